// The public C API doing real work, ranks as threads in one process (hetcommCommInitAll): every collective on 1,
// 2, 3 and 4 ranks, driven from one thread inside hetcommGroupStart/End (one call per communicator), streams,
// CommSplit from threads, non-blocking init, finalize. Includes only <hetcomm/hetcomm.h>.
#include <gtest/gtest.h>
#include <hetcomm/hetcomm.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "api_test_util.h"

namespace hetcomm_test {
namespace {

class ApiCollectives : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    n_ = GetParam();
    ASSERT_NO_FATAL_FAILURE(initAll(comms_, n_));
  }
  // One thread per rank, each with a stream of its own: body(rank, stream, why) leaves in why what went wrong.
  void onEveryRank(const std::function<void(int, hetcommStream_t, std::string&)>& body) {
    std::vector<hetcommStream_t> streams(n_, nullptr);
    for (auto& s : streams) HC_ASSERT_OK(hetcommStreamCreate(&s));
    std::vector<std::string> why(n_);
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r) threads.emplace_back([&, r] { body(r, streams[r], why[r]); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n_; ++r) EXPECT_EQ(why[r], "") << "rank " << r;
    for (auto s : streams) HC_EXPECT_OK(hetcommStreamDestroy(s));
  }
  int n_ = 0;
  Comms comms_;
};

TEST_P(ApiCollectives, CountAndRank) {
  for (int r = 0; r < n_; ++r) {
    int count = -1, rank = -1;
    HC_ASSERT_OK(hetcommCommCount(comms_[r], &count));
    HC_ASSERT_OK(hetcommCommUserRank(comms_[r], &rank));
    EXPECT_EQ(count, n_);
    EXPECT_EQ(rank, r);
  }
}

TEST_P(ApiCollectives, AllReduceSumOutOfPlaceAndMaxInPlace) {
  const size_t count = 1031;
  std::vector<std::vector<float>> send(n_, std::vector<float>(count)), recv(n_, std::vector<float>(count, -99.f));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<float>((r + 1) * (static_cast<int>(i % 13) - 6));
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)
    HC_ASSERT_OK(
        hetcommAllReduce(send[r].data(), recv[r].data(), count, hetcommFloat32, hetcommSum, comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  const float ranksum = static_cast<float>(n_ * (n_ + 1) / 2);
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(recv[r][i], (static_cast<int>(i % 13) - 6) * ranksum) << "rank " << r << " element " << i;

  std::vector<std::vector<int32_t>> buf(n_, std::vector<int32_t>(count));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<int32_t>((r * 7 + i) % 11) - 5;
  std::vector<int32_t> want(count, INT32_MIN);
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) want[i] = std::max(want[i], buf[r][i]);
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)
    HC_ASSERT_OK(hetcommAllReduce(buf[r].data(), buf[r].data(), count, hetcommInt32, hetcommMax, comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int r = 0; r < n_; ++r) EXPECT_EQ(buf[r], want) << "rank " << r;
}

TEST_P(ApiCollectives, Broadcast) {
  const size_t count = 1001;
  const int root = n_ - 1;
  std::vector<int64_t> src(count);
  for (size_t i = 0; i < count; ++i) src[i] = static_cast<int64_t>(i * i) - 500000;
  std::vector<std::vector<int64_t>> recv(n_, std::vector<int64_t>(count, -1));
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)  // sendbuff matters only at the root: NULL elsewhere, as NCCL allows
    HC_ASSERT_OK(hetcommBroadcast(r == root ? src.data() : nullptr, recv[r].data(), count, hetcommInt64, root,
                                  comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int r = 0; r < n_; ++r) EXPECT_EQ(recv[r], src) << "rank " << r;
}

TEST_P(ApiCollectives, ReduceToAMiddleRoot) {
  const size_t count = 513;
  const int root = n_ / 2;
  std::vector<std::vector<double>> send(n_, std::vector<double>(count));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) send[r][i] = 0.5 * r + static_cast<double>(i);
  std::vector<double> out(count, -1), want(count, 0);
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) want[i] += send[r][i];
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)  // recvbuff matters only at the root
    HC_ASSERT_OK(hetcommReduce(send[r].data(), r == root ? out.data() : nullptr, count, hetcommFloat64, hetcommSum,
                               root, comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  EXPECT_EQ(out, want);
}

TEST_P(ApiCollectives, AllGather) {
  const size_t count = 5;
  std::vector<std::vector<uint8_t>> send(n_, std::vector<uint8_t>(count)),
      recv(n_, std::vector<uint8_t>(count * n_, 0xee));
  std::vector<uint8_t> want(count * n_);
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) want[r * count + i] = send[r][i] = static_cast<uint8_t>(r * 16 + i);
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)
    HC_ASSERT_OK(hetcommAllGather(send[r].data(), recv[r].data(), count, hetcommUint8, comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int r = 0; r < n_; ++r) EXPECT_EQ(recv[r], want) << "rank " << r;
}

TEST_P(ApiCollectives, ReduceScatter) {
  const size_t count = 7;
  std::vector<std::vector<int32_t>> send(n_, std::vector<int32_t>(count * n_)),
      recv(n_, std::vector<int32_t>(count, -1));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count * n_; ++i) send[r][i] = static_cast<int32_t>(r * 1000 + i);
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)
    HC_ASSERT_OK(
        hetcommReduceScatter(send[r].data(), recv[r].data(), count, hetcommInt32, hetcommSum, comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) {
      int32_t want = 0;
      for (int q = 0; q < n_; ++q) want += send[q][r * count + i];
      EXPECT_EQ(recv[r][i], want) << "rank " << r << " element " << i;
    }
}

TEST_P(ApiCollectives, AlltoAll) {
  const size_t count = 3;
  std::vector<std::vector<int32_t>> send(n_, std::vector<int32_t>(count * n_)),
      recv(n_, std::vector<int32_t>(count * n_, -1));
  for (int r = 0; r < n_; ++r)
    for (int j = 0; j < n_; ++j)
      for (size_t k = 0; k < count; ++k) send[r][j * count + k] = r * 100 + j * 10 + static_cast<int32_t>(k);
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)
    HC_ASSERT_OK(hetcommAlltoAll(send[r].data(), recv[r].data(), count, hetcommInt32, comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int r = 0; r < n_; ++r)
    for (int i = 0; i < n_; ++i)
      for (size_t k = 0; k < count; ++k)
        EXPECT_EQ(recv[r][i * count + k], i * 100 + r * 10 + static_cast<int32_t>(k)) << "rank " << r;
}

TEST_P(ApiCollectives, SendRecvRing) {
  // Each rank sends to the next and receives from the previous; on 1 rank that is a send to self.
  const size_t count = 1000;
  std::vector<std::vector<float>> send(n_, std::vector<float>(count)), recv(n_, std::vector<float>(count, -1));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<float>(r * 10000 + i);
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r) {
    HC_ASSERT_OK(hetcommSend(send[r].data(), count, hetcommFloat32, (r + 1) % n_, comms_[r], nullptr));
    HC_ASSERT_OK(hetcommRecv(recv[r].data(), count, hetcommFloat32, (r + n_ - 1) % n_, comms_[r], nullptr));
  }
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int r = 0; r < n_; ++r) EXPECT_EQ(recv[r], send[(r + n_ - 1) % n_]) << "rank " << r;
}

TEST_P(ApiCollectives, CountZeroWithNullBuffers) {
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r) {
    HC_ASSERT_OK(hetcommAllReduce(nullptr, nullptr, 0, hetcommFloat32, hetcommSum, comms_[r], nullptr));
    HC_ASSERT_OK(hetcommAllGather(nullptr, nullptr, 0, hetcommInt8, comms_[r], nullptr));
  }
  HC_ASSERT_OK(hetcommGroupEnd());
  // And the communicators still do real work afterwards.
  std::vector<int> v(n_, 1);
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)
    HC_ASSERT_OK(hetcommAllReduce(&v[r], &v[r], 1, hetcommInt32, hetcommSum, comms_[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  for (int r = 0; r < n_; ++r) EXPECT_EQ(v[r], n_);
}

TEST_P(ApiCollectives, AsyncAllReduceOnStreamsInsideAGroup) {
  const size_t count = 4099;
  std::vector<hetcommStream_t> streams(n_, nullptr);
  for (auto& s : streams) HC_ASSERT_OK(hetcommStreamCreate(&s));
  std::vector<std::vector<int32_t>> buf(n_, std::vector<int32_t>(count));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<int32_t>(i) + r;
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n_; ++r)
    HC_ASSERT_OK(
        hetcommAllReduce(buf[r].data(), buf[r].data(), count, hetcommInt32, hetcommSum, comms_[r], streams[r]));
  HC_ASSERT_OK(hetcommGroupEnd());  // returns once queued
  for (int r = 0; r < n_; ++r) {
    hetcommResult_t q = hetcommStreamQuery(streams[r]);
    EXPECT_TRUE(q == hetcommSuccess || q == hetcommInProgress) << q << ": " << lastError();
  }
  for (int r = 0; r < n_; ++r) HC_ASSERT_OK(hetcommStreamSynchronize(streams[r]));
  for (int r = 0; r < n_; ++r) {
    EXPECT_EQ(hetcommStreamQuery(streams[r]), hetcommSuccess);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(buf[r][i], static_cast<int32_t>(n_ * i + n_ * (n_ - 1) / 2)) << "rank " << r << " element " << i;
  }
  for (auto s : streams) HC_EXPECT_OK(hetcommStreamDestroy(s));
}

TEST_P(ApiCollectives, StreamRunsItsOperationsInIssueOrder) {
  // Without a group: each call on a stream returns at once, so one thread can issue every rank's calls. Two
  // in-place sums in a row must run in order: x -> n x -> n^2 x.
  const size_t count = 257;
  std::vector<hetcommStream_t> streams(n_, nullptr);
  for (auto& s : streams) HC_ASSERT_OK(hetcommStreamCreate(&s));
  std::vector<std::vector<int64_t>> buf(n_, std::vector<int64_t>(count));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<int64_t>(i + 1);
  for (int round = 0; round < 2; ++round)
    for (int r = 0; r < n_; ++r)
      HC_ASSERT_OK(
          hetcommAllReduce(buf[r].data(), buf[r].data(), count, hetcommInt64, hetcommSum, comms_[r], streams[r]));
  for (int r = 0; r < n_; ++r) HC_ASSERT_OK(hetcommStreamSynchronize(streams[r]));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[r][i], static_cast<int64_t>((i + 1) * n_ * n_)) << r << "," << i;
  for (auto s : streams) HC_EXPECT_OK(hetcommStreamDestroy(s));
}

TEST_P(ApiCollectives, BlockingCallsFromOneThreadPerRank) {
  const size_t count = 300;
  std::vector<std::vector<float>> buf(n_, std::vector<float>(count));
  std::vector<hetcommResult_t> rc(n_, hetcommInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < n_; ++r)
    threads.emplace_back([&, r] {
      std::fill(buf[r].begin(), buf[r].end(), static_cast<float>(r + 1));
      rc[r] = hetcommAllReduce(buf[r].data(), buf[r].data(), count, hetcommFloat32, hetcommSum, comms_[r], nullptr);
      if (rc[r] == hetcommSuccess)
        rc[r] = hetcommBroadcast(buf[r].data(), buf[r].data(), count, hetcommFloat32, 0, comms_[r], nullptr);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n_; ++r) {
    EXPECT_EQ(rc[r], hetcommSuccess) << "rank " << r;
    EXPECT_EQ(buf[r], std::vector<float>(count, static_cast<float>(n_ * (n_ + 1) / 2)));
  }
}

// A lone blocking send or receive runs on the calling thread while nothing else is queued on its communicator; one
// that waits longer (its peer is late) becomes the communicator's current operation; one behind an asynchronous
// collective on a stream waits for it. Every way, each message arrives whole, in order, and the collective's sum is
// right. Ranks are threads in a ring: even ranks send first, odd ranks receive first.
TEST_P(ApiCollectives, LoneBlockingSendsAndReceivesWhateverIsAheadOfThem) {
  if (n_ < 2) GTEST_SKIP() << "sends to another rank";
  onEveryRank([&](int r, hetcommStream_t stream, std::string& why) {
    const int next = (r + 1) % n_, prev = (r + n_ - 1) % n_;
    auto ok = [&](hetcommResult_t rc, const char* what, int k) {
      if (rc != hetcommSuccess && why.empty()) why = std::string(what) + " #" + std::to_string(k) + ": " + lastError();
      return rc == hetcommSuccess;
    };
    for (int k = 0; k < 200 && why.empty(); ++k) {
      const size_t count = 1 + (static_cast<size_t>(k) * 37) % 3000;
      std::vector<int32_t> out(count), in(count, -1);
      for (size_t i = 0; i < count; ++i) out[i] = r * 1000000 + k * 1000 + static_cast<int32_t>(i % 1000);
      std::vector<int64_t> sum(5, r + 1);
      const bool queuedAhead = k % 40 == 20;
      if (queuedAhead &&
          !ok(hetcommAllReduce(sum.data(), sum.data(), sum.size(), hetcommInt64, hetcommSum, comms_[r], stream),
              "allreduce", k))
        return;
      if (k % 50 == 49 && r % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a late sender
      auto send = [&] { return ok(hetcommSend(out.data(), count, hetcommInt32, next, comms_[r], nullptr), "send", k); };
      auto recv = [&] { return ok(hetcommRecv(in.data(), count, hetcommInt32, prev, comms_[r], nullptr), "recv", k); };
      if (!(r % 2 == 0 ? send() && recv() : recv() && send())) return;
      for (size_t i = 0; i < count; ++i)
        if (in[i] != prev * 1000000 + k * 1000 + static_cast<int32_t>(i % 1000)) {
          why = "message #" + std::to_string(k) + " element " + std::to_string(i) + " is wrong";
          return;
        }
      if (queuedAhead) {
        if (!ok(hetcommStreamSynchronize(stream), "synchronize", k)) return;
        if (sum != std::vector<int64_t>(5, n_ * (n_ + 1) / 2)) why = "allreduce #" + std::to_string(k) + " is wrong";
      }
    }
  });
}

// Small blocking allreduces, one thread per rank (on one host they run in the host slots, on the calling thread
// while nothing else is queued): whether a rank is late (the others hand their call over to the engine's passes)
// or an asynchronous one is queued ahead, every sum is right.
TEST_P(ApiCollectives, SmallBlockingAllReducesWithALateRankOrOneQueuedAhead) {
  onEveryRank([&](int r, hetcommStream_t stream, std::string& why) {
    for (int k = 0; k < 150 && why.empty(); ++k) {
      const size_t count = 1 + (static_cast<size_t>(k) * 53) % 4096;
      std::vector<int32_t> buf(count), ahead(7, r + 1);
      for (size_t i = 0; i < count; ++i) buf[i] = r * 100 + k + static_cast<int32_t>(i % 7);
      const bool queuedAhead = k % 30 == 15;
      if (queuedAhead && hetcommAllReduce(ahead.data(), ahead.data(), ahead.size(), hetcommInt32, hetcommSum,
                                          comms_[r], stream) != hetcommSuccess) {
        why = "allreduce on the stream #" + std::to_string(k) + ": " + lastError();
        return;
      }
      if (k % 50 == 49 && r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a late rank
      if (hetcommAllReduce(buf.data(), buf.data(), count, hetcommInt32, hetcommSum, comms_[r], nullptr) !=
          hetcommSuccess) {
        why = "allreduce #" + std::to_string(k) + ": " + lastError();
        return;
      }
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != 100 * n_ * (n_ - 1) / 2 + n_ * (k + static_cast<int32_t>(i % 7))) {
          why = "allreduce #" + std::to_string(k) + " element " + std::to_string(i) + " is wrong";
          return;
        }
      if (queuedAhead) {
        if (hetcommStreamSynchronize(stream) != hetcommSuccess) why = "synchronize: " + lastError();
        if (ahead != std::vector<int32_t>(7, n_ * (n_ + 1) / 2)) why = "the allreduce on the stream is wrong";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ApiCollectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

// ---- communicator life ----

TEST(ApiComm, SplitFromThreads) {
  const int n = 4;
  Comms parent;
  ASSERT_NO_FATAL_FAILURE(initAll(parent, n));
  Comms child;
  child.c.assign(n, nullptr);
  std::vector<hetcommResult_t> rc(n, hetcommInternalError);
  std::vector<int> sums(n, -1), childRank(n, -1), childCount(n, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      // Even and odd ranks; key -r reverses the order within each half.
      rc[r] = hetcommCommSplit(parent[r], r % 2, -r, &child.c[r], nullptr);
      if (rc[r] != hetcommSuccess) return;
      hetcommCommCount(child.c[r], &childCount[r]);
      hetcommCommUserRank(child.c[r], &childRank[r]);
      int v = r;
      rc[r] = hetcommAllReduce(&v, &sums[r], 1, hetcommInt32, hetcommSum, child.c[r], nullptr);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(rc[r], hetcommSuccess);
    EXPECT_EQ(childCount[r], 2);
    EXPECT_EQ(childRank[r], r < 2 ? 1 : 0);  // {2, 0} and {3, 1}
    EXPECT_EQ(sums[r], r % 2 == 0 ? 0 + 2 : 1 + 3);
  }
  // The parent still works.
  std::vector<int> v(n, 1);
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n; ++r)
    HC_ASSERT_OK(hetcommAllReduce(&v[r], &v[r], 1, hetcommInt32, hetcommSum, parent[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  EXPECT_EQ(v, std::vector<int>(n, n));
}

// hetcommCommPredict over every rank of the communicator is what the communicator itself chooses and predicts.
TEST(ApiComm, PredictForTheWholeGroupIsWhatTheCommunicatorChooses) {
  const int n = 4;
  Comms comms;
  ASSERT_NO_FATAL_FAILURE(initAll(comms, n));
  const int all[n] = {0, 1, 2, 3};
  for (hetcommCollective_t coll : {hetcommCollAllReduce, hetcommCollBroadcast, hetcommCollReduce, hetcommCollAllGather,
                                   hetcommCollReduceScatter, hetcommCollAlltoAll})
    for (size_t count : {size_t{1}, size_t{1} << 12, size_t{1} << 22}) {
      SCOPED_TRACE("collective " + std::to_string(coll) + ", count " + std::to_string(count));
      char chosen[32], predicted[32];
      double chosenUs = -1, predictedUs = -2;
      HC_ASSERT_OK(hetcommCommGetAlgorithm(comms[0], coll, count, hetcommFloat32, chosen, sizeof chosen, &chosenUs));
      HC_ASSERT_OK(
          hetcommCommPredict(comms[0], coll, count, hetcommFloat32, all, n, predicted, sizeof predicted, &predictedUs));
      EXPECT_STREQ(chosen, predicted);
      EXPECT_DOUBLE_EQ(chosenUs, predictedUs);
    }
}

TEST(ApiComm, PredictForSubgroupsAndSends) {
  const int n = 4;
  Comms comms;
  ASSERT_NO_FATAL_FAILURE(initAll(comms, n));
  const int pair[2] = {3, 1};
  char name[32];
  double small = 0, large = 0;
  HC_ASSERT_OK(
      hetcommCommPredict(comms[0], hetcommCollSendRecv, 1, hetcommFloat32, pair, 2, name, sizeof name, &small));
  EXPECT_STREQ(name, "direct");
  HC_ASSERT_OK(hetcommCommPredict(comms[0], hetcommCollSendRecv, 1 << 20, hetcommFloat32, pair, 2, nullptr, 0, &large));
  EXPECT_GT(small, 0);
  EXPECT_GT(large, small);  // 4 MiB over the link take longer than 4 bytes
  // A group the caller is not in, of one rank: nothing to move.
  const int one[1] = {2};
  double alone = -1;
  HC_ASSERT_OK(hetcommCommPredict(comms[0], hetcommCollAllReduce, 1 << 20, hetcommFloat32, one, 1, nullptr, 0, &alone));
  EXPECT_GE(alone, 0);
  double pairUs = 0;
  HC_ASSERT_OK(
      hetcommCommPredict(comms[0], hetcommCollAllGather, 1 << 20, hetcommFloat32, pair, 2, nullptr, 0, &pairUs));
  EXPECT_GT(pairUs, 0);
}

TEST(ApiComm, PredictRefusesBadGroupsNamingThem) {
  const int n = 3;
  Comms comms;
  ASSERT_NO_FATAL_FAILURE(initAll(comms, n));
  double us = 0;
  auto refused = [&](const int* ranks, int count, hetcommCollective_t coll, const char* what) {
    EXPECT_EQ(hetcommCommPredict(comms[0], coll, 16, hetcommFloat32, ranks, count, nullptr, 0, &us),
              hetcommInvalidArgument)
        << what;
    EXPECT_NE(lastError().find(what), std::string::npos) << lastError();
  };
  const int outOfRange[2] = {0, 3}, twice[3] = {1, 0, 1}, one[1] = {0};
  refused(outOfRange, 2, hetcommCollAllReduce, "ranks[1] = 3 is not a rank of this communicator (0..2)");
  refused(twice, 3, hetcommCollAllReduce, "ranks[2] = 1 is listed twice");
  refused(one, 0, hetcommCollAllReduce, "nranks is 0");
  refused(nullptr, 2, hetcommCollAllReduce, "ranks is NULL");
  refused(one, 1, hetcommCollSendRecv, "a send needs a group of 2 ranks at least");
  refused(one, 1, static_cast<hetcommCollective_t>(7), "collective 7 is not a hetcommCollective_t");
  EXPECT_EQ(hetcommCommGetAlgorithm(comms[0], hetcommCollSendRecv, 16, hetcommFloat32, nullptr, 0, &us),
            hetcommInvalidArgument);
  EXPECT_NE(lastError().find("only hetcommCommPredict takes sendrecv"), std::string::npos) << lastError();
}

// A model communicator: the cluster a description gives, for planning, with nothing running behind it.
TEST(ApiComm, ModelCommunicatorAnswersPlanningCallsAndRefusesOperations) {
  const char* cluster = R"({"name": "m", "ranksPerHost": 2, "hosts": [
      {"name": "a", "nics": [{"name": "ib0", "kind": "ib", "rateMbps": 8000, "fabric": "ib"},
                             {"name": "eth0", "kind": "eth", "rateMbps": 1000, "fabric": "eth"}],
       "gpus": [{"model": "fast", "peakTflops": 100, "memoryBytes": "8G", "count": 2}]},
      {"name": "b", "nics": [{"name": "ib0", "kind": "ib", "rateMbps": 8000, "fabric": "ib"},
                             {"name": "eth0", "kind": "eth", "rateMbps": 1000, "fabric": "eth"}]},
      {"name": "c", "ranks": 1, "nics": [{"name": "eth0", "kind": "eth", "rateMbps": 1000, "fabric": "eth"}]}]})";
  hetcommComm_t m = nullptr;
  HC_ASSERT_OK(hetcommCommInitModel(&m, cluster));
  int n = 0, me = -1;
  HC_ASSERT_OK(hetcommCommCount(m, &n));
  HC_ASSERT_OK(hetcommCommUserRank(m, &me));
  EXPECT_EQ(n, 5);
  EXPECT_EQ(me, 0);
  int host = -1, island = -1;
  HC_ASSERT_OK(hetcommCommRankPlacement(m, 3, &host, &island));
  EXPECT_EQ(host, 1);
  int hostC = -1, islandC = -1;
  HC_ASSERT_OK(hetcommCommRankPlacement(m, 4, &hostC, &islandC));
  EXPECT_EQ(hostC, 2);
  EXPECT_NE(islandC, island);  // c is on Ethernet only
  double peak = 0;
  size_t memory = 0;
  HC_ASSERT_OK(hetcommCommRankDevice(m, 1, &peak, &memory));
  EXPECT_EQ(peak, 100);
  EXPECT_EQ(memory, size_t{8} << 30);
  HC_ASSERT_OK(hetcommCommRankDevice(m, 2, &peak, &memory));
  EXPECT_EQ(peak, 0);  // host b declares no GPU
  // Predictions follow the nominal rates: 64 MiB between the InfiniBand hosts beat the Ethernet host.
  const int overIb[2] = {0, 2}, overEth[2] = {0, 4};
  double ib = 0, eth = 0;
  HC_ASSERT_OK(hetcommCommPredict(m, hetcommCollSendRecv, 16 << 20, hetcommFloat32, overIb, 2, nullptr, 0, &ib));
  HC_ASSERT_OK(hetcommCommPredict(m, hetcommCollSendRecv, 16 << 20, hetcommFloat32, overEth, 2, nullptr, 0, &eth));
  EXPECT_GT(eth, 6 * ib);
  EXPECT_NEAR(eth, 64.0 * (1 << 20) * 8 / 1000e6 * 1e6, 0.15 * eth);  // 64 MiB at 1 Gbit/s
  float x = 1;
  EXPECT_EQ(hetcommAllReduce(&x, &x, 1, hetcommFloat32, hetcommSum, m, nullptr), hetcommInvalidUsage);
  EXPECT_NE(lastError().find("runs no operations"), std::string::npos) << lastError();
  EXPECT_EQ(hetcommCommFinalize(m), hetcommInvalidUsage);
  hetcommComm_t child = nullptr;
  EXPECT_EQ(hetcommCommSplit(m, 0, 0, &child, nullptr), hetcommInvalidUsage);
  HC_ASSERT_OK(hetcommCommDestroy(m));

  EXPECT_EQ(hetcommCommInitModel(&m, R"({"name": "x", "hosts": [{"name": "a", "nics": []}]})"), hetcommInvalidArgument);
  EXPECT_NE(lastError().find("$.hosts[0].nics"), std::string::npos) << lastError();
  EXPECT_EQ(hetcommCommInitModel(&m, "{"), hetcommInvalidArgument);
  EXPECT_EQ(hetcommCommInitModel(&m, nullptr), hetcommInvalidArgument);
  EXPECT_EQ(hetcommCommInitModel(nullptr, cluster), hetcommInvalidArgument);
}

TEST(ApiComm, SplitWithNoColorGivesNull) {
  const int n = 3;
  Comms parent;
  ASSERT_NO_FATAL_FAILURE(initAll(parent, n));
  Comms child;
  child.c.assign(n, reinterpret_cast<hetcommComm_t>(0x1));  // must be overwritten, also with NULL
  std::vector<hetcommResult_t> rc(n, hetcommInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back(
        [&, r] { rc[r] = hetcommCommSplit(parent[r], r == 2 ? HETCOMM_SPLIT_NOCOLOR : 0, r, &child.c[r], nullptr); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_EQ(rc[r], hetcommSuccess) << r;
  EXPECT_EQ(child[2], nullptr);
  ASSERT_NE(child[0], nullptr);
  int count = 0;
  HC_ASSERT_OK(hetcommCommCount(child[0], &count));
  EXPECT_EQ(count, 2);
}

TEST(ApiComm, InitRankFromThreadsThenFinalizeAndDestroy) {
  const int n = 3;
  hetcommUniqueId id;
  HC_ASSERT_OK(hetcommGetUniqueId(&id));
  std::vector<hetcommComm_t> comms(n, nullptr);
  std::vector<hetcommResult_t> init(n), fin(n), destroy(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      init[r] = hetcommCommInitRank(&comms[r], n, id, r);
      if (init[r] != hetcommSuccess) return;
      int v = 1;
      hetcommAllReduce(&v, &v, 1, hetcommInt32, hetcommSum, comms[r], nullptr);
      fin[r] = hetcommCommFinalize(comms[r]);
      destroy[r] = hetcommCommDestroy(comms[r]);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(init[r], hetcommSuccess) << r;
    EXPECT_EQ(fin[r], hetcommSuccess) << r;
    EXPECT_EQ(destroy[r], hetcommSuccess) << r;
  }
}

TEST(ApiComm, NonBlockingInitFromOneThread) {
  const int n = 2;
  hetcommUniqueId id;
  HC_ASSERT_OK(hetcommGetUniqueId(&id));
  Comms comms;
  comms.c.assign(n, nullptr);
  hetcommConfig_t cfg = HETCOMM_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.timeoutSec = 10;
  ASSERT_EQ(hetcommCommInitRankConfig(&comms.c[0], n, id, 0, &cfg), hetcommInProgress) << lastError();
  ASSERT_NE(comms[0], nullptr);
  // Rank 1 does not exist yet, so rank 0 cannot be ready: operations are refused, not queued.
  hetcommResult_t state = hetcommSuccess;
  HC_ASSERT_OK(hetcommCommGetAsyncError(comms[0], &state));
  EXPECT_EQ(state, hetcommInProgress);
  int v = 1;
  EXPECT_EQ(hetcommAllReduce(&v, &v, 1, hetcommInt32, hetcommSum, comms[0], nullptr), hetcommInvalidUsage);
  EXPECT_NE(lastError().find("still initializing"), std::string::npos) << lastError();
  ASSERT_EQ(hetcommCommInitRankConfig(&comms.c[1], n, id, 1, &cfg), hetcommInProgress) << lastError();
  // Poll until both are ready (bounded).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<hetcommResult_t> st(n, hetcommInProgress);
  while (std::chrono::steady_clock::now() < until && (st[0] == hetcommInProgress || st[1] == hetcommInProgress)) {
    for (int r = 0; r < n; ++r) HC_ASSERT_OK(hetcommCommGetAsyncError(comms[r], &st[r]));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(st[0], hetcommSuccess);
  ASSERT_EQ(st[1], hetcommSuccess);
  std::vector<int> x = {3, 4};
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < n; ++r)
    HC_ASSERT_OK(hetcommAllReduce(&x[r], &x[r], 1, hetcommInt32, hetcommSum, comms[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  EXPECT_EQ(x, (std::vector<int>{7, 7}));
}

TEST(ApiComm, NonBlockingInitThatCannotCompleteReportsTheTimeout) {
  hetcommUniqueId id;
  HC_ASSERT_OK(hetcommGetUniqueId(&id));
  Comms comms;
  comms.c.assign(1, nullptr);
  hetcommConfig_t cfg = HETCOMM_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.timeoutSec = 1;
  // Rank 0 of 2; rank 1 never comes.
  ASSERT_EQ(hetcommCommInitRankConfig(&comms.c[0], 2, id, 0, &cfg), hetcommInProgress) << lastError();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  hetcommResult_t st = hetcommInProgress;
  while (st == hetcommInProgress && std::chrono::steady_clock::now() < until) {
    HC_ASSERT_OK(hetcommCommGetAsyncError(comms[0], &st));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(st, hetcommTimeout);
  int v = 0;
  EXPECT_EQ(hetcommAllReduce(&v, &v, 1, hetcommInt32, hetcommSum, comms[0], nullptr), hetcommTimeout);
  EXPECT_NE(lastError().find("rank 1"), std::string::npos) << lastError();
}

TEST(ApiComm, AbortFreesTheCommunicator) {
  Comms comms;
  ASSERT_NO_FATAL_FAILURE(initAll(comms, 1));
  HC_ASSERT_OK(hetcommCommAbort(comms[0]));
  int count = -1;
  EXPECT_EQ(hetcommCommCount(comms[0], &count), hetcommInvalidUsage);
  EXPECT_EQ(count, -1);
  comms.c[0] = nullptr;  // already freed
}

TEST(ApiComm, VersionAndErrorStrings) {
  int version = -1;
  HC_ASSERT_OK(hetcommGetVersion(&version));
  EXPECT_EQ(version, HETCOMM_VERSION_CODE);
  EXPECT_EQ(version, HETCOMM_MAJOR * 10000 + HETCOMM_MINOR * 100 + HETCOMM_PATCH);
  std::vector<std::string> seen;
  for (int r = 0; r < hetcommNumResults; ++r) {
    const char* s = hetcommGetErrorString(static_cast<hetcommResult_t>(r));
    ASSERT_NE(s, nullptr) << r;
    EXPECT_GT(std::strlen(s), 5u) << r;
    EXPECT_STRNE(s, "unknown result code") << r;
    for (const auto& prev : seen) EXPECT_NE(prev, s) << "code " << r << " shares its string";
    seen.push_back(s);
  }
  EXPECT_STREQ(hetcommGetErrorString(hetcommSuccess), "no error");
  EXPECT_NE(std::string(hetcommGetErrorString(hetcommTimeout)).find("HETCOMM_TIMEOUT"), std::string::npos);
  EXPECT_NE(std::string(hetcommGetErrorString(hetcommRemoteError)).find("remote"), std::string::npos);
  EXPECT_STREQ(hetcommGetErrorString(hetcommNumResults), "unknown result code");
  EXPECT_STREQ(hetcommGetErrorString(static_cast<hetcommResult_t>(-1)), "unknown result code");
}

}  // namespace
}  // namespace hetcomm_test
