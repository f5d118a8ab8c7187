// hetcommCommShrink and hetcommCommRevoke through the public C API, ranks as threads. A "lost" rank here is one
// whose communicator was aborted: its connections and its hold on the store end, as when its process dies (the
// process-level kill -9 runs in tests/integration/shrink_check.cc).
#include <gtest/gtest.h>
#include <hetcomm/hetcomm.h>

#include <string>
#include <thread>
#include <vector>

#include "api_test_util.h"

namespace hetcomm_test {
namespace {

constexpr int kTimeoutSec = 20;

// Each listed rank shrinks comms[r] with its exclude list, at the same time. rc and newcomm per listed rank.
struct ShrinkResults {
  std::vector<hetcommResult_t> rc;
  std::vector<std::string> msg;
  Comms out;
};
void shrinkAll(ShrinkResults& res, const Comms& comms, const std::vector<int>& callers,
               const std::vector<std::vector<int>>& exclude, int flags) {
  res.rc.assign(callers.size(), hetcommInternalError);
  res.msg.resize(callers.size());
  res.out.c.assign(callers.size(), nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < callers.size(); ++i)
    threads.emplace_back([&, i] {
      const std::vector<int>& ex = exclude[i];
      res.rc[i] =
          hetcommCommShrink(comms[callers[i]], ex.data(), static_cast<int>(ex.size()), &res.out.c[i], nullptr, flags);
      res.msg[i] = lastError();
    });
  for (auto& t : threads) t.join();
}

// Every communicator in comms sums its rank + 1 with the others.
void expectAllReduceWorks(const Comms& comms) {
  const int n = comms.size();
  std::vector<int> v(n);
  ASSERT_EQ(hetcommGroupStart(), hetcommSuccess);
  for (int i = 0; i < n; ++i) {
    int rank = -1, count = -1;
    HC_ASSERT_OK(hetcommCommUserRank(comms[i], &rank));
    HC_ASSERT_OK(hetcommCommCount(comms[i], &count));
    EXPECT_EQ(count, n);
    v[i] = rank + 1;
    HC_ASSERT_OK(hetcommAllReduce(&v[i], &v[i], 1, hetcommInt32, hetcommSum, comms[i], nullptr));
  }
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int i = 0; i < n; ++i) EXPECT_EQ(v[i], n * (n + 1) / 2) << "rank " << i;
}

TEST(Shrink, SurvivorsOfALostRankGoOnWithoutIt) {
  Comms comms;
  initWithTimeout(comms, 4, kTimeoutSec);
  // Rank 2 is lost while ranks 0, 1 and 3 wait for it in an all-reduce.
  HC_ASSERT_OK(hetcommCommAbort(comms.c[2]));
  comms.c[2] = nullptr;
  std::vector<int> v(4, 1);
  std::vector<hetcommResult_t> rc(4, hetcommSuccess);
  std::vector<std::thread> threads;
  for (int r : {0, 1, 3})
    threads.emplace_back(
        [&, r] { rc[r] = hetcommAllReduce(&v[r], &v[r], 1, hetcommInt32, hetcommSum, comms[r], nullptr); });
  for (auto& t : threads) t.join();
  for (int r : {0, 1, 3}) EXPECT_NE(rc[r], hetcommSuccess) << "rank " << r;

  ShrinkResults s;
  shrinkAll(s, comms, {0, 1, 3}, {{}, {}, {}}, HETCOMM_SHRINK_ABORT);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(s.rc[i], hetcommSuccess) << "caller " << i << ": " << s.msg[i];
  for (size_t i = 0; i < 3; ++i) {
    int rank = -1;
    HC_ASSERT_OK(hetcommCommUserRank(s.out[i], &rank));
    EXPECT_EQ(rank, static_cast<int>(i)) << "old ranks 0, 1, 3 become 0, 1, 2";
  }
  expectAllReduceWorks(s.out);
}

TEST(Shrink, ExcludedRanksAreLeftOutThoughAlive) {
  Comms comms;
  initWithTimeout(comms, 4, kTimeoutSec);
  ShrinkResults s;
  shrinkAll(s, comms, {0, 2, 3}, {{1}, {1}, {1}}, HETCOMM_SHRINK_DEFAULT);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(s.rc[i], hetcommSuccess) << "caller " << i << ": " << s.msg[i];
  expectAllReduceWorks(s.out);
  // The parent is untouched by a default shrink: all four still reduce together.
  expectAllReduceWorks(comms);
}

TEST(Shrink, ARankThatAnotherExcludedIsToldSo) {
  Comms comms;
  initWithTimeout(comms, 3, kTimeoutSec);
  // Rank 0 leaves rank 1 out; rank 1 calls anyway.
  ShrinkResults s;
  shrinkAll(s, comms, {0, 1, 2}, {{1}, {}, {}}, HETCOMM_SHRINK_DEFAULT);
  EXPECT_EQ(s.rc[0], hetcommSuccess) << s.msg[0];
  EXPECT_EQ(s.rc[2], hetcommSuccess) << s.msg[2];
  EXPECT_EQ(s.rc[1], hetcommRemoteError);
  EXPECT_NE(s.msg[1].find("was left out of shrink"), std::string::npos) << s.msg[1];
  EXPECT_EQ(s.out[1], nullptr);
  Comms two;
  two.c = {s.out.c[0], s.out.c[2]};
  s.out.c = {};
  expectAllReduceWorks(two);
}

TEST(Shrink, ShrinkingTwiceAfterTwoLosses) {
  Comms comms;
  initWithTimeout(comms, 4, kTimeoutSec);
  HC_ASSERT_OK(hetcommCommAbort(comms.c[3]));
  comms.c[3] = nullptr;
  ShrinkResults first;
  shrinkAll(first, comms, {0, 1, 2}, {{}, {}, {}}, HETCOMM_SHRINK_ABORT);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(first.rc[i], hetcommSuccess) << first.msg[i];
  HC_ASSERT_OK(hetcommCommAbort(first.out.c[0]));
  first.out.c[0] = nullptr;
  ShrinkResults second;
  shrinkAll(second, first.out, {1, 2}, {{}, {}}, HETCOMM_SHRINK_ABORT);
  for (size_t i = 0; i < 2; ++i) ASSERT_EQ(second.rc[i], hetcommSuccess) << second.msg[i];
  expectAllReduceWorks(second.out);
}

TEST(Shrink, BadArgumentsAreRefused) {
  Comms comms;
  initWithTimeout(comms, 2, kTimeoutSec);
  hetcommComm_t out = nullptr;
  auto expectError = [&](hetcommResult_t rc, hetcommResult_t code, const std::string& phrase) {
    EXPECT_EQ(rc, code) << lastError();
    EXPECT_NE(lastError().find(phrase), std::string::npos) << lastError();
  };
  int self = 0, far = 7, twice[2] = {1, 1};
  expectError(hetcommCommShrink(comms[0], &self, 1, &out, nullptr, 0), hetcommInvalidArgument, "is this rank");
  expectError(hetcommCommShrink(comms[0], &far, 1, &out, nullptr, 0), hetcommInvalidArgument, "not a rank");
  expectError(hetcommCommShrink(comms[0], twice, 2, &out, nullptr, 0), hetcommInvalidArgument, "listed twice");
  expectError(hetcommCommShrink(comms[0], nullptr, 1, &out, nullptr, 0), hetcommInvalidArgument, "NULL");
  expectError(hetcommCommShrink(comms[0], nullptr, -1, &out, nullptr, 0), hetcommInvalidArgument, "negative");
  expectError(hetcommCommShrink(comms[0], nullptr, 0, &out, nullptr, 5), hetcommInvalidArgument, "shrinkFlags");
  expectError(hetcommCommShrink(comms[0], nullptr, 0, nullptr, nullptr, 0), hetcommInvalidArgument, "newcomm");
  expectError(hetcommCommRevoke(comms[0], 3), hetcommInvalidArgument, "revokeFlags");
  expectAllReduceWorks(comms);  // nothing above touched the communicators
}

TEST(Revoke, FailsWhatWaitsAndEverythingAfterOnEveryRank) {
  Comms comms;
  initWithTimeout(comms, 2, kTimeoutSec);
  int v = 1;
  hetcommResult_t waiting = hetcommSuccess;
  // Rank 1 waits for rank 0, which revokes instead of joining.
  std::thread t([&] { waiting = hetcommAllReduce(&v, &v, 1, hetcommInt32, hetcommSum, comms[1], nullptr); });
  HC_ASSERT_OK(hetcommCommRevoke(comms[0], 0));
  t.join();
  EXPECT_EQ(waiting, hetcommRemoteError) << lastError();
  int w = 1;
  EXPECT_NE(hetcommAllReduce(&w, &w, 1, hetcommInt32, hetcommSum, comms[0], nullptr), hetcommSuccess);
  EXPECT_NE(lastError().find("revoked"), std::string::npos) << lastError();
  // Both can still be shrunk into a working communicator.
  ShrinkResults s;
  shrinkAll(s, comms, {0, 1}, {{}, {}}, HETCOMM_SHRINK_DEFAULT);
  for (size_t i = 0; i < 2; ++i) ASSERT_EQ(s.rc[i], hetcommSuccess) << s.msg[i];
  expectAllReduceWorks(s.out);
}

}  // namespace
}  // namespace hetcomm_test
