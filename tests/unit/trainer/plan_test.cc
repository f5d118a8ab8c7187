// plan_test: the parallel plan's file format, its checks (one test per error, each checking that the message names
// the key and the numbers), the uniform shorthand, the replicas' gradient weights, and the naive vs NIC-aware
// (Holmes) role assignment on small mixed clusters.
#include "trainer/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "tests/unit/trainer/test_support.h"

namespace hetcomm::trainer {
namespace {

using nlohmann::json;
using test::messageOf;

// The example of plan.h's header.
constexpr const char* kExample = R"({ "data_parallel": 2, "micro_batches": [3, 1],
  "stages": [ {"layers": 1, "tensor_parallel": 2}, {"layers": 3, "tensor_parallel": 1} ],
  "ranks": [[[0,1],[2]], [[3,4],[5]]] })";

// 4 blocks, 4 heads, d_model 128, vocab 256 (the defaults); 4 micro-batches of 4 samples per step.
TrainConfig smallConfig() {
  TrainConfig c;
  c.microBatch = 4;
  c.globalBatch = 16;
  return c;
}

// Checks that `r` failed on `field` and that its message holds every one of `says`.
template <class R>
void expectError(const R& r, const std::string& field, const std::vector<std::string>& says) {
  ASSERT_FALSE(r.has_value()) << "expected an error on " << field;
  EXPECT_EQ(r.error().field, field) << r.error().message();
  for (const std::string& s : says) EXPECT_NE(r.error().message().find(s), std::string::npos) << r.error().message();
}

// ---- file format -------------------------------------------------------------------------------------------------

TEST(Plan, ParsesTheDocumentedExampleAndRoundTrips) {
  Result<ParallelPlan> p = parsePlan(kExample, "plan example.json");
  ASSERT_TRUE(p.has_value()) << messageOf(p);
  EXPECT_EQ(p->dp, 2);
  EXPECT_EQ(p->microBatches, (std::vector<int>{3, 1}));
  EXPECT_EQ(p->stages, (std::vector<StagePlan>{{.layers = 1, .tp = 2}, {.layers = 3, .tp = 1}}));
  EXPECT_EQ(p->ranks, (std::vector<std::vector<std::vector<int>>>{{{0, 1}, {2}}, {{3, 4}, {5}}}));
  EXPECT_EQ(p->ranksPerReplica(), 3);
  EXPECT_EQ(p->worldSize(), 6);
  EXPECT_EQ(p->totalMicroBatches(), 4);

  Result<ParallelPlan> back = parsePlan(toJson(*p).dump());
  ASSERT_TRUE(back.has_value()) << messageOf(back);
  EXPECT_EQ(*back, *p);

  test::TempDir dir("hetcomm_plan_");
  Result<ParallelPlan> loaded = loadPlan(dir.write("plan.json", toJson(*p).dump(2)));
  ASSERT_TRUE(loaded.has_value()) << messageOf(loaded);
  EXPECT_EQ(*loaded, *p);
}

TEST(Plan, OptionalKeysTakeTheirDefaults) {
  Result<ParallelPlan> p = parsePlan(R"({"stages": [{"layers": 2}, {"layers": 2}]})");
  ASSERT_TRUE(p.has_value()) << messageOf(p);
  EXPECT_EQ(p->dp, 1);
  EXPECT_TRUE(p->microBatches.empty());
  EXPECT_EQ(p->stages, (std::vector<StagePlan>{{.layers = 2, .tp = 1}, {.layers = 2, .tp = 1}}));
  EXPECT_TRUE(p->ranks.empty());
  EXPECT_EQ(p->pipelineDepth, 1);
  // Empty optional lists and the default depth are left out, and the rest written in full.
  const json j = toJson(*p);
  EXPECT_FALSE(j.contains("micro_batches"));
  EXPECT_FALSE(j.contains("pipeline_depth"));
  EXPECT_FALSE(j.contains("ranks"));
  EXPECT_EQ(j["stages"][1]["tensor_parallel"], 1);
  EXPECT_EQ(j["data_parallel"], 1);
}

TEST(Plan, ParseErrorsNameTheKeyPath) {
  struct Case {
    const char* json;
    const char* field;
    const char* says;
  } cases[] = {
      {R"({"pipeline": 2, "stages": [{"layers": 4}]})", "key 'pipeline'",
       "unknown key (known keys here: data_parallel"},
      {R"({"stages": [{"layers": 4, "tensor_paralel": 2}]})", "key 'stages[0].tensor_paralel'",
       "unknown key (known keys here: layers, tensor_parallel)"},
      {R"({"data_parallel": 2})", "key 'stages'", "missing"},
      {R"({"stages": {"layers": 4}})", "key 'stages'", "must be an array of stage objects, got object"},
      {R"({"stages": [{"layers": 2}, 3]})", "key 'stages[1]'", "must be an object"},
      {R"({"stages": [{"layers": 2}, {"tensor_parallel": 2}]})", "key 'stages[1].layers'", "missing"},
      {R"({"stages": [{"layers": 4, "tensor_parallel": "2"}]})", "key 'stages[0].tensor_parallel'",
       "must be an integer, got string \"2\""},
      {R"({"stages": [{"layers": 2.5}]})", "key 'stages[0].layers'", "must be an integer, got number 2.5"},
      {R"({"data_parallel": 4294967296, "stages": [{"layers": 4}]})", "key 'data_parallel'",
       "4294967296 does not fit in 32 bits"},
      {R"({"data_parallel": 2, "micro_batches": [1, true], "stages": [{"layers": 4}]})", "key 'micro_batches[1]'",
       "must be an integer, got boolean true"},
      {R"({"micro_batches": 3, "stages": [{"layers": 4}]})", "key 'micro_batches'", "must be an array of integers"},
      {R"({"stages": [{"layers": 4}], "ranks": [0]})", "key 'ranks[0]'", "must be an array (per stage)"},
      {R"({"stages": [{"layers": 4}], "ranks": [[0]]})", "key 'ranks[0][0]'", "must be an array of integers"},
      {R"({"stages": [{"layers": 4}], "ranks": "auto"})", "key 'ranks'", "must be an array"},
  };
  for (const Case& c : cases) {
    Result<ParallelPlan> r = parsePlan(c.json, "plan p.json");
    ASSERT_FALSE(r.has_value()) << c.json;
    EXPECT_EQ(r.error().source, "plan p.json");
    EXPECT_EQ(r.error().field, c.field) << c.json << " -> " << r.error().message();
    EXPECT_NE(r.error().detail.find(c.says), std::string::npos) << c.json << " -> " << r.error().message();
  }
}

TEST(Plan, PipelineDepthRoundTripsAndIsBounded) {
  Result<ParallelPlan> p = parsePlan(R"({"stages": [{"layers": 2}, {"layers": 2}], "pipeline_depth": 2})");
  ASSERT_TRUE(p.has_value()) << messageOf(p);
  EXPECT_EQ(p->pipelineDepth, 2);
  EXPECT_EQ(toJson(*p)["pipeline_depth"], 2);
  EXPECT_EQ(parsePlan(toJson(*p).dump()).value(), *p);
  for (const char* bad : {"0", "-1", "65"})
    expectError(parsePlan(std::string(R"({"stages": [{"layers": 4}], "pipeline_depth": )") + bad + "}", "plan p.json"),
                "key 'pipeline_depth'", {"must be in [1, 64], got " + std::string(bad)});
  expectError(parsePlan(R"({"stages": [{"layers": 4}], "pipeline_depth": "2"})"), "key 'pipeline_depth'",
              {"must be an integer"});
}

TEST(Plan, ParsingRunsThePlanOnlyChecks) {
  expectError(parsePlan(R"({"stages": [{"layers": 4, "tensor_parallel": 0}]})", "plan p.json"),
              "key 'stages[0].tensor_parallel'", {"plan p.json", "must be positive, got 0"});
  expectError(parsePlan(R"({"data_parallel": 2, "micro_batches": [4], "stages": [{"layers": 4}]})"),
              "key 'micro_batches'", {"has 1 entries but data_parallel is 2"});
}

TEST(Plan, SyntaxErrorsAndMissingFiles) {
  Result<ParallelPlan> r = parsePlan(R"({"stages": [}])", "plan bad.json");
  ASSERT_FALSE(r.has_value());
  ASSERT_TRUE(r.error().offset.has_value());
  EXPECT_NE(r.error().message().find("plan bad.json: byte "), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("not valid JSON"), std::string::npos) << r.error().message();

  Result<ParallelPlan> notObject = parsePlan("[1, 2]");
  ASSERT_FALSE(notObject.has_value());
  EXPECT_NE(notObject.error().detail.find("must be a JSON object, got array"), std::string::npos);

  Result<ParallelPlan> missing = loadPlan("/nonexistent/dir/plan.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().source, "plan /nonexistent/dir/plan.json");
  EXPECT_NE(missing.error().detail.find("cannot open"), std::string::npos);
}

// ---- validation: one test per error ------------------------------------------------------------------------------

TEST(PlanValidate, AcceptsTheExampleAndKeepsExplicitMicroBatches) {
  ParallelPlan p = parsePlan(kExample).value();
  const ParallelPlan before = p;
  Result<void> r = validatePlan(p, smallConfig(), 6);
  EXPECT_TRUE(r.has_value()) << messageOf(r);
  EXPECT_EQ(p, before);
}

TEST(PlanValidate, FillsUniformMicroBatches) {
  ParallelPlan p{.dp = 2, .stages = {{.layers = 4, .tp = 2}}};
  Result<void> r = validatePlan(p, smallConfig(), 4);  // 16 samples / (4 x 2 replicas) = 2 each
  ASSERT_TRUE(r.has_value()) << messageOf(r);
  EXPECT_EQ(p.microBatches, (std::vector<int>{2, 2}));
}

TEST(PlanValidate, LayersMustSumToTheModel) {
  ParallelPlan p{.stages = {{.layers = 1}, {.layers = 2}}};
  expectError(validatePlan(p, smallConfig(), 2, "plan p.json"), "key 'stages'",
              {"plan p.json", "layers 1+2 = 3 but model.n_layer is 4"});
}

TEST(PlanValidate, TensorParallelMustDivideTheHeads) {
  TrainConfig c = smallConfig();
  c.model.nHead = 6;
  c.model.dModel = 192;
  ParallelPlan p{.stages = {{.layers = 2, .tp = 2}, {.layers = 2, .tp = 4}}};
  expectError(validatePlan(p, c, 6), "key 'stages[1].tensor_parallel'",
              {"tensor_parallel 4 does not divide model.n_head 6", "attention heads"});
}

TEST(PlanValidate, TensorParallelMustDivideDModel) {
  // Unreachable with a valid config (tp | n_head | d_model); checked anyway for configs built in code.
  TrainConfig c = smallConfig();
  c.model.dModel = 130;
  ParallelPlan p{.stages = {{.layers = 4, .tp = 4}}};
  expectError(validatePlan(p, c, 4), "key 'stages[0].tensor_parallel'",
              {"tensor_parallel 4 does not divide model.d_model 130"});
}

TEST(PlanValidate, TensorParallelMustDivideTheVocabulary) {
  TrainConfig c = smallConfig();
  c.model.vocabSize = 257;
  ParallelPlan p{.stages = {{.layers = 4, .tp = 2}}};
  expectError(validatePlan(p, c, 2), "key 'stages[0].tensor_parallel'",
              {"tensor_parallel 2 does not divide model.vocab_size 257", "vocabulary"});
}

TEST(PlanValidate, TensorParallelMustBePositive) {
  ParallelPlan p{.stages = {{.layers = 2, .tp = 1}, {.layers = 2, .tp = -2}}};
  expectError(validatePlan(p, smallConfig(), 1), "key 'stages[1].tensor_parallel'", {"must be positive, got -2"});
}

TEST(PlanValidate, DataParallelMustBePositive) {
  ParallelPlan p{.dp = 0, .stages = {{.layers = 4}}};
  expectError(validatePlan(p, smallConfig(), 0), "key 'data_parallel'", {"must be positive, got 0"});
}

TEST(PlanValidate, NeedsAStage) {
  ParallelPlan p;
  expectError(validatePlan(p, smallConfig(), 1), "key 'stages'", {"at least one pipeline stage"});
}

TEST(PlanValidate, LayersMustNotBeNegative) {
  ParallelPlan p{.stages = {{.layers = 5}, {.layers = -1}}};
  expectError(validatePlan(p, smallConfig(), 2), "key 'stages[1].layers'", {"must be >= 0, got -1"});
}

TEST(PlanValidate, OnlyTheFirstOrLastStageMayBeEmpty) {
  ParallelPlan middle{.stages = {{.layers = 2}, {.layers = 0}, {.layers = 2}}};
  expectError(validatePlan(middle, smallConfig(), 3), "key 'stages[1].layers'",
              {"0 transformer blocks on stage 1 of 3", "first stage (embedding) or the last"});

  ParallelPlan only{.stages = {{.layers = 0}}};
  expectError(validatePlan(only, smallConfig(), 1), "key 'stages[0].layers'",
              {"the only stage must hold at least one transformer block, got 0"});

  // The embedding or the head alone is a stage's worth of work.
  for (ParallelPlan ok : {ParallelPlan{.stages = {{.layers = 0}, {.layers = 4}}},
                          ParallelPlan{.stages = {{.layers = 2}, {.layers = 2}, {.layers = 0}}}}) {
    Result<void> r = validatePlan(ok, smallConfig(), ok.worldSize());
    EXPECT_TRUE(r.has_value()) << messageOf(r);
  }
}

TEST(PlanValidate, WorldSizeMustMatch) {
  ParallelPlan p{.dp = 2, .stages = {{.layers = 1, .tp = 2}, {.layers = 3, .tp = 1}}};
  Result<void> r = validatePlan(p, smallConfig(), 8, "plan p.json");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message(),
            "plan p.json: the plan needs data_parallel 2 x (tensor_parallel 2+1 = 3 ranks per replica) = 6 ranks, but "
            "the world has 8");
}

TEST(PlanValidate, UniformSplitMustDivideTheBatch) {
  TrainConfig c = smallConfig();  // micro 4, global 16
  ParallelPlan p{.dp = 3, .stages = {{.layers = 4}}};
  expectError(validatePlan(p, c, 3), "key 'micro_batches'",
              {"global_batch 16 is not a multiple of micro_batch 4 x data_parallel 3 = 12",
               "list micro_batches per replica (summing to 4)"});
  EXPECT_TRUE(p.microBatches.empty());  // left as it was
}

TEST(PlanValidate, MicroBatchesMustMakeTheGlobalBatch) {
  ParallelPlan p{.dp = 2, .microBatches = {3, 2}, .stages = {{.layers = 4}}};
  expectError(validatePlan(p, smallConfig(), 2), "key 'micro_batches'",
              {"3+2 = 5 micro-batches x micro_batch 4 = 20 samples per step, but global_batch is 16"});
}

TEST(Plan, MicroBatchSizeAndZeroRoundTrip) {
  auto p = parsePlan(R"({"stages": [{"layers": 4}], "data_parallel": 2, "micro_batch": 2, "zero": 1})");
  ASSERT_TRUE(p.has_value()) << p.error().message();
  EXPECT_EQ(p->microBatch, 2);
  EXPECT_EQ(p->zero, 1);
  EXPECT_EQ(parsePlan(toJson(*p).dump()).value(), *p);
  auto none = parsePlan(R"({"stages": [{"layers": 4}]})").value();
  EXPECT_EQ(none.microBatch, 0);
  EXPECT_EQ(none.zero, -1);
  EXPECT_FALSE(toJson(none).contains("micro_batch"));
  EXPECT_FALSE(toJson(none).contains("zero"));
  expectError(parsePlan(R"({"stages": [{"layers": 4}], "zero": 2})"), "key 'zero'", {"must be 0 or 1, got 2"});
  expectError(parsePlan(R"({"stages": [{"layers": 4}], "micro_batch": 0})"), "key 'micro_batch'",
              {"must be positive, got 0"});
}

TEST(Plan, ZeroSharesRoundTripAndAreChecked) {
  auto p = parsePlan(R"({"stages": [{"layers": 4}], "data_parallel": 2, "zero": 1, "zero_shares": [3, 1]})");
  ASSERT_TRUE(p.has_value()) << p.error().message();
  EXPECT_EQ(p->zeroShares, (std::vector<double>{3, 1}));
  EXPECT_EQ(parsePlan(toJson(*p).dump()).value(), *p);
  expectError(parsePlan(R"({"stages": [{"layers": 4}], "zero_shares": [1, 0]})"), "key 'zero_shares[1]'",
              {"must be a positive number, got number 0"});
  expectError(parsePlan(R"({"stages": [{"layers": 4}], "zero_shares": 2})"), "key 'zero_shares'",
              {"must be an array of positive numbers"});
  ParallelPlan three = *p;
  three.zeroShares = {1, 1, 1};
  expectError(validatePlan(three, smallConfig(), 2), "key 'zero_shares'", {"has 3 entries for the plan's 2 ranks"});
}

TEST(PlanValidate, MicroBatchSizeMustBeTheConfigs) {
  ParallelPlan p{.dp = 2, .stages = {{.layers = 4}}, .microBatch = 2};
  expectError(validatePlan(p, smallConfig(), 2), "key 'micro_batch'",
              {"micro-batches of 2 sequences but the config's micro_batch is 4"});
  TrainConfig c = smallConfig();
  c.microBatch = 2;
  EXPECT_TRUE(validatePlan(p, c, 2).has_value());
  EXPECT_EQ(p.microBatches, (std::vector<int>{4, 4}));
}

TEST(PlanValidate, MicroBatchesMustBePositive) {
  ParallelPlan p{.dp = 2, .microBatches = {4, 0}, .stages = {{.layers = 4}}};
  expectError(validatePlan(p, smallConfig(), 2), "key 'micro_batches[1]'",
              {"replica 1 must run at least 1 micro-batch per step, got 0"});
}

TEST(PlanValidate, MicroBatchesNeedOneEntryPerReplica) {
  ParallelPlan p{.dp = 2, .microBatches = {1, 1, 2}, .stages = {{.layers = 4}}};
  expectError(validatePlan(p, smallConfig(), 2), "key 'micro_batches'", {"has 3 entries but data_parallel is 2"});
}

TEST(PlanValidate, RanksNeedOneEntryPerReplica) {
  ParallelPlan p{.dp = 2, .stages = {{.layers = 4}}, .ranks = {{{0}}}};
  expectError(validatePlan(p, smallConfig(), 2), "key 'ranks'", {"has 1 replicas but data_parallel is 2"});
}

TEST(PlanValidate, RanksNeedOneEntryPerStage) {
  ParallelPlan p{.dp = 2, .stages = {{.layers = 2}, {.layers = 2}}, .ranks = {{{0}, {1}}, {{2}}}};
  expectError(validatePlan(p, smallConfig(), 4), "key 'ranks[1]'", {"has 1 stages but the plan has 2"});
}

TEST(PlanValidate, RanksNeedTheStagesTensorParallelDegree) {
  ParallelPlan p{.stages = {{.layers = 2, .tp = 2}, {.layers = 2}}, .ranks = {{{0}, {1, 2}}}};
  expectError(validatePlan(p, smallConfig(), 3), "key 'ranks[0][0]'",
              {"has 1 ranks but stages[0].tensor_parallel is 2"});
}

TEST(PlanValidate, RanksMustBeInTheWorld) {
  ParallelPlan p = parsePlan(kExample).value();
  p.ranks[1][1][0] = 6;
  expectError(validatePlan(p, smallConfig(), 6), "key 'ranks[1][1][0]'",
              {"rank 6 is outside 0..5", "data_parallel 2 x 3 per replica"});
}

TEST(PlanValidate, RanksMustNotRepeat) {
  ParallelPlan p = parsePlan(kExample).value();
  p.ranks[1][0][1] = 1;  // rank 4 is then missing, rank 1 twice
  expectError(validatePlan(p, smallConfig(), 6), "key 'ranks[1][0][1]'",
              {"rank 1 appears twice (also at ranks[0][0][1])"});
}

// ---- the uniform shorthand and the gradient weights --------------------------------------------------------------

TEST(Plan, UniformPlanSplitsBlocksEarlierStagesFirst) {
  TrainConfig c = smallConfig();
  c.model.nLayer = 5;
  ParallelPlan p = uniformPlan(c, 2, 2, 2);
  EXPECT_EQ(p.stages, (std::vector<StagePlan>{{.layers = 3, .tp = 2}, {.layers = 2, .tp = 2}}));
  EXPECT_EQ(p.dp, 2);
  EXPECT_EQ(p.microBatches, (std::vector<int>{2, 2}));  // 16 / (4 x 2)
  EXPECT_TRUE(p.ranks.empty());
  EXPECT_EQ(p.worldSize(), 8);
  EXPECT_TRUE(validatePlan(p, c, 8).has_value());

  c.model.nLayer = 7;
  std::vector<int> layers;
  for (const StagePlan& s : uniformPlan(c, 1, 3, 1).stages) layers.push_back(s.layers);
  EXPECT_EQ(layers, (std::vector<int>{3, 2, 2}));

  c.model.nLayer = 4;
  EXPECT_EQ(uniformPlan(c, 1, 4, 1).stages, (std::vector<StagePlan>(4, StagePlan{.layers = 1, .tp = 1})));
}

TEST(Plan, UniformPlanLeavesAnUnevenBatchToValidation) {
  ParallelPlan p = uniformPlan(smallConfig(), 1, 1, 3);  // 16 samples do not split over 3 replicas of 4
  EXPECT_TRUE(p.microBatches.empty());
  expectError(validatePlan(p, smallConfig(), 3), "key 'micro_batches'", {"not a multiple"});
}

TEST(Plan, ReplicaGradWeightsFollowTheMicroBatches) {
  ParallelPlan p{.dp = 2, .microBatches = {3, 1}, .stages = {{.layers = 4}}};
  const std::vector<double> w = replicaGradWeights(p);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_DOUBLE_EQ(w[0], 0.75);
  EXPECT_DOUBLE_EQ(w[1], 0.25);

  // The weighted sum of the replicas' mean gradients is the mean over all samples of the global batch.
  const int micro = 4;
  std::vector<double> samples(p.totalMicroBatches() * micro);
  std::iota(samples.begin(), samples.end(), 1.0);  // per-sample "gradients" 1..16
  const double globalMean = std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size();
  double weighted = 0;
  size_t first = 0;
  for (int d = 0; d < p.dp; ++d) {
    const size_t n = size_t(p.microBatches[d]) * micro;
    weighted += w[d] * std::accumulate(samples.begin() + first, samples.begin() + first + n, 0.0) / n;
    first += n;
  }
  EXPECT_DOUBLE_EQ(weighted, globalMean);

  EXPECT_EQ(replicaGradWeights(ParallelPlan{.dp = 4, .stages = {{.layers = 4}}}), (std::vector<double>(4, 0.25)));
}

// ---- role assignment ---------------------------------------------------------------------------------------------

using Ranks = std::vector<std::vector<std::vector<int>>>;

// Hosts of `perHost` ranks each, numbered host-major (host h holds ranks h*perHost ..), host h in islands[h].
Placement cluster(const std::vector<int>& islands, int perHost) {
  Placement p;
  for (size_t h = 0; h < islands.size(); ++h)
    for (int i = 0; i < perHost; ++i) {
      p.host.push_back(int(h));
      p.island.push_back(islands[h]);
    }
  return p;
}

// Every rank plays exactly one role, and `of` and `ranks` agree.
void expectConsistent(const RoleTable& t, const ParallelPlan& plan) {
  ASSERT_EQ(t.of.size(), size_t(plan.worldSize()));
  ASSERT_EQ(t.ranks.size(), size_t(plan.dp));
  std::vector<int> seen(plan.worldSize(), 0);
  for (int d = 0; d < plan.dp; ++d) {
    ASSERT_EQ(t.ranks[d].size(), plan.stages.size());
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      ASSERT_EQ(t.ranks[d][s].size(), size_t(plan.stages[s].tp));
      for (int k = 0; k < plan.stages[s].tp; ++k) {
        const int r = t.ranks[d][s][k];
        ASSERT_TRUE(r >= 0 && r < plan.worldSize()) << r;
        ++seen[r];
        EXPECT_EQ(t.of[r], (Role{d, int(s), k})) << "rank " << r;
      }
    }
  }
  EXPECT_EQ(seen, std::vector<int>(plan.worldSize(), 1));
}

TEST(PlanRoles, NicAwareKeepsTpInHostsAndDpInIslandsWhereNaiveDoesNot) {
  // 4 hosts x 2 ranks; hosts 0,1 share a fast fabric (island 0), hosts 2,3 another (island 1). TP2 x PP2 x DP2.
  const Placement where = cluster({0, 0, 1, 1}, 2);
  const ParallelPlan plan = uniformPlan(smallConfig(), 2, 2, 2);

  Result<RoleTable> nic = assignRoles(plan, where, Assignment::kNicAware);
  ASSERT_TRUE(nic.has_value()) << messageOf(nic);
  expectConsistent(*nic, plan);
  // Stage-major: stage 0 of both replicas on island 0, stage 1 of both on island 1.
  EXPECT_EQ(nic->ranks, (Ranks{{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}}));
  const GroupSpans n = groupSpans(*nic, where);
  EXPECT_EQ(n.tpGroups, 4);
  EXPECT_EQ(n.tpSpanningHosts, 0);  // every TP group in one host
  EXPECT_EQ(n.dpGroups, 4);
  EXPECT_EQ(n.dpSpanningIslands, 0);  // every DP group in one island
  EXPECT_EQ(n.boundaries, 2);
  EXPECT_EQ(n.boundariesAcrossIslands, 2);  // only the pipeline crosses the slow fabric

  Result<RoleTable> naive = assignRoles(plan, where, Assignment::kNaive);
  ASSERT_TRUE(naive.has_value()) << messageOf(naive);
  expectConsistent(*naive, plan);
  EXPECT_EQ(naive->ranks, (Ranks{{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}}));
  const GroupSpans v = groupSpans(*naive, where);
  EXPECT_EQ(v.tpSpanningHosts, 0);
  EXPECT_EQ(v.dpSpanningIslands, 4);  // every gradient all-reduce over the slow fabric
  EXPECT_EQ(v.boundariesAcrossIslands, 0);
}

TEST(PlanRoles, NicAwareUndoesARoundRobinLaunch) {
  // The same cluster, but the launcher dealt ranks round-robin over the hosts: rank r on host r % 4.
  Placement where;
  where.host = {0, 1, 2, 3, 0, 1, 2, 3};
  where.island = {0, 0, 1, 1, 0, 0, 1, 1};
  const ParallelPlan plan = uniformPlan(smallConfig(), 2, 2, 2);

  Result<RoleTable> nic = assignRoles(plan, where, Assignment::kNicAware);
  ASSERT_TRUE(nic.has_value()) << messageOf(nic);
  expectConsistent(*nic, plan);
  EXPECT_EQ(nic->ranks, (Ranks{{{0, 4}, {2, 6}}, {{1, 5}, {3, 7}}}));
  const GroupSpans n = groupSpans(*nic, where);
  EXPECT_EQ(n.tpSpanningHosts, 0);
  EXPECT_EQ(n.dpSpanningIslands, 0);
  EXPECT_EQ(n.boundariesAcrossIslands, 2);

  Result<RoleTable> naive = assignRoles(plan, where, Assignment::kNaive);
  ASSERT_TRUE(naive.has_value()) << messageOf(naive);
  EXPECT_EQ(groupSpans(*naive, where).tpSpanningHosts, 4);  // {0,1} is hosts 0 and 1, and so on
}

TEST(PlanRoles, UnevenTensorParallelOnThreeHosts) {
  // 3 hosts x 2 ranks, hosts 0,1 in island 0 and host 2 in island 1. Stage 0: 1 block at TP 2 (with the
  // embedding), stage 1: 3 blocks at TP 1; DP 2.
  const Placement where = cluster({0, 0, 1}, 2);
  const ParallelPlan plan{.dp = 2, .stages = {{.layers = 1, .tp = 2}, {.layers = 3, .tp = 1}}};

  Result<RoleTable> nic = assignRoles(plan, where, Assignment::kNicAware);
  ASSERT_TRUE(nic.has_value()) << messageOf(nic);
  expectConsistent(*nic, plan);
  EXPECT_EQ(nic->ranks, (Ranks{{{0, 1}, {4}}, {{2, 3}, {5}}}));
  const GroupSpans n = groupSpans(*nic, where);
  EXPECT_EQ(n.tpSpanningHosts, 0);
  EXPECT_EQ(n.dpGroups, 3);
  EXPECT_EQ(n.dpSpanningIslands, 0);
  EXPECT_EQ(n.boundariesAcrossIslands, 2);

  // Rank order cuts replica 1's TP group across hosts 1 and 2, and two DP groups across the islands.
  Result<RoleTable> naive = assignRoles(plan, where, Assignment::kNaive);
  ASSERT_TRUE(naive.has_value()) << messageOf(naive);
  EXPECT_EQ(naive->ranks, (Ranks{{{0, 1}, {2}}, {{3, 4}, {5}}}));
  const GroupSpans v = groupSpans(*naive, where);
  EXPECT_EQ(v.tpSpanningHosts, 1);
  EXPECT_EQ(v.dpSpanningIslands, 2);
}

TEST(PlanRoles, NicAwarePacksLargerTpGroupsFirstWhenTheFillWouldSplitOne) {
  // Hosts of 3 ranks, stages at TP 1 and 2, DP 2. The plain stage-major fill gives stage 1 the groups {2,3} and
  // {4,5}, and {2,3} straddles hosts 0 and 1; placing the TP-2 groups first keeps both inside a host.
  const Placement where = cluster({0, 0}, 3);
  const ParallelPlan plan{.dp = 2, .stages = {{.layers = 2, .tp = 1}, {.layers = 2, .tp = 2}}};
  Result<RoleTable> nic = assignRoles(plan, where, Assignment::kNicAware);
  ASSERT_TRUE(nic.has_value()) << messageOf(nic);
  expectConsistent(*nic, plan);
  EXPECT_EQ(nic->ranks, (Ranks{{{2}, {0, 1}}, {{5}, {3, 4}}}));
  EXPECT_EQ(groupSpans(*nic, where).tpSpanningHosts, 0);
}

TEST(PlanRoles, EveryShapeGetsAPermutation) {
  // Both modes, over plans and clusters of matching size (including hosts of odd size and many islands).
  struct Shape {
    ParallelPlan plan;
    std::vector<int> islands;
    int perHost;
  } shapes[] = {
      {ParallelPlan{.stages = {{.layers = 4}}}, {0}, 1},
      {ParallelPlan{.dp = 3, .stages = {{.layers = 2, .tp = 2}, {.layers = 2, .tp = 1}}}, {0, 1, 1}, 3},
      {ParallelPlan{.dp = 2, .stages = {{.layers = 1, .tp = 4}, {.layers = 1, .tp = 2}, {.layers = 2, .tp = 1}}},
       {0, 0, 1, 1, 2, 2, 2},
       2},
      {ParallelPlan{.dp = 4, .stages = {{.layers = 1, .tp = 1}, {.layers = 3, .tp = 2}}}, {0, 1, 0, 1}, 3},
  };
  for (const Shape& sh : shapes) {
    const Placement where = cluster(sh.islands, sh.perHost);
    ASSERT_EQ(where.host.size(), size_t(sh.plan.worldSize()));
    for (Assignment how : {Assignment::kNicAware, Assignment::kNaive}) {
      Result<RoleTable> t = assignRoles(sh.plan, where, how);
      ASSERT_TRUE(t.has_value()) << messageOf(t);
      expectConsistent(*t, sh.plan);
      Result<RoleTable> again = assignRoles(sh.plan, where, how);  // deterministic: every rank computes the same
      EXPECT_EQ(*again, *t);
    }
    // NIC-aware never splits more TP groups across hosts than rank order does.
    EXPECT_LE(groupSpans(assignRoles(sh.plan, where, Assignment::kNicAware).value(), where).tpSpanningHosts,
              groupSpans(assignRoles(sh.plan, where, Assignment::kNaive).value(), where).tpSpanningHosts);
  }
}

TEST(PlanRoles, ExplicitRanksWinOverBothModes) {
  ParallelPlan plan = parsePlan(kExample).value();
  plan.ranks = {{{5, 0}, {3}}, {{1, 4}, {2}}};
  const Placement where = cluster({0, 0, 1}, 2);
  for (Assignment how : {Assignment::kNicAware, Assignment::kNaive}) {
    Result<RoleTable> t = assignRoles(plan, where, how);
    ASSERT_TRUE(t.has_value()) << messageOf(t);
    EXPECT_EQ(t->ranks, plan.ranks);
    expectConsistent(*t, plan);
    EXPECT_EQ(t->of[5], (Role{0, 0, 0}));
    EXPECT_EQ(t->of[2], (Role{1, 1, 0}));
  }
}

TEST(PlanRoles, PlacementMustCoverEveryRank) {
  const ParallelPlan plan = uniformPlan(smallConfig(), 2, 2, 2);  // 8 ranks
  Placement where = cluster({0, 0, 1, 1}, 2);
  where.host.pop_back();
  Result<RoleTable> r = assignRoles(plan, where, Assignment::kNicAware);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message(),
            "placement: has 7 host ids and 8 island ids, but the plan has 8 ranks (one of each per rank)");
}

TEST(PlanRoles, AHostLiesInOneIsland) {
  const ParallelPlan plan = uniformPlan(smallConfig(), 2, 2, 2);
  Placement where = cluster({0, 0, 1, 1}, 2);
  where.island[3] = 1;  // rank 3 is on host 1, whose rank 2 is in island 0
  Result<RoleTable> r = assignRoles(plan, where, Assignment::kNaive);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("host 1 is in island 0 (rank 2) and in island 1 (rank 3)"), std::string::npos)
      << r.error().message();
}

TEST(PlanRoles, AnInvalidPlanIsAnError) {
  const ParallelPlan plan{.stages = {{.layers = 4, .tp = 0}}};
  expectError(assignRoles(plan, Placement{}, Assignment::kNicAware), "key 'stages[0].tensor_parallel'",
              {"must be positive, got 0"});
}

TEST(PlanRoles, FormatsOneLinePerRankAndTheSpans) {
  const Placement where = cluster({0, 0, 1, 1}, 2);
  ParallelPlan plan = uniformPlan(smallConfig(), 2, 2, 2);
  const RoleTable t = assignRoles(plan, where, Assignment::kNicAware).value();
  const std::string text = formatRoleTable(t, where, plan);
  EXPECT_EQ(text.substr(0, text.find('\n')), "rank  host  island  replica  stage  tp_rank  layers  micro_batches");
  // Rank 4: host 2, island 1, replica 0, stage 1, tp rank 0, 2 blocks, 2 micro-batches.
  EXPECT_NE(text.find("\n   4     2       1        0      1        0       2              2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tensor-parallel groups spanning hosts:   0 of 4"), std::string::npos) << text;
  EXPECT_NE(text.find("data-parallel groups spanning islands:   0 of 4"), std::string::npos) << text;
  EXPECT_NE(text.find("pipeline boundaries crossing islands:    2 of 2"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1 + 8 + 3);
}

}  // namespace
}  // namespace hetcomm::trainer
