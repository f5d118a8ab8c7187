// hetcomm-train: GPT training on the CPU with data, tensor and pipeline parallelism over hetcomm.
//
//   hetcomm-run -np 2 build/bin/hetcomm-train --config configs/gpt-tiny.json --steps 200
//   hetcomm-run -np 8 build/bin/hetcomm-train --tp 2 --pp 2            (or --plan plans/FILE.json)
//
// The parallel plan (plan.h) gives every rank a role: a data-parallel replica, a pipeline stage, a tensor-parallel
// rank; plain data parallelism is the plan of one stage at TP degree 1. One step: every rank draws the same
// global batch of samples; each replica takes its micro-batches (uneven plans: a prefix of the batch per
// replica); each stage runs them 1F1B (pipeline.h), the last micro-batch's backward starting each gradient
// bucket's reduction over the data-parallel group as soon as its gradients are final. Then: the tied
// embedding's two copies summed (pipelines), wait for the reductions, clip by the global norm, AdamW (on this
// rank's slices under ZeRO-1, then an allgather), and report. Evaluation on the validation split every
// eval_every steps; checkpoints every checkpoint_every steps; --resume continues a checkpoint exactly.
#include <hetcomm/hetcomm.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/nn/nn.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/data_parallel.h"
#include "trainer/emulated_stage.h"
#include "trainer/lr_schedule.h"
#include "trainer/model.h"
#include "trainer/memory.h"
#include "trainer/optimizer.h"
#include "trainer/param_layout.h"
#include "trainer/pipeline.h"
#include "trainer/plan.h"
#include "trainer/train_state.h"

namespace ht = hetcomm::trainer;
namespace nn = hetcomm::kernels::nn;

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Options {
  std::string config = "configs/gpt-tiny.json";
  std::optional<int64_t> steps, warmup, evalEvery, logEvery, checkpointEvery;
  std::optional<int> nLayer, nHead, dModel, seqLen, microBatch, globalBatch, evalBatches;
  std::optional<double> lr, minLr, weightDecay, gradClip;
  std::optional<uint64_t> seed;
  std::vector<std::string> data;
  std::string checkpointDir, resume, logJson;
  int zero = 0;
  double bucketMb = 1.0;
  int threads = 0;
  bool progress = true;
  std::string plan, assignment = "nic";
  int tp = 1, pp = 1;
  std::vector<std::string> deviceSpeedsText;
  std::vector<double> deviceSpeeds;  // parsed from deviceSpeedsText, or from the topology
  bool emulateCompute = false;
  double referenceGflops = 0;
  std::vector<uint64_t> memoryLimits;
};

// Ranks on this host, from whichever launcher started us (for the BLAS thread share).
int localRanks() {
  for (const char* v : {"HETCOMM_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "SLURM_NTASKS_PER_NODE"})
    if (const char* s = std::getenv(v); s && std::atoi(s) > 0) return std::atoi(s);
  return 1;
}

bool launched() {
  for (const char* v : {"HETCOMM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return true;
  return false;
}

[[noreturn]] void die(int rank, const std::string& message) {
  std::fprintf(stderr, "hetcomm-train [rank %d]: error: %s\n", rank, message.c_str());
  std::exit(1);
}

template <class T>
T check(int rank, ht::Result<T> r) {
  if (!r) die(rank, r.error().message());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

// fp32 GEMM rate of this rank with its BLAS threads, every rank measuring at once (as they will train): the
// "peak" MFU is measured against. sync: a barrier over every rank.
double measureGemmGflops(const std::function<void()>& sync) {
  constexpr int n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  sync();  // start together
  nn::linearForward(c.data(), a.data(), b.data(), nullptr, n, n, n);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    constexpr int reps = 8;
    for (int i = 0; i < reps; ++i) nn::linearForward(c.data(), a.data(), b.data(), nullptr, n, n, n);
    best = std::max(best, 2.0 * n * n * n * reps / secondsSince(t0) / 1e9);
  }
  return best;
}

std::string human(double v) {
  char buf[32];
  if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

// Mean validation loss over the first eval_batches * micro_batch windows of the validation split, each replica
// taking a contiguous share (weighted by its count, so any plan gives the same figure) through its pipeline.
// worldSum sums over every rank; countsLoss: this rank reports its replica's loss (last stage, TP rank 0).
double evaluate(ht::Pipeline& pipeline, const std::vector<float>& params, const ht::DataLoader& val,
                const ht::TrainConfig& cfg, int replica, int replicas, bool countsLoss, int rank,
                const std::function<void(std::vector<double>&)>& worldSum) {
  const int64_t total = std::min<int64_t>(int64_t(cfg.evalBatches) * cfg.microBatch, val.windowsPerEpoch());
  const int64_t begin = total * replica / replicas, end = total * (replica + 1) / replicas;
  std::vector<ht::Batch> batches;
  std::vector<ht::MicroBatch> micro;
  for (int64_t at = begin; at < end; at += cfg.microBatch) {
    std::vector<int64_t> samples;
    for (int64_t i = at; i < std::min(end, at + cfg.microBatch); ++i) samples.push_back(i);
    batches.push_back(check(rank, val.makeBatch(samples)));
  }
  for (size_t i = 0; i < batches.size(); ++i) {
    const int B = static_cast<int>(std::min<int64_t>(cfg.microBatch, end - begin - int64_t(i) * cfg.microBatch));
    micro.push_back({batches[i].inputs.data(), batches[i].targets.data(), B});
  }
  const double lossSum = check(rank, pipeline.evaluate(params.data(), micro));
  std::vector<double> sums{countsLoss ? lossSum : 0.0, countsLoss ? double(end - begin) : 0.0};
  worldSum(sums);
  return sums[0] / sums[1];
}

// The tied embedding: the first stage's wte and the last stage's copy for the LM head get the sum of both
// gradients (each rank puts its rows into a whole-table buffer; the tied group sums it).
ht::Result<void> sumTiedCopies(const ht::ParamLayout& layout, float* grads, hetcommComm_t tied, int C, int V) {
  const ht::ParamTensor& t = layout.find(layout.shard().embedding ? "wte" : "lm_head.weight");
  std::vector<float> whole(size_t(V) * C, 0.0f);
  size_t at = t.offset;
  for (auto [b, e] : t.rows) {
    std::copy(grads + at, grads + at + size_t(e - b) * C, whole.begin() + b * C);
    at += size_t(e - b) * C;
  }
  if (hetcommResult_t r = hetcommAllReduce(whole.data(), whole.data(), whole.size(), hetcommFloat32, hetcommSum,
                                           tied, nullptr);
      r != hetcommSuccess)
    return ht::commError("hetcommAllReduce (tied embedding)", r, tied);
  at = t.offset;
  for (auto [b, e] : t.rows) {
    std::copy(whole.begin() + b * C, whole.begin() + e * C, grads + at);
    at += size_t(e - b) * C;
  }
  return {};
}

// A figure for the log, or "-" for NaN (not computed: losses and norms under --emulate-compute).
std::string figure(double v, const char* format) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

using ht::MemoryNeed;

// Every rank's need against its limit, collectively: every rank exits when any rank does not fit (the lead
// names each one with its numbers), so none is left waiting in a collective. Returns the line for the start-up
// report.
std::string checkMemory(const MemoryNeed& need, uint64_t limit, const ht::RoleTable& table, int rank, int world,
                        const std::function<void(std::vector<double>&)>& worldSum) {
  constexpr int kFields = 6;
  std::vector<double> all(size_t(world) * kFields, 0.0);
  const double mine[kFields] = {need.params, need.grads, need.optimizer, need.activations, need.buffers,
                                double(limit)};
  std::copy(mine, mine + kFields, all.begin() + size_t(rank) * kFields);
  worldSum(all);
  std::vector<MemoryNeed> needs(world);
  std::vector<double> limits(world);
  for (int r = 0; r < world; ++r) {
    const double* f = all.data() + size_t(r) * kFields;
    needs[r] = MemoryNeed{f[0], f[1], f[2], f[3], f[4]};
    limits[r] = f[5];
  }
  auto line = ht::fitMemory(needs, limits, table);
  if (!line) {
    if (rank == 0)
      std::fprintf(stderr, "hetcomm-train [rank 0]: error: the plan does not fit --memory-limits:%s\n",
                   line.error().detail.c_str());
    std::exit(1);
  }
  return *line;
}

class Progress {
 public:
  Progress(bool on, int64_t total) : on_(on), total_(total) {}
  void show(int64_t step, double loss, double etaS) {
    if (!on_) return;
    const int width = 30, filled = static_cast<int>(width * step / std::max<int64_t>(total_, 1));
    std::printf("\r[%s%s] %lld/%lld loss %s eta %.0fs ", std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), (long long)step, (long long)total_,
                figure(loss, "%.4f").c_str(), etaS);
    std::fflush(stdout);
    shown_ = true;
  }
  void clear() {
    if (on_ && shown_) std::printf("\r%80s\r", "");
    shown_ = false;
  }

 private:
  bool on_;
  int64_t total_;
  bool shown_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"hetcomm-train: GPT training with data, tensor and pipeline parallelism over hetcomm"};
  app.add_option("--config", o.config, "JSON config (configs/gpt-tiny.json)");
  app.add_option("--steps", o.steps, "optimizer steps");
  app.add_option("--n-layer", o.nLayer);
  app.add_option("--n-head", o.nHead);
  app.add_option("--d-model", o.dModel);
  app.add_option("--seq-len", o.seqLen);
  app.add_option("--micro-batch", o.microBatch, "sequences per forward/backward");
  app.add_option("--global-batch", o.globalBatch, "sequences per optimizer step, over all ranks");
  app.add_option("--lr", o.lr, "peak learning rate");
  app.add_option("--min-lr", o.minLr, "final learning rate of the cosine schedule");
  app.add_option("--warmup", o.warmup, "linear warmup steps");
  app.add_option("--weight-decay", o.weightDecay);
  app.add_option("--grad-clip", o.gradClip, "global gradient norm limit (0: off)");
  app.add_option("--seed", o.seed);
  app.add_option("--eval-every", o.evalEvery, "steps between validation evaluations (0: only at the end)");
  app.add_option("--eval-batches", o.evalBatches, "micro-batches of validation data per evaluation");
  app.add_option("--log-every", o.logEvery, "steps between log lines");
  app.add_option("--data", o.data, "text files to train on (default: the fortunes package's)");
  app.add_option("--zero", o.zero, "1: shard optimizer state over the data-parallel ranks (ZeRO-1)")
      ->check(CLI::Range(0, 1));
  app.add_option("--bucket-mb", o.bucketMb, "gradient bucket size in MiB")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "BLAS threads per rank (default: cores / ranks on this host)");
  app.add_option("--checkpoint-dir", o.checkpointDir, "where checkpoints go");
  app.add_option("--checkpoint-every", o.checkpointEvery, "steps between checkpoints (0: only at the end)");
  app.add_option("--resume", o.resume, "checkpoint file to continue from");
  app.add_option("--log-json", o.logJson, "write one JSON object per step to this file");
  app.add_flag("!--no-progress", o.progress, "no progress bar");
  app.add_option("--plan", o.plan, "parallel plan JSON (stages, TP degrees, micro-batches per replica, ranks)");
  app.add_option("--tp", o.tp, "tensor-parallel degree of every stage (without --plan)")->check(CLI::PositiveNumber);
  app.add_option("--pp", o.pp, "pipeline stages, blocks split evenly (without --plan)")->check(CLI::PositiveNumber);
  app.add_option("--assignment", o.assignment, "who plays which role: nic (TP in a host, DP in an RDMA island, "
                                               "pipeline boundaries across islands) or naive (rank order)")
      ->check(CLI::IsMember({"nic", "naive"}));
  app.add_option("--device-speeds", o.deviceSpeedsText,
                 "relative compute speed per rank (e.g. 1,1,0.5,0.5), or 'topo': each rank's GPU peak in "
                 "HETCOMM_TOPO_FILE over the fastest; each rank's measured compute is stretched to emulate that device")
      ->delimiter(',');
  app.add_flag("--emulate-compute", o.emulateCompute,
               "skip the math: wait each layer's FLOPs / (device speed x reference FLOP/s); messages keep their real "
               "sizes (planning runs with more ranks than cores; losses are not computed)");
  app.add_option("--reference-gflops", o.referenceGflops,
                 "FLOP/s of a speed-1 device for --emulate-compute, in GFLOP/s (default: the topology file's fastest "
                 "GPU peak, else rank 0's measured fp32 GEMM rate)")
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-limits", o.memoryLimits, "bytes per rank (one value for all, or one per rank; suffixes "
                                                    "K M G, binary): a plan that does not fit is refused at start")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false));
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // log lines reach a file or pipe as they happen

  // ---- communicator: the launcher's ranks, or this process alone ----
  hetcommComm_t comm = nullptr;
  hetcommResult_t rc;
  if (launched()) {
    rc = hetcommCommInitFromEnv(&comm);
  } else {
    hetcommUniqueId id;
    rc = hetcommGetUniqueId(&id);
    if (rc == hetcommSuccess) rc = hetcommCommInitRank(&comm, 1, id, 0);
  }
  if (rc != hetcommSuccess) die(-1, ht::commError("communicator init", rc, nullptr).message());
  int rank = 0, world = 1;
  hetcommCommUserRank(comm, &rank);
  hetcommCommCount(comm, &world);
  const bool lead = rank == 0;

  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads > 0 ? o.threads : std::max(1, cores / localRanks());
  nn::setBlasThreads(threads);

  // ---- config: file, then command-line overrides, then checks against the rank count ----
  ht::TrainConfig cfg = check(rank, ht::loadConfig(o.config));
  auto set = [](auto& field, const auto& opt) {
    if (opt) field = *opt;
  };
  set(cfg.steps, o.steps), set(cfg.warmupSteps, o.warmup), set(cfg.evalEvery, o.evalEvery);
  set(cfg.logEvery, o.logEvery), set(cfg.checkpointEvery, o.checkpointEvery);
  set(cfg.model.nLayer, o.nLayer), set(cfg.model.nHead, o.nHead), set(cfg.model.dModel, o.dModel);
  set(cfg.model.seqLen, o.seqLen), set(cfg.microBatch, o.microBatch), set(cfg.globalBatch, o.globalBatch);
  set(cfg.evalBatches, o.evalBatches), set(cfg.lr, o.lr), set(cfg.minLr, o.minLr);
  set(cfg.weightDecay, o.weightDecay), set(cfg.gradClip, o.gradClip), set(cfg.seed, o.seed);
  if (!o.data.empty()) cfg.dataFiles = o.data;
  if (!o.checkpointDir.empty()) cfg.checkpointDir = o.checkpointDir;
  const bool planned = !o.plan.empty() || o.tp > 1 || o.pp > 1;
  check(rank, ht::validate(cfg, planned ? 1 : world, "config " + o.config + " with the command line"));
  const int T = cfg.model.seqLen;

  // ---- parallel plan, roles, communicators ----
  ht::ParallelPlan plan;
  std::string planSource = "plan " + o.plan;
  if (!o.plan.empty()) {
    if (o.tp > 1 || o.pp > 1) die(rank, "--plan and --tp/--pp both given: the plan file says both");
    plan = check(rank, ht::loadPlan(o.plan));
  } else {
    planSource = "--tp " + std::to_string(o.tp) + " --pp " + std::to_string(o.pp);
    if (world % (o.tp * o.pp) != 0)
      die(rank, planSource + ": tp x pp = " + std::to_string(o.tp * o.pp) + " does not divide the " +
                    std::to_string(world) + " ranks");
    plan = ht::uniformPlan(cfg, o.tp, o.pp, world / (o.tp * o.pp));
  }
  check(rank, ht::validatePlan(plan, cfg, world, planSource));
  // Device speeds: given one per rank, or "topo": the topology's GPU peaks (HETCOMM_TOPO_FILE "gpus" entries)
  // over the fastest. The fastest peak is also --emulate-compute's default reference rate.
  std::string speedSource = "--device-speeds";
  double topoPeakTflops = 0;
  {
    std::vector<double> peaks(world, 0.0);
    for (int r = 0; r < world; ++r)
      if (hetcommResult_t pr = hetcommCommRankDevice(comm, r, &peaks[r], nullptr); pr != hetcommSuccess)
        die(rank, ht::commError("hetcommCommRankDevice", pr, comm).message());
    const auto [lo, hi] = std::minmax_element(peaks.begin(), peaks.end());
    topoPeakTflops = *lo > 0 ? *hi : 0;
    if (o.deviceSpeedsText.size() == 1 && o.deviceSpeedsText[0] == "topo") {
      if (*lo == 0)
        die(rank, "--device-speeds topo: the topology gives rank " + std::to_string(lo - peaks.begin()) +
                      " no GPU peak (HETCOMM_TOPO_FILE \"gpus\" entries with \"peakTflops\" for every rank)");
      for (double p : peaks) o.deviceSpeeds.push_back(p / *hi);
      speedSource = "the topology file's GPU peaks";
    } else {
      for (size_t r = 0; r < o.deviceSpeedsText.size(); ++r) {
        const std::string& t = o.deviceSpeedsText[r];
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        if (t.empty() || *end != '\0')
          die(rank, "--device-speeds: entry " + std::to_string(r) + " '" + t + "' is not a number (or give 'topo')");
        o.deviceSpeeds.push_back(v);
      }
    }
  }
  if (!o.deviceSpeeds.empty()) {
    if (static_cast<int>(o.deviceSpeeds.size()) != world)
      die(rank, "--device-speeds has " + std::to_string(o.deviceSpeeds.size()) + " entries for " +
                    std::to_string(world) + " ranks");
    for (size_t r = 0; r < o.deviceSpeeds.size(); ++r)
      if (!(o.deviceSpeeds[r] > 0 && o.deviceSpeeds[r] <= 1))
        die(rank, "--device-speeds: entry " + std::to_string(r) + " is " + std::to_string(o.deviceSpeeds[r]) +
                      "; a relative speed lies in (0, 1]");
  }
  const double speed = o.deviceSpeeds.empty() ? 1.0 : o.deviceSpeeds[rank];
  const bool emulated = !o.deviceSpeeds.empty() || o.emulateCompute;  // figures say so
  if (!o.memoryLimits.empty() && o.memoryLimits.size() != 1 && static_cast<int>(o.memoryLimits.size()) != world)
    die(rank, "--memory-limits has " + std::to_string(o.memoryLimits.size()) + " entries for " +
                  std::to_string(world) + " ranks: give one for every rank, or one for all");
  ht::Placement where;
  for (int r = 0; r < world; ++r) {
    int host = 0, island = 0;
    if (hetcommResult_t pr = hetcommCommRankPlacement(comm, r, &host, &island); pr != hetcommSuccess)
      die(rank, ht::commError("hetcommCommRankPlacement", pr, comm).message());
    where.host.push_back(host);
    where.island.push_back(island);
  }
  const ht::RoleTable table = check(rank, ht::assignRoles(plan, where, o.assignment == "naive"
                                                                          ? ht::Assignment::kNaive
                                                                          : ht::Assignment::kNicAware));
  std::unique_ptr<ht::HybridGroups> groups = check(rank, ht::HybridGroups::create(comm, plan, table));
  const ht::Role role = groups->role();
  const int S = static_cast<int>(plan.stages.size());
  const bool hybrid = S > 1 || plan.stages[0].tp > 1;
  if (o.emulateCompute && (!cfg.checkpointDir.empty() || !o.resume.empty()))
    die(rank, "--emulate-compute computes no parameters: it takes no --checkpoint-dir, checkpoint_dir or --resume");
  const int accum = plan.microBatches[role.replica];
  auto worldSum = [&](std::vector<double>& v) {
    if (world == 1) return;
    if (hetcommResult_t r = hetcommAllReduce(v.data(), v.data(), v.size(), hetcommFloat64, hetcommSum, comm, nullptr);
        r != hetcommSuccess)
      die(rank, ht::commError("hetcommAllReduce (world sum)", r, comm).message());
  };

  // ---- data ----
  std::vector<std::string> files = cfg.dataFiles;
  if (files.empty()) files = check(rank, ht::defaultCorpusFiles());
  ht::Dataset dataset = check(rank, ht::Dataset::fromFiles(files, cfg.valFraction, T));
  ht::DataLoader train(dataset, ht::Split::kTrain, cfg.seed);
  ht::DataLoader val(dataset, ht::Split::kVal, cfg.seed, /*shuffle=*/false);
  const double unigramNats = ht::unigramEntropyNats(dataset.tokens(ht::Split::kTrain));

  // ---- model (this rank's stage and TP shard), pipeline, optimizer, data parallelism ----
  const ht::Shard shard = ht::shardOf(plan, role);
  const size_t bucketBytes = static_cast<size_t>(o.bucketMb * (1 << 20));
  ht::ParamLayout layout(cfg.model, shard, bucketBytes, plan.dp);
  ht::DataParallel dp(groups->dp(), layout, o.zero == 1);
  const int slots = ht::Pipeline::slotsFor(role.stage, S, accum);
  std::string memoryLine;
  if (!o.memoryLimits.empty()) {
    const MemoryNeed need = ht::memoryNeed(cfg, shard, layout, dp.ownedFloats(), accum, role.stage, S);
    const uint64_t limit = o.memoryLimits.size() == 1 ? o.memoryLimits[0] : o.memoryLimits[rank];
    memoryLine = checkMemory(need, limit, table, rank, world, worldSum);
  }
  // Reference rate of a speed-1 device for --emulate-compute: given, the topology's fastest GPU, or rank 0's
  // GEMM rate measured while the others wait (a core of its own, as an emulated device has).
  double referenceGflops = o.referenceGflops > 0 ? o.referenceGflops : topoPeakTflops * 1e3;
  if (o.emulateCompute && referenceGflops == 0) {
    std::vector<double> r{lead ? measureGemmGflops([] {}) : 0.0};
    worldSum(r);
    referenceGflops = r[0];
  }
  std::unique_ptr<ht::StageModel> model;
  if (o.emulateCompute)
    model = std::make_unique<ht::EmulatedStage>(cfg.model, layout.shard(), cfg.microBatch, slots, groups->tpGroup(),
                                                speed * referenceGflops * 1e9);
  else
    model = std::make_unique<ht::Gpt>(cfg.model, layout, cfg.microBatch, slots, groups->tpGroup());
  ht::Pipeline pipeline(*groups, *model, cfg.model, cfg.microBatch, accum);
  ht::AdamW adam(cfg, layout, dp.ownedRanges());
  ht::LrSchedule schedule(cfg);
  std::vector<float> params(layout.totalFloats()), grads(layout.totalFloats(), 0.0f);
  const ht::ParamLayout full(cfg.model, bucketBytes, 1);  // the whole model: initialisation and checkpoints
  if (!o.emulateCompute) {  // every rank initialises the whole model from the seed and keeps its part: any plan
                            // starts identically
    std::vector<float> whole(full.totalFloats());
    ht::Gpt(cfg.model, full, 1).initParams(whole.data(), cfg.seed);
    ht::sliceFromFull(full, whole.data(), layout, params.data());
  }
  const bool countsLoss = role.stage + 1 == S && role.tpRank == 0;
  const int tiedGroup = groups->tied() ? (role.stage == 0 ? 0 : cfg.model.nLayer + 1) : -1;
  int64_t step = 0;
  if (!o.resume.empty()) {
    // The checkpoint holds the whole model (any plan wrote it): each rank takes its part.
    ht::TrainState s = check(rank, ht::loadTrainState(o.resume, full, cfg));
    auto part = [&](const std::vector<float>& whole) {
      std::vector<float> mine(layout.totalFloats(), 0.0f);
      ht::sliceFromFull(full, whole.data(), layout, mine.data());
      return mine;
    };
    params = part(s.params);
    s.m = part(s.m);
    s.v = part(s.v);
    size_t at = 0;
    for (auto [off, len] : dp.ownedRanges()) {
      std::copy(s.m.begin() + off, s.m.begin() + off + len, adam.m().begin() + at);
      std::copy(s.v.begin() + off, s.v.begin() + off + len, adam.v().begin() + at);
      at += len;
    }
    adam.setSteps(s.adamSteps);
    check(rank, train.seek(s.data));
    step = s.step;
    if (lead) std::printf("resumed from %s at step %lld\n", o.resume.c_str(), (long long)step);
  }
  // MFU's peak: the sum over ranks of each one's measured fp32 GEMM rate (or, emulating, the reference rate),
  // times its device speed.
  std::vector<double> gemm{(o.emulateCompute ? referenceGflops : measureGemmGflops([&] {
    std::vector<double> z{0.0};
    worldSum(z);
  })) * speed};
  worldSum(gemm);
  const double peakGflops = gemm[0];

  if (lead) {
    std::printf("hetcomm-train: %d rank%s (data parallel %d x pipeline %d x tensor parallel %s%s), %d BLAS thread%s "
                "each\n",
                world, world > 1 ? "s" : "", plan.dp, S,
                [&] {
                  std::string t;
                  for (const auto& st : plan.stages) t += (t.empty() ? "" : "/") + std::to_string(st.tp);
                  return t;
                }().c_str(),
                dp.zero1() ? ", ZeRO-1" : "", threads, threads > 1 ? "s" : "");
    if (hybrid || plan.dp > 1) {
      std::printf("plan (%s, %s assignment): %s\n", planSource.c_str(), o.assignment.c_str(),
                  ht::toJson(plan).dump().c_str());
      std::printf("%s", ht::formatRoleTable(table, where, plan).c_str());
    }
    if (!o.deviceSpeeds.empty()) {
      std::printf("emulated device speeds (from %s; %s, figures marked emulated):", speedSource.c_str(),
                  o.emulateCompute ? "waits scaled" : "compute stretched");
      for (double v : o.deviceSpeeds) std::printf(" %g", v);
      std::printf("\n");
    }
    if (o.emulateCompute)
      std::printf("emulated compute: no math; each layer waits its FLOPs / (device speed x %.1f GFLOP/s); messages "
                  "at their real sizes; losses not computed\n",
                  referenceGflops);
    std::printf("model: %d layers, %d heads, d_model %d, seq_len %d, vocab %d: %s parameters\n", cfg.model.nLayer,
                cfg.model.nHead, cfg.model.dModel, T, cfg.model.vocabSize,
                human(static_cast<double>(layout.parameterCount())).c_str());
    std::printf("batch: %d sequences per step (%d tokens) = %d micro-batch%s x %d over %d replica%s\n",
                cfg.globalBatch, cfg.globalBatch * T, plan.totalMicroBatches(),
                plan.totalMicroBatches() > 1 ? "es" : "", cfg.microBatch, plan.dp, plan.dp > 1 ? "s" : "");
    std::printf("data: %zu file%s, %s train / %s validation tokens; unigram entropy %.4f nats\n", files.size(),
                files.size() > 1 ? "s" : "", human(double(dataset.tokens(ht::Split::kTrain).size())).c_str(),
                human(double(dataset.tokens(ht::Split::kVal).size())).c_str(), unigramNats);
    std::printf("buckets: %zu of about %.1f MiB; %s fp32 GEMM peak %.1f GFLOP/s over all ranks\n",
                layout.buckets().size(), o.bucketMb, o.emulateCompute ? "emulated" : "measured", peakGflops);
    std::printf("%s", memoryLine.c_str());
  }
  std::unique_ptr<std::ofstream> json;
  if (lead && !o.logJson.empty()) {
    json = std::make_unique<std::ofstream>(o.logJson, std::ios::trunc);
    if (!*json) die(rank, "cannot write --log-json file " + o.logJson);
  }
  // Checkpoints hold the whole model by tensor name, whatever the plan, so a run can resume under another: the
  // ranks of replica 0 add their shards into whole-model buffers (each parameter once: addToFull skips the
  // copies the gradient norm skips), the world sums them onto rank 0, and rank 0 writes.
  auto wholeOnLead = [&](const std::vector<float>& mine) {
    std::vector<float> whole(full.totalFloats(), 0.0f);
    if (role.replica == 0) ht::addToFull(layout, mine.data(), full, whole.data());
    if (world > 1)
      if (hetcommResult_t r = hetcommReduce(whole.data(), whole.data(), whole.size(), hetcommFloat32, hetcommSum, 0,
                                            comm, nullptr);
          r != hetcommSuccess)
        die(rank, ht::commError("hetcommReduce (checkpoint)", r, comm).message());
    if (!lead) whole = {};  // one whole-model buffer at a time off rank 0
    return whole;
  };
  auto saveCheckpoint = [&](int64_t atStep) {
    if (cfg.checkpointDir.empty()) return;
    ht::TrainState s;
    s.step = atStep;
    s.adamSteps = adam.steps();
    s.data = train.position();
    s.params = wholeOnLead(params);
    s.m = wholeOnLead(check(rank, dp.gatherOwned(adam.m())));
    s.v = wholeOnLead(check(rank, dp.gatherOwned(adam.v())));
    if (!lead) return;
    std::filesystem::create_directories(cfg.checkpointDir);
    const std::string path = cfg.checkpointDir + "/step" + std::to_string(atStep) + ".safetensors";
    check(rank, ht::saveTrainState(path, full, s, cfg));
    std::printf("checkpoint: %s\n", path.c_str());
  };

  // ---- the loop ----
  Progress progress(lead && o.progress && isatty(STDOUT_FILENO), cfg.steps);
  const double tokensPerStep = double(cfg.globalBatch) * T;
  const float lossScale = static_cast<float>(1.0 / tokensPerStep);
  double totalCompute = 0, totalComm = 0, totalTime = 0, lastLoss = NAN, lastVal = NAN;
  double totalBusy = 0, totalPipe = 0;  // this rank's forward/backward time and 1F1B wall time (bubble)
  double totalTp = 0, totalP2p = 0;     // ... in tensor-parallel collectives and pipeline transfers
  int64_t timedSteps = 0;
  int64_t replicaOffset = 0;  // this replica's first sample in the global batch
  for (int d = 0; d < role.replica; ++d) replicaOffset += int64_t(plan.microBatches[d]) * cfg.microBatch;
  // Device-speed emulation: a device of relative speed v takes 1/v of the measured compute time (the emulated
  // stage's waits already run at the device's speed).
  const double stretchSpeed = o.emulateCompute ? 1.0 : speed;
  double busyS = 0;
  auto computeHook = [&](double computeS, double tpS) {
    if (stretchSpeed < 1)
      std::this_thread::sleep_for(std::chrono::duration<double>(computeS * (1 / stretchSpeed - 1)));
    busyS += computeS / stretchSpeed + tpS;
  };
  const auto runStart = Clock::now();
  for (; step < cfg.steps; ++step) {
    const auto t0 = Clock::now();
    const std::vector<int64_t> samples = train.nextSamples(cfg.globalBatch);
    double commS = 0;
    std::vector<ht::Batch> batches;
    std::vector<ht::MicroBatch> micro;
    for (int m = 0; m < accum; ++m) {
      const auto at = std::span(samples).subspan(replicaOffset + int64_t(m) * cfg.microBatch, cfg.microBatch);
      batches.push_back(check(rank, train.makeBatch(at)));
    }
    for (auto& b : batches) micro.push_back({b.inputs.data(), b.targets.data(), cfg.microBatch});
    // Buckets go out as the last micro-batch's backward completes them, except the tied embedding's: its two
    // copies are summed first, after the pipeline.
    auto onGroup = [&](int g) {
      if (tiedGroup >= 0 && layout.bucketOfGroup(g) == layout.bucketOfGroup(tiedGroup)) return;
      check(rank, dp.groupDone(g, grads.data()));
    };
    groups->tpSeconds = groups->p2pSeconds = 0;
    busyS = 0;
    const double lossSum = check(rank, pipeline.step(params.data(), grads.data(), lossScale, micro, onGroup,
                                                     computeHook));
    const double computeS = secondsSince(t0);
    auto c0 = Clock::now();
    if (groups->tied()) check(rank, sumTiedCopies(layout, grads.data(), groups->tied(), cfg.model.dModel,
                                                  cfg.model.vocabSize));
    check(rank, dp.finishGradients(grads.data()));
    // Loss (sum over sequences, from each replica's last stage) and the squared gradient norm, each parameter
    // counted once: without ZeRO every replica holds the same gradients, so only replica 0's count.
    std::vector<double> sums{countsLoss ? lossSum : 0.0, (dp.zero1() || dp.rank() == 0) ? adam.normSquared(grads.data())
                                                                                        : 0.0};
    worldSum(sums);
    commS += secondsSince(c0);
    const double loss = sums[0] / cfg.globalBatch, norm = std::sqrt(sums[1]);
    // What the log shows: nothing is computed under --emulate-compute (NaN: "-", null in the JSON).
    const double shownLoss = o.emulateCompute ? NAN : loss, shownNorm = o.emulateCompute ? NAN : norm;
    const float clip = cfg.gradClip > 0 && norm > cfg.gradClip ? static_cast<float>(cfg.gradClip / (norm + 1e-6)) : 1;
    const double lr = schedule.lrAt(step);
    adam.step(params.data(), grads.data(), static_cast<float>(lr), clip);
    c0 = Clock::now();
    check(rank, dp.gatherParams(params.data()));
    commS += secondsSince(c0);
    std::fill(grads.begin(), grads.end(), 0.0f);
    const double stepS = secondsSince(t0);
    lastLoss = loss;
    if (step > 0) {  // the first step warms caches and allocators
      totalCompute += computeS, totalComm += commS, totalTime += stepS, ++timedSteps;
      totalBusy += busyS, totalPipe += computeS;
      totalTp += groups->tpSeconds, totalP2p += groups->p2pSeconds;
    }

    const bool evalNow =
        !o.emulateCompute && ((cfg.evalEvery > 0 && (step + 1) % cfg.evalEvery == 0) || step + 1 == cfg.steps);
    double valLoss = NAN;
    if (evalNow)
      lastVal = valLoss = evaluate(pipeline, params, val, cfg, role.replica, plan.dp, countsLoss, rank, worldSum);
    if (cfg.checkpointEvery > 0 && (step + 1) % cfg.checkpointEvery == 0 && step + 1 < cfg.steps)
      saveCheckpoint(step + 1);
    if (!lead) continue;
    const double tps = tokensPerStep / stepS;
    const double mfu = ht::Gpt::flopsPerToken(cfg.model) * tps / (peakGflops * 1e9);
    if (json) {
      nlohmann::json j{{"step", step + 1}, {"loss", shownLoss}, {"lr", lr}, {"grad_norm", shownNorm},
                       {"tokens_per_s", tps}, {"mfu", mfu}, {"compute_ms", computeS * 1e3},
                       {"comm_ms", commS * 1e3}, {"step_ms", stepS * 1e3}};
      if (hybrid) j["tp_comm_ms"] = groups->tpSeconds * 1e3, j["pipe_comm_ms"] = groups->p2pSeconds * 1e3;
      if (emulated) j["emulated"] = true;
      if (evalNow) j["val_loss"] = valLoss;
      *json << j.dump() << "\n" << std::flush;
    }
    if ((cfg.logEvery > 0 && (step + 1) % cfg.logEvery == 0) || step == 0 || evalNow) {
      progress.clear();
      std::printf("step %5lld/%lld | loss %s | lr %.2e | norm %s | %s tok/s | MFU %.1f%% | compute %.0f ms | comm "
                  "%.0f ms%s\n",
                  (long long)(step + 1), (long long)cfg.steps, figure(shownLoss, "%.4f").c_str(), lr,
                  figure(shownNorm, "%.3f").c_str(), human(tps).c_str(), mfu * 100,
                  computeS * 1e3, commS * 1e3,
                  (evalNow ? (" | val " + std::to_string(valLoss).substr(0, 6)) : std::string()).append(
                      emulated ? " | emulated" : "").c_str());
    }
    progress.show(step + 1, shownLoss, secondsSince(runStart) / (step + 1) * (cfg.steps - step - 1));
  }
  progress.clear();
  saveCheckpoint(step);

  // Means over the ranks: the pipeline's idle share and the time in each kind of group.
  std::vector<double> means{totalPipe - totalBusy, totalPipe, totalTp, totalP2p, totalComm};
  worldSum(means);
  if (lead) {
    const double tps = timedSteps ? tokensPerStep * timedSteps / totalTime : 0;
    if (hybrid || plan.dp > 1) {
      int minMicro = plan.microBatches[0];
      for (int m : plan.microBatches) minMicro = std::min(minMicro, m);
      std::printf("summary: pipeline bubble %.1f%% measured (time stages wait, mean over ranks), 1F1B ideal %.1f%% "
                  "((S-1)/(M+S-1), S %d, M %d)%s\n",
                  means[1] > 0 ? means[0] / means[1] * 100 : 0, 100.0 * (S - 1) / (minMicro + S - 1), S, minMicro,
                  emulated ? " [emulated]" : "");
      std::printf("summary: communication per step, mean over ranks: tensor parallel %.1f ms, pipeline %.1f ms, "
                  "data parallel + tied embedding %.1f ms\n",
                  timedSteps ? means[2] / world / timedSteps * 1e3 : 0, timedSteps ? means[3] / world / timedSteps * 1e3 : 0,
                  timedSteps ? means[4] / world / timedSteps * 1e3 : 0);
    }
    std::printf("summary: %lld steps, %s tokens in %.1f s | %s tok/s%s | MFU %.1f%% | compute %.0f%% comm %.0f%% of "
                "step time\n",
                (long long)cfg.steps, human(tokensPerStep * cfg.steps).c_str(), secondsSince(runStart),
                human(tps).c_str(), emulated ? " (emulated)" : "", ht::Gpt::flopsPerToken(cfg.model) * tps / (peakGflops * 1e9) * 100,
                totalTime > 0 ? totalCompute / totalTime * 100 : 0, totalTime > 0 ? totalComm / totalTime * 100 : 0);
    if (o.emulateCompute)
      std::printf("summary: losses not computed (--emulate-compute)\n");
    else
      std::printf("summary: final train loss %.4f, validation loss %.4f (unigram entropy of the data %.4f nats)\n",
                  lastLoss, lastVal, unigramNats);
  }
  hetcommCommFinalize(comm);
  hetcommCommDestroy(comm);
  return 0;
}
