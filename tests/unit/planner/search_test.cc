// The plan search: every plan it gives is valid for the run and within memory, the same inputs give the same
// plans, it beats the hand plans it should, and it says why when nothing fits.
#include "planner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace hetcomm::planner {
namespace {

// Links by where the two ends run: 10 GB/s in a host, 1 GB/s in an island, 0.05 GB/s between islands; a
// collective moves 2 (n - 1) / n of its bytes over its group's slowest link, a message its bytes.
struct FakeLinks {
  const ClusterInfo& c;
  int calls = 0;
  double rate(int a, int b) const {
    if (c.host[a] == c.host[b]) return 10e9;
    return c.island[a] == c.island[b] ? 1e9 : 0.05e9;
  }
  CollectiveTime time() {
    return [this](hetcommCollective_t coll, size_t count, const std::vector<int>& ranks) -> trainer::Result<double> {
      ++calls;
      double slowest = 1e12;
      for (size_t i = 0; i < ranks.size(); ++i)
        for (size_t j = 0; j < ranks.size(); ++j)
          if (i != j) slowest = std::min(slowest, rate(ranks[i], ranks[j]));
      const double n = double(ranks.size()), bytes = double(count) * 4;
      const double moved = coll == hetcommCollSendRecv ? bytes : 2 * (n - 1) / n * bytes;
      return 20e-6 + moved / slowest;
    };
  }
};

// A speed-1 device runs 1e10 FLOP/s.
ComputeProfile profile() { return ComputeProfile::fromFlops(1e10); }

trainer::TrainConfig config() {
  trainer::TrainConfig c;
  c.model = {.nLayer = 8, .nHead = 4, .dModel = 64, .seqLen = 64, .vocabSize = 256};
  c.microBatch = 2;
  c.globalBatch = 32;
  return c;
}

// hosts x ranksPerHost ranks; hosts [0, hosts/2) in island 0 at speed `fast`, the rest in island 1 at `slow`.
ClusterInfo cluster(int hosts, int ranksPerHost, double fast, double slow) {
  ClusterInfo c;
  for (int h = 0; h < hosts; ++h)
    for (int k = 0; k < ranksPerHost; ++k) {
      c.host.push_back(h);
      c.island.push_back(h < hosts / 2 ? 0 : 1);
      c.speed.push_back(h < hosts / 2 ? fast : slow);
    }
  return c;
}

// The predicted step of a plan (roles as the trainer assigns them).
double stepOf(trainer::ParallelPlan plan, const trainer::TrainConfig& cfg, const ClusterInfo& c,
              const CollectiveTime& time) {
  EXPECT_TRUE(trainer::validatePlan(plan, cfg, c.nranks()).has_value());
  auto roles = trainer::assignRoles(plan, {c.host, c.island}, trainer::Assignment::kNicAware).value();
  StepInputs in{cfg, plan, roles, c.speed, profile()};
  return simulateStep(stepCost(in, time).value()).value().stepS;
}

void expectValid(const SearchReport& r, const trainer::TrainConfig& cfg, const ClusterInfo& c) {
  ASSERT_FALSE(r.best.empty());
  for (size_t i = 0; i < r.best.size(); ++i) {
    const PlanCandidate& p = r.best[i];
    SCOPED_TRACE(p.summary());
    trainer::TrainConfig run = cfg;
    run.microBatch = p.microBatch;
    trainer::ParallelPlan plan = p.plan;
    EXPECT_TRUE(trainer::validatePlan(plan, run, c.nranks(), "found").has_value());
    int layers = 0;
    for (const auto& s : p.plan.stages) layers += s.layers;
    EXPECT_EQ(layers, cfg.model.nLayer);
    EXPECT_EQ(p.plan.totalMicroBatches() * p.microBatch, cfg.globalBatch);
    // TP groups stay in a host.
    for (const auto& replica : p.plan.ranks)
      for (const auto& group : replica)
        for (int r : group) EXPECT_EQ(c.host[r], c.host[group[0]]);
    EXPECT_NEAR(p.tokensPerS, cfg.globalBatch * cfg.model.seqLen / p.prediction.stepS, 1e-6 * p.tokensPerS);
    if (i > 0) {
      EXPECT_GE(p.prediction.stepS, r.best[i - 1].prediction.stepS);
    }
    if (!c.memoryBytes.empty()) {
      for (int rank = 0; rank < c.nranks(); ++rank) EXPECT_LE(p.memory[rank].total(), c.memoryBytes[rank]);
    }
  }
  EXPECT_GT(r.simulated, 0);
  EXPECT_GE(r.structures, 1);
}

TEST(Search, PlansAreValidAndTheSameEveryTime) {
  const trainer::TrainConfig cfg = config();
  const ClusterInfo c = cluster(4, 2, 1, 0.5);
  FakeLinks links{c};
  const SearchReport a = searchPlans(cfg, c, profile(), links.time()).value();
  expectValid(a, cfg, c);
  const SearchReport b = searchPlans(cfg, c, profile(), links.time()).value();
  ASSERT_EQ(a.best.size(), b.best.size());
  for (size_t i = 0; i < a.best.size(); ++i) {
    EXPECT_EQ(a.best[i].plan, b.best[i].plan);
    EXPECT_EQ(a.best[i].prediction.stepS, b.best[i].prediction.stepS);
  }
}

TEST(Search, BeatsTheHandPlansOnMixedDevices) {
  const trainer::TrainConfig cfg = config();
  const ClusterInfo c = cluster(4, 2, 1, 0.5);
  FakeLinks links{c};
  const SearchReport r = searchPlans(cfg, c, profile(), links.time()).value();
  expectValid(r, cfg, c);
  const double found = r.best[0].prediction.stepS;
  // Uniform data parallelism; uneven micro-batches by speed (README's best hand plan); Megatron's TP 2 x PP 2.
  const double uniform = stepOf(trainer::uniformPlan(cfg, 1, 1, 8), cfg, c, links.time());
  trainer::ParallelPlan bySpeed = trainer::uniformPlan(cfg, 1, 1, 8);
  bySpeed.microBatches = {3, 3, 3, 3, 1, 1, 1, 1};
  const double hand = stepOf(bySpeed, cfg, c, links.time());
  const double megatron = stepOf(trainer::uniformPlan(cfg, 2, 2, 2), cfg, c, links.time());
  EXPECT_LE(found, uniform);
  EXPECT_LE(found, hand);
  EXPECT_LE(found, megatron);
  EXPECT_LE(r.best[0].tokensPerS, r.boundTokensPerS);
  EXPECT_GT(r.boundTokensPerS, 0);
}

TEST(Search, BoundIsTheSumOfEachDeviceAlone) {
  trainer::TrainConfig cfg = config();
  const ClusterInfo one = cluster(2, 1, 1, 1);  // two equal devices
  const ClusterInfo alone{{0}, {0}, {1}, {}};
  FakeLinks links{one}, none{alone};
  const SearchReport two = searchPlans(cfg, one, profile(), links.time()).value();
  const SearchReport single = searchPlans(cfg, alone, profile(), none.time()).value();
  EXPECT_NEAR(two.boundTokensPerS, 2 * single.boundTokensPerS, 1e-9 * two.boundTokensPerS);
  // Alone, with no one to talk to, the best plan is the bound (at the config's micro-batch size, or better).
  EXPECT_GE(single.best[0].tokensPerS, single.boundTokensPerS * (1 - 1e-9));
}

TEST(Search, KeepsEveryRankWithinItsMemory) {
  const trainer::TrainConfig cfg = config();
  ClusterInfo c = cluster(2, 2, 1, 1);
  FakeLinks links{c};
  const SearchReport free = searchPlans(cfg, c, profile(), links.time()).value();
  // Limits at 60 % of what the unconstrained best plan's fullest rank needs.
  double most = 0;
  for (const auto& m : free.best[0].memory) most = std::max(most, m.total());
  c.memoryBytes.assign(c.nranks(), 0.6 * most);
  const SearchReport tight = searchPlans(cfg, c, profile(), links.time()).value();
  expectValid(tight, cfg, c);
  EXPECT_GT(tight.memoryRefused, 0);
  for (const auto& p : tight.best) EXPECT_LE(p.peakMemoryShare, 1.0);
}

// Cephalo: data parallelism only, and one rank whose memory holds less than an even ZeRO-1 share of the optimizer
// state, while the group as a whole has room for it. The plan shards it by each rank's room, and says why.
TEST(Search, ShardsTheOptimizerStateByMemoryWhereEvenSharesDoNotFit) {
  const trainer::TrainConfig cfg = config();
  ClusterInfo c = cluster(2, 2, 1, 1);
  FakeLinks links{c};
  SearchOptions dpOnly;
  dpOnly.maxTp = dpOnly.maxPp = 1;
  dpOnly.microBatchSizes = {2};
  dpOnly.zero = 0;
  const SearchReport plain = searchPlans(cfg, c, profile(), links.time(), dpOnly).value();
  ASSERT_EQ(plain.best[0].plan.dp, 4);
  const trainer::MemoryNeed need = plain.best[0].memory[0];
  const double rest = need.total() - need.optimizer, state = need.optimizer;  // the whole state on one rank
  c.memoryBytes = {rest + 0.15 * state, rest + 0.5 * state, rest + 0.5 * state, rest + 0.5 * state};
  dpOnly.zero = -1;
  const SearchReport r = searchPlans(cfg, c, profile(), links.time(), dpOnly).value();
  expectValid(r, cfg, c);
  const PlanCandidate& best = r.best[0];
  ASSERT_EQ(best.plan.zeroShares.size(), 4u);
  EXPECT_TRUE(best.zero1);
  EXPECT_LT(best.plan.zeroShares[0], best.plan.zeroShares[1]);
  EXPECT_NE(best.memoryNote.find("even ZeRO-1 shards would need"), std::string::npos) << best.memoryNote;
  EXPECT_NE(best.memoryNote.find("on rank 0"), std::string::npos) << best.memoryNote;
  EXPECT_NE(best.summary().find("ZeRO-1 by memory"), std::string::npos) << best.summary();
  // Without uneven shares (ZeRO-1 off) nothing fits.
  dpOnly.zero = 0;
  EXPECT_FALSE(searchPlans(cfg, c, profile(), links.time(), dpOnly).has_value());
}

// A model whose LM head outweighs its blocks (a large vocabulary over few channels, as in real LLMs' last stage),
// on a fast and a slow device with room for 3/4 of the model each, so only a two-stage pipeline fits: the fast
// device takes the head, the last stage, though the layouts list the fastest groups first.
TEST(Search, PutsTheHeavyLastStageOnTheFastDevice) {
  trainer::TrainConfig cfg = config();
  cfg.model.vocabSize = 4096;  // head: 4096 / (12 x 64) = 5.3 blocks of compute
  ClusterInfo c = cluster(2, 1, 1, 0.5);
  FakeLinks links{c};
  SearchOptions o;
  o.zero = 0;
  const SearchReport free = searchPlans(cfg, c, profile(), links.time(), o).value();
  double most = 0;
  for (const auto& m : free.best[0].memory) most = std::max(most, m.total());
  c.memoryBytes.assign(2, 0.75 * most);
  const SearchReport r = searchPlans(cfg, c, profile(), links.time(), o).value();
  expectValid(r, cfg, c);
  const trainer::ParallelPlan& best = r.best[0].plan;
  SCOPED_TRACE(r.best[0].summary());
  ASSERT_EQ(best.stages.size(), 2u);
  EXPECT_EQ(best.ranks[0].back(), std::vector<int>{0});  // rank 0 is the fast one
  // The same split the other way round (the slow device with the head) is slower.
  trainer::ParallelPlan mirrored = best;
  std::reverse(mirrored.ranks[0].begin(), mirrored.ranks[0].end());
  std::reverse(mirrored.stages.begin(), mirrored.stages.end());
  trainer::TrainConfig run = cfg;
  run.microBatch = r.best[0].microBatch;
  EXPECT_LT(r.best[0].prediction.stepS, stepOf(mirrored, run, c, links.time()));
}

TEST(Search, KeepsToTheDegreesAllowed) {
  const trainer::TrainConfig cfg = config();
  const ClusterInfo c = cluster(4, 2, 1, 0.5);
  FakeLinks links{c};
  SearchOptions o;
  o.maxTp = 1;
  o.maxPp = 2;
  const SearchReport r = searchPlans(cfg, c, profile(), links.time(), o).value();
  expectValid(r, cfg, c);
  for (const PlanCandidate& p : r.best) {
    EXPECT_LE(p.plan.stages.size(), 2u);
    for (const auto& s : p.plan.stages) EXPECT_EQ(s.tp, 1);
  }
}

TEST(Search, SaysWhenNothingFits) {
  const trainer::TrainConfig cfg = config();
  ClusterInfo c = cluster(2, 1, 1, 1);
  c.memoryBytes = {1024, 1024};
  FakeLinks links{c};
  auto r = searchPlans(cfg, c, profile(), links.time());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("no plan fits"), std::string::npos) << r.error().message();
}

TEST(Search, RefusesBadInputs) {
  const trainer::TrainConfig cfg = config();
  ClusterInfo c = cluster(2, 1, 1, 1);
  FakeLinks links{c};
  ClusterInfo shortFlops = c;
  shortFlops.speed.pop_back();
  auto r = searchPlans(cfg, shortFlops, profile(), links.time());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("one entry per rank"), std::string::npos) << r.error().message();
  ClusterInfo zero = c;
  zero.speed[1] = 0;
  r = searchPlans(cfg, zero, profile(), links.time());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("speed[1]"), std::string::npos) << r.error().message();
  SearchOptions o;
  o.microBatchSizes = {5};
  r = searchPlans(cfg, c, profile(), links.time(), o);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("does not divide global_batch 32"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace hetcomm::planner
