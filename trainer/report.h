// report.h: what hetcomm-train prints: the start-up report (who plays which role, the model, the batch, the data,
// the memory check), one log line (and JSON object) per step with a progress bar, and the summary at the end,
// with the planner's prediction against what was measured, term by term, when the run was predicted.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"
#include "trainer/plan.h"

namespace hetcomm::trainer {

// "1.50M", "12.3k", "640".
std::string human(double v);
// v with printf's format, or "-" for NaN (not computed: losses and norms under --emulate-compute).
std::string figure(double v, const char* format);

struct StartupInfo {
  int world = 1, threads = 1;
  bool zero1 = false, hybrid = false, emulateCompute = false;
  const ParallelPlan* plan = nullptr;
  std::string planSource, assignment, roleTable;
  std::vector<double> deviceSpeeds;
  std::string speedSource;
  double referenceGflops = 0, peakGflops = 0;
  const TrainConfig* config = nullptr;
  int64_t parameters = 0;
  size_t files = 0, buckets = 0;
  double trainTokens = 0, valTokens = 0, unigramNats = 0, bucketMb = 0;
  std::string memoryLine;
};
void printStartup(const StartupInfo& s);

// One step as the log shows it.
struct StepRecord {
  int64_t step = 0, steps = 0;  // 1-based
  double loss = 0, lr = 0, norm = 0, tokensPerS = 0, mfu = 0, computeS = 0, commS = 0, stepS = 0;
  double tpS = 0, p2pS = 0;  // hybrid plans
  std::optional<double> valLoss;
  bool hybrid = false, emulated = false;
};

// The per-step log: a line every log_every steps (and the first and evaluation steps), a JSON object per step
// (--log-json), and a progress bar on a terminal. Only the lead rank makes one.
class StepLog {
 public:
  // jsonPath "": no JSON. Errors: a JSON file that cannot be written.
  // append: after the file's lines (hetcomm-train --elastic going on after a shrink), else from empty.
  static Result<std::unique_ptr<StepLog>> open(const std::string& jsonPath, bool progress, int64_t logEvery,
                                               bool append = false);
  void record(const StepRecord& r, double etaS);
  void clearProgress();

 private:
  std::unique_ptr<std::ofstream> json_;
  bool progress_ = false, shown_ = false;
  int64_t logEvery_ = 1;
};

// A step's breakdown, predicted (planner/step_sim.h) or measured (means over ranks and steps).
struct StepBreakdown {
  double stepS = 0, pipelineS = 0, bubble = 0, afterPipelineS = 0, tokensPerS = 0;
  double tpCommS = 0, pipelineCommS = 0;  // per step, mean over ranks
};

struct SummaryInfo {
  int world = 1, stages = 1, minMicroBatches = 1;
  bool hybridOrDp = false, emulated = false, emulateCompute = false;
  int64_t steps = 0, timedSteps = 0;
  double tokensPerStep = 0, runS = 0, tokensPerS = 0, mfu = 0, computeShare = 0, commShare = 0;
  double bubble = 0, tpMs = 0, p2pMs = 0, dpMs = 0;  // means over ranks, per step
  double lastLoss = 0, lastVal = 0, unigramNats = 0;
  StepBreakdown measured;
  std::optional<StepBreakdown> predicted;
};
void printSummary(const SummaryInfo& s);
// {"steps", "tokens_per_s", "measured": {...}, "predicted": {...}} (hetcomm-train --summary-json).
nlohmann::json summaryJson(const SummaryInfo& s);

}  // namespace hetcomm::trainer
