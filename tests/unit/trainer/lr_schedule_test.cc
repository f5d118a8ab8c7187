// lr_schedule_test: the schedule at warmup start and end, mid-decay, the last step and past it.
#include "trainer/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace hetcomm::trainer {
namespace {

TEST(LrSchedule, WarmupIsLinearAndReachesThePeak) {
  LrSchedule s(1e-3, 1e-4, 10, 110);
  EXPECT_DOUBLE_EQ(s.lrAt(0), 1e-4);  // (0+1)/10 of the peak: the first step already learns
  EXPECT_DOUBLE_EQ(s.lrAt(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.lrAt(9), 1e-3);  // last warmup step: the peak
  EXPECT_DOUBLE_EQ(s.lrAt(-3), s.lrAt(0));
}

TEST(LrSchedule, CosineDecayHitsMiddleAndMinimum) {
  LrSchedule s(1e-3, 1e-4, 10, 110);  // 100 decay steps: 10..109
  // Step 59: progress (59-10+1)/100 = 1/2, cos = 0: halfway between peak and minimum.
  EXPECT_NEAR(s.lrAt(59), 5.5e-4, 1e-15);
  // Step 10: progress 1/100, just below the peak.
  EXPECT_NEAR(s.lrAt(10), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi / 100)), 1e-15);
  EXPECT_LT(s.lrAt(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.lrAt(109), 1e-4);  // last step: exactly the minimum
  EXPECT_DOUBLE_EQ(s.lrAt(110), 1e-4);  // past the end: stays there
  EXPECT_DOUBLE_EQ(s.lrAt(1000000), 1e-4);
}

TEST(LrSchedule, MonotoneAfterWarmup) {
  LrSchedule s(6e-4, 6e-5, 7, 53);
  for (int64_t step = 0; step + 1 < 7; ++step) EXPECT_LT(s.lrAt(step), s.lrAt(step + 1));
  for (int64_t step = 6; step + 1 < 60; ++step) EXPECT_GE(s.lrAt(step), s.lrAt(step + 1)) << step;
}

TEST(LrSchedule, EdgeCasesStayFinite) {
  LrSchedule noWarmup(1e-3, 0.0, 0, 4);
  EXPECT_NEAR(noWarmup.lrAt(0), 1e-3 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(noWarmup.lrAt(3), 0.0);
  LrSchedule allWarmup(1e-3, 1e-4, 5, 5);  // warmup == steps: no decay step at all
  EXPECT_DOUBLE_EQ(allWarmup.lrAt(4), 1e-3);
  EXPECT_DOUBLE_EQ(allWarmup.lrAt(5), 1e-4);
  LrSchedule oneStep(1e-3, 1e-4, 0, 1);
  EXPECT_DOUBLE_EQ(oneStep.lrAt(0), 1e-4);
}

TEST(LrSchedule, FromConfig) {
  TrainConfig c;
  c.lr = 2e-3;
  c.minLr = 2e-4;
  c.warmupSteps = 4;
  c.steps = 20;
  LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.lrAt(3), 2e-3);
  EXPECT_DOUBLE_EQ(s.lrAt(19), 2e-4);
}

}  // namespace
}  // namespace hetcomm::trainer
