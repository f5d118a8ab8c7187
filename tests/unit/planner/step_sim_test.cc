// The step simulator against 1F1B timelines worked out by hand, and its checks on bad costs.
#include "planner/step_sim.h"

#include <gtest/gtest.h>

namespace hetcomm::planner {
namespace {

StepCost pipeline(int stages, int micro, double f, double b, double transfer = 0) {
  StepCost c;
  ReplicaCost r;
  r.microBatches = micro;
  for (int s = 0; s < stages; ++s) r.stages.push_back({f, b, transfer, transfer, 1});
  c.replicas.push_back(r);
  return c;
}

TEST(StepSim, OneStageRunsItsMicroBatchesBackToBack) {
  auto p = simulateStep(pipeline(1, 3, 1, 2)).value();
  EXPECT_DOUBLE_EQ(p.pipelineS, 9);
  EXPECT_DOUBLE_EQ(p.stepS, 9);
  EXPECT_DOUBLE_EQ(p.bubble, 0);
}

// Two stages, two micro-batches, F = 1, B = 2. Stage 0: F0 [0,1], F1 [1,2], B0 [4,6], B1 [7,9]; stage 1: F0 [1,2],
// B0 [2,4], F1 [4,5], B1 [5,7]. The textbook (M + S - 1)(F + B) = 9.
TEST(StepSim, TwoStagesMatchTheTextbook1F1B) {
  auto p = simulateStep(pipeline(2, 2, 1, 2)).value();
  EXPECT_DOUBLE_EQ(p.pipelineEndS[0][0], 9);
  EXPECT_DOUBLE_EQ(p.pipelineEndS[0][1], 7);
  EXPECT_DOUBLE_EQ(p.pipelineS, 9);
  // Bubbles: stage 0 busy 6 of 9, stage 1 busy 6 of 7.
  EXPECT_NEAR(p.bubble, (3.0 / 9 + 1.0 / 7) / 2, 1e-12);
  // S stages, M micro-batches, F + B each: (M + S - 1)(F + B) for any shape.
  for (int S : {1, 2, 3, 5})
    for (int M : {1, 2, 4, 7})
      EXPECT_DOUBLE_EQ(simulateStep(pipeline(S, M, 1.5, 2.5)).value().pipelineS, (M + S - 1) * 4.0) << S << " " << M;
}

// The same with 0.5 s per transfer: stage 1's F0 [1.5,2.5], B0 [2.5,4.5], F1 [4.5,5.5], B1 [5.5,7.5]; stage 0's
// B0 waits for the gradient until 5 [5,7], B1 until 8 [8,10].
TEST(StepSim, TransfersDelayTheReceiverNotTheSender) {
  auto p = simulateStep(pipeline(2, 2, 1, 2, 0.5)).value();
  EXPECT_DOUBLE_EQ(p.pipelineEndS[0][1], 7.5);
  EXPECT_DOUBLE_EQ(p.pipelineEndS[0][0], 10);
}

// Depth 2: each stage runs two forwards ahead of the next, so a boundary's transfers leave the critical path.
// Stages of F + B = 3 with 0.5 s each way: plain 1F1B's steady state runs a micro-batch per (3 + 3 + 0.5 + 0.5) / 2
// = 3.5 s (stage 0 sends forward m + 1 only after its backward m - 1), depth 2 per 3 s, the stages' own pace.
TEST(StepSim, DepthHidesTheBoundaryTransfers) {
  auto period = [](int depth) {
    StepCost ten = pipeline(2, 10, 1, 2, 0.5), twenty = pipeline(2, 20, 1, 2, 0.5);
    ten.pipelineDepth = twenty.pipelineDepth = depth;
    return (simulateStep(twenty).value().pipelineS - simulateStep(ten).value().pipelineS) / 10;
  };
  EXPECT_DOUBLE_EQ(period(1), 3.5);
  EXPECT_DOUBLE_EQ(period(2), 3);
  EXPECT_DOUBLE_EQ(period(3), 3);
  // Without transfers depth changes nothing: (M + S - 1)(F + B) still.
  StepCost c = pipeline(3, 6, 1, 2);
  c.pipelineDepth = 2;
  EXPECT_DOUBLE_EQ(simulateStep(c).value().pipelineS, 8 * 3.0);
  // Every depth and shape runs every op once (warm-ups capped by M included): each stage computes M (F + B).
  for (int depth : {1, 2, 3})
    for (int S : {2, 3, 4})
      for (int M : {1, 2, 3, 5, 9}) {
        StepCost d = pipeline(S, M, 1, 2, 0.25);
        d.pipelineDepth = depth;
        auto p = simulateStep(d).value();
        for (int s = 0; s < S; ++s) EXPECT_DOUBLE_EQ(p.busyS[0][s], 3.0 * M) << depth << " " << S << " " << M;
      }
  c.pipelineDepth = 0;
  auto bad = simulateStep(c);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("pipelineDepth"), std::string::npos) << bad.error().message();
}

// A slow middle stage sets the pace: the others wait for it.
TEST(StepSim, TheSlowestStageSetsThePace) {
  StepCost c = pipeline(3, 8, 1, 2);
  c.replicas[0].stages[1] = {2, 4, 0, 0, 1};
  auto p = simulateStep(c).value();
  // Its own 8 x 6 s, after stage 0's first forward (1 s) and one wait for the first gradient (stage 2's forward and
  // backward of micro-batch 0 take 3 s against stage 1's second forward, 2 s): then it is never idle again.
  EXPECT_DOUBLE_EQ(p.pipelineEndS[0][1], 1 + 48 + 1);
  EXPECT_GT(p.bubble, 0.3);
}

// Two replicas of one stage, F = 1, B = 2, one micro-batch: backward [1,3]. Bucket 0 final halfway through it (at
// 2), bucket 1 at its end (3); each takes 1 s to reduce, one after the other: done at 3 and 4. Then the world's
// sum (0.25) and the optimizer (0.5).
TEST(StepSim, BucketsOverlapTheBackwardOneAfterAnother) {
  StepCost c = pipeline(1, 1, 1, 2);
  c.replicas.push_back(c.replicas[0]);
  c.buckets = {{{0.5, 1, false}, {1.0, 1, false}}};
  c.worldSumS = 0.25;
  c.optimizerS = {0.5};
  auto p = simulateStep(c).value();
  EXPECT_DOUBLE_EQ(p.reductionsDoneS, 4);
  EXPECT_DOUBLE_EQ(p.stepS, 4.75);
  // A reduction longer than the backward's rest queues the next bucket behind it.
  c.buckets = {{{0.0, 5, false}, {1.0, 1, false}}};
  EXPECT_DOUBLE_EQ(simulateStep(c).value().reductionsDoneS, 1 + 5 + 1);
}

// Uneven replicas: the bucket waits for the replica with more micro-batches.
TEST(StepSim, ABucketWaitsForItsSlowestReplica) {
  StepCost c = pipeline(1, 2, 1, 1);
  c.replicas.push_back(pipeline(1, 1, 1, 1).replicas[0]);
  c.buckets = {{{1.0, 1, false}}};
  auto p = simulateStep(c).value();
  EXPECT_DOUBLE_EQ(p.pipelineEndS[0][0], 4);
  EXPECT_DOUBLE_EQ(p.pipelineEndS[1][0], 2);
  EXPECT_DOUBLE_EQ(p.reductionsDoneS, 5);
  EXPECT_NEAR(p.bubble, 0, 1e-12);  // each replica's own 1F1B has no idle time; the wait is for the reduction
}

// Two stages: the bucket holding the tied embedding waits for both stages' pipelines and the tied sum.
TEST(StepSim, TheTiedEmbeddingsBucketWaitsForTheTiedSum) {
  StepCost c = pipeline(2, 2, 1, 2);
  c.replicas.push_back(c.replicas[0]);
  c.tiedSumS = 0.5;
  c.buckets = {{{0.0, 1, true}}, {{0.0, 1, true}}};
  auto p = simulateStep(c).value();
  EXPECT_DOUBLE_EQ(p.reductionsDoneS, 9 + 0.5 + 1);  // both stages through at 9, summed by 9.5, reduced by 10.5
  c.buckets = {{{0.0, 1, false}}, {{0.0, 1, false}}};
  EXPECT_DOUBLE_EQ(simulateStep(c).value().reductionsDoneS, 9.5);  // stage 0's bucket reduced [7,8]; the tied sum
}

TEST(StepSim, BadCostsAreRefusedNamingTheField) {
  auto msg = [](const StepCost& c) { return simulateStep(c).error().message(); };
  EXPECT_NE(msg(StepCost{}).find("no replica"), std::string::npos);
  StepCost c = pipeline(2, 0, 1, 1);
  EXPECT_NE(msg(c).find("replicas[0].microBatches: must be >= 1, got 0"), std::string::npos) << msg(c);
  c = pipeline(2, 2, 1, -1);
  EXPECT_NE(msg(c).find("replicas[0].stages[0].backwardS"), std::string::npos) << msg(c);
  c = pipeline(2, 2, 1, 1);
  c.replicas.push_back(pipeline(3, 2, 1, 1).replicas[0]);
  EXPECT_NE(msg(c).find("replicas[1].stages: has 3 stages, replicas[0] has 2"), std::string::npos) << msg(c);
  c = pipeline(2, 2, 1, 1);
  c.buckets = {{}};
  EXPECT_NE(msg(c).find("buckets"), std::string::npos) << msg(c);
  c.buckets = {{{1.5, 1, false}}, {}};
  EXPECT_NE(msg(c).find("buckets[0][0].readyShare: must be in [0, 1], got 1.5"), std::string::npos) << msg(c);
  c.buckets = {};
  c.optimizerS = {1};
  EXPECT_NE(msg(c).find("optimizerS: has 1 entries for 2 stages"), std::string::npos) << msg(c);
}

}  // namespace
}  // namespace hetcomm::planner
