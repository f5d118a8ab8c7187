// Deadline: never, expired, msLeft (rounded up, clamped), earlier().
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <thread>

#include "common/deadline.h"

namespace hetcomm {
namespace {

TEST(Deadline, NeverNeverExpires) {
  Deadline d = Deadline::never();
  EXPECT_TRUE(d.isNever());
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.msLeft(), -1);  // epoll's "wait forever"
}

TEST(Deadline, PastDeadlinesAreExpired) {
  Deadline zero = Deadline::afterMs(0);
  EXPECT_FALSE(zero.isNever());
  EXPECT_TRUE(zero.expired());
  EXPECT_EQ(zero.msLeft(), 0);
  Deadline past = Deadline::afterMs(-50);
  EXPECT_TRUE(past.expired());
  EXPECT_EQ(past.msLeft(), 0);
  EXPECT_TRUE(Deadline::afterSec(-1.0).expired());
}

TEST(Deadline, FutureDeadline) {
  Deadline d = Deadline::afterMs(10000);
  EXPECT_FALSE(d.expired());
  int left = d.msLeft();
  EXPECT_GT(left, 9000);
  EXPECT_LE(left, 10000);
  Deadline s = Deadline::afterSec(2.5);
  EXPECT_GT(s.msLeft(), 2000);
  EXPECT_LE(s.msLeft(), 2500);
}

TEST(Deadline, MsLeftRoundsUp) {
  // 1.2 ms ahead: a wait of 1 ms would wake too early and spin; msLeft says 2 (or 1 once the clock moved).
  Deadline d = Deadline::afterSec(0.0012);
  int left = d.msLeft();
  EXPECT_GE(left, 1);
  EXPECT_LE(left, 2);
}

TEST(Deadline, ExpiresAfterItsTime) {
  Deadline d = Deadline::afterMs(30);
  EXPECT_FALSE(d.expired());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.msLeft(), 0);
}

TEST(Deadline, MsLeftClampsToIntMax) {
  Deadline d = Deadline::afterSec(1e7);  // 1e10 ms: more than an int holds
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.msLeft(), INT_MAX);
}

TEST(Deadline, EarlierPicksTheSooner) {
  Deadline a = Deadline::afterMs(1000), b = Deadline::afterMs(5000), n = Deadline::never();
  EXPECT_EQ(Deadline::earlier(a, b).at(), a.at());
  EXPECT_EQ(Deadline::earlier(b, a).at(), a.at());
  EXPECT_EQ(Deadline::earlier(n, b).at(), b.at());
  EXPECT_TRUE(Deadline::earlier(n, n).isNever());
}

TEST(NowSec, Monotonic) {
  double a = nowSec();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  double b = nowSec();
  EXPECT_GT(b, a);
  EXPECT_LT(b - a, 5.0);
}

}  // namespace
}  // namespace hetcomm
