#include "trainer/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace hetcomm::trainer {

std::string human(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string figure(double v, const char* format) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

void printStartup(const StartupInfo& s) {
  const ParallelPlan& plan = *s.plan;
  const TrainConfig& cfg = *s.config;
  const int S = static_cast<int>(plan.stages.size()), T = cfg.model.seqLen;
  std::string tps;
  for (const auto& st : plan.stages) tps += (tps.empty() ? "" : "/") + std::to_string(st.tp);
  std::printf(
      "hetcomm-train: %d rank%s (data parallel %d x pipeline %d x tensor parallel %s%s), %d BLAS thread%s "
      "each\n",
      s.world, s.world > 1 ? "s" : "", plan.dp, S, tps.c_str(), s.zero1 ? ", ZeRO-1" : "", s.threads,
      s.threads > 1 ? "s" : "");
  if (s.hybrid || plan.dp > 1) {
    std::printf("plan (%s, %s assignment): %s\n", s.planSource.c_str(), s.assignment.c_str(),
                toJson(plan).dump().c_str());
    std::printf("%s", s.roleTable.c_str());
  }
  if (!s.deviceSpeeds.empty()) {
    std::printf("emulated device speeds (from %s; %s, figures marked emulated):", s.speedSource.c_str(),
                s.emulateCompute ? "waits scaled" : "compute stretched");
    for (double v : s.deviceSpeeds) std::printf(" %g", v);
    std::printf("\n");
  }
  if (s.emulateCompute)
    std::printf(
        "emulated compute: no math; each layer waits its FLOPs / (device speed x %.1f GFLOP/s); messages "
        "at their real sizes; losses not computed\n",
        s.referenceGflops);
  std::printf("model: %d layers, %d heads, d_model %d, seq_len %d, vocab %d: %s parameters\n", cfg.model.nLayer,
              cfg.model.nHead, cfg.model.dModel, T, cfg.model.vocabSize, human(double(s.parameters)).c_str());
  std::printf("batch: %d sequences per step (%d tokens) = %d micro-batch%s x %d over %d replica%s\n", cfg.globalBatch,
              cfg.globalBatch * T, plan.totalMicroBatches(), plan.totalMicroBatches() > 1 ? "es" : "", cfg.microBatch,
              plan.dp, plan.dp > 1 ? "s" : "");
  std::printf("data: %zu file%s, %s train / %s validation tokens; unigram entropy %.4f nats\n", s.files,
              s.files > 1 ? "s" : "", human(s.trainTokens).c_str(), human(s.valTokens).c_str(), s.unigramNats);
  std::printf("buckets: %zu of about %.1f MiB; %s fp32 GEMM peak %.1f GFLOP/s over all ranks\n", s.buckets, s.bucketMb,
              s.emulateCompute ? "emulated" : "measured", s.peakGflops);
  std::printf("%s", s.memoryLine.c_str());
}

Result<std::unique_ptr<StepLog>> StepLog::open(const std::string& jsonPath, bool progress, int64_t logEvery,
                                               bool append) {
  auto log = std::unique_ptr<StepLog>(new StepLog);
  log->progress_ = progress && isatty(STDOUT_FILENO);
  log->logEvery_ = logEvery;
  if (!jsonPath.empty()) {
    log->json_ = std::make_unique<std::ofstream>(jsonPath, append ? std::ios::app : std::ios::trunc);
    if (!*log->json_) return Error{.source = "--log-json", .detail = "cannot write " + jsonPath};
  }
  return log;
}

void StepLog::record(const StepRecord& r, double etaS) {
  if (json_) {
    nlohmann::json j{{"step", r.step},
                     {"loss", r.loss},
                     {"lr", r.lr},
                     {"grad_norm", r.norm},
                     {"tokens_per_s", r.tokensPerS},
                     {"mfu", r.mfu},
                     {"compute_ms", r.computeS * 1e3},
                     {"comm_ms", r.commS * 1e3},
                     {"step_ms", r.stepS * 1e3}};
    if (r.hybrid) j["tp_comm_ms"] = r.tpS * 1e3, j["pipe_comm_ms"] = r.p2pS * 1e3;
    if (r.emulated) j["emulated"] = true;
    if (r.valLoss) j["val_loss"] = *r.valLoss;
    *json_ << j.dump() << "\n" << std::flush;
  }
  if ((logEvery_ > 0 && r.step % logEvery_ == 0) || r.step == 1 || r.valLoss) {
    clearProgress();
    std::printf(
        "step %5lld/%lld | loss %s | lr %.2e | norm %s | %s tok/s | MFU %.1f%% | compute %.0f ms | comm "
        "%.0f ms%s\n",
        (long long)r.step, (long long)r.steps, figure(r.loss, "%.4f").c_str(), r.lr, figure(r.norm, "%.3f").c_str(),
        human(r.tokensPerS).c_str(), r.mfu * 100, r.computeS * 1e3, r.commS * 1e3,
        (r.valLoss ? (" | val " + std::to_string(*r.valLoss).substr(0, 6)) : std::string())
            .append(r.emulated ? " | emulated" : "")
            .c_str());
  }
  if (progress_) {
    const int width = 30, filled = static_cast<int>(width * r.step / std::max<int64_t>(r.steps, 1));
    std::printf("\r[%s%s] %lld/%lld loss %s eta %.0fs ", std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), (long long)r.step, (long long)r.steps,
                figure(r.loss, "%.4f").c_str(), etaS);
    std::fflush(stdout);
    shown_ = true;
  }
}

void StepLog::clearProgress() {
  if (progress_ && shown_) std::printf("\r%80s\r", "");
  shown_ = false;
}

namespace {

nlohmann::json breakdownJson(const StepBreakdown& b) {
  return {{"step_ms", b.stepS * 1e3},
          {"pipeline_ms", b.pipelineS * 1e3},
          {"bubble", b.bubble},
          {"after_pipeline_ms", b.afterPipelineS * 1e3},
          {"tp_comm_ms", b.tpCommS * 1e3},
          {"pipe_comm_ms", b.pipelineCommS * 1e3},
          {"tokens_per_s", b.tokensPerS}};
}

}  // namespace

void printSummary(const SummaryInfo& s) {
  if (s.hybridOrDp) {
    std::printf(
        "summary: pipeline bubble %.1f%% measured (time stages wait, mean over ranks), 1F1B ideal %.1f%% "
        "((S-1)/(M+S-1), S %d, M %d)%s\n",
        s.bubble * 100, 100.0 * (s.stages - 1) / (s.minMicroBatches + s.stages - 1), s.stages, s.minMicroBatches,
        s.emulated ? " [emulated]" : "");
    std::printf(
        "summary: communication per step, mean over ranks: tensor parallel %.1f ms, pipeline %.1f ms, "
        "data parallel + tied embedding %.1f ms\n",
        s.tpMs, s.p2pMs, s.dpMs);
  }
  std::printf(
      "summary: %lld steps, %s tokens in %.1f s | %s tok/s%s | MFU %.1f%% | compute %.0f%% comm %.0f%% of "
      "step time\n",
      (long long)s.steps, human(s.tokensPerStep * double(s.steps)).c_str(), s.runS, human(s.tokensPerS).c_str(),
      s.emulated ? " (emulated)" : "", s.mfu * 100, s.computeShare * 100, s.commShare * 100);
  if (s.predicted) {
    const StepBreakdown& p = *s.predicted;
    const StepBreakdown& m = s.measured;
    std::printf(
        "summary: predicted vs measured: step %.1f vs %.1f ms (%.2fx) | 1F1B %.1f vs %.1f ms | bubble %.1f%% vs "
        "%.1f%% | after the pipeline %.1f vs %.1f ms | tensor parallel %.1f vs %.1f ms | pipeline %.1f vs %.1f ms | "
        "%s vs %s tok/s\n",
        p.stepS * 1e3, m.stepS * 1e3, m.stepS > 0 ? p.stepS / m.stepS : 0, p.pipelineS * 1e3, m.pipelineS * 1e3,
        p.bubble * 100, m.bubble * 100, p.afterPipelineS * 1e3, m.afterPipelineS * 1e3, p.tpCommS * 1e3,
        m.tpCommS * 1e3, p.pipelineCommS * 1e3, m.pipelineCommS * 1e3, human(p.tokensPerS).c_str(),
        human(m.tokensPerS).c_str());
  }
  if (s.emulateCompute)
    std::printf("summary: losses not computed (--emulate-compute)\n");
  else
    std::printf("summary: final train loss %.4f, validation loss %.4f (unigram entropy of the data %.4f nats)\n",
                s.lastLoss, s.lastVal, s.unigramNats);
}

nlohmann::json summaryJson(const SummaryInfo& s) {
  nlohmann::json j{{"steps", s.steps}, {"tokens_per_s", s.tokensPerS}, {"measured", breakdownJson(s.measured)}};
  if (s.predicted) j["predicted"] = breakdownJson(*s.predicted);
  return j;
}

}  // namespace hetcomm::trainer
