#include "trainer/training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kernels/nn/nn.h"
#include "planner/world_plan.h"
#include "trainer/checkpoint.h"
#include "trainer/data.h"
#include "trainer/data_parallel.h"
#include "trainer/devices.h"
#include "trainer/emulated_stage.h"
#include "trainer/lr_schedule.h"
#include "trainer/memory.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/param_layout.h"
#include "trainer/pipeline.h"
#include "trainer/plan.h"
#include "trainer/report.h"
#include "trainer/train_state.h"

namespace hetcomm::trainer {
namespace {

namespace nn = hetcomm::kernels::nn;

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void die(int rank, const std::string& message) {
  std::fprintf(stderr, "hetcomm-train [rank %d]: error: %s\n", rank, message.c_str());
  std::exit(1);
}

template <class T>
T check(int rank, Result<T> r) {
  if (!r) die(rank, r.error().message());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

// Ranks on this host, from whichever launcher started us (for the BLAS thread share).
int localRanks() {
  for (const char* v :
       {"HETCOMM_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* s = std::getenv(v); s && std::atoi(s) > 0) return std::atoi(s);
  return 1;
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

}  // namespace

struct Training::State {
  Options o;
  hetcommComm_t comm = nullptr;
  int rank = 0, world = 1, threads = 1;
  bool lead = true;
  TrainConfig cfg;
  ParallelPlan plan;
  std::string planSource;
  DeviceSpeeds speeds;
  double speed = 1.0, referenceGflops = 0, peakGflops = 0;
  bool emulated = false, zero1 = false;
  Placement where;
  RoleTable table;
  std::unique_ptr<HybridGroups> groups;
  Role role;
  int S = 1, accum = 1, tiedGroup = -1;
  bool hybrid = false, countsLoss = false;
  std::vector<std::string> files;
  std::unique_ptr<Dataset> dataset;
  std::unique_ptr<DataLoader> train, val;
  double unigramNats = 0;
  std::unique_ptr<ParamLayout> layout, full;
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<StageModel> model;
  std::unique_ptr<Pipeline> pipeline;
  std::unique_ptr<AdamW> adam;
  std::unique_ptr<LrSchedule> schedule;
  std::vector<float> params, grads;
  int64_t step = 0;
  std::string memoryLine;
  std::optional<planner::ComputeProfile> computeProfile;  // --plan auto, --predict
  std::optional<StepBreakdown> predicted;                 // --plan auto, --predict (lead rank)
  std::string predictionText;                             // what the lead prints before the steps

  void worldSum(std::vector<double>& v) const {
    if (world == 1) return;
    if (hetcommResult_t r = hetcommAllReduce(v.data(), v.data(), v.size(), hetcommFloat64, hetcommSum, comm, nullptr);
        r != hetcommSuccess)
      die(rank, commError("hetcommAllReduce (world sum)", r, comm).message());
  }
  double worldMax(double v) const {
    if (world > 1)
      if (hetcommResult_t r = hetcommAllReduce(&v, &v, 1, hetcommFloat64, hetcommMax, comm, nullptr);
          r != hetcommSuccess)
        die(rank, commError("hetcommAllReduce (world max)", r, comm).message());
    return v;
  }
  // The lead's text on every rank (length, then bytes).
  std::string fromLead(std::string text) const {
    if (world == 1) return text;
    uint64_t n = text.size();
    if (hetcommResult_t r = hetcommBroadcast(&n, &n, 1, hetcommUint64, 0, comm, nullptr); r != hetcommSuccess)
      die(rank, commError("hetcommBroadcast (plan)", r, comm).message());
    text.resize(n);
    if (hetcommResult_t r = hetcommBroadcast(text.data(), text.data(), n, hetcommUint8, 0, comm, nullptr);
        r != hetcommSuccess)
      die(rank, commError("hetcommBroadcast (plan)", r, comm).message());
    return text;
  }

  void setUp();
  void resolveDevices();
  void resolveReferenceRate();
  void choosePlan();
  std::vector<double> plannedSpeeds() const;
  planner::ComputeProfile profile();
  void planAutomatically();
  void predict();
  void buildRanks();
  void checkMemory();
  void loadData();
  void buildModel();
  void resume();
  void printStartup();
  std::vector<float> wholeOnLead(const std::vector<float>& mine);
  void saveCheckpoint(int64_t atStep);
  double evaluate();
  void run();
};

void Training::State::setUp() {
  hetcommCommUserRank(comm, &rank);
  hetcommCommCount(comm, &world);
  lead = rank == 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = o.threads > 0 ? o.threads : std::max(1, cores / localRanks());
  Gpt::setThreads(threads);
  cfg = check(rank, configFrom(o));
  resolveDevices();
  resolveReferenceRate();
  choosePlan();
  buildRanks();
  loadData();
  buildModel();
  checkMemory();
  resume();
  // MFU's peak: the sum over ranks of each one's measured fp32 GEMM rate (or, emulating, the reference rate),
  // times its device speed.
  std::vector<double> gemm{(o.emulateCompute ? referenceGflops : measureGemmGflops([&] {
                             std::vector<double> z{0.0};
                             worldSum(z);
                           })) *
                           speed};
  worldSum(gemm);
  peakGflops = gemm[0];
  if (lead) printStartup();
}

// Device speeds: given one per rank, or "topo": the topology's GPU peaks over the fastest.
void Training::State::resolveDevices() {
  speeds = check(rank, deviceSpeeds(comm, o.deviceSpeeds));
  speed = speeds.speeds.empty() ? 1.0 : speeds.speeds[rank];
  emulated = !speeds.speeds.empty() || o.emulateCompute;  // figures say so
  if (!o.memoryLimits.empty() && o.memoryLimits.size() != 1 && static_cast<int>(o.memoryLimits.size()) != world)
    die(rank, "--memory-limits has " + std::to_string(o.memoryLimits.size()) + " entries for " + std::to_string(world) +
                  " ranks: give one for every rank, or one for all");
  if (o.emulateCompute && (!cfg.checkpointDir.empty() || !o.resume.empty()))
    die(rank, "--emulate-compute computes no parameters: it takes no --checkpoint-dir, checkpoint_dir or --resume");
}

// Reference rate of a speed-1 device for --emulate-compute: given, the topology's fastest GPU, or rank 0's GEMM
// rate measured while the others wait (a core of its own, as an emulated device has).
void Training::State::resolveReferenceRate() {
  referenceGflops = o.referenceGflops > 0 ? o.referenceGflops : speeds.topoPeakTflops * 1e3;
  if (o.emulateCompute && referenceGflops == 0) {
    std::vector<double> r{lead ? measureGemmGflops([] {}) : 0.0};
    worldSum(r);
    referenceGflops = r[0];
  }
}

void Training::State::choosePlan() {
  // The compute profile, measured by every rank at once when it is measured (as they will compute: a rank alone
  // on the host would find the memory bus to itself).
  if (o.plan == "auto" || o.predict) computeProfile = profile();
  if (o.plan == "auto") {
    if (o.tp > 1 || o.pp > 1) die(rank, "--plan auto and --tp/--pp both given: the planner chooses both");
    planAutomatically();
  } else if (!o.plan.empty()) {
    if (o.tp > 1 || o.pp > 1) die(rank, "--plan and --tp/--pp both given: the plan file says both");
    planSource = "plan " + o.plan;
    plan = check(rank, loadPlan(o.plan));
  } else {
    planSource = "--tp " + std::to_string(o.tp) + " --pp " + std::to_string(o.pp);
    if (world % (o.tp * o.pp) != 0)
      die(rank, planSource + ": tp x pp = " + std::to_string(o.tp * o.pp) + " does not divide the " +
                    std::to_string(world) + " ranks");
    plan = uniformPlan(cfg, o.tp, o.pp, world / (o.tp * o.pp));
  }
  // A plan that says its micro-batch size and ZeRO runs with them (the command line's --zero wins).
  if (plan.microBatch > 0 && plan.microBatch != cfg.microBatch) {
    if (lead && o.microBatch)
      std::printf("note: the plan's micro_batch %d replaces --micro-batch %d\n", plan.microBatch, *o.microBatch);
    cfg.microBatch = plan.microBatch;
  }
  zero1 = o.zero ? *o.zero == 1 : plan.zero == 1;
  check(rank, validatePlan(plan, cfg, world, planSource));
  if (o.predict && o.plan != "auto") predict();
}

// Each rank's speed as the planner counts it: its device speed, and with real compute its share of the host's cores
// when the ranks on a host want more BLAS threads than it has (they compute at once).
std::vector<double> Training::State::plannedSpeeds() const {
  std::vector<double> v = speeds.speeds.empty() ? std::vector<double>(world, 1.0) : speeds.speeds;
  if (!o.emulateCompute) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const double share = std::min(1.0, double(cores) / (double(localRanks()) * threads));
    for (double& x : v) x *= share;
  }
  return v;
}

// The compute the planner counts: the emulated devices' waits, or this host's kernels measured (cached).
planner::ComputeProfile Training::State::profile() {
  if (o.emulateCompute) return planner::ComputeProfile::fromFlops(referenceGflops * 1e9);
  std::vector<int> sizes;
  for (int mb : {cfg.microBatch / 2, cfg.microBatch, cfg.microBatch * 2})
    if (mb >= 1 && cfg.globalBatch % mb == 0) sizes.push_back(mb);
  const std::vector<int> tps = check(rank, planner::profiledTpDegrees(comm, cfg.model));
  return check(rank, planner::measureProfile(cfg.model, sizes, tps, threads, planner::profileCacheDir()));
}

// Rank 0 searches (the others wait in the broadcast), every rank takes its plan.
void Training::State::planAutomatically() {
  std::string text;
  if (lead) {
    planner::PlanRequest request;
    request.speeds = plannedSpeeds();
    std::string memorySource;
    request.memoryLimits = check(rank, memoryLimits(comm, o.memoryLimits, true, &memorySource));
    request.profile = *computeProfile;
    request.options.top = o.planTop;
    request.options.maxTp = o.planMaxTp;
    request.options.maxPp = o.planMaxPp;
    request.options.bucketBytes = static_cast<size_t>(o.bucketMb * (1 << 20));
    if (o.zero) request.options.zero = *o.zero;
    const auto t0 = Clock::now();
    auto report = planner::planWorld(comm, cfg, request);
    if (!report) {
      text = "error: " + report.error().message();
    } else {
      const planner::PlanCandidate& best = report->best[0];
      text = toJson(best.plan).dump();
      char line[160];
      std::snprintf(line, sizeof line, "plan auto: searched in %.2f s%s%s\n", secondsSince(t0),
                    request.memoryLimits.empty() ? "" : "; memory limits from ",
                    request.memoryLimits.empty() ? "" : memorySource.c_str());
      predictionText = line + planner::formatReport(*report, request);
      const planner::StepPrediction& p = best.prediction;
      predicted = StepBreakdown{p.stepS,         p.pipelineS, p.bubble,       p.stepS - p.pipelineS,
                                best.tokensPerS, p.tpCommS,   p.pipelineCommS};
    }
  }
  text = fromLead(text);
  if (text.rfind("error: ", 0) == 0) die(rank, "--plan auto: " + text.substr(7));
  plan = check(rank, parsePlan(text, "--plan auto"));
  planSource = "--plan auto";
}

// The planner's prediction for the plan given (lead rank; --predict).
void Training::State::predict() {
  if (!lead) return;
  Placement at = check(rank, placementOf(comm));
  RoleTable roles =
      check(rank, assignRoles(plan, at, o.assignment == "naive" ? Assignment::kNaive : Assignment::kNicAware));
  planner::StepInputs in{
      cfg, plan, roles, plannedSpeeds(), *computeProfile, static_cast<size_t>(o.bucketMb * (1 << 20)), zero1};
  in.where = at;
  auto p = planner::predictStep(in, planner::predictedBy(comm));
  if (!p) die(rank, "--predict: " + p.error().message());
  predicted = StepBreakdown{p->stepS,
                            p->pipelineS,
                            p->bubble,
                            p->stepS - p->pipelineS,
                            double(cfg.globalBatch) * cfg.model.seqLen / p->stepS,
                            p->tpCommS,
                            p->pipelineCommS};
  char line[200];
  std::snprintf(line, sizeof line, "predicted: step %.1f ms, 1F1B %.1f ms, bubble %.1f%%, %s tok/s (%s)\n",
                p->stepS * 1e3, p->pipelineS * 1e3, p->bubble * 100, human(predicted->tokensPerS).c_str(),
                in.profile.source().c_str());
  predictionText = line;
}

void Training::State::buildRanks() {
  where = check(rank, placementOf(comm));
  table = check(rank, assignRoles(plan, where, o.assignment == "naive" ? Assignment::kNaive : Assignment::kNicAware));
  groups = check(rank, HybridGroups::create(comm, plan, table));
  role = groups->role();
  S = static_cast<int>(plan.stages.size());
  hybrid = S > 1 || plan.stages[0].tp > 1;
  accum = plan.microBatches[role.replica];
  countsLoss = role.stage + 1 == S && role.tpRank == 0;
  tiedGroup = groups->tied() ? (role.stage == 0 ? 0 : cfg.model.nLayer + 1) : -1;
}

void Training::State::loadData() {
  files = cfg.dataFiles;
  if (files.empty()) files = check(rank, defaultCorpusFiles());
  dataset = std::make_unique<Dataset>(check(rank, Dataset::fromFiles(files, cfg.valFraction, cfg.model.seqLen)));
  train = std::make_unique<DataLoader>(*dataset, Split::kTrain, cfg.seed);
  val = std::make_unique<DataLoader>(*dataset, Split::kVal, cfg.seed, /*shuffle=*/false);
  unigramNats = unigramEntropyNats(dataset->tokens(Split::kTrain));
}

// This rank's stage and TP shard, its pipeline, optimizer and data parallelism.
void Training::State::buildModel() {
  const size_t bucketBytes = static_cast<size_t>(o.bucketMb * (1 << 20));
  layout = std::make_unique<ParamLayout>(cfg.model, shardOf(plan, role), bucketBytes, plan.dp);
  std::vector<double> shares;  // this rank's DP group's (the same role in every replica), in replica order
  if (!plan.zeroShares.empty())
    for (int d = 0; d < plan.dp; ++d) shares.push_back(plan.zeroShares[table.ranks[d][role.stage][role.tpRank]]);
  dp = std::make_unique<DataParallel>(groups->dp(), *layout, zero1, shares);
  const int slots = Pipeline::slotsFor(role.stage, S, accum);
  if (o.emulateCompute)
    model = std::make_unique<EmulatedStage>(cfg.model, layout->shard(), cfg.microBatch, slots, groups->tpGroup(),
                                            speed * referenceGflops * 1e9);
  else
    model = std::make_unique<Gpt>(cfg.model, *layout, cfg.microBatch, slots, groups->tpGroup());
  pipeline = std::make_unique<Pipeline>(*groups, *model, cfg.model, cfg.microBatch, accum);
  adam = std::make_unique<AdamW>(cfg, *layout, dp->ownedRanges());
  schedule = std::make_unique<LrSchedule>(cfg);
  params.assign(layout->totalFloats(), 0.0f);
  grads.assign(layout->totalFloats(), 0.0f);
  full = std::make_unique<ParamLayout>(cfg.model, bucketBytes, 1);  // the whole model: initialisation, checkpoints
  if (!o.emulateCompute) {  // every rank initialises the whole model from the seed and keeps its part: any plan
                            // starts identically
    std::vector<float> whole(full->totalFloats());
    Gpt(cfg.model, *full, 1).initParams(whole.data(), cfg.seed);
    sliceFromFull(*full, whole.data(), *layout, params.data());
  }
}

// Every rank's need against its limit, collectively: every rank exits when any rank does not fit (the lead names
// each one with its numbers), so none is left waiting in a collective.
void Training::State::checkMemory() {
  if (o.memoryLimits.empty()) return;
  const MemoryNeed need = memoryNeed(cfg, layout->shard(), *layout, dp->ownedFloats(), accum, role.stage, S);
  const uint64_t limit = o.memoryLimits.size() == 1 ? o.memoryLimits[0] : o.memoryLimits[rank];
  constexpr int kFields = 6;
  std::vector<double> all(size_t(world) * kFields, 0.0);
  const double mine[kFields] = {need.params, need.grads, need.optimizer, need.activations, need.buffers, double(limit)};
  std::copy(mine, mine + kFields, all.begin() + size_t(rank) * kFields);
  worldSum(all);
  std::vector<MemoryNeed> needs(world);
  std::vector<double> limits(world);
  for (int r = 0; r < world; ++r) {
    const double* f = all.data() + size_t(r) * kFields;
    needs[r] = MemoryNeed{f[0], f[1], f[2], f[3], f[4]};
    limits[r] = f[5];
  }
  auto line = fitMemory(needs, limits, table);
  if (!line) {
    if (lead)
      std::fprintf(stderr, "hetcomm-train [rank 0]: error: the plan does not fit --memory-limits:%s\n",
                   line.error().detail.c_str());
    // Every rank leaves only once the lead has said why (a launcher stops the others when one exits).
    std::vector<double> said{0.0};
    worldSum(said);
    std::exit(1);
  }
  memoryLine = *line;
}

// The checkpoint holds the whole model (any plan wrote it): each rank takes its part.
void Training::State::resume() {
  if (o.resume.empty()) return;
  TrainState st = check(rank, loadTrainState(o.resume, *full, cfg));
  auto part = [&](const std::vector<float>& whole) {
    std::vector<float> mine(layout->totalFloats(), 0.0f);
    sliceFromFull(*full, whole.data(), *layout, mine.data());
    return mine;
  };
  params = part(st.params);
  st.m = part(st.m);
  st.v = part(st.v);
  size_t at = 0;
  for (auto [off, len] : dp->ownedRanges()) {
    std::copy(st.m.begin() + off, st.m.begin() + off + len, adam->m().begin() + at);
    std::copy(st.v.begin() + off, st.v.begin() + off + len, adam->v().begin() + at);
    at += len;
  }
  adam->setSteps(st.adamSteps);
  check(rank, train->seek(st.data));
  step = st.step;
  if (lead) std::printf("resumed from %s at step %lld\n", o.resume.c_str(), (long long)step);
}

void Training::State::printStartup() {
  StartupInfo s;
  s.world = world, s.threads = threads, s.zero1 = dp->zero1(), s.hybrid = hybrid;
  s.emulateCompute = o.emulateCompute, s.plan = &plan, s.planSource = planSource, s.assignment = o.assignment;
  if (hybrid || plan.dp > 1) s.roleTable = formatRoleTable(table, where, plan);
  s.deviceSpeeds = speeds.speeds, s.speedSource = speeds.source;
  s.referenceGflops = referenceGflops, s.peakGflops = peakGflops, s.config = &cfg;
  s.parameters = int64_t(layout->parameterCount());
  s.files = files.size(), s.buckets = layout->buckets().size(), s.bucketMb = o.bucketMb;
  s.trainTokens = double(dataset->tokens(Split::kTrain).size());
  s.valTokens = double(dataset->tokens(Split::kVal).size());
  s.unigramNats = unigramNats, s.memoryLine = memoryLine;
  std::printf("%s", predictionText.c_str());
  trainer::printStartup(s);
}

// Checkpoints hold the whole model by tensor name, whatever the plan, so a run can resume under another: the ranks
// of replica 0 add their shards into whole-model buffers (each parameter once: addToFull skips the copies the
// gradient norm skips), the world sums them onto rank 0, and rank 0 writes.
std::vector<float> Training::State::wholeOnLead(const std::vector<float>& mine) {
  std::vector<float> whole(full->totalFloats(), 0.0f);
  if (role.replica == 0) addToFull(*layout, mine.data(), *full, whole.data());
  if (world > 1)
    if (hetcommResult_t r =
            hetcommReduce(whole.data(), whole.data(), whole.size(), hetcommFloat32, hetcommSum, 0, comm, nullptr);
        r != hetcommSuccess)
      die(rank, commError("hetcommReduce (checkpoint)", r, comm).message());
  if (!lead) whole = {};  // one whole-model buffer at a time off rank 0
  return whole;
}

void Training::State::saveCheckpoint(int64_t atStep) {
  if (cfg.checkpointDir.empty()) return;
  TrainState st;
  st.step = atStep;
  st.adamSteps = adam->steps();
  st.data = train->position();
  st.params = wholeOnLead(params);
  st.m = wholeOnLead(check(rank, dp->gatherOwned(adam->m())));
  st.v = wholeOnLead(check(rank, dp->gatherOwned(adam->v())));
  if (!lead) return;
  std::filesystem::create_directories(cfg.checkpointDir);
  const std::string path = cfg.checkpointDir + "/step" + std::to_string(atStep) + ".safetensors";
  check(rank, saveTrainState(path, *full, st, cfg));
  std::printf("checkpoint: %s\n", path.c_str());
}

// Mean validation loss over the first eval_batches * micro_batch windows of the validation split, each replica
// taking a contiguous share (weighted by its count, so any plan gives the same figure) through its pipeline.
double Training::State::evaluate() {
  const int64_t total = std::min<int64_t>(int64_t(cfg.evalBatches) * cfg.microBatch, val->windowsPerEpoch());
  const int64_t begin = total * role.replica / plan.dp, end = total * (role.replica + 1) / plan.dp;
  std::vector<Batch> batches;
  std::vector<MicroBatch> micro;
  for (int64_t at = begin; at < end; at += cfg.microBatch) {
    std::vector<int64_t> samples;
    for (int64_t i = at; i < std::min(end, at + cfg.microBatch); ++i) samples.push_back(i);
    batches.push_back(check(rank, val->makeBatch(samples)));
  }
  for (size_t i = 0; i < batches.size(); ++i) {
    const int B = static_cast<int>(std::min<int64_t>(cfg.microBatch, end - begin - int64_t(i) * cfg.microBatch));
    micro.push_back({batches[i].inputs.data(), batches[i].targets.data(), B});
  }
  const double lossSum = check(rank, pipeline->evaluate(params.data(), micro));
  std::vector<double> sums{countsLoss ? lossSum : 0.0, countsLoss ? double(end - begin) : 0.0};
  worldSum(sums);
  return sums[0] / sums[1];
}

// The tied embedding: the first stage's wte and the last stage's copy for the LM head get the sum of both
// gradients (each rank puts its rows into a whole-table buffer; the tied group sums it).
static Result<void> sumTiedCopies(const ParamLayout& layout, float* grads, hetcommComm_t tied, int C, int V) {
  const ParamTensor& t = layout.find(layout.shard().embedding ? "wte" : "lm_head.weight");
  std::vector<float> whole(size_t(V) * C, 0.0f);
  size_t at = t.offset;
  for (auto [b, e] : t.rows) {
    std::copy(grads + at, grads + at + size_t(e - b) * C, whole.begin() + b * C);
    at += size_t(e - b) * C;
  }
  if (hetcommResult_t r =
          hetcommAllReduce(whole.data(), whole.data(), whole.size(), hetcommFloat32, hetcommSum, tied, nullptr);
      r != hetcommSuccess)
    return commError("hetcommAllReduce (tied embedding)", r, tied);
  at = t.offset;
  for (auto [b, e] : t.rows) {
    std::copy(whole.begin() + b * C, whole.begin() + e * C, grads + at);
    at += size_t(e - b) * C;
  }
  return {};
}

void Training::State::run() {
  std::unique_ptr<StepLog> log;
  if (lead) log = check(rank, StepLog::open(o.logJson, o.progress, cfg.logEvery));
  const int T = cfg.model.seqLen;
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
    if (stretchSpeed < 1) std::this_thread::sleep_for(std::chrono::duration<double>(computeS * (1 / stretchSpeed - 1)));
    busyS += computeS / stretchSpeed + tpS;
  };
  const auto runStart = Clock::now();
  const int64_t firstStep = step;
  for (; step < cfg.steps; ++step) {
    const auto t0 = Clock::now();
    const std::vector<int64_t> samples = train->nextSamples(cfg.globalBatch);
    double commS = 0;
    std::vector<Batch> batches;
    std::vector<MicroBatch> micro;
    for (int m = 0; m < accum; ++m) {
      const auto at = std::span(samples).subspan(replicaOffset + int64_t(m) * cfg.microBatch, cfg.microBatch);
      batches.push_back(check(rank, train->makeBatch(at)));
    }
    for (auto& b : batches) micro.push_back({b.inputs.data(), b.targets.data(), cfg.microBatch});
    // Buckets go out as the last micro-batch's backward completes them, except the tied embedding's: its two
    // copies are summed first, after the pipeline.
    auto onGroup = [&](int g) {
      if (tiedGroup >= 0 && layout->bucketOfGroup(g) == layout->bucketOfGroup(tiedGroup)) return;
      check(rank, dp->groupDone(g, grads.data()));
    };
    groups->tpSeconds = groups->p2pSeconds = 0;
    busyS = 0;
    const double lossSum =
        check(rank, pipeline->step(params.data(), grads.data(), lossScale, micro, onGroup, computeHook));
    const double computeS = secondsSince(t0);
    auto c0 = Clock::now();
    if (groups->tied())
      check(rank, sumTiedCopies(*layout, grads.data(), groups->tied(), cfg.model.dModel, cfg.model.vocabSize));
    check(rank, dp->finishGradients(grads.data()));
    // Loss (sum over sequences, from each replica's last stage) and the squared gradient norm, each parameter
    // counted once: without ZeRO every replica holds the same gradients, so only replica 0's count.
    std::vector<double> sums{countsLoss ? lossSum : 0.0,
                             (dp->zero1() || dp->rank() == 0) ? adam->normSquared(grads.data()) : 0.0};
    worldSum(sums);
    commS += secondsSince(c0);
    const double loss = sums[0] / cfg.globalBatch, norm = std::sqrt(sums[1]);
    const float clip = cfg.gradClip > 0 && norm > cfg.gradClip ? static_cast<float>(cfg.gradClip / (norm + 1e-6)) : 1;
    const double lr = schedule->lrAt(step);
    adam->step(params.data(), grads.data(), static_cast<float>(lr), clip);
    c0 = Clock::now();
    check(rank, dp->gatherParams(params.data()));
    commS += secondsSince(c0);
    std::fill(grads.begin(), grads.end(), 0.0f);
    const double stepS = secondsSince(t0);
    lastLoss = loss;
    if (step > firstStep) {  // the first step warms caches and allocators
      totalCompute += computeS, totalComm += commS, totalTime += stepS, ++timedSteps;
      totalBusy += busyS, totalPipe += computeS;
      totalTp += groups->tpSeconds, totalP2p += groups->p2pSeconds;
    }

    const bool evalNow =
        !o.emulateCompute && ((cfg.evalEvery > 0 && (step + 1) % cfg.evalEvery == 0) || step + 1 == cfg.steps);
    std::optional<double> valLoss;
    if (evalNow) lastVal = *(valLoss = evaluate());
    if (cfg.checkpointEvery > 0 && (step + 1) % cfg.checkpointEvery == 0 && step + 1 < cfg.steps)
      saveCheckpoint(step + 1);
    if (!lead) continue;
    StepRecord r;
    r.step = step + 1, r.steps = cfg.steps;
    // What the log shows: nothing is computed under --emulate-compute (NaN: "-", null in the JSON).
    r.loss = o.emulateCompute ? NAN : loss, r.norm = o.emulateCompute ? NAN : norm, r.lr = lr;
    r.tokensPerS = tokensPerStep / stepS;
    r.mfu = Gpt::flopsPerToken(cfg.model) * r.tokensPerS / (peakGflops * 1e9);
    r.computeS = computeS, r.commS = commS, r.stepS = stepS, r.tpS = groups->tpSeconds, r.p2pS = groups->p2pSeconds;
    r.valLoss = valLoss, r.hybrid = hybrid, r.emulated = emulated;
    log->record(r, secondsSince(runStart) / double(step + 1 - firstStep) * double(cfg.steps - step - 1));
  }
  if (log) log->clearProgress();
  saveCheckpoint(step);

  // Means over the ranks: the pipeline's idle share and the time in each kind of group; the slowest rank's 1F1B.
  std::vector<double> means{totalPipe - totalBusy, totalPipe, totalTp, totalP2p, totalComm};
  worldSum(means);
  const double slowestPipe = worldMax(timedSteps ? totalPipe / double(timedSteps) : 0);
  if (!lead) return;
  SummaryInfo s;
  s.world = world, s.stages = S, s.hybridOrDp = hybrid || plan.dp > 1;
  s.minMicroBatches = *std::min_element(plan.microBatches.begin(), plan.microBatches.end());
  s.emulated = emulated, s.emulateCompute = o.emulateCompute;
  s.steps = cfg.steps - firstStep, s.timedSteps = timedSteps, s.tokensPerStep = tokensPerStep;
  s.runS = secondsSince(runStart);
  s.tokensPerS = timedSteps ? tokensPerStep * double(timedSteps) / totalTime : 0;
  s.mfu = Gpt::flopsPerToken(cfg.model) * s.tokensPerS / (peakGflops * 1e9);
  s.computeShare = totalTime > 0 ? totalCompute / totalTime : 0;
  s.commShare = totalTime > 0 ? totalComm / totalTime : 0;
  s.bubble = means[1] > 0 ? means[0] / means[1] : 0;
  const double perStep = timedSteps ? 1e3 / double(world) / double(timedSteps) : 0;
  s.tpMs = means[2] * perStep, s.p2pMs = means[3] * perStep, s.dpMs = means[4] * perStep;
  s.lastLoss = lastLoss, s.lastVal = lastVal, s.unigramNats = unigramNats;
  const double stepS = timedSteps ? totalTime / double(timedSteps) : 0;
  s.measured =
      StepBreakdown{stepS, slowestPipe, s.bubble, stepS - slowestPipe, s.tokensPerS, s.tpMs / 1e3, s.p2pMs / 1e3};
  s.predicted = predicted;
  printSummary(s);
  if (!o.summaryJson.empty()) {
    std::ofstream out(o.summaryJson, std::ios::trunc);
    out << summaryJson(s).dump(1) << "\n";
    if (!out) die(rank, "cannot write --summary-json " + o.summaryJson);
  }
}

Training::Training(const Options& options, hetcommComm_t comm) : s_(std::make_unique<State>()) {
  s_->o = options;
  s_->comm = comm;
  s_->setUp();
}

Training::~Training() = default;

void Training::run() { s_->run(); }

}  // namespace hetcomm::trainer
