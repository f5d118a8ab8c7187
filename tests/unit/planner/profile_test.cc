// The compute profile: FLOPs at a rate, measured times scaled to other micro-batch sizes, and the measurement's
// cache (a second call reads what the first wrote; another model measures again; a cache far off this machine now
// is measured again).
#include "planner/profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trainer/model.h"

namespace hetcomm::planner {
namespace {

trainer::ModelConfig tiny() { return {.nLayer = 2, .nHead = 2, .dModel = 32, .seqLen = 16, .vocabSize = 256}; }

TEST(Profile, FlopsAtARate) {
  const trainer::ModelConfig m = tiny();
  const auto f = trainer::Gpt::forwardFlopsPerToken(m);
  const PartTimes t = ComputeProfile::fromFlops(2e9).at(m, 4);
  EXPECT_DOUBLE_EQ(ComputeProfile::fromFlops(2e9).at(m, 4, 2).blockForwardS, t.blockForwardS / 2);
  const double tokens = 4.0 * 16;
  EXPECT_DOUBLE_EQ(t.blockForwardS, (f.attention + f.mlp) * tokens / 2e9);
  EXPECT_DOUBLE_EQ(t.blockBackwardS, 2 * t.blockForwardS);
  EXPECT_DOUBLE_EQ(t.headForwardS, f.head * tokens / 2e9);
  EXPECT_DOUBLE_EQ(t.headBackwardS, 2 * t.headForwardS);
}

TEST(Profile, MeasuredSizesScaleFromTheNearest) {
  const ComputeProfile p = ComputeProfile::fromMeasured(
      {{{2, 1}, {1, 2, 3, 4}}, {{8, 1}, {10, 20, 30, 40}}, {{2, 2}, {0.6, 1.2, 2, 3}}}, "test");
  EXPECT_DOUBLE_EQ(p.at(tiny(), 2).blockForwardS, 1);
  EXPECT_DOUBLE_EQ(p.at(tiny(), 1).blockBackwardS, 1);       // from 2, halved
  EXPECT_DOUBLE_EQ(p.at(tiny(), 16).headForwardS, 60);       // from 8, doubled
  EXPECT_DOUBLE_EQ(p.at(tiny(), 4, 2).blockForwardS, 1.2);   // measured at TP 2, size 2, doubled
  EXPECT_DOUBLE_EQ(p.at(tiny(), 2, 4).blockForwardS, 0.25);  // TP 4 not measured: TP 1's over 4
  EXPECT_EQ(p.source(), "test");
}

TEST(Profile, MeasuresAndCaches) {
  const std::string dir = ::testing::TempDir() + "/hetcomm-profile-test";
  std::filesystem::remove_all(dir);
  bool cached = true;
  auto first = measureProfile(tiny(), {1, 2}, {2}, 1, dir, &cached);
  ASSERT_TRUE(first.has_value()) << first.error().message();
  EXPECT_FALSE(cached);
  ASSERT_EQ(first->measured().size(), 4u);  // sizes 1 and 2 at TP degrees 1 and 2
  for (const auto& [size, t] : first->measured()) {
    EXPECT_GE(t.blockForwardS, 0);
    EXPECT_GT(t.blockForwardS + t.headForwardS, 0);
    EXPECT_GT(t.blockBackwardS + t.headBackwardS, 0);
  }
  // The check before a cache is used times the model again; its tolerance here is wide enough for any load.
  auto second = measureProfile(tiny(), {1, 2}, {2}, 1, dir, &cached, {.recheck = true, .tolerance = 1000});
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(cached);
  EXPECT_EQ(second->measured().at({2, 2}).blockForwardS, first->measured().at({2, 2}).blockForwardS);
  // No comparison of the times themselves (e.g. a TP shard faster than the whole block): they are tens of
  // microseconds on this model, and a loaded CI machine reversed one such comparison. perf/ measures speed.
  trainer::ModelConfig other = tiny();
  other.dModel = 64;
  ASSERT_TRUE(measureProfile(other, {1, 2}, {2}, 1, dir, &cached).has_value());
  EXPECT_FALSE(cached);
  std::filesystem::remove_all(dir);
}

// A cache written when the machine was far slower (or faster) than now is not used: everything is measured again,
// the file is rewritten, and the profile's source says why.
TEST(Profile, ACacheFarOffThisMachineIsMeasuredAgain) {
  const std::string dir = ::testing::TempDir() + "/hetcomm-profile-drift";
  std::filesystem::remove_all(dir);
  bool cached = true;
  ASSERT_TRUE(measureProfile(tiny(), {1}, {}, 1, dir, &cached).has_value());
  ASSERT_FALSE(cached);
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  const std::string path = std::filesystem::directory_iterator(dir)->path();
  nlohmann::json doc;
  std::ifstream(path) >> doc;
  for (auto& e : doc["sizes"])  // as if measured on a machine 10^4 times slower
    for (const char* k : {"block_forward_s", "block_backward_s", "head_forward_s", "head_backward_s"})
      e[k] = e[k].get<double>() * 1e4 + 1.0;
  std::ofstream(path, std::ios::trunc) << doc.dump();
  auto again = measureProfile(tiny(), {1}, {}, 1, dir, &cached);
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_FALSE(cached);
  EXPECT_NE(again->source().find("measured again"), std::string::npos) << again->source();
  const PartTimes t = again->measured().at({1, 1});
  EXPECT_LT(t.blockForwardS + t.headForwardS, 1.0) << "the doctored times were kept";
  // The rewritten file is used next time (the check's tolerance wide enough for any load).
  ASSERT_TRUE(measureProfile(tiny(), {1}, {}, 1, dir, &cached, {.recheck = true, .tolerance = 1000}).has_value());
  EXPECT_TRUE(cached);
  std::filesystem::remove_all(dir);
}

TEST(Profile, RefusesBadSizesAndDegrees) {
  auto r = measureProfile(tiny(), {0}, {}, 1, "");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("micro-batch size 0 < 1"), std::string::npos) << r.error().message();
  EXPECT_FALSE(measureProfile(tiny(), {}, {}, 1, "").has_value());
  r = measureProfile(tiny(), {1}, {3}, 1, "");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("TP degree 3 does not split"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace hetcomm::planner
