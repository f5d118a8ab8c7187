// The step's costs from a plan: every group the trainer makes is asked about, with the trainer's sizes, and the
// compute follows the FLOPs and the slowest device of each TP group.
#include "planner/step_cost.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "trainer/memory.h"
#include "trainer/model.h"
#include "trainer/param_layout.h"

namespace hetcomm::planner {
namespace {

// A link of 1 GB/s and 10 us for every collective and message: each call's bytes over the link, recorded.
struct FakeLinks {
  std::vector<std::tuple<hetcommCollective_t, size_t, std::vector<int>>> calls;
  CollectiveTime time() {
    return [this](hetcommCollective_t coll, size_t count, const std::vector<int>& ranks) -> trainer::Result<double> {
      calls.emplace_back(coll, count, ranks);
      return 10e-6 + count * 4 / 1e9;
    };
  }
  bool asked(hetcommCollective_t coll, size_t count, const std::vector<int>& ranks) const {
    for (const auto& c : calls)
      if (c == std::make_tuple(coll, count, ranks)) return true;
    return false;
  }
};

StepInputs inputs(int tp, int pp, int dp) {
  StepInputs in;
  in.config.model = {.nLayer = 4, .nHead = 4, .dModel = 64, .seqLen = 32, .vocabSize = 256};
  in.config.microBatch = 2;
  in.config.globalBatch = 4 * dp;
  in.plan = trainer::uniformPlan(in.config, tp, pp, dp);
  EXPECT_TRUE(trainer::validatePlan(in.plan, in.config, in.plan.worldSize()).has_value());
  trainer::Placement where;
  for (int r = 0; r < in.plan.worldSize(); ++r) {
    where.host.push_back(r / 2);
    where.island.push_back(0);
  }
  in.roles = trainer::assignRoles(in.plan, where, trainer::Assignment::kNaive).value();
  in.rankSpeed.assign(in.plan.worldSize(), 1);
  in.profile = ComputeProfile::fromFlops(1e9);
  return in;
}

TEST(StepCost, ComputeIsTheStagesFlopsAtItsSlowestDevice) {
  StepInputs in = inputs(1, 2, 1);
  in.rankSpeed = {1, 0.5};
  FakeLinks links;
  StepCost c = stepCost(in, links.time()).value();
  ASSERT_EQ(c.replicas.size(), 1u);
  ASSERT_EQ(c.replicas[0].stages.size(), 2u);
  EXPECT_EQ(c.replicas[0].microBatches, 2);
  const auto f = trainer::Gpt::forwardFlopsPerToken(in.config.model);
  const double tokens = 2 * 32;
  EXPECT_DOUBLE_EQ(c.replicas[0].stages[0].forwardS, 2 * (f.attention + f.mlp) * tokens / 1e9);
  EXPECT_DOUBLE_EQ(c.replicas[0].stages[1].forwardS, (2 * (f.attention + f.mlp) + f.head) * tokens / 0.5e9);
  EXPECT_DOUBLE_EQ(c.replicas[0].stages[1].backwardS, 2 * c.replicas[0].stages[1].forwardS);
  // The activation (tokens x d_model floats) from rank 0 to rank 1, one TP rank each: no all-gather.
  const size_t stream = 2 * 32 * 64;
  EXPECT_TRUE(links.asked(hetcommCollSendRecv, stream, {0, 1}));
  EXPECT_TRUE(links.asked(hetcommCollSendRecv, stream, {1, 0}));
  EXPECT_DOUBLE_EQ(c.replicas[0].stages[0].transferS, 10e-6 + stream * 4 / 1e9);
  // The tied embedding over both stages, the world's sum; one replica: no buckets.
  EXPECT_TRUE(links.asked(hetcommCollAllReduce, 256 * 64, {0, 1}));
  EXPECT_DOUBLE_EQ(c.tiedSumS, 10e-6 + 256 * 64 * 4 / 1e9);
  EXPECT_TRUE(c.buckets.empty());
  ASSERT_EQ(c.optimizerS.size(), 2u);
  EXPECT_GT(c.optimizerS[0], 0);
  EXPECT_TRUE(simulateStep(c).has_value());
}

TEST(StepCost, TensorParallelSumsAndDataParallelBucketsUseTheTrainersGroups) {
  StepInputs in = inputs(2, 1, 2);  // naive roles: replica 0 = ranks 0, 1; replica 1 = ranks 2, 3
  in.bucketBytes = 16 << 10;
  FakeLinks links;
  StepCost c = stepCost(in, links.time()).value();
  const size_t stream = 2 * 32 * 64, tokens = 2 * 32;
  EXPECT_TRUE(links.asked(hetcommCollAllReduce, stream, {0, 1}));
  EXPECT_TRUE(links.asked(hetcommCollAllReduce, stream, {2, 3}));
  EXPECT_TRUE(links.asked(hetcommCollAllReduce, tokens, {0, 1}));      // the softmax's max
  EXPECT_TRUE(links.asked(hetcommCollAllReduce, 2 * tokens, {0, 1}));  // and its sums
  const double sum = 10e-6 + stream * 4 / 1e9;
  const auto f = trainer::Gpt::forwardFlopsPerToken(in.config.model);
  // Forward: the embedding's sum, two per block, the softmax's two; each rank half the FLOPs.
  EXPECT_NEAR(c.replicas[0].stages[0].forwardS,
              (4 * (f.attention + f.mlp) + f.head) / 2 * tokens / 1e9 + 9 * sum + (10e-6 + tokens * 4 / 1e9) +
                  (10e-6 + 2 * tokens * 4 / 1e9),
              1e-12);
  // Buckets: DP groups {0, 2} and {1, 3}, several buckets of a 16 KiB size, ready in the backward's order.
  ASSERT_EQ(c.buckets.size(), 1u);
  ASSERT_GT(c.buckets[0].size(), 2u);
  for (size_t b = 1; b < c.buckets[0].size(); ++b)
    EXPECT_GE(c.buckets[0][b].readyShare, c.buckets[0][b - 1].readyShare);
  EXPECT_DOUBLE_EQ(c.buckets[0].back().readyShare, 1.0);  // the embedding's, at the end
  bool dp0 = false, dp1 = false;
  for (const auto& [coll, count, ranks] : links.calls) {
    dp0 |= coll == hetcommCollAllReduce && ranks == std::vector<int>{0, 2};
    dp1 |= coll == hetcommCollAllReduce && ranks == std::vector<int>{1, 3};
  }
  EXPECT_TRUE(dp0 && dp1);
  // ZeRO-1: reduce-scatters and all-gathers of half a bucket, and half the optimizer's floats.
  const double plainOptimizer = c.optimizerS[0];
  in.zero1 = true;
  links.calls.clear();
  StepCost z = stepCost(in, links.time()).value();
  bool scatter = false, gather = false;
  for (const auto& [coll, count, ranks] : links.calls) {
    scatter |= coll == hetcommCollReduceScatter && ranks == std::vector<int>{0, 2};
    gather |= coll == hetcommCollAllGather && ranks == std::vector<int>{0, 2};
  }
  EXPECT_TRUE(scatter && gather);
  EXPECT_NE(z.optimizerS[0], plainOptimizer);
  EXPECT_TRUE(simulateStep(z).has_value());
}

TEST(StepCost, MemoryIsTheTrainersAccountingPerRank) {
  StepInputs in = inputs(1, 2, 2);  // 2 replicas of 2 stages: ranks 0, 1 and 2, 3
  std::vector<trainer::MemoryNeed> plain = rankMemory(in);
  ASSERT_EQ(plain.size(), 4u);
  for (int g = 0; g < 4; ++g) {
    const trainer::Role& role = in.roles.of[g];
    const trainer::Shard shard = trainer::shardOf(in.plan, role);
    const trainer::ParamLayout layout(in.config.model, shard, in.bucketBytes, 2);
    EXPECT_DOUBLE_EQ(plain[g].total(), trainer::memoryNeed(in.config, shard, layout, layout.totalFloats(),
                                                           {role.stage, 2, in.plan.microBatches[role.replica], 1})
                                           .total())
        << g;
  }
  EXPECT_GT(plain[0].activations, 0);  // the micro-batches in flight are counted
  // ZeRO-1 over 2 replicas: half the AdamW state, the rest alike.
  in.zero1 = true;
  std::vector<trainer::MemoryNeed> zero = rankMemory(in);
  for (int g = 0; g < 4; ++g) {
    EXPECT_DOUBLE_EQ(zero[g].optimizer, plain[g].optimizer / 2) << g;
    EXPECT_DOUBLE_EQ(zero[g].params, plain[g].params) << g;
  }
}

// The links' sharing: TP2 x DP2 on two hosts (naive roles: replica 0 on host 0, replica 1 on host 1) has two
// data-parallel groups, one per TP rank, each spanning both hosts: at the end of the step they reduce at once
// over the same two NICs, each at half its rate.
TEST(StepCost, GroupsSharingAHostsLinksShareItsRate) {
  StepInputs in = inputs(2, 1, 2);
  in.config.model.nLayer = 2;
  in.plan = trainer::uniformPlan(in.config, 2, 1, 2);
  ASSERT_TRUE(trainer::validatePlan(in.plan, in.config, 4).has_value());
  for (int r = 0; r < 4; ++r) in.where.host.push_back(r / 2), in.where.island.push_back(0);
  in.roles = trainer::assignRoles(in.plan, in.where, trainer::Assignment::kNaive).value();
  FakeLinks links;
  const StepPrediction alone = simulateStep(stepCost(in, links.time()).value()).value();
  const StepPrediction shared = predictStep(in, links.time()).value();
  // The reduction phase (after the last backward) takes longer; the 1F1B part (TP sums inside a host) does not.
  EXPECT_DOUBLE_EQ(shared.pipelineS, alone.pipelineS);
  EXPECT_GT(shared.reductionsDoneS - shared.pipelineS, 1.5 * (alone.reductionsDoneS - alone.pipelineS));
  EXPECT_GT(shared.stepS, alone.stepS);
  // Without placement, predictStep is stepCost and simulateStep.
  in.where = {};
  EXPECT_DOUBLE_EQ(predictStep(in, links.time()).value().stepS, alone.stepS);
}

TEST(StepCost, BadInputsAndFailedPredictionsAreErrors) {
  StepInputs in = inputs(1, 2, 1);
  FakeLinks links;
  in.rankSpeed = {1};
  auto r = stepCost(in, links.time());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("rankSpeed: has 1 speeds for 2 ranks"), std::string::npos) << r.error().message();
  in.rankSpeed = {1, 0};
  r = stepCost(in, links.time());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("rankSpeed[1]"), std::string::npos) << r.error().message();
  in.rankSpeed = {1, 1};
  CollectiveTime failing = [](hetcommCollective_t, size_t, const std::vector<int>&) -> trainer::Result<double> {
    return trainer::Error{.source = "test", .detail = "no link"};
  };
  r = stepCost(in, failing);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("no link"), std::string::npos);
}

}  // namespace
}  // namespace hetcomm::planner
