// hetcomm-train: GPT training on the CPU with data parallelism over hetcomm.
//
//   hetcomm-run -np 2 build/bin/hetcomm-train --config configs/gpt-tiny.json --steps 200
//
// One step: every rank draws the same global batch of samples, takes its share, runs forward and backward over
// its micro-batches (accumulating gradients), and the last micro-batch's backward starts each bucket's
// reduction as soon as its gradients are final. Then: wait for the reductions, clip by the global norm, AdamW
// (on this rank's slices under ZeRO-1, then an allgather), and report. Evaluation on the validation split every
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
#include "trainer/lr_schedule.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/param_layout.h"
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
// "peak" MFU is measured against.
double measureGemmGflops(ht::DataParallel& dp) {
  constexpr int n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  (void)dp.sum(0.0);  // start together
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

// Mean validation loss over the first eval_batches * micro_batch windows of the validation split, each rank
// taking a contiguous share (weighted by its count, so any rank count gives the same figure).
double evaluate(ht::Gpt& model, const std::vector<float>& params, const ht::DataLoader& val, const ht::TrainConfig& cfg,
                ht::DataParallel& dp) {
  const int64_t total = std::min<int64_t>(int64_t(cfg.evalBatches) * cfg.microBatch, val.windowsPerEpoch());
  const int64_t begin = total * dp.rank() / dp.size(), end = total * (dp.rank() + 1) / dp.size();
  std::vector<double> sums{0.0, 0.0};  // loss * sequences, sequences
  for (int64_t at = begin; at < end; at += cfg.microBatch) {
    std::vector<int64_t> samples;
    for (int64_t i = at; i < std::min(end, at + cfg.microBatch); ++i) samples.push_back(i);
    auto batch = check(dp.rank(), val.makeBatch(samples));
    const int B = static_cast<int>(samples.size());
    sums[0] += check(dp.rank(), model.evaluate(params.data(), batch.inputs.data(), batch.targets.data(), B)) * B;
    sums[1] += B;
  }
  check(dp.rank(), dp.sum(sums));
  return sums[0] / sums[1];
}

class Progress {
 public:
  Progress(bool on, int64_t total) : on_(on), total_(total) {}
  void show(int64_t step, double loss, double etaS) {
    if (!on_) return;
    const int width = 30, filled = static_cast<int>(width * step / std::max<int64_t>(total_, 1));
    std::printf("\r[%s%s] %lld/%lld loss %.4f eta %.0fs ", std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), (long long)step, (long long)total_, loss, etaS);
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
  CLI::App app{"hetcomm-train: GPT training with data parallelism over hetcomm"};
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
  check(rank, ht::validate(cfg, world, "config " + o.config + " with the command line"));
  const int accum = ht::gradAccumSteps(cfg, world);
  const int T = cfg.model.seqLen;

  // ---- data ----
  std::vector<std::string> files = cfg.dataFiles;
  if (files.empty()) files = check(rank, ht::defaultCorpusFiles());
  ht::Dataset dataset = check(rank, ht::Dataset::fromFiles(files, cfg.valFraction, T));
  ht::DataLoader train(dataset, ht::Split::kTrain, cfg.seed);
  ht::DataLoader val(dataset, ht::Split::kVal, cfg.seed, /*shuffle=*/false);
  const double unigramNats = ht::unigramEntropyNats(dataset.tokens(ht::Split::kTrain));

  // ---- model, optimizer, data parallelism ----
  ht::ParamLayout layout(cfg.model, static_cast<size_t>(o.bucketMb * (1 << 20)), world);
  ht::Gpt model(cfg.model, layout, cfg.microBatch);
  ht::DataParallel dp(comm, layout, o.zero == 1);
  ht::AdamW adam(cfg, layout, dp.ownedRanges());
  ht::LrSchedule schedule(cfg);
  std::vector<float> params(layout.totalFloats()), grads(layout.totalFloats(), 0.0f);
  model.initParams(params.data(), cfg.seed);
  int64_t step = 0;
  if (!o.resume.empty()) {
    ht::TrainState s = check(rank, ht::loadTrainState(o.resume, layout, cfg));
    params = std::move(s.params);
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
  const double gemmGflops = measureGemmGflops(dp);
  const double peakGflops = check(rank, dp.sum(gemmGflops));

  if (lead) {
    std::printf("hetcomm-train: %d rank%s (data parallel%s), %d BLAS thread%s each\n", world, world > 1 ? "s" : "",
                dp.zero1() ? ", ZeRO-1" : "", threads, threads > 1 ? "s" : "");
    std::printf("model: %d layers, %d heads, d_model %d, seq_len %d, vocab %d: %s parameters\n", cfg.model.nLayer,
                cfg.model.nHead, cfg.model.dModel, T, cfg.model.vocabSize,
                human(static_cast<double>(layout.parameterCount())).c_str());
    std::printf("batch: %d sequences per step (%d tokens) = %d rank%s x %d micro-batch%s x %d\n", cfg.globalBatch,
                cfg.globalBatch * T, world, world > 1 ? "s" : "", accum, accum > 1 ? "es" : "", cfg.microBatch);
    std::printf("data: %zu file%s, %s train / %s validation tokens; unigram entropy %.4f nats\n", files.size(),
                files.size() > 1 ? "s" : "", human(double(dataset.tokens(ht::Split::kTrain).size())).c_str(),
                human(double(dataset.tokens(ht::Split::kVal).size())).c_str(), unigramNats);
    std::printf("buckets: %zu of about %.1f MiB; measured fp32 GEMM peak %.1f GFLOP/s over all ranks\n",
                layout.buckets().size(), o.bucketMb, peakGflops);
  }
  std::unique_ptr<std::ofstream> json;
  if (lead && !o.logJson.empty()) {
    json = std::make_unique<std::ofstream>(o.logJson, std::ios::trunc);
    if (!*json) die(rank, "cannot write --log-json file " + o.logJson);
  }
  auto saveCheckpoint = [&](int64_t atStep) {
    if (cfg.checkpointDir.empty()) return;
    ht::TrainState s;
    s.step = atStep;
    s.adamSteps = adam.steps();
    s.data = train.position();
    s.m = check(rank, dp.gatherOwned(adam.m()));
    s.v = check(rank, dp.gatherOwned(adam.v()));
    if (!lead) return;
    s.params = params;
    std::filesystem::create_directories(cfg.checkpointDir);
    const std::string path = cfg.checkpointDir + "/step" + std::to_string(atStep) + ".safetensors";
    check(rank, ht::saveTrainState(path, layout, s, cfg));
    std::printf("checkpoint: %s\n", path.c_str());
  };

  // ---- the loop ----
  Progress progress(lead && o.progress && isatty(STDOUT_FILENO), cfg.steps);
  const double tokensPerStep = double(cfg.globalBatch) * T;
  const float lossScale = static_cast<float>(1.0 / tokensPerStep);
  double totalCompute = 0, totalComm = 0, totalTime = 0, lastLoss = NAN, lastVal = NAN;
  int64_t timedSteps = 0;
  const auto runStart = Clock::now();
  for (; step < cfg.steps; ++step) {
    const auto t0 = Clock::now();
    const std::vector<int64_t> samples = train.nextSamples(cfg.globalBatch);
    double lossSum = 0, commS = 0;
    for (int micro = 0; micro < accum; ++micro) {
      auto slice = check(rank, ht::microBatchSlice(cfg.globalBatch, rank, world, cfg.microBatch, micro));
      auto batch = check(rank, train.makeBatch(std::span(samples).subspan(slice.begin, slice.count)));
      const int B = static_cast<int>(slice.count);
      lossSum += check(rank, model.forward(params.data(), batch.inputs.data(), batch.targets.data(), B)) * B;
      std::function<void(int)> onGroup;
      if (micro == accum - 1)  // the last micro-batch: buckets go out as the backward pass completes them
        onGroup = [&](int g) { check(rank, dp.groupDone(g, grads.data())); };
      model.backward(params.data(), grads.data(), lossScale, onGroup);
    }
    const double computeS = secondsSince(t0);
    auto c0 = Clock::now();
    check(rank, dp.finishGradients(grads.data()));
    // Loss (sum over sequences) and the squared gradient norm of this rank's ranges, summed over ranks. Without
    // ZeRO every rank holds every gradient, so only rank 0's norm counts.
    std::vector<double> sums{lossSum, (dp.zero1() || lead) ? adam.normSquared(grads.data()) : 0.0};
    check(rank, dp.sum(sums));
    commS += secondsSince(c0);
    const double loss = sums[0] / cfg.globalBatch, norm = std::sqrt(sums[1]);
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
    }

    const bool evalNow = (cfg.evalEvery > 0 && (step + 1) % cfg.evalEvery == 0) || step + 1 == cfg.steps;
    double valLoss = NAN;
    if (evalNow) lastVal = valLoss = evaluate(model, params, val, cfg, dp);
    if (cfg.checkpointEvery > 0 && (step + 1) % cfg.checkpointEvery == 0 && step + 1 < cfg.steps)
      saveCheckpoint(step + 1);
    if (!lead) continue;
    const double tps = tokensPerStep / stepS;
    const double mfu = model.flopsPerToken() * tps / (peakGflops * 1e9);
    if (json) {
      nlohmann::json j{{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                       {"tokens_per_s", tps}, {"mfu", mfu}, {"compute_ms", computeS * 1e3},
                       {"comm_ms", commS * 1e3}, {"step_ms", stepS * 1e3}};
      if (evalNow) j["val_loss"] = valLoss;
      *json << j.dump() << "\n" << std::flush;
    }
    if ((cfg.logEvery > 0 && (step + 1) % cfg.logEvery == 0) || step == 0 || evalNow) {
      progress.clear();
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %s tok/s | MFU %.1f%% | compute %.0f ms | comm "
                  "%.0f ms%s\n",
                  (long long)(step + 1), (long long)cfg.steps, loss, lr, norm, human(tps).c_str(), mfu * 100,
                  computeS * 1e3, commS * 1e3,
                  evalNow ? (" | val " + std::to_string(valLoss).substr(0, 6)).c_str() : "");
    }
    progress.show(step + 1, loss, secondsSince(runStart) / (step + 1) * (cfg.steps - step - 1));
  }
  progress.clear();
  saveCheckpoint(step);

  if (lead) {
    const double tps = timedSteps ? tokensPerStep * timedSteps / totalTime : 0;
    std::printf("summary: %lld steps, %s tokens in %.1f s | %s tok/s | MFU %.1f%% | compute %.0f%% comm %.0f%% of "
                "step time\n",
                (long long)cfg.steps, human(tokensPerStep * cfg.steps).c_str(), secondsSince(runStart),
                human(tps).c_str(), model.flopsPerToken() * tps / (peakGflops * 1e9) * 100,
                totalTime > 0 ? totalCompute / totalTime * 100 : 0, totalTime > 0 ? totalComm / totalTime * 100 : 0);
    std::printf("summary: final train loss %.4f, validation loss %.4f (unigram entropy of the data %.4f nats)\n",
                lastLoss, lastVal, unigramNats);
  }
  hetcommCommFinalize(comm);
  hetcommCommDestroy(comm);
  return 0;
}
