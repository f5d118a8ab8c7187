#include "planner/step_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "trainer/pipeline.h"

namespace hetcomm::planner {
namespace {

using trainer::Error;

Error bad(const std::string& field, const std::string& detail) {
  return Error{.source = "step cost", .field = field, .detail = detail};
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

trainer::Result<void> checkTime(const std::string& field, double s) {
  if (!std::isfinite(s) || s < 0) return bad(field, "must be a finite time >= 0 s, got " + num(s));
  return {};
}

trainer::Result<void> check(const StepCost& c) {
  if (c.replicas.empty()) return bad("replicas", "no replica");
  if (c.pipelineDepth < 1) return bad("pipelineDepth", "must be >= 1, got " + std::to_string(c.pipelineDepth));
  const size_t S = c.replicas[0].stages.size();
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const ReplicaCost& rep = c.replicas[r];
    const std::string at = "replicas[" + std::to_string(r) + "]";
    if (rep.stages.empty()) return bad(at + ".stages", "no stage");
    if (rep.stages.size() != S)
      return bad(at + ".stages",
                 "has " + std::to_string(rep.stages.size()) + " stages, replicas[0] has " + std::to_string(S));
    if (rep.microBatches < 1) return bad(at + ".microBatches", "must be >= 1, got " + std::to_string(rep.microBatches));
    for (size_t s = 0; s < S; ++s) {
      const StageCost& st = rep.stages[s];
      const std::string here = at + ".stages[" + std::to_string(s) + "]";
      if (auto ok = checkTime(here + ".forwardS", st.forwardS); !ok) return ok;
      if (auto ok = checkTime(here + ".backwardS", st.backwardS); !ok) return ok;
      if (auto ok = checkTime(here + ".transferS", st.transferS); !ok) return ok;
      if (auto ok = checkTime(here + ".gradientTransferS", st.gradientTransferS); !ok) return ok;
      if (st.ranks < 1) return bad(here + ".ranks", "must be >= 1, got " + std::to_string(st.ranks));
    }
  }
  if (!c.buckets.empty() && c.buckets.size() != S)
    return bad("buckets",
               "has " + std::to_string(c.buckets.size()) + " stages' lists for " + std::to_string(S) + " stages");
  for (size_t s = 0; s < c.buckets.size(); ++s)
    for (size_t b = 0; b < c.buckets[s].size(); ++b) {
      const Bucket& k = c.buckets[s][b];
      const std::string here = "buckets[" + std::to_string(s) + "][" + std::to_string(b) + "]";
      if (!(k.readyShare >= 0 && k.readyShare <= 1))
        return bad(here + ".readyShare", "must be in [0, 1], got " + num(k.readyShare));
      if (auto ok = checkTime(here + ".reduceS", k.reduceS); !ok) return ok;
    }
  if (!c.optimizerS.empty() && c.optimizerS.size() != S)
    return bad("optimizerS",
               "has " + std::to_string(c.optimizerS.size()) + " entries for " + std::to_string(S) + " stages");
  for (size_t s = 0; s < c.optimizerS.size(); ++s)
    if (auto ok = checkTime("optimizerS[" + std::to_string(s) + "]", c.optimizerS[s]); !ok) return ok;
  if (auto ok = checkTime("tiedSumS", c.tiedSumS); !ok) return ok;
  return checkTime("worldSumS", c.worldSumS);
}

// The 1F1B order of stage s of S over M micro-batches at pipeline depth d: (backward?, micro-batch).
std::vector<std::pair<bool, int>> order1F1B(int s, int S, int M, int d) {
  const int warm = trainer::StageShape{s, S, M, d}.warmup();
  std::vector<std::pair<bool, int>> ops;
  ops.reserve(2 * static_cast<size_t>(M));
  int f = 0, b = 0;
  for (; f < warm; ++f) ops.push_back({false, f});
  for (; f < M; ++f, ++b) {
    ops.push_back({false, f});
    ops.push_back({true, b});
  }
  for (; b < M; ++b) ops.push_back({true, b});
  return ops;
}

// One replica's 1F1B, per stage: when each backward starts, when the last one ends, and the compute.
struct Timeline {
  std::vector<std::vector<double>> forwardEnd, backwardStart, backwardEnd;  // [stage][micro-batch]; -1: not yet
  std::vector<double> end, busy;                                            // per stage
};

// Each stage runs its ops in their 1F1B order, each as soon as the stage is free and its input has arrived. A
// sweep over the stages runs every op whose input is there; 1F1B never deadlocks, so every sweep runs one at least.
Timeline runPipeline(const ReplicaCost& r, int depth) {
  const int S = static_cast<int>(r.stages.size()), M = r.microBatches;
  Timeline t;
  t.forwardEnd.assign(S, std::vector<double>(M, -1));
  t.backwardStart = t.backwardEnd = t.forwardEnd;
  t.end.assign(S, 0);
  t.busy.assign(S, 0);
  std::vector<std::vector<std::pair<bool, int>>> ops(S);
  for (int s = 0; s < S; ++s) ops[s] = order1F1B(s, S, M, depth);
  std::vector<size_t> next(S, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < S; ++s)
      for (; next[s] < ops[s].size(); ++next[s], moved = true) {
        const auto [backward, m] = ops[s][next[s]];
        double ready = 0;
        if (!backward && s > 0) {
          if (t.forwardEnd[s - 1][m] < 0) break;
          ready = t.forwardEnd[s - 1][m] + r.stages[s - 1].transferS;
        } else if (backward && s + 1 < S) {
          if (t.backwardEnd[s + 1][m] < 0) break;
          ready = t.backwardEnd[s + 1][m] + r.stages[s].gradientTransferS;
        } else if (backward) {
          ready = t.forwardEnd[s][m];  // the last stage: its own forward, earlier in its order
        }
        const double start = std::max(t.end[s], ready);
        const double took = backward ? r.stages[s].backwardS : r.stages[s].forwardS;
        t.end[s] = start + took;
        t.busy[s] += took;
        if (backward) {
          t.backwardStart[s][m] = start;
          t.backwardEnd[s][m] = t.end[s];
        } else {
          t.forwardEnd[s][m] = t.end[s];
        }
      }
  }
  return t;
}

}  // namespace

std::string StepPrediction::describe() const {
  char b[160];
  std::snprintf(b, sizeof b, "step %.2f ms: 1F1B %.2f ms (bubble %.1f %%), reductions done at %.2f ms", stepS * 1e3,
                pipelineS * 1e3, bubble * 100, reductionsDoneS * 1e3);
  return b;
}

trainer::Result<StepPrediction> simulateStep(const StepCost& c) {
  if (auto ok = check(c); !ok) return ok.error();
  const size_t R = c.replicas.size(), S = c.replicas[0].stages.size();
  StepPrediction p;
  std::vector<Timeline> lines;
  for (const ReplicaCost& r : c.replicas) lines.push_back(runPipeline(r, c.pipelineDepth));

  // The tied embedding: the replica's first and last stage sum their copies once both are through.
  std::vector<double> tiedDone(R, 0);
  const bool tied = S >= 2;
  for (size_t r = 0; r < R; ++r)
    if (tied) tiedDone[r] = std::max(lines[r].end[0], lines[r].end[S - 1]) + c.tiedSumS;
  auto holdsTied = [&](size_t s) { return tied && (s == 0 || s == S - 1); };

  // Per stage, its buckets one after another, each once every replica has finished it.
  std::vector<double> reduced(S, 0);
  for (size_t s = 0; s < c.buckets.size(); ++s) {
    double stream = 0;
    for (const Bucket& k : c.buckets[s]) {
      double ready = 0;
      for (size_t r = 0; r < R; ++r) {
        const int last = c.replicas[r].microBatches - 1;
        double at = lines[r].backwardStart[s][last] + k.readyShare * c.replicas[r].stages[s].backwardS;
        if (k.holdsTiedEmbedding && holdsTied(s)) at = std::max(at, tiedDone[r]);
        ready = std::max(ready, at);
      }
      stream = std::max(stream, ready) + k.reduceS;
    }
    reduced[s] = stream;
  }

  // Every rank: its pipeline, its tied sum, its reductions; then the world's sum waits for the slowest.
  double sync = 0, weightedBubble = 0;
  int ranks = 0;
  p.pipelineEndS.assign(R, std::vector<double>(S, 0));
  p.busyS = p.pipelineEndS;
  for (size_t r = 0; r < R; ++r)
    for (size_t s = 0; s < S; ++s) {
      const double end = lines[r].end[s];
      p.pipelineEndS[r][s] = end;
      p.busyS[r][s] = lines[r].busy[s];
      p.pipelineS = std::max(p.pipelineS, end);
      const int n = c.replicas[r].stages[s].ranks;
      weightedBubble += n * (end > 0 ? (end - lines[r].busy[s]) / end : 0);
      ranks += n;
      sync = std::max({sync, end, reduced[s], holdsTied(s) ? tiedDone[r] : 0.0});
      p.reductionsDoneS = std::max({p.reductionsDoneS, reduced[s], holdsTied(s) ? tiedDone[r] : 0.0});
    }
  p.bubble = weightedBubble / ranks;
  double optimizer = 0;
  for (double o : c.optimizerS) optimizer = std::max(optimizer, o);
  p.stepS = sync + c.worldSumS + optimizer;
  p.tpCommS = c.tpCommS, p.pipelineCommS = c.pipelineCommS;
  return p;
}

}  // namespace hetcomm::planner
