// hetcomm-plan: the automatic hybrid-parallel planner. It finds the plans with the shortest predicted training
// step for a model on a cluster, prints the best with their predictions and the HetHub bound, and writes the best
// as a plan file hetcomm-train reads (--plan FILE).
//
//   hetcomm-plan --config configs/gpt-bench.json --cluster clusters/mixed-4x2.json --device-speeds 1,1,1,1,.5,.5,.5,.5
//   -o plan.json hetcomm-plan --config MODEL.json --synthetic
//   hosts=128,ranks=8,islands=16,types=H100:989:80G/A100:312:40G hetcomm-run -np 8 hetcomm-plan --config MODEL.json -o
//   plan.json     (the live cluster, its probed links)
//
// The cluster: a cluster file (--cluster), a one-line description (--synthetic, synthetic.h), or the ranks of a
// launcher with their probed link figures (every rank plans the same; rank 0 prints and writes). Device speeds:
// --device-speeds, else the GPUs' peaks where the topology gives every rank one, else all equal. Compute:
// FLOPs at --reference-gflops or the fastest GPU's peak, else the model measured on this host with the real
// kernels (cached). Memory: --memory-limits, else the GPUs' memory where known.
#include <hetcomm/hetcomm.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "planner/synthetic.h"
#include "planner/world_plan.h"
#include "trainer/config.h"
#include "trainer/data_parallel.h"
#include "trainer/devices.h"
#include "trainer/json_input.h"

namespace hp = hetcomm::planner;
namespace ht = hetcomm::trainer;

namespace {

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "hetcomm-plan: error: %s\n", message.c_str());
  std::exit(1);
}

template <class T>
T check(ht::Result<T> r) {
  if (!r) die(r.error().message());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

nlohmann::json candidateJson(const hp::PlanCandidate& p, double bound) {
  return {{"plan", ht::toJson(p.plan)},
          {"layout", p.layout},
          {"step_ms", p.prediction.stepS * 1e3},
          {"tokens_per_s", p.tokensPerS},
          {"bubble", p.prediction.bubble},
          {"of_bound", bound > 0 ? p.tokensPerS / bound : 0.0},
          {"peak_memory_share", p.peakMemoryShare}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string configPath = "configs/gpt-tiny.json", clusterPath, synthetic, out, jsonOut, printCluster;
  std::vector<std::string> speedsText;
  std::vector<uint64_t> limits;
  std::vector<int> sizes;
  double referenceGflops = 0;
  int top = 5, simulate = 24, threads = 0;
  std::string zero = "auto";
  std::optional<int> globalBatch, microBatch, nLayer, nHead, dModel, seqLen;
  double bucketMb = 1.0;
  hp::PlanRequest request;
  CLI::App app{
      "hetcomm-plan: the automatic hybrid-parallel planner (DP x PP x TP, uneven stages and micro-batches, "
      "NIC-aware placement, ZeRO-1)"};
  app.add_option("--config", configPath, "the model and batch (hetcomm-train's JSON config)");
  app.add_option("--global-batch", globalBatch, "sequences per optimizer step (overrides the config)");
  app.add_option("--micro-batch", microBatch,
                 "the config's micro-batch size (the search also tries its half and double)");
  app.add_option("--n-layer", nLayer, "transformer blocks (overrides the config)");
  app.add_option("--n-head", nHead, "attention heads (overrides the config)");
  app.add_option("--d-model", dModel, "channels (overrides the config)");
  app.add_option("--seq-len", seqLen, "sequence length (overrides the config)");
  auto* cluster = app.add_option("--cluster", clusterPath, "a cluster file (clusters/*.json)");
  auto* synth = app.add_option("--synthetic", synthetic,
                               "a cluster in one line: hosts=N,ranks=R,types=NAME:TFLOPS:MEM/...,islands=HOSTS,"
                               "fast=KIND:MBPS/...,slow=KIND:MBPS");
  cluster->excludes(synth);
  app.add_option("--print-cluster", printCluster, "write the --synthetic cluster's file here (for emulate-cluster.sh)");
  app.add_option("--device-speeds", speedsText, "relative speed per rank, or 'topo' (the GPUs' peaks)")->delimiter(',');
  app.add_option("--memory-limits", limits, "bytes per rank (one for all, or one per rank; suffixes K M G)")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--reference-gflops", referenceGflops,
                 "FLOP/s of a speed-1 device, in GFLOP/s: plan from FLOPs (as hetcomm-train --emulate-compute runs) "
                 "instead of timing the model on this host")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "BLAS threads the profile is measured with (default: cores / local ranks)");
  app.add_option("--micro-batch-sizes", sizes, "micro-batch sizes to try")->delimiter(',');
  app.add_option("--zero", zero, "ZeRO-1: auto (try both), 0 or 1")->check(CLI::IsMember({"auto", "0", "1"}));
  app.add_option("--bucket-mb", bucketMb, "gradient bucket size in MiB (hetcomm-train's)")->check(CLI::PositiveNumber);
  app.add_option("--max-tp", request.options.maxTp, "the largest tensor-parallel degree to consider (0: any)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-pp", request.options.maxPp, "the most pipeline stages to consider (0: any)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top", top, "plans to print")->check(CLI::PositiveNumber);
  app.add_option("--simulate", simulate, "structures to simulate in full")->check(CLI::PositiveNumber);
  std::vector<std::string> evaluate;
  app.add_option("--evaluate", evaluate,
                 "predict these plan files instead of searching (one line each; --json: with each rank's memory)");
  app.add_option("-o,--output", out, "write the best plan here");
  app.add_option("--json", jsonOut, "write the report (every printed plan, the bound, the counts) as JSON here");
  CLI11_PARSE(app, argc, argv);

  // ---- the cluster: a model of a file or a description, or the launcher's ranks ----
  hetcommComm_t comm = nullptr;
  int rank = 0;
  if (!clusterPath.empty() || !synthetic.empty()) {
    const std::string text = clusterPath.empty() ? check(hp::syntheticClusterJson(synthetic))
                                                 : check(ht::readTextFile(clusterPath, "--cluster " + clusterPath));
    if (!printCluster.empty()) {
      std::ofstream(printCluster) << text;
      std::printf("cluster written to %s\n", printCluster.c_str());
    }
    if (hetcommResult_t rc = hetcommCommInitModel(&comm, text.c_str()); rc != hetcommSuccess)
      die(std::string(clusterPath.empty() ? "--synthetic" : "--cluster " + clusterPath) + ": " +
          hetcommGetLastError(nullptr));
  } else if (ht::launchedByALauncher()) {
    if (hetcommResult_t rc = hetcommCommInitFromEnv(&comm); rc != hetcommSuccess)
      die(ht::commError("communicator init", rc, nullptr).message());
    hetcommCommUserRank(comm, &rank);
  } else {
    die("no cluster: give --cluster FILE or --synthetic SPEC, or run under a launcher (hetcomm-run, mpirun, torchrun, "
        "srun) to plan for its ranks");
  }
  int world = 0;
  hetcommCommCount(comm, &world);
  const bool lead = rank == 0;

  ht::TrainConfig cfg = check(ht::loadConfig(configPath));
  if (globalBatch) cfg.globalBatch = *globalBatch;
  if (microBatch) cfg.microBatch = *microBatch;
  if (nLayer) cfg.model.nLayer = *nLayer;
  if (nHead) cfg.model.nHead = *nHead;
  if (dModel) cfg.model.dModel = *dModel;
  if (seqLen) cfg.model.seqLen = *seqLen;
  check(ht::validate(cfg, 1, "config " + configPath + " with the command line"));

  // ---- devices, memory, compute ----
  ht::DeviceSpeeds speeds = check(ht::deviceSpeeds(comm, speedsText));
  if (speedsText.empty() && speeds.topoPeakTflops > 0) speeds = check(ht::deviceSpeeds(comm, {"topo"}));
  std::string memorySource;
  request.speeds = speeds.speeds;
  request.memoryLimits = check(ht::memoryLimits(comm, limits, true, &memorySource));
  const double reference = referenceGflops > 0 ? referenceGflops * 1e9 : speeds.topoPeakTflops * 1e12;
  request.options.top = top;
  request.options.simulate = simulate;
  request.options.microBatchSizes = sizes;
  request.options.bucketBytes = static_cast<size_t>(bucketMb * (1 << 20));
  request.options.zero = zero == "auto" ? -1 : std::stoi(zero);
  if (reference > 0) {
    request.profile = hp::ComputeProfile::fromFlops(reference);
  } else {
    std::vector<int> measured = sizes;
    if (measured.empty())
      for (int mb : {cfg.microBatch / 2, cfg.microBatch, cfg.microBatch * 2})
        if (mb >= 1 && cfg.globalBatch % mb == 0) measured.push_back(mb);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int perRank = threads > 0 ? threads : std::max(1, cores / std::max(1, world));
    const std::vector<int> tps = check(hp::profiledTpDegrees(comm, cfg.model));
    request.profile = check(hp::measureProfile(cfg.model, measured, tps, perRank, hp::profileCacheDir()));
  }

  if (!evaluate.empty()) {
    nlohmann::json plans = nlohmann::json::array();
    for (const std::string& path : evaluate) {
      hp::PlanCandidate c = check(hp::predictPlan(comm, cfg, check(ht::loadPlan(path)), request));
      if (lead) std::printf("%s: %s\n", path.c_str(), c.summary().c_str());
      nlohmann::json j = candidateJson(c, 0);
      j["path"] = path;
      j["memory"] = nlohmann::json::array();
      for (const ht::MemoryNeed& m : c.memory)
        j["memory"].push_back({{"total", m.total()}, {"optimizer", m.optimizer}});
      plans.push_back(std::move(j));
    }
    if (lead && !jsonOut.empty()) std::ofstream(jsonOut) << nlohmann::json{{"plans", plans}}.dump(1) << "\n";
    if (ht::launchedByALauncher() && clusterPath.empty() && synthetic.empty()) hetcommCommFinalize(comm);
    hetcommCommDestroy(comm);
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  hp::SearchReport report = check(hp::planWorld(comm, cfg, request));
  const double planS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (lead) {
    std::printf("hetcomm-plan: %d ranks; model %d layers, d_model %d, %d heads, seq_len %d; global batch %d\n", world,
                cfg.model.nLayer, cfg.model.dModel, cfg.model.nHead, cfg.model.seqLen, cfg.globalBatch);
    if (!speeds.speeds.empty()) std::printf("device speeds from %s\n", speeds.source.c_str());
    if (!request.memoryLimits.empty()) std::printf("memory limits from %s\n", memorySource.c_str());
    std::printf("%s", hp::formatReport(report, request).c_str());
    std::printf("planner: searched in %.2f s\n", planS);
    if (!out.empty()) {
      std::ofstream f(out, std::ios::trunc);
      if (!f) die("cannot write -o " + out);
      f << ht::toJson(report.best[0].plan).dump(1) << "\n";
      std::printf("best plan written to %s (hetcomm-train --plan %s)\n", out.c_str(), out.c_str());
    }
    if (!jsonOut.empty()) {
      nlohmann::json j{{"ranks", world},
                       {"bound_tokens_per_s", report.boundTokensPerS},
                       {"structures", report.structures},
                       {"simulated", report.simulated},
                       {"memory_refused", report.memoryRefused},
                       {"search_s", planS},
                       {"compute", request.profile.source()},
                       {"plans", nlohmann::json::array()}};
      for (const auto& p : report.best) j["plans"].push_back(candidateJson(p, report.boundTokensPerS));
      std::ofstream f(jsonOut, std::ios::trunc);
      if (!f) die("cannot write --json " + jsonOut);
      f << j.dump(1) << "\n";
    }
  }
  if (ht::launchedByALauncher() && clusterPath.empty() && synthetic.empty()) hetcommCommFinalize(comm);
  hetcommCommDestroy(comm);
  return 0;
}
