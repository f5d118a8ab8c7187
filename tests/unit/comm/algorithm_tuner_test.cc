// The algorithm tuner (comm/algorithm_tuner.h): which calls it takes, the order of their trials, what a rank brings
// to the agreement, and the choice from the agreed times. Through real communicators: tests/integration's
// coll_check (every call right through trials and agreements; every rank reports the same algorithm).
#include "comm/algorithm_tuner.h"

#include <gtest/gtest.h>

#include <cmath>

#include "collectives/algorithm_list.h"

namespace hetcomm::comm {
namespace {

std::vector<coll::Selection> twoContenders(double firstUs = 10, double secondUs = 12) {
  return {{&coll::ringAllReduce(), firstUs}, {&coll::recursiveDoublingAllReduce(), secondUs}};
}

CallShape shapeOfCount(size_t count) {
  coll::Args a;
  a.kind = coll::CollKind::kAllReduce;
  a.dtype = kernels::DataType::kFloat32;
  a.count = count;
  return shapeOf(a);
}

TEST(AlgorithmTuner, TakesOnlyShortCallsWithSeveralContenders) {
  AlgorithmTuner tuner;
  EXPECT_FALSE(tuner.pending());
  EXPECT_FALSE(tuner.track(shapeOfCount(1), {{&coll::ringAllReduce(), 10}})) << "one contender: nothing to measure";
  EXPECT_FALSE(tuner.track(shapeOfCount(2), twoContenders(2000, 2100))) << "predicted over a millisecond";
  EXPECT_FALSE(tuner.track(shapeOfCount(3), twoContenders(NAN, 1))) << "no prediction";
  EXPECT_TRUE(tuner.track(shapeOfCount(4), twoContenders()));
  EXPECT_FALSE(tuner.track(shapeOfCount(4), twoContenders())) << "already tracked";
  EXPECT_TRUE(tuner.pending());
  EXPECT_EQ(tuner.find(shapeOfCount(1)), nullptr);
  ASSERT_NE(tuner.find(shapeOfCount(4)), nullptr);
  EXPECT_FALSE(tuner.decision(shapeOfCount(4)));

  TunerSettings off;
  off.enabled = false;
  EXPECT_FALSE(AlgorithmTuner(off).track(shapeOfCount(4), twoContenders())) << "HETCOMM_TUNE=0";
  TunerSettings few;
  few.maxShapes = 1;
  AlgorithmTuner capped(few);
  EXPECT_TRUE(capped.track(shapeOfCount(4), twoContenders()));
  EXPECT_FALSE(capped.track(shapeOfCount(5), twoContenders())) << "over maxShapes the model decides";
}

TEST(AlgorithmTuner, TrialsInterleaveThenTheRanksAgree) {
  AlgorithmTuner tuner;  // 3 trials each
  ASSERT_TRUE(tuner.track(shapeOfCount(4), twoContenders()));
  AlgorithmTuner::Shape& s = *tuner.find(shapeOfCount(4));
  std::vector<int> order;
  const double times[2][3] = {{30, 10, 11}, {9, 8, 50}};  // ring: one cold call; rd: one disturbed call
  for (int i; (i = tuner.nextTrial(s)) >= 0;) {
    order.push_back(i);
    const int k = s.started / 2;
    ++s.started;
    s.contenders[static_cast<size_t>(i)].timesUs.push_back(times[i][k]);
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(AlgorithmTuner::medians(s), (std::vector<double>{11, 9}));
  EXPECT_TRUE(tuner.pending()) << "measured but not agreed";
  // Another rank saw rd slower: the slowest rank's medians decide.
  const std::vector<double> agreed{11, 13};
  EXPECT_EQ(tuner.decide(s, agreed), 0);
  EXPECT_FALSE(tuner.pending());
  auto chosen = tuner.decision(shapeOfCount(4));
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->algo->name(), "ring");
  EXPECT_EQ(chosen->predictedUs, 10);
}

TEST(AlgorithmTuner, TiesGoToTheModelsOrder) {
  AlgorithmTuner tuner;
  ASSERT_TRUE(tuner.track(shapeOfCount(4), twoContenders()));
  AlgorithmTuner::Shape& s = *tuner.find(shapeOfCount(4));
  EXPECT_EQ(tuner.decide(s, std::vector<double>{7, 7}), 0);
  EXPECT_EQ(tuner.decide(s, std::vector<double>{7, 6.5}), 1);
  EXPECT_EQ(tuner.decision(shapeOfCount(4))->algo->name(), "rd");
  // A contender no rank timed (its median is infinite) never wins.
  AlgorithmTuner::Shape untimed;
  untimed.contenders = {{{&coll::ringAllReduce(), 1}, nullptr, {}}, {{&coll::ringAllReduce(), 1}, nullptr, {4}}};
  EXPECT_EQ(AlgorithmTuner::medians(untimed)[0], HUGE_VAL);
  EXPECT_EQ(AlgorithmTuner::medians(untimed)[1], 4);
}

TEST(AlgorithmTuner, ShapesDifferInEveryArgument) {
  coll::Args a;
  a.kind = coll::CollKind::kAllReduce;
  a.count = 100;
  const CallShape base = shapeOf(a);
  coll::Args b = a;
  b.inPlace = true;
  EXPECT_FALSE(shapeOf(b) == base);
  b = a;
  b.op = kernels::RedOp::kMax;
  EXPECT_FALSE(shapeOf(b) == base);
  b = a;
  b.root = 1;
  EXPECT_FALSE(shapeOf(b) == base);
  b = a;
  b.dtype = kernels::DataType::kFloat64;
  EXPECT_FALSE(shapeOf(b) == base);
  b = a;
  b.kind = coll::CollKind::kReduce;
  EXPECT_FALSE(shapeOf(b) == base);
  EXPECT_TRUE(shapeOf(a) == base);
}

}  // namespace
}  // namespace hetcomm::comm
