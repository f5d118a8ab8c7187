// The compute profile: FLOPs at a rate, measured times scaled to other micro-batch sizes, and the measurement's
// cache (a second call reads what the first wrote; another model measures again).
#include "planner/profile.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "trainer/model.h"

namespace hetcomm::planner {
namespace {

trainer::ModelConfig tiny() { return {.nLayer = 2, .nHead = 2, .dModel = 32, .seqLen = 16, .vocabSize = 256}; }

TEST(Profile, FlopsAtARate) {
  const trainer::ModelConfig m = tiny();
  const auto f = trainer::Gpt::forwardFlopsPerToken(m);
  const PartTimes t = ComputeProfile::fromFlops(2e9).at(m, 4);
  const double tokens = 4.0 * 16;
  EXPECT_DOUBLE_EQ(t.blockForwardS, (f.attention + f.mlp) * tokens / 2e9);
  EXPECT_DOUBLE_EQ(t.blockBackwardS, 2 * t.blockForwardS);
  EXPECT_DOUBLE_EQ(t.headForwardS, f.head * tokens / 2e9);
  EXPECT_DOUBLE_EQ(t.headBackwardS, 2 * t.headForwardS);
}

TEST(Profile, MeasuredSizesScaleFromTheNearest) {
  const ComputeProfile p = ComputeProfile::fromMeasured({{2, {1, 2, 3, 4}}, {8, {10, 20, 30, 40}}}, "test");
  EXPECT_DOUBLE_EQ(p.at(tiny(), 2).blockForwardS, 1);
  EXPECT_DOUBLE_EQ(p.at(tiny(), 1).blockBackwardS, 1);  // from 2, halved
  EXPECT_DOUBLE_EQ(p.at(tiny(), 16).headForwardS, 60);  // from 8, doubled
  EXPECT_EQ(p.source(), "test");
}

TEST(Profile, MeasuresAndCaches) {
  const std::string dir = ::testing::TempDir() + "/hetcomm-profile-test";
  std::filesystem::remove_all(dir);
  bool cached = true;
  auto first = measureProfile(tiny(), {1, 2}, 1, dir, &cached);
  ASSERT_TRUE(first.has_value()) << first.error().message();
  EXPECT_FALSE(cached);
  ASSERT_EQ(first->measured().size(), 2u);
  for (const auto& [size, t] : first->measured()) {
    EXPECT_GE(t.blockForwardS, 0);
    EXPECT_GT(t.blockForwardS + t.headForwardS, 0);
    EXPECT_GT(t.blockBackwardS + t.headBackwardS, 0);
  }
  auto second = measureProfile(tiny(), {1, 2}, 1, dir, &cached);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(cached);
  EXPECT_EQ(second->measured().at(2).blockForwardS, first->measured().at(2).blockForwardS);
  trainer::ModelConfig other = tiny();
  other.dModel = 64;
  ASSERT_TRUE(measureProfile(other, {1, 2}, 1, dir, &cached).has_value());
  EXPECT_FALSE(cached);
  std::filesystem::remove_all(dir);
}

TEST(Profile, RefusesBadSizes) {
  auto r = measureProfile(tiny(), {0}, 1, "");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("micro-batch size 0 < 1"), std::string::npos) << r.error().message();
  EXPECT_FALSE(measureProfile(tiny(), {}, 1, "").has_value());
}

}  // namespace
}  // namespace hetcomm::planner
