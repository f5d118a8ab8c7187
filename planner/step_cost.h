// step_cost.h: what each part of a hybrid plan's training step costs, for the step simulator (step_sim.h), from
// the model's FLOPs, each rank's device rate, and the communication library's own predictions for every group the
// plan makes (never a cost model of the planner's own).
//
// Per stage and micro-batch of micro_batch sequences of seq_len tokens, as trainer/emulated_stage.cc runs it:
//   compute    the stage's blocks (and the head on the last stage) from the compute profile (profile.h) at its TP
//              group's slowest device speed, each rank holding 1/tp of every block;
//   TP sums    forward: the embedding's sum (first stage), two per block, the head's max and sums (last stage);
//              backward: the head's one, two per block; each an all-reduce over the stage's TP group, of the
//              residual stream (tokens x d_model floats) or the softmax's statistics;
//   transfers  rank j of the receiving stage takes 1/tp of the activation from rank j mod tp of the sending one
//              (the slowest pair counts), then the receiving TP group all-gathers it; the gradient back alike;
//   buckets    the stage's gradient buckets (trainer/param_layout.h: --bucket-mb, aligned to the DP size), each an
//              all-reduce (ZeRO-1: a reduce-scatter) over the stage's DP groups (the slowest TP rank's group), final
//              once the backward has passed the bucket's first group; the tied embedding's bucket after the sum;
//   tied sum   an all-reduce of the whole embedding table over the first and last stages' ranks;
//   optimizer  AdamW over the floats the rank updates (all, or its ZeRO-1 slice) at the host's memory rate, and
//              under ZeRO-1 an all-gather of every bucket.
#pragma once

#include <hetcomm/hetcomm.h>

#include <functional>
#include <vector>

#include "planner/profile.h"
#include "planner/step_sim.h"
#include "trainer/config.h"
#include "trainer/error.h"
#include "trainer/memory.h"
#include "trainer/plan.h"

namespace hetcomm::planner {

// The time of one collective (or one message: hetcommCollSendRecv from ranks[0] to ranks[1]) of count float32
// elements over the group of global ranks, in group order; counts as the hetcomm call takes them. In seconds.
using CollectiveTime =
    std::function<trainer::Result<double>(hetcommCollective_t coll, size_t count, const std::vector<int>& ranks)>;

// hetcommCommPredict over world (not owned; it must outlive the result).
CollectiveTime predictedBy(hetcommComm_t world);

struct StepInputs {
  trainer::TrainConfig config;    // the model, micro_batch (sequences per micro-batch)
  trainer::ParallelPlan plan;     // validated: microBatches filled
  trainer::RoleTable roles;       // from assignRoles
  std::vector<double> rankSpeed;  // per global rank: its device's speed relative to the profile's (1: as profiled)
  ComputeProfile profile = ComputeProfile::fromFlops(1e12);
  size_t bucketBytes = 1 << 20;  // --bucket-mb
  bool zero1 = false;
  // What AdamW streams per second on one rank (bytes of parameters, gradients and moments read and written).
  double optimizerBytesPerS = 4e9;
  // Every rank's host and island, for the links' sharing (predictStep); empty: every group alone on its links.
  trainer::Placement where{};
};

// A stage's compute and tensor-parallel sums per micro-batch on one TP group (global ranks, TP order), its devices
// at relative `speed` (the group's slowest) under `profile`: per block, and the extras of the first stage (the
// embedding) and of the last (the final LayerNorm and head). A stage's forward is first? + layers x block + last?, its
// backward alike.
struct StageTiming {
  double blockForwardS = 0, blockBackwardS = 0;
  double firstForwardS = 0, firstBackwardS = 0;
  double lastForwardS = 0, lastBackwardS = 0;
  double streamSumS = 0;  // one TP all-reduce of the residual stream (0 at TP degree 1)
  double headSumsS = 0;   // the vocabulary-parallel softmax's max and sums (0 at TP degree 1)
  // The TP all-reduces of a micro-batch's forward and backward through the stage.
  double sumsS(int layers, bool first, bool last) const {
    return (first ? streamSumS : 0) + 4.0 * layers * streamSumS + (last ? headSumsS + streamSumS : 0);
  }
  double forwardS(int layers, bool first, bool last) const {
    return (first ? firstForwardS : 0) + layers * blockForwardS + (last ? lastForwardS : 0);
  }
  double backwardS(int layers, bool first, bool last) const {
    return (first ? firstBackwardS : 0) + layers * blockBackwardS + (last ? lastBackwardS : 0);
  }
};
trainer::Result<StageTiming> stageTiming(const trainer::TrainConfig& config, const std::vector<int>& group,
                                         double speed, const ComputeProfile& profile, const CollectiveTime& time);

// The time of the residual stream's transfer from one stage's TP group to the next's (or the gradient's back):
// receiver j takes 1/|to| of it from sender j mod |from| (the slowest pair counts), then the receivers all-gather.
trainer::Result<double> stageTransfer(const trainer::TrainConfig& config, const std::vector<int>& from,
                                      const std::vector<int>& to, const CollectiveTime& time);

// The step's prediction with the links' sharing: groups whose traffic leaves a host over the same kind of link
// (inside an island, or across islands) at the same time share that host's NIC.
//   - a stage's data-parallel groups (one per TP rank) reduce the same buckets at once: each takes 1 / (the most
//     of them on any host it spans) of its links;
//   - tensor-parallel groups and pipeline transfers run through the 1F1B part whenever their stages compute:
//     each is slowed by the share of the step the others on its hosts keep the link busy (from a first
//     simulation without sharing).
// Without in.where, stepCost and simulateStep as they are.
trainer::Result<StepPrediction> predictStep(const StepInputs& in, const CollectiveTime& time);

// A rank's share of its data-parallel group's optimizer state under ZeRO-1: 1/dp, or its plan.zeroShares entry
// over its group's (the ranks of its stage and TP rank in every replica).
double zeroShare(const StepInputs& in, int rank);

// Each global rank's memory while training under the plan, by the trainer's own accounting (trainer/memory.h).
// in.roles and in.plan as for stepCost; rankSpeed and the profile are not read.
std::vector<trainer::MemoryNeed> rankMemory(const StepInputs& in);

// Errors: rankSpeed not one positive speed per rank of the plan; roles not of the plan's shape; a failed
// prediction (its message).
trainer::Result<StepCost> stepCost(const StepInputs& in, const CollectiveTime& time);

}  // namespace hetcomm::planner
