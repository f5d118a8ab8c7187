// step_sim.h: one training step of a hybrid (DP x PP x TP) plan, simulated from what each of its parts costs, the
// way hetcomm-train runs it (trainer/hetcomm_train.cc, trainer/pipeline.h):
//
//   1. every replica runs its micro-batches through its stages 1F1B: stage s of S runs min(d (S - s - 1), M)
//      forwards (d: the pipeline depth, trainer::StageShape::warmup), then one forward and one backward in
//      turn, then the backwards left. A forward waits for the
//      previous stage's forward of the same micro-batch and its activation's transfer; a backward for the next
//      stage's backward and the gradient's transfer back (the last stage: for its own forward). Transfers do
//      not hold up the sender (they go out on streams of their own);
//   2. from the last micro-batch's backward, each data-parallel gradient bucket of a stage is reduced over the
//      stage's replicas once every replica has finished it, one bucket after another on one stream, so the
//      reduction of the last layers overlaps the backward of the first;
//   3. with two stages or more, the first and the last stage sum their copies of the tied embedding once both
//      have finished their pipeline, and only then reduce the bucket that holds it;
//   4. every rank waits for its reductions, then the whole world sums the loss and the gradient norm (every
//      rank waits for the slowest), then each stage runs its optimizer and, under ZeRO-1, gathers the
//      parameters.
//
// Pure arithmetic on the costs it is given: where the costs come from (profiles, the communicator's cost model)
// is the caller's business. Times in seconds.
#pragma once

#include <string>
#include <vector>

#include "trainer/error.h"

namespace hetcomm::planner {

// One stage of one replica, per micro-batch.
struct StageCost {
  double forwardS = 0;   // its blocks' forward at its devices' speed, its tensor-parallel all-reduces included
  double backwardS = 0;  // the same for the backward
  // The activation to the next stage over the links between the two stages' ranks, and the gradient back from
  // it, each with the receiving group's re-shard all-gather. Ignored on the last stage.
  double transferS = 0, gradientTransferS = 0;
  int ranks = 1;  // its tensor-parallel degree: how many ranks the stage's figures stand for in means over ranks
};

struct ReplicaCost {
  std::vector<StageCost> stages;  // in pipeline order
  int microBatches = 1;
};

// A data-parallel gradient bucket of a stage.
struct Bucket {
  // When its gradients are final: this share of the stage's last backward has run (0..1). Buckets are listed in
  // the order the backward finishes them (last layers first).
  double readyShare = 1;
  double reduceS = 0;               // its reduction over the stage's replicas, alone on the link
  bool holdsTiedEmbedding = false;  // reduced only after the tied embedding's two copies are summed
};

struct StepCost {
  std::vector<ReplicaCost> replicas;         // each with the same number of stages
  std::vector<std::vector<Bucket>> buckets;  // per stage; empty with one replica
  double tiedSumS = 0;                       // the tied embedding's sum (two stages or more)
  double worldSumS = 0;                      // the loss and gradient-norm sum over the world
  std::vector<double> optimizerS;            // per stage: the optimizer, and the ZeRO-1 parameter gather
  int pipelineDepth = 1;                     // forwards each stage runs ahead of the next (plan.pipelineDepth)
  // For the report, per step and mean over ranks: time in tensor-parallel sums and in pipeline transfers (the
  // simulation does not read them; they are in the stages' times already).
  double tpCommS = 0, pipelineCommS = 0;
};

struct StepPrediction {
  double stepS = 0;
  double pipelineS = 0;  // the slowest rank's 1F1B time (from the step's start to its last backward)
  // Mean over ranks of the share of its 1F1B time a rank waits (hetcomm-train's "pipeline bubble").
  double bubble = 0;
  double reductionsDoneS = 0;  // when the last data-parallel reduction (and tied sum) ends
  // Per replica and stage: when its last backward ends, and its compute in the step.
  std::vector<std::vector<double>> pipelineEndS, busyS;
  double tpCommS = 0, pipelineCommS = 0;  // StepCost's, passed on
  std::string describe() const;
};

// Errors (naming the field and the numbers): no replica; a pipeline depth < 1; replicas of different stage counts or none; fewer than
// one micro-batch; a negative or non-finite time; buckets or optimizerS not sized by the stage count (either
// may be empty: nothing to reduce, no optimizer time); a share outside [0, 1].
trainer::Result<StepPrediction> simulateStep(const StepCost& cost);

}  // namespace hetcomm::planner
