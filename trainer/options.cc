#include "trainer/options.h"

#include <CLI/CLI.hpp>
#include <type_traits>
#include <utility>

namespace hetcomm::trainer {

std::variant<Options, int> parseCommandLine(int argc, char** argv) {
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
  app.add_option("--zero", o.zero,
                 "1: shard optimizer state over the data-parallel ranks (ZeRO-1); default: the "
                 "plan's, else 0")
      ->check(CLI::Range(0, 1));
  app.add_option("--pipeline-depth", o.pipelineDepth,
                 "forwards each pipeline stage runs ahead of the next (1: plain 1F1B; 2 hides the stage boundaries' "
                 "transfers, for more activations held); default: the plan's, else 1")
      ->check(CLI::Range(1, 64));
  app.add_option("--bucket-mb", o.bucketMb, "gradient bucket size in MiB")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "BLAS threads per rank (default: cores / ranks on this host)");
  app.add_option("--checkpoint-dir", o.checkpointDir, "where checkpoints go");
  app.add_option("--checkpoint-every", o.checkpointEvery, "steps between checkpoints (0: only at the end)");
  app.add_option("--resume", o.resume, "checkpoint file to continue from");
  app.add_flag(
      "--elastic", o.elastic,
      "when a rank is lost, the others shrink the world (hetcommCommShrink) and go on from the newest "
      "checkpoint under a plan for the ranks left (needs a checkpoint dir; start under hetcomm-run --elastic)");
  app.add_option("--log-json", o.logJson, "write one JSON object per step to this file");
  app.add_option("--summary-json", o.summaryJson,
                 "write the run's summary (throughput; the measured step and, with --predict or --plan auto, the "
                 "predicted one, term by term) as JSON to this file");
  app.add_flag("!--no-progress", o.progress, "no progress bar");
  app.add_option("--plan", o.plan,
                 "parallel plan JSON (stages, TP degrees, micro-batches per replica, ranks), or 'auto': the planner "
                 "chooses one at start from the live link figures, the device speeds and the memory limits");
  app.add_flag("--predict", o.predict,
               "print the planner's prediction for the plan at start, and against the measured step at the end (with "
               "--plan auto always)");
  app.add_option("--plan-max-tp", o.planMaxTp, "--plan auto: the largest tensor-parallel degree (0: any)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--plan-max-pp", o.planMaxPp, "--plan auto: the most pipeline stages (0: any)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--plan-top", o.planTop, "--plan auto: the best plans to show")->check(CLI::PositiveNumber);
  app.add_option("--tp", o.tp, "tensor-parallel degree of every stage (without --plan)")->check(CLI::PositiveNumber);
  app.add_option("--pp", o.pp, "pipeline stages, blocks split evenly (without --plan)")->check(CLI::PositiveNumber);
  app.add_option("--assignment", o.assignment,
                 "who plays which role: nic (TP in a host, DP in an RDMA island, "
                 "pipeline boundaries across islands) or naive (rank order)")
      ->check(CLI::IsMember({"nic", "naive"}));
  app.add_option("--device-speeds", o.deviceSpeeds,
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
  app.add_option("--memory-limits", o.memoryLimits,
                 "bytes per rank (one value for all, or one per rank; suffixes "
                 "K M G, binary): a plan that does not fit is refused at start")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return o;
}

Result<TrainConfig> configFrom(const Options& o) {
  auto loaded = loadConfig(o.config);
  if (!loaded) return loaded.error();
  TrainConfig cfg = *loaded;
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
  if (auto ok = validate(cfg, 1, "config " + o.config + " with the command line"); !ok) return ok.error();
  return cfg;
}

void adaptToSurvivors(Options& o, const std::vector<int32_t>& survivors, int oldWorld) {
  auto keep = [&](auto& perRank) {
    if (static_cast<int>(perRank.size()) != oldWorld) return;
    std::remove_reference_t<decltype(perRank)> left;
    for (int32_t r : survivors) left.push_back(perRank[r]);
    perRank = std::move(left);
  };
  keep(o.memoryLimits);
  if (!(o.deviceSpeeds.size() == 1 && o.deviceSpeeds[0] == "topo")) keep(o.deviceSpeeds);
  const int world = static_cast<int>(survivors.size());
  if (!o.plan.empty() && o.plan != "auto") o.plan = "auto";
  if (o.plan.empty() && world % (o.tp * o.pp) != 0) {
    o.plan = "auto";
    o.tp = o.pp = 1;
  }
  if (o.plan == "auto") o.tp = o.pp = 1;
  o.appendLog = true;  // the steps before the loss stay in the log, then the resumed ones follow
}

}  // namespace hetcomm::trainer
