// pipeline.h: one rank's part of a TP x PP x DP run: the communicators its roles need, and the 1F1B pipeline
// schedule over its replica's micro-batches.
//
// Communicators (hetcommCommSplit of the world, every rank calling in the same order):
//   tp    the ranks of this (replica, stage): the model's TpGroup, and the all-gather that re-shards an
//         activation arriving at the stage boundary;
//   dp    the ranks with this (stage, tp rank) in every replica: the gradient buckets (DataParallel, ZeRO-1);
//   tied  the first and last stage of this replica (two stages or more): they sum the gradients of their two
//         copies of the tied wte;
//   fwd, bwd  copies of the world for activations going forward and gradients going backward, so a send
//         queued one way never holds up a receive the other way.
//
// Stage boundaries: both sides hold the residual stream whole on every TP rank. The receiving stage's rank j
// takes slice j of its TP degree's slices from the sending stage's rank j mod (sender's TP degree), and the
// receiving TP group all-gathers the slices: each byte crosses the boundary once, whatever the two degrees
// (FlashFlex's asymmetric stages).
//
// 1F1B (PipeDream-Flush / Megatron): stage s runs min(S - s - 1, M) forwards, then alternates one forward and
// one backward, then the remaining backwards; so at most S - s micro-batches are in flight on it.
//
// With pipeline depth d (the plan's pipeline_depth) the warm-up is min(d (S - s - 1), M) forwards: each stage
// runs d forwards ahead of the next one instead of one. Plain 1F1B puts a boundary's two transfers on the
// critical path: stage s sends forward(m + 1) only after its backward(m - 1), so with stages of T0 and T1 a
// micro-batch per (T0 + T1 + activation + gradient transfer) / 2 at best, not per max(T0, T1). Depth 2 lets the
// next activation cross while the next stage computes, at the price of d (S - s - 1) - (S - s - 1) more
// micro-batches' activations held on stage s.
#pragma once

#include <hetcomm/hetcomm.h>

#include <functional>
#include <memory>
#include <vector>

#include "trainer/error.h"
#include "trainer/model.h"
#include "trainer/plan.h"

namespace hetcomm::trainer {

class HybridGroups {
 public:
  // world: every rank (not owned). Collective over world.
  static Result<std::unique_ptr<HybridGroups>> create(hetcommComm_t world, const ParallelPlan& plan,
                                                      const RoleTable& table);
  ~HybridGroups();
  HybridGroups(const HybridGroups&) = delete;
  HybridGroups& operator=(const HybridGroups&) = delete;

  const Role& role() const { return role_; }
  int stages() const { return stages_; }
  hetcommComm_t dp() const { return dp_; }
  hetcommComm_t tied() const { return tied_; }         // null unless this rank is on the first or last of >= 2 stages
  TpGroup* tpGroup() const { return tpGroup_.get(); }  // null at TP degree 1
  hetcommComm_t tp() const { return tp_; }
  hetcommComm_t fwd() const { return fwd_; }
  hetcommComm_t bwd() const { return bwd_; }
  // Global ranks of stage `stage`'s TP group in this rank's replica.
  const std::vector<int>& stageRanks(int stage) const { return ranks_[stage]; }
  // Seconds spent in each group's communication since the last take (tp, pipeline p2p), for the log.
  double tpSeconds = 0, p2pSeconds = 0;

 private:
  HybridGroups() = default;
  Role role_;
  int stages_ = 1;
  std::vector<std::vector<int>> ranks_;
  hetcommComm_t tp_ = nullptr, dp_ = nullptr, tied_ = nullptr, fwd_ = nullptr, bwd_ = nullptr;
  std::unique_ptr<TpGroup> tpGroup_;
};

// What a step's pipeline needs to know about one micro-batch: its tokens and targets (first / last stage).
struct MicroBatch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  int sequences = 0;
};

// Where one stage sits in its pipeline, and what decides how much it holds: stage `stage` of `stages`, running
// `microBatches` a step at pipeline depth `depth` (the plan's pipeline_depth).
struct StageShape {
  int stage = 0, stages = 1, microBatches = 1, depth = 1;
  // Forwards the stage runs before its first backward: min(depth (stages - stage - 1), microBatches).
  int warmup() const;
  // Micro-batches in flight on the stage (its warm-up and one more): the slots its model needs.
  int slots() const;
  // Boundary buffers of each kind (activations sent, input gradients sent) the stage keeps, reused round-robin:
  // the micro-batches in flight and one more, and at least depth + 1 (the previous stage runs depth ahead); at
  // most one per micro-batch.
  int boundaryBuffers() const;
};

class Pipeline {
 public:
  // model: this rank's stage (built with StageShape::slots() slots); not owned. depth: the plan's pipeline_depth.
  Pipeline(HybridGroups& groups, StageModel& model, const ModelConfig& cfg, int maxBatch, int microBatches,
           int depth);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // One step's 1F1B over `micro` (the replica's micro-batches, in order): accumulates gradients into grads;
  // groupDone as Gpt::backward, from the last micro-batch's backward. Returns the sum over micro-batches of
  // loss * sequences on the last stage, 0 elsewhere. computeHook(compute, tp) runs after each forward or backward
  // with the seconds it spent computing and in tensor-parallel reductions (device-speed emulation stretches
  // the first).
  Result<double> step(const float* params, float* grads, float lossScale, const std::vector<MicroBatch>& micro,
                      const std::function<void(int)>& groupDone,
                      const std::function<void(double, double)>& computeHook);
  // Bytes of the buffers a pipeline of these shapes holds (for memory limits).
  static size_t bufferBytes(const ModelConfig& cfg, int maxBatch, const StageShape& shape);
  // Forward only (evaluation), one micro-batch after another: the sum of loss * sequences on the last stage.
  Result<double> evaluate(const float* params, const std::vector<MicroBatch>& micro);

 private:
  Result<void> sendBoundary(const float* buf, size_t floats, int toStage, hetcommComm_t comm, hetcommStream_t stream);
  Result<void> recvBoundary(float* buf, size_t floats, int fromStage, hetcommComm_t comm);

  HybridGroups& g_;
  StageModel& model_;
  int C_, T_, stage_, stages_, depth_;
  hetcommStream_t fwdStream_ = nullptr, bwdStream_ = nullptr;
  std::vector<std::vector<float>> outs_, dins_;  // boundaryBuffers() of each: sent activations / input gradients
  std::vector<float> in_, dout_, slice_, evalOut_;
};

}  // namespace hetcomm::trainer
