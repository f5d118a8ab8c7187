// Bad input through the public C API: one test per case, each checking the result code AND that
// hetcommGetLastError(NULL) says what was wrong. Also: a communicator keeps working after an argument error;
// mismatched collectives fail with a clear error, poison only their own communicator, and can be destroyed.
#include <gtest/gtest.h>
#include <hetcomm/hetcomm.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api_test_util.h"

namespace hetcomm_test {
namespace {

// Two ranks made once for the whole suite (argument errors never reach the data path), and a unique id for the
// init cases.
class ApiErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    comms_ = new Comms();
    initAll(*comms_, 2);
    ASSERT_EQ(hetcommGetUniqueId(&id_), hetcommSuccess) << lastError();
  }
  static void TearDownTestSuite() {
    delete comms_;
    comms_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(comms_, nullptr);
    ASSERT_EQ(comms_->size(), 2) << "suite set-up failed";
  }

  // The call failed with `code`, and the last error contains `phrase`.
  static void expectError(hetcommResult_t rc, hetcommResult_t code, const std::string& phrase) {
    EXPECT_EQ(rc, code) << hetcommGetErrorString(rc) << ": " << lastError();
    EXPECT_NE(lastError().find(phrase), std::string::npos) << "last error: \"" << lastError() << "\"";
  }

  static hetcommComm_t c0() { return (*comms_)[0]; }
  static hetcommComm_t c1() { return (*comms_)[1]; }

  // One all-reduce over both ranks: the communicators still work.
  static void expectStillWorks() {
    int a = 5, b = 6;
    HC_ASSERT_OK(hetcommGroupStart());
    HC_ASSERT_OK(hetcommAllReduce(&a, &a, 1, hetcommInt32, hetcommSum, c0(), nullptr));
    HC_ASSERT_OK(hetcommAllReduce(&b, &b, 1, hetcommInt32, hetcommSum, c1(), nullptr));
    HC_ASSERT_OK(hetcommGroupEnd());
    EXPECT_EQ(a, 11);
    EXPECT_EQ(b, 11);
  }

  static Comms* comms_;
  static hetcommUniqueId id_;
  float buf_[64] = {};
};
Comms* ApiErrors::comms_ = nullptr;
hetcommUniqueId ApiErrors::id_;

// ---- NULL buffers ----

// ---- placement ----

TEST_F(ApiErrors, RankPlacementOfBothRanksOfOneProcessIsOneHost) {
  int host = -1, island = -1;
  for (int r = 0; r < 2; ++r) {
    HC_ASSERT_OK(hetcommCommRankPlacement(c1(), r, &host, &island));
    EXPECT_EQ(host, 0);
    EXPECT_EQ(island, 0);
  }
  HC_ASSERT_OK(hetcommCommRankPlacement(c0(), 1, nullptr, nullptr));  // outputs may be NULL
}

TEST_F(ApiErrors, RankPlacementOfARankOutOfRange) {
  int host = 0;
  expectError(hetcommCommRankPlacement(c0(), 2, &host, nullptr), hetcommInvalidArgument, "rank 2");
  expectError(hetcommCommRankPlacement(c0(), -1, &host, nullptr), hetcommInvalidArgument, "in [0, 2)");
}

TEST_F(ApiErrors, RankDeviceWithoutATopologyFileHasNoPeak) {
  double peak = -1;
  HC_ASSERT_OK(hetcommCommRankDevice(c0(), 1, &peak, nullptr));
  EXPECT_EQ(peak, 0.0);  // only a topology file gives a GPU's peak; discovery never guesses one
  HC_ASSERT_OK(hetcommCommRankDevice(c0(), 0, nullptr, nullptr));  // outputs may be NULL
  size_t memory = 0;
  expectError(hetcommCommRankDevice(c1(), 2, &peak, &memory), hetcommInvalidArgument, "rank 2");
  expectError(hetcommCommRankDevice(c1(), -3, &peak, &memory), hetcommInvalidArgument, "in [0, 2)");
}

TEST_F(ApiErrors, AllReduceNullSendbuff) {
  expectError(hetcommAllReduce(nullptr, buf_, 4, hetcommFloat32, hetcommSum, c0(), nullptr), hetcommInvalidArgument,
              "sendbuff is NULL");
}

TEST_F(ApiErrors, AllReduceNullRecvbuff) {
  expectError(hetcommAllReduce(buf_, nullptr, 4, hetcommFloat32, hetcommSum, c0(), nullptr), hetcommInvalidArgument,
              "recvbuff is NULL");
}

TEST_F(ApiErrors, BroadcastNullSendbuffAtTheRoot) {
  expectError(hetcommBroadcast(nullptr, buf_, 4, hetcommFloat32, 0, c0(), nullptr), hetcommInvalidArgument,
              "sendbuff is NULL");
}

TEST_F(ApiErrors, ReduceNullRecvbuffAtTheRoot) {
  expectError(hetcommReduce(buf_, nullptr, 4, hetcommFloat32, hetcommSum, 1, c1(), nullptr), hetcommInvalidArgument,
              "recvbuff is NULL");
}

TEST_F(ApiErrors, AllGatherNullSendbuff) {
  expectError(hetcommAllGather(nullptr, buf_, 4, hetcommFloat32, c0(), nullptr), hetcommInvalidArgument,
              "sendbuff is NULL");
}

TEST_F(ApiErrors, ReduceScatterNullRecvbuff) {
  expectError(hetcommReduceScatter(buf_, nullptr, 4, hetcommFloat32, hetcommSum, c0(), nullptr),
              hetcommInvalidArgument, "recvbuff is NULL");
}

TEST_F(ApiErrors, AlltoAllNullRecvbuff) {
  expectError(hetcommAlltoAll(buf_, nullptr, 4, hetcommFloat32, c0(), nullptr), hetcommInvalidArgument,
              "recvbuff is NULL");
}

TEST_F(ApiErrors, SendNullBuffer) {
  expectError(hetcommSend(nullptr, 4, hetcommFloat32, 1, c0(), nullptr), hetcommInvalidArgument, "sendbuff is NULL");
}

TEST_F(ApiErrors, RecvNullBuffer) {
  expectError(hetcommRecv(nullptr, 4, hetcommFloat32, 1, c0(), nullptr), hetcommInvalidArgument, "recvbuff is NULL");
}

TEST_F(ApiErrors, CountZeroWithNullBuffersIsFine) {
  HC_ASSERT_OK(hetcommGroupStart());
  HC_ASSERT_OK(hetcommAllReduce(nullptr, nullptr, 0, hetcommFloat32, hetcommSum, c0(), nullptr));
  HC_ASSERT_OK(hetcommAllReduce(nullptr, nullptr, 0, hetcommFloat32, hetcommSum, c1(), nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
}

// ---- unknown datatype / op ----

TEST_F(ApiErrors, UnknownDatatype) {
  expectError(hetcommAllReduce(buf_, buf_, 4, static_cast<hetcommDataType_t>(42), hetcommSum, c0(), nullptr),
              hetcommInvalidArgument, "unknown datatype 42");
}

TEST_F(ApiErrors, NegativeDatatype) {
  expectError(hetcommBroadcast(buf_, buf_, 4, static_cast<hetcommDataType_t>(-1), 0, c0(), nullptr),
              hetcommInvalidArgument, "unknown datatype -1");
}

TEST_F(ApiErrors, UnknownDatatypeOnSend) {
  expectError(hetcommSend(buf_, 4, hetcommNumTypes, 1, c0(), nullptr), hetcommInvalidArgument, "unknown datatype");
}

TEST_F(ApiErrors, UnknownOp) {
  expectError(hetcommAllReduce(buf_, buf_, 4, hetcommFloat32, static_cast<hetcommRedOp_t>(9), c0(), nullptr),
              hetcommInvalidArgument, "unknown reduction op 9");
}

TEST_F(ApiErrors, UnknownOpOnReduceScatter) {
  expectError(hetcommReduceScatter(buf_, buf_, 1, hetcommFloat32, hetcommNumOps, c0(), nullptr),
              hetcommInvalidArgument, "unknown reduction op");
}

// ---- ranks ----

TEST_F(ApiErrors, BroadcastRootMinusOne) {
  expectError(hetcommBroadcast(buf_, buf_, 4, hetcommFloat32, -1, c0(), nullptr), hetcommInvalidArgument,
              "root -1 is out of range");
}

TEST_F(ApiErrors, BroadcastRootEqualToNranks) {
  expectError(hetcommBroadcast(buf_, buf_, 4, hetcommFloat32, 2, c0(), nullptr), hetcommInvalidArgument,
              "root 2 is out of range for a communicator of 2 ranks");
}

TEST_F(ApiErrors, ReduceRootMinusOne) {
  expectError(hetcommReduce(buf_, buf_, 4, hetcommFloat32, hetcommSum, -1, c0(), nullptr), hetcommInvalidArgument,
              "root -1 is out of range");
}

TEST_F(ApiErrors, ReduceRootEqualToNranks) {
  expectError(hetcommReduce(buf_, buf_, 4, hetcommFloat32, hetcommSum, 2, c0(), nullptr), hetcommInvalidArgument,
              "root 2 is out of range");
}

TEST_F(ApiErrors, SendToPeerOutOfRange) {
  expectError(hetcommSend(buf_, 4, hetcommFloat32, 2, c0(), nullptr), hetcommInvalidArgument,
              "peer 2 is out of range");
}

TEST_F(ApiErrors, RecvFromNegativePeer) {
  expectError(hetcommRecv(buf_, 4, hetcommFloat32, -1, c0(), nullptr), hetcommInvalidArgument,
              "peer -1 is out of range");
}

// ---- communicator handles ----

TEST_F(ApiErrors, NullComm) {
  expectError(hetcommAllReduce(buf_, buf_, 4, hetcommFloat32, hetcommSum, nullptr, nullptr), hetcommInvalidArgument,
              "comm is NULL");
}

TEST_F(ApiErrors, DestroyedComm) {
  hetcommComm_t c = nullptr;
  HC_ASSERT_OK(hetcommCommInitAll(&c, 1, nullptr));
  HC_ASSERT_OK(hetcommCommDestroy(c));
  expectError(hetcommAllReduce(buf_, buf_, 4, hetcommFloat32, hetcommSum, c, nullptr), hetcommInvalidUsage,
              "not a live communicator");
}

TEST_F(ApiErrors, DestroyTwice) {
  hetcommComm_t c = nullptr;
  HC_ASSERT_OK(hetcommCommInitAll(&c, 1, nullptr));
  HC_ASSERT_OK(hetcommCommDestroy(c));
  expectError(hetcommCommDestroy(c), hetcommInvalidUsage, "not a live communicator");
}

TEST_F(ApiErrors, MadeUpCommHandle) {
  int notAComm = 0;
  expectError(hetcommCommUserRank(reinterpret_cast<hetcommComm_t>(&notAComm), &notAComm), hetcommInvalidUsage,
              "not a live communicator");
}

// ---- groups and self sends ----

TEST_F(ApiErrors, SendToSelfWithoutItsReceiveInTheGroup) {
  HC_ASSERT_OK(hetcommGroupStart());
  HC_ASSERT_OK(hetcommSend(buf_, 4, hetcommFloat32, 0, c0(), nullptr));  // queued until GroupEnd
  expectError(hetcommGroupEnd(), hetcommInvalidUsage, "send(s) to self but 0 receive(s) from self");
  expectStillWorks();
}

TEST_F(ApiErrors, SendToSelfOutsideAGroup) {
  expectError(hetcommSend(buf_, 4, hetcommFloat32, 1, c1(), nullptr), hetcommInvalidUsage, "send(s) to self");
}

TEST_F(ApiErrors, SelfSendAndReceiveOfDifferentSizes) {
  float other[8];
  HC_ASSERT_OK(hetcommGroupStart());
  HC_ASSERT_OK(hetcommSend(buf_, 4, hetcommFloat32, 0, c0(), nullptr));
  HC_ASSERT_OK(hetcommRecv(other, 8, hetcommFloat32, 0, c0(), nullptr));
  expectError(hetcommGroupEnd(), hetcommInvalidUsage, "a send to self of 16 bytes meets a receive from self of 32");
  expectStillWorks();
}

// What a device pointer is in a process without CUDA: an address that is not host memory. It is refused, naming the
// buffer and the reason, before anything reads it; the communicator still works.
TEST_F(ApiErrors, APointerThatIsNotHostMemoryWithoutCudaIsRefused) {
  // Above every address the kernel hands out without an explicit high hint (47 bits on x86-64 and arm64), so no
  // allocator, thread stack or sanitizer runtime can map it while the test runs. (A page that the test unmapped
  // itself could be reused by the next mmap: under TSan it was, and the call went ahead.)
  float* gone = reinterpret_cast<float*>(uintptr_t{0xffff} << 40);
  float ok[4] = {};
  expectError(hetcommAllReduce(gone, ok, 4, hetcommFloat32, hetcommSum, c0(), nullptr), hetcommInvalidArgument,
              "sendbuff");
  expectError(hetcommAllReduce(ok, gone, 4, hetcommFloat32, hetcommSum, c0(), nullptr), hetcommInvalidArgument,
              "CUDA is not in use in this process");
  expectError(hetcommSend(gone, 4, hetcommFloat32, 1, c0(), nullptr), hetcommInvalidArgument, "not memory");
  expectStillWorks();
}

TEST_F(ApiErrors, ACudaStreamWithoutAGpuIsRefused) {
  hetcommStream_t s = nullptr;
  hetcommResult_t rc = hetcommStreamCreateForCuda(&s, nullptr);
  if (rc == hetcommSuccess) {  // a machine with a GPU: nothing to check here
    HC_EXPECT_OK(hetcommStreamDestroy(s));
    GTEST_SKIP() << "this machine has a usable CUDA runtime and GPU";
  }
  expectError(rc, hetcommInvalidUsage, "CUDA");
}

TEST_F(ApiErrors, GroupEndWithoutGroupStart) {
  expectError(hetcommGroupEnd(), hetcommInvalidUsage, "without hetcommGroupStart");
}

TEST_F(ApiErrors, BadArgumentInsideAGroupLeavesTheGroupUsable) {
  int a = 1, b = 2;
  HC_ASSERT_OK(hetcommGroupStart());
  expectError(hetcommAllReduce(&a, nullptr, 1, hetcommInt32, hetcommSum, c0(), nullptr), hetcommInvalidArgument,
              "recvbuff is NULL");
  HC_ASSERT_OK(hetcommAllReduce(&a, &a, 1, hetcommInt32, hetcommSum, c0(), nullptr));
  HC_ASSERT_OK(hetcommAllReduce(&b, &b, 1, hetcommInt32, hetcommSum, c1(), nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 3);
}

// ---- init ----

TEST_F(ApiErrors, InitRankWithZeroRanks) {
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRank(&c, 0, id_, 0), hetcommInvalidArgument, "nranks 0 must be at least 1");
  EXPECT_EQ(c, nullptr);
}

TEST_F(ApiErrors, InitRankWithRankEqualToNranks) {
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRank(&c, 2, id_, 2), hetcommInvalidArgument, "rank 2 is out of range");
  EXPECT_EQ(c, nullptr);
}

TEST_F(ApiErrors, InitRankWithNegativeRank) {
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRank(&c, 2, id_, -1), hetcommInvalidArgument, "rank -1 is out of range");
}

TEST_F(ApiErrors, InitRankWithZeroedUniqueId) {
  hetcommUniqueId zero;
  std::memset(&zero, 0, sizeof(zero));
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRank(&c, 1, zero, 0), hetcommInvalidArgument, "not made by hetcommGetUniqueId");
}

TEST_F(ApiErrors, InitRankWithCorruptUniqueId) {
  hetcommUniqueId bad = id_;
  bad.internal[30] ^= 0x10;
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRank(&c, 1, bad, 0), hetcommInvalidArgument, "corrupt");
}

TEST_F(ApiErrors, InitRankWithNullOutput) {
  expectError(hetcommCommInitRank(nullptr, 1, id_, 0), hetcommInvalidArgument, "comm (the output pointer) is NULL");
}

TEST_F(ApiErrors, ConfigNotMadeWithTheInitializer) {
  hetcommConfig_t cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.blocking = 1;
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRankConfig(&c, 1, id_, 0, &cfg), hetcommInvalidArgument, "HETCOMM_CONFIG_INITIALIZER");
}

TEST_F(ApiErrors, ConfigBlockingTwo) {
  hetcommConfig_t cfg = HETCOMM_CONFIG_INITIALIZER;
  cfg.blocking = 2;
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRankConfig(&c, 1, id_, 0, &cfg), hetcommInvalidArgument, "blocking must be 0 or 1, not 2");
}

TEST_F(ApiErrors, ConfigNegativeTimeout) {
  hetcommConfig_t cfg = HETCOMM_CONFIG_INITIALIZER;
  cfg.timeoutSec = -5;
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitRankConfig(&c, 1, id_, 0, &cfg), hetcommInvalidArgument, "timeoutSec -5 must be positive");
}

TEST_F(ApiErrors, InitAllWithZeroRanks) {
  hetcommComm_t c = nullptr;
  expectError(hetcommCommInitAll(&c, 0, nullptr), hetcommInvalidArgument, "ndev 0 must be at least 1");
}

TEST_F(ApiErrors, SplitWithNegativeColor) {
  hetcommComm_t out = nullptr;
  expectError(hetcommCommSplit(c0(), -5, 0, &out, nullptr), hetcommInvalidArgument, "color -5 must be >= 0");
}

TEST_F(ApiErrors, SplitWithNullOutput) {
  expectError(hetcommCommSplit(c0(), 0, 0, nullptr, nullptr), hetcommInvalidArgument, "newcomm is NULL");
}

// ---- NULL output pointers ----

TEST_F(ApiErrors, CommCountNullOutput) {
  expectError(hetcommCommCount(c0(), nullptr), hetcommInvalidArgument, "count is NULL");
}

TEST_F(ApiErrors, UserRankNullOutput) {
  expectError(hetcommCommUserRank(c0(), nullptr), hetcommInvalidArgument, "rank is NULL");
}

TEST_F(ApiErrors, GetAsyncErrorNullOutput) {
  expectError(hetcommCommGetAsyncError(c0(), nullptr), hetcommInvalidArgument, "asyncError is NULL");
}

TEST_F(ApiErrors, StreamCreateNullOutput) {
  expectError(hetcommStreamCreate(nullptr), hetcommInvalidArgument, "stream is NULL");
}

TEST_F(ApiErrors, GetVersionNullOutput) {
  expectError(hetcommGetVersion(nullptr), hetcommInvalidArgument, "version is NULL");
}

TEST_F(ApiErrors, GetUniqueIdNullOutput) {
  expectError(hetcommGetUniqueId(nullptr), hetcommInvalidArgument, "uniqueId is NULL");
}

TEST_F(ApiErrors, OutputsAreWrittenOnlyOnSuccess) {
  int count = -7;
  hetcommComm_t c = nullptr;
  HC_ASSERT_OK(hetcommCommInitAll(&c, 1, nullptr));
  HC_ASSERT_OK(hetcommCommDestroy(c));
  EXPECT_EQ(hetcommCommCount(c, &count), hetcommInvalidUsage);
  EXPECT_EQ(count, -7);
}

// ---- streams ----

TEST_F(ApiErrors, SynchronizeNullStream) {
  expectError(hetcommStreamSynchronize(nullptr), hetcommInvalidArgument, "stream is NULL");
}

TEST_F(ApiErrors, DestroyedStream) {
  hetcommStream_t s = nullptr;
  HC_ASSERT_OK(hetcommStreamCreate(&s));
  HC_ASSERT_OK(hetcommStreamDestroy(s));
  expectError(hetcommAllReduce(buf_, buf_, 4, hetcommFloat32, hetcommSum, c0(), s), hetcommInvalidUsage,
              "not a live stream");
}

// ---- the communicator survives argument errors ----

TEST_F(ApiErrors, CommunicatorStillWorksAfterAnInvalidArgument) {
  expectError(hetcommAllReduce(buf_, buf_, 4, static_cast<hetcommDataType_t>(42), hetcommSum, c0(), nullptr),
              hetcommInvalidArgument, "unknown datatype");
  expectError(hetcommBroadcast(buf_, buf_, 4, hetcommFloat32, 7, c1(), nullptr), hetcommInvalidArgument, "root 7");
  hetcommResult_t async = hetcommInternalError;
  HC_ASSERT_OK(hetcommCommGetAsyncError(c0(), &async));
  EXPECT_EQ(async, hetcommSuccess);
  expectStillWorks();
}

// ---- collectives that do not match between ranks ----

TEST(ApiMismatch, DifferentCountsFailOnlyThatCommunicator) {
  Comms earlier, bad;
  ASSERT_NO_FATAL_FAILURE(initWithTimeout(earlier, 2, 10, "earlier"));
  ASSERT_NO_FATAL_FAILURE(initWithTimeout(bad, 2, 10, "bad"));
  std::vector<float> a(20, 1.f), b(20, 2.f);
  HC_ASSERT_OK(hetcommGroupStart());
  HC_ASSERT_OK(hetcommAllReduce(a.data(), a.data(), 10, hetcommFloat32, hetcommSum, bad[0], nullptr));
  HC_ASSERT_OK(hetcommAllReduce(b.data(), b.data(), 20, hetcommFloat32, hetcommSum, bad[1], nullptr));
  const auto t0 = std::chrono::steady_clock::now();
  hetcommResult_t rc = hetcommGroupEnd();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(rc == hetcommInvalidUsage || rc == hetcommRemoteError) << hetcommGetErrorString(rc) << ": " << lastError();
  const std::string msg = lastError();
  EXPECT_TRUE(msg.find("mismatch") != std::string::npos || msg.find("different counts") != std::string::npos) << msg;
  EXPECT_LT(sec, 8.0) << "the mismatch was found only by the timeout";
  // The error sticks to both ranks of that communicator.
  for (int r = 0; r < 2; ++r) {
    hetcommResult_t async = hetcommSuccess;
    HC_ASSERT_OK(hetcommCommGetAsyncError(bad[r], &async));
    EXPECT_NE(async, hetcommSuccess) << "rank " << r;
    int v = 0;
    EXPECT_NE(hetcommAllReduce(&v, &v, 1, hetcommInt32, hetcommSum, bad[r], nullptr), hetcommSuccess) << r;
  }
  // They can be destroyed.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(hetcommCommDestroy(bad[r]), hetcommSuccess) << lastError();
    bad.c[r] = nullptr;
  }
  // The communicator made earlier is untouched.
  std::vector<int> x = {1, 2};
  HC_ASSERT_OK(hetcommGroupStart());
  for (int r = 0; r < 2; ++r)
    HC_ASSERT_OK(hetcommAllReduce(&x[r], &x[r], 1, hetcommInt32, hetcommSum, earlier[r], nullptr));
  HC_ASSERT_OK(hetcommGroupEnd());
  EXPECT_EQ(x, (std::vector<int>{3, 3}));
}

// One rank's count fits the host slots and the other's goes by messages: the slot's waiter sees the other's
// announcement, and the other hears of the mismatch through its abort, long before the timeout.
TEST(ApiMismatch, ASlotCollectiveAgainstAMessageOneFailsAtOnce) {
  Comms comms;
  ASSERT_NO_FATAL_FAILURE(initWithTimeout(comms, 2, 10));
  std::vector<float> a(8, 1.f), b(1 << 18, 2.f);
  HC_ASSERT_OK(hetcommGroupStart());
  HC_ASSERT_OK(hetcommAllReduce(a.data(), a.data(), a.size(), hetcommFloat32, hetcommSum, comms[0], nullptr));
  HC_ASSERT_OK(hetcommAllReduce(b.data(), b.data(), b.size(), hetcommFloat32, hetcommSum, comms[1], nullptr));
  const auto t0 = std::chrono::steady_clock::now();
  hetcommResult_t rc = hetcommGroupEnd();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(rc == hetcommInvalidUsage || rc == hetcommRemoteError) << hetcommGetErrorString(rc) << ": " << lastError();
  EXPECT_NE(lastError().find("mismatch"), std::string::npos) << lastError();
  EXPECT_LT(sec, 8.0) << "the mismatch was found only by the timeout";
  for (int r = 0; r < 2; ++r) {
    hetcommResult_t async = hetcommSuccess;
    HC_ASSERT_OK(hetcommCommGetAsyncError(comms[r], &async));
    EXPECT_NE(async, hetcommSuccess) << "rank " << r;
  }
}

TEST(ApiMismatch, DifferentCollectivesFailWithAMismatch) {
  Comms comms;
  ASSERT_NO_FATAL_FAILURE(initWithTimeout(comms, 3, 10));
  std::vector<int> a(6, 1), b(6, 1), c(6, 1);
  HC_ASSERT_OK(hetcommGroupStart());
  HC_ASSERT_OK(hetcommAllReduce(a.data(), a.data(), 6, hetcommInt32, hetcommSum, comms[0], nullptr));
  HC_ASSERT_OK(hetcommAllReduce(b.data(), b.data(), 6, hetcommInt32, hetcommSum, comms[1], nullptr));
  HC_ASSERT_OK(hetcommBroadcast(c.data(), c.data(), 6, hetcommInt32, 0, comms[2], nullptr));
  hetcommResult_t rc = hetcommGroupEnd();
  EXPECT_TRUE(rc == hetcommInvalidUsage || rc == hetcommRemoteError) << hetcommGetErrorString(rc) << ": " << lastError();
  const std::string msg = lastError();
  EXPECT_TRUE(msg.find("mismatch") != std::string::npos || msg.find("different counts") != std::string::npos) << msg;
  for (int r = 0; r < 3; ++r) {
    hetcommResult_t async = hetcommSuccess;
    HC_ASSERT_OK(hetcommCommGetAsyncError(comms[r], &async));
    EXPECT_NE(async, hetcommSuccess) << "rank " << r;
  }
}

}  // namespace
}  // namespace hetcomm_test
