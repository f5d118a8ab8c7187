// The shared-memory transport. Like the TCP tests, 2 or 4 ranks live in one process: connectAll runs on a thread
// per rank (it blocks until every pair is attached), then ONE thread drives every transport's progress() in a loop
// bounded by iterations and wall time, as the progress engine does. Cross-memory attach works inside one process
// (process_vm_readv on our own pid), so both paths run here: messages below HETCOMM_SHM_CMA_BYTES (default 256K)
// go through the ring, larger ones are pulled from the sender's buffer.
//
// HETCOMM_SHM_CMA_BYTES is read once per process, so ShmRingPath.* re-runs this binary as a child process with
// HETCOMM_SHM_CMA_BYTES=0: every data, error, wake-up and peer-death test then runs again with every byte through
// the ring (64 and 256 MiB included). Unset, the transport measures whether attach pays on this machine
// (measureAttach); this binary sets it to its default, so that both paths run wherever it runs, except in the child
// of ShmAttachChoice.*, which checks the measured choice.
//
// A peer that dies needs a real other process (its pidfd): ShmPeerDeath.* forks a child that is one rank of the
// pair (blobs travel over pipes), kills it with SIGKILL at the chosen moment, and bounds every wait.
//
// Every segment is named "/hetcomm-<commId>-...": the tests give each communicator a fresh comm id and check that
// nothing under /dev/shm carries one of them once the transports are gone (other programs on this machine may
// use hetcomm at the same time, so other names are not ours to judge).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/param.h"
#include "common/strings.h"
#include "tests/support/transport_harness.h"
#include "transports/shm/shm_transport.h"

namespace hetcomm::transport::shm {
namespace {

using testing::Bytes;
using testing::bytesOf;
using testing::ConnectOutcome;
using testing::Conns;
using testing::contains;
using testing::diff;
using testing::driveGroups;
using testing::expectDelivered;
using testing::expectManyTagsDelivered;
using testing::pattern;

// Mirrors shm_transport.cc: 1 MiB ring per direction, frames of a 32-byte header and at most 256 KiB of payload.
constexpr size_t kRing = 1 << 20;
constexpr size_t kHeader = 32;
constexpr size_t kMaxChunk = kRing / 4;

// Both paths, whatever attach costs on this machine (above); before any transport reads the parameter.
const bool kAttachPinned = [] {
  if (!std::getenv("HC_TEST_SHM_MEASURE")) ::setenv("HETCOMM_SHM_CMA_BYTES", "262144", /*overwrite=*/0);
  return true;
}();

// The range of message sizes sent by cross-memory attach in this process (min 0: never).
size_t cmaThreshold() {
  static const size_t v = static_cast<size_t>(std::max<int64_t>(0, param::readInt("SHM_CMA_BYTES", 256 << 10)));
  return v;
}
size_t cmaMax() {
  static const size_t v = static_cast<size_t>(std::max<int64_t>(0, param::readInt("SHM_CMA_MAX_BYTES", 1 << 20)));
  return v;
}
bool ringOnly() { return cmaThreshold() == 0; }
bool viaCma(size_t n) { return cmaThreshold() > 0 && n >= cmaThreshold() && n <= cmaMax(); }

// ---- /dev/shm bookkeeping ----

std::vector<uint64_t>& usedCommIds() {
  static std::vector<uint64_t> ids;
  return ids;
}

// A comm id no other process (and no other test of this one) uses.
uint64_t freshCommId() {
  static std::atomic<uint32_t> counter{0};
  uint64_t id = (0x5eull << 56) | (static_cast<uint64_t>(getpid() & 0xffffff) << 32) | ++counter;
  usedCommIds().push_back(id);
  return id;
}

std::string segmentPrefix(uint64_t commId) { return format("hetcomm-%016llx-", (unsigned long long)commId); }

// Names in /dev/shm that start with prefix.
std::vector<std::string> devShmEntries(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
  ::closedir(d);
  return out;
}

std::string leftoversOf(uint64_t commId) {
  std::string s;
  for (const auto& n : devShmEntries(segmentPrefix(commId))) s += " /dev/shm/" + n;
  return s;
}

// ---- a group of ranks in this process ----

transport::Config configFor(int rank, int n, uint64_t commId, const std::string& host = "unit-test-host") {
  return testing::configFor(rank, n, testing::secretOf(1), commId, host);
}

// n transports of one communicator, connected to each other, with a comm id of their own. Destroying the group
// checks that none of its segments is left in /dev/shm.
struct Group : testing::TransportGroup {
  uint64_t commId = freshCommId();

  ~Group() {
    tearDown();
    EXPECT_EQ(leftoversOf(commId), "") << "segments left behind";
  }
};

// Makes, listens and runs connectAll on a thread per rank; participates[r] false: rank r listens but never
// calls connectAll.
ConnectOutcome connectGroup(Group& g, int n, double deadlineSec, std::vector<bool> participates = {}) {
  return testing::connectGroup(
      g, n, [&](int r) { return testing::asTransport(ShmTransport::create(configFor(r, n, g.commId))); }, deadlineSec,
      std::move(participates));
}

void makeGroup(Group& g, int n) {
  testing::makeGroup(g, n,
                     [&](int r) { return testing::asTransport(ShmTransport::create(configFor(r, n, g.commId))); });
}

// poll(fd) for readability, at most ms.
bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// ---- connection set-up ----

TEST(ShmConnect, TwoRanks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  EXPECT_EQ(g.t[0]->properties().kind, Kind::kShm);
  EXPECT_EQ(g.t[0]->properties().name, "shm");
  EXPECT_GE(g.t[0]->waitFd(), 0);
  EXPECT_NE(g.t[0]->waitFd(), g.t[1]->waitFd());
  // One process may read its own memory: cross-memory attach is available both ways.
  EXPECT_EQ(g.conn(0, 1).describe(), "r0->r1/shm(ring + cross-memory attach)");
  EXPECT_EQ(g.conn(1, 0).describe(), "r1->r0/shm(ring + cross-memory attach)");
}

TEST(ShmConnect, FourRanksAndSegmentsAreUnlinkedOnceConnected) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 4));
  EXPECT_EQ(g.conn(3, 0).describe().rfind("r3->r0/shm(", 0), 0u) << g.conn(3, 0).describe();
  // All six pairs are mapped and nothing is left on the file system: a crash from now on leaves nothing behind.
  EXPECT_EQ(leftoversOf(g.commId), "") << "segments still linked while the connections are up";
}

TEST(ShmConnect, PeerOnAnotherHostIsRefused) {
  const uint64_t id = freshCommId();
  auto a = ShmTransport::create(configFor(0, 2, id, "host-a"));
  auto b = ShmTransport::create(configFor(1, 2, id, "host-b"));
  ASSERT_TRUE(a && b);
  auto blobB = (*b)->listen();
  ASSERT_TRUE(blobB);
  auto r = (*a)->connectAll({{}, *blobB}, Deadline::afterSec(2));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidUsage) << r.error().toString();
  EXPECT_TRUE(contains(r.error().message(), "host-b")) << r.error().message();
  EXPECT_TRUE(contains(r.error().message(), "host-a")) << r.error().message();
}

TEST(ShmConnect, MalformedBlobIsRejected) {
  auto tr = ShmTransport::create(configFor(0, 2, freshCommId()));
  ASSERT_TRUE(tr);
  ASSERT_TRUE((*tr)->listen());
  std::string junk = "hello=world\n";
  Bytes blob(reinterpret_cast<const std::byte*>(junk.data()),
             reinterpret_cast<const std::byte*>(junk.data()) + junk.size());
  auto r = (*tr)->connectAll({{}, blob}, Deadline::afterSec(2));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kRemote);
  EXPECT_TRUE(contains(r.error().message(), "rank 1's shm blob is malformed")) << r.error().message();
}

TEST(ShmConnect, PeerThatNeverConnectsTimesOutAndLeavesNoSegment) {
  // silent 1: rank 0 creates the segment and waits for an attach that never comes; silent 0: rank 1 waits for a
  // segment that is never created. Either way a timeout at the deadline, and no segment once the transports go.
  for (int silent : {0, 1}) {
    SCOPED_TRACE(format("silent rank %d", silent));
    uint64_t id;
    {
      Group g;
      id = g.commId;
      auto out = connectGroup(g, 2, 0.5, {silent != 0, silent != 1});
      ASSERT_EQ(out.results.size(), 2u);
      const int active = 1 - silent;
      ASSERT_FALSE(out.results[active]);
      EXPECT_EQ(out.results[active].error().code(), Code::kTimeout) << out.results[active].error().toString();
      EXPECT_TRUE(contains(out.results[active].error().message(), format("rank %d", silent)))
          << out.results[active].error().message();
      EXPECT_LT(out.seconds[active], 3.0);
    }
    EXPECT_EQ(leftoversOf(id), "");
  }
}

// ---- data at every size, both paths ----

class ShmSizes : public ::testing::TestWithParam<size_t> {};

TEST_P(ShmSizes, ReceivePostedAfterTheDataArrived) {
  const size_t n = GetParam();
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes out01 = pattern(n, 3), out10 = pattern(n, 4);
  Request s01, s10;
  ASSERT_TRUE(g.conn(0, 1).isend(s01, out01, 5).ok());
  ASSERT_TRUE(g.conn(1, 0).isend(s10, out10, 6).ok());
  if (viaCma(n)) {
    // Cross-memory attach: the receiver pulls from the sender's buffer, so the send waits for the receive.
    g.driveFor(0.05);
    EXPECT_FALSE(s01.finished()) << "a cross-memory-attach send completed before anybody read it";
    EXPECT_FALSE(s10.finished());
  } else {
    // The ring: the receiver buffers what arrives early, so the send completes on its own.
    ASSERT_TRUE(g.drive([&] { return s01.finished() && s10.finished(); }, 30));
    EXPECT_TRUE(s01.done()) << s01.error.toString();
    EXPECT_TRUE(s10.done()) << s10.error.toString();
    g.driveFor(0.05);  // the last frames land in the receivers' buffers
  }
  Bytes in01(n), in10(n);
  Request r01, r10;
  ASSERT_TRUE(g.conn(1, 0).irecv(r01, in01, 5).ok());
  ASSERT_TRUE(g.conn(0, 1).irecv(r10, in10, 6).ok());
  // Everything was here (or readable in the sender's memory): the receives complete inside irecv.
  EXPECT_TRUE(r01.done()) << "state " << static_cast<int>(r01.state) << " " << r01.error.toString();
  EXPECT_TRUE(r10.done()) << "state " << static_cast<int>(r10.state) << " " << r10.error.toString();
  ASSERT_NO_FATAL_FAILURE(expectDelivered(g, n, {&r01, &r10, &s01, &s10}, {{&in01, &out01}, {&in10, &out10}}, 30));
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShmSizes,
                         ::testing::Values(0, 1, 31, 32, 33, 4095, kMaxChunk - 1, kMaxChunk, kMaxChunk + 1,
                                           (1u << 20) + 3),
                         [](const auto& info) { return "bytes" + std::to_string(info.param); });

// 64 and 256 MiB, once each, both directions at once.
TEST(ShmLarge, SixtyFourAndTwoHundredFiftySixMiBBothDirectionsAtOnce) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  for (size_t n : {size_t{64} << 20, size_t{256} << 20}) {
    SCOPED_TRACE(humanBytes(n));
    Bytes out01 = pattern(n, 11), out10 = pattern(n, 12);
    Bytes in01(n), in10(n);
    Request r01, r10, s01, s10;
    ASSERT_TRUE(g.conn(1, 0).irecv(r01, in01, n).ok());
    ASSERT_TRUE(g.conn(0, 1).isend(s01, out01, n).ok());
    ASSERT_TRUE(g.conn(1, 0).isend(s10, out10, n).ok());
    ASSERT_TRUE(g.conn(0, 1).irecv(r10, in10, n).ok());
    const double t0 = nowSec();
    ASSERT_TRUE(g.drive([&] { return r01.finished() && r10.finished() && s01.finished() && s10.finished(); }, 60))
        << "timed out";
    std::printf("[ info ] %s both ways via %s in %.3f s\n", humanBytes(n).c_str(),
                viaCma(n) ? "cross-memory attach" : "the ring", nowSec() - t0);
    for (Request* r : {&r01, &r10, &s01, &s10}) {
      EXPECT_TRUE(r->done()) << r->error.toString();
      EXPECT_EQ(r->bytes, n);
    }
    EXPECT_EQ(diff(in01, out01), "");
    EXPECT_EQ(diff(in10, out10), "");
  }
}

TEST(ShmLarge, SixtyFourMiBReceivePostedAfterTheSenderStarted) {
  const size_t n = size_t{64} << 20;
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes out = pattern(n, 13), in(n);
  Request s, r;
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 1).ok());
  g.driveFor(0.1);  // ring: the receiver buffers part or all of it; attach: the header waits
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }, 60));
  EXPECT_TRUE(r.done()) << r.error.toString();
  EXPECT_TRUE(s.done()) << s.error.toString();
  EXPECT_EQ(diff(in, out), "");
}

// ---- the ring ----

// Messages whose frames land at chosen places relative to the ring's end: a header cut in two, a header that ends
// exactly at the end, a payload cut in two, a frame that starts exactly at the beginning, over and over until the
// ring has been filled many times. Only one direction carries data (acknowledgements travel in the other ring),
// and every message fits one frame and stays below the attach threshold, so the test knows where each frame goes.
TEST(ShmData, RingWrapAroundWithFramesStraddlingTheEnd) {
  const size_t maxPayload = cmaThreshold() ? std::min(kMaxChunk, cmaThreshold() - 1) : kMaxChunk;
  if (maxPayload < 8192) GTEST_SKIP() << "HETCOMM_SHM_CMA_BYTES is too small for this test";
  std::vector<size_t> sizes;
  std::vector<std::string> what;
  uint64_t head = 0;
  auto add = [&](size_t payload, std::string label) {
    sizes.push_back(payload);
    what.push_back(std::move(label));
    head += kHeader + payload;
  };
  // Fills until the next frame starts `before` bytes ahead of the ring's end (0: at its start).
  auto advanceTo = [&](size_t before) {
    for (;;) {
      const size_t target = (kRing - before) % kRing, pos = head % kRing;
      size_t want = (target + kRing - pos) % kRing;  // bytes of frames still to add
      if (want == 0 || sizes.size() > 20000) return;
      if (want < kHeader) want += kRing;
      size_t frame = std::min(want, kHeader + maxPayload);
      if (want - frame != 0 && want - frame < kHeader) frame = want - kHeader;  // leave room for a header
      add(frame - kHeader, "filler");
    }
  };
  int straddles = 0;
  for (int round = 0; round < 4; ++round) {
    for (size_t before : {1, 16, 31, 32, 33, 100, 4096, 0}) {
      advanceTo(before);
      const size_t probe = 5000 + 13 * round + before;
      const bool cut = before > 0 && before < kHeader + probe;
      straddles += cut;
      add(probe, format("round %d: frame starting %zu bytes before the end", round, before));
    }
  }
  ASSERT_LT(sizes.size(), 20000u) << "the test's own planning ran away";
  ASSERT_GT(straddles, 20);
  ASSERT_GT(head, 8 * kRing) << "the ring should wrap many times";

  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const size_t m = sizes.size();
  std::vector<Bytes> out(m), in(m);
  std::deque<Request> s(m), r(m);
  for (size_t i = 0; i < m; ++i) {
    out[i] = pattern(sizes[i], 1000 + i);
    in[i].resize(sizes[i]);
  }
  for (size_t i = 0; i < m; i += 2) ASSERT_TRUE(g.conn(1, 0).irecv(r[i], in[i], i).ok());
  for (size_t i = 0; i < m; ++i) ASSERT_TRUE(g.conn(0, 1).isend(s[i], out[i], i).ok());
  g.driveFor(0.02);
  for (size_t i = 1; i < m; i += 2) ASSERT_TRUE(g.conn(1, 0).irecv(r[i], in[i], i).ok());
  ASSERT_TRUE(g.drive(
      [&] {
        for (size_t i = 0; i < m; ++i)
          if (!s[i].finished() || !r[i].finished()) return false;
        return true;
      },
      60));
  for (size_t i = 0; i < m; ++i) {
    EXPECT_TRUE(s[i].done()) << i << " " << what[i] << ": " << s[i].error.toString();
    EXPECT_TRUE(r[i].done()) << i << " " << what[i] << ": " << r[i].error.toString();
    EXPECT_EQ(diff(in[i], out[i]), "") << i << " (" << sizes[i] << " bytes, " << what[i] << ")";
  }
}

TEST(ShmData, ManyTagsInFlightOutOfOrderBetweenFourRanks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 4));
  // Tiny, odd, one-frame, attach-sized and multi-frame messages mixed, every pair in both directions at once. Half
  // the receives first.
  ASSERT_NO_FATAL_FAILURE(
      expectManyTagsDelivered(g, 24, {0, 1, 7, 4095, 65536 + 3, kMaxChunk + 1, (1u << 20) + 7, 33}, 0x1000, 2, 0.05));
}

TEST(ShmData, PostedReceiveIsNotHeldUpByEarlierUnclaimedMessages) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const size_t big = 3u << 20;
  Bytes b1 = pattern(big, 1), b2 = pattern(big, 2), a = pattern(100, 3);
  Bytes in1(big), in2(big), inA(100);
  Request s1, s2, sA, r1, r2, rA;
  ASSERT_TRUE(g.conn(1, 0).irecv(rA, inA, 3).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s1, b1, 1).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s2, b2, 2).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(sA, a, 3).ok());
  EXPECT_TRUE(g.drive([&] { return rA.finished(); }, 5)) << "the receive of tag 3 waits behind unclaimed messages";
  ASSERT_TRUE(g.conn(1, 0).irecv(r1, in1, 1).ok());
  ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 2).ok());
  ASSERT_TRUE(g.drive(
      [&] {
        return rA.finished() && r1.finished() && r2.finished() && s1.finished() && s2.finished() && sA.finished();
      },
      30));
  EXPECT_TRUE(rA.done()) << rA.error.toString();
  EXPECT_EQ(diff(inA, a), "");
  EXPECT_EQ(diff(in1, b1), "");
  EXPECT_EQ(diff(in2, b2), "");
}

TEST(ShmData, TwoCommunicatorsBetweenTheSameRanksStayApart) {
  Group a, b;
  ASSERT_NO_FATAL_FAILURE(makeGroup(a, 2));
  ASSERT_NO_FATAL_FAILURE(makeGroup(b, 2));
  for (size_t n : {size_t{1000}, (size_t{1} << 20) + 1}) {
    Bytes outA = pattern(n, 1), outB = pattern(n, 2), inA(n), inB(n);
    Request sa, sb, ra, rb;
    ASSERT_TRUE(a.conn(1, 0).irecv(ra, inA, 1).ok());
    ASSERT_TRUE(b.conn(1, 0).irecv(rb, inB, 1).ok());
    ASSERT_TRUE(a.conn(0, 1).isend(sa, outA, 1).ok());
    ASSERT_TRUE(b.conn(0, 1).isend(sb, outB, 1).ok());
    ASSERT_TRUE(driveGroups(
        {&a, &b}, [&] { return ra.finished() && rb.finished() && sa.finished() && sb.finished(); }, 30, 5'000'000));
    EXPECT_TRUE(ra.done()) << ra.error.toString();
    EXPECT_TRUE(rb.done()) << rb.error.toString();
    EXPECT_EQ(diff(inA, outA), "");
    EXPECT_EQ(diff(inB, outB), "");
  }
}

// ---- errors on the data path ----

// One message below the attach threshold and one above it (or, with attach off, one that spans several frames).
std::vector<size_t> mismatchSizes() { return {200, std::max<size_t>(cmaThreshold(), kMaxChunk) + 4321}; }

TEST(ShmErrors, WrongSizeReceivePostedFirstFailsNamingBothSizesAndSparesOtherTags) {
  for (size_t n : mismatchSizes()) {
    SCOPED_TRACE(format("%zu bytes", n));
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
    Bytes out = pattern(n, 1), in(n - 100);
    Request s, r;
    ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 9).ok());
    ASSERT_TRUE(g.conn(0, 1).isend(s, out, 9).ok());
    ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }, 10));
    ASSERT_TRUE(r.failed());
    EXPECT_EQ(r.error.code(), Code::kInvalidUsage);
    EXPECT_TRUE(contains(r.error.message(), format("sent %zu bytes", n))) << r.error.message();
    EXPECT_TRUE(contains(r.error.message(), format("expected %zu", n - 100))) << r.error.message();
    EXPECT_TRUE(s.done()) << "the sender is released: " << s.error.toString();
    // The connection itself is fine: a later message of another tag goes through, whatever its path.
    for (size_t n2 : {size_t{300}, n}) {
      Bytes out2 = pattern(n2, 2), in2(n2);
      Request s2, r2;
      ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 10 + n2).ok());
      ASSERT_TRUE(g.conn(0, 1).isend(s2, out2, 10 + n2).ok());
      ASSERT_TRUE(g.drive([&] { return r2.finished() && s2.finished(); }, 10));
      EXPECT_TRUE(r2.done()) << r2.error.toString();
      EXPECT_EQ(diff(in2, out2), "");
    }
  }
}

// After a size mismatch the message is gone: the next receive with that tag gets the next message with that tag.
TEST(ShmErrors, RejectedMessageDoesNotSatisfyTheNextReceiveOfItsTag) {
  for (size_t n : mismatchSizes()) {
    SCOPED_TRACE(format("%zu bytes", n));
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
    Bytes out = pattern(n, 1), in(n / 2);
    Request s, r;
    ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 9).ok());
    ASSERT_TRUE(g.conn(0, 1).isend(s, out, 9).ok());
    ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }, 10));
    ASSERT_TRUE(r.failed());
    g.driveFor(0.1);
    Bytes out2 = pattern(n, 2), in2(n);
    Request s2, r2;
    ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 9).ok());
    ASSERT_TRUE(g.conn(0, 1).isend(s2, out2, 9).ok());
    ASSERT_TRUE(g.drive([&] { return r2.finished() && s2.finished(); }, 10));
    EXPECT_TRUE(r2.done()) << r2.error.toString();
    EXPECT_EQ(diff(in2, out2), "") << (diff(in2, out) == "" ? "got the rejected message again" : "");
  }
}

TEST(ShmErrors, WrongSizeReceivePostedAfterArrivalFailsAndDoesNotPoisonTheNextTag) {
  for (size_t n : mismatchSizes()) {
    SCOPED_TRACE(format("%zu bytes", n));
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
    // Tag 3 (mismatched) and tag 4 (fine) are both here before either receive is posted.
    Bytes out3 = pattern(n, 1), out4 = pattern(n + 1, 2), in3(n + 1), in4(n + 1);
    Request s3, s4, r3, r4;
    ASSERT_TRUE(g.conn(0, 1).isend(s3, out3, 3).ok());
    ASSERT_TRUE(g.conn(0, 1).isend(s4, out4, 4).ok());
    g.driveFor(0.1);
    ASSERT_TRUE(g.conn(1, 0).irecv(r3, in3, 3).ok());
    ASSERT_TRUE(g.drive([&] { return r3.finished(); }, 10));
    ASSERT_TRUE(r3.failed());
    EXPECT_EQ(r3.error.code(), Code::kInvalidUsage);
    EXPECT_TRUE(contains(r3.error.message(), format("sent %zu bytes", n))) << r3.error.message();
    EXPECT_TRUE(contains(r3.error.message(), format("expected %zu", n + 1))) << r3.error.message();
    ASSERT_TRUE(g.conn(1, 0).irecv(r4, in4, 4).ok());
    ASSERT_TRUE(g.drive([&] { return r4.finished() && s3.finished() && s4.finished(); }, 10));
    EXPECT_TRUE(r4.done()) << r4.error.toString();
    EXPECT_EQ(diff(in4, out4), "");
    EXPECT_TRUE(s3.done()) << "the sender of the rejected message is released: " << s3.error.toString();
    EXPECT_TRUE(s4.done()) << s4.error.toString();
    // The rejected tag is free again.
    Bytes out5 = pattern(n + 1, 5), in5(n + 1);
    Request s5, r5;
    ASSERT_TRUE(g.conn(1, 0).irecv(r5, in5, 3).ok());
    ASSERT_TRUE(g.conn(0, 1).isend(s5, out5, 3).ok());
    ASSERT_TRUE(g.drive([&] { return r5.finished() && s5.finished(); }, 10));
    EXPECT_TRUE(r5.done()) << r5.error.toString();
    EXPECT_EQ(diff(in5, out5), "");
  }
}

// ---- abort and close ----

TEST(ShmFailure, AbortQueuedBehindAMessageArrivesAfterIt) {
  // The abort never cuts a frame: a message queued before it (4 MiB: several frames, or an attach) arrives
  // whole, and only receives still pending afterwards see the reason.
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const size_t n = (4u << 20) + 1;
  Bytes out = pattern(n, 3), in(n), in2(10);
  Request s, r, r2;
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 2).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 1).ok());
  g.conn(0, 1).sendAbort("after the message");
  ASSERT_TRUE(g.drive([&] { return r.finished() && r2.finished() && s.finished(); }, 10));
  EXPECT_TRUE(r.done()) << r.error.toString();
  EXPECT_EQ(diff(in, out), "");
  ASSERT_TRUE(r2.failed());
  EXPECT_EQ(r2.error.code(), Code::kRemote);
  EXPECT_TRUE(contains(r2.error.message(), "after the message")) << r2.error.message();
}

TEST(ShmFailure, CloseIsIdempotentAndFailsOwnRequests) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes in(10);
  const size_t big = std::max<size_t>(cmaThreshold(), kMaxChunk) * 4 + 1;
  Bytes out = pattern(big, 1);
  Request r, s;
  ASSERT_TRUE(g.conn(0, 1).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 2).ok());  // waits for an acknowledgement or for ring space
  ASSERT_FALSE(s.finished());
  g.conn(0, 1).close(invalidUsage("closing for the test"));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.message(), "closing for the test");
  ASSERT_TRUE(s.failed());
  EXPECT_EQ(s.error.message(), "closing for the test");
  g.conn(0, 1).close(invalidUsage("second close"));  // no effect, no crash
  Request r2;
  ASSERT_TRUE(g.conn(0, 1).irecv(r2, in, 3).ok());
  EXPECT_TRUE(r2.failed());
  EXPECT_EQ(r2.error.message(), "closing for the test");
  g.driveFor(0.05);  // the peer keeps running
}

// After close() the caller may free or reuse the buffer of a failed send ("releases every reference to callers'
// requests and buffers"). A receiver must then not complete with whatever that memory holds by now.
TEST(ShmFailure, ClosedSendersBufferIsNotDeliveredAsData) {
  if (ringOnly()) GTEST_SKIP() << "the ring copies at isend; only cross-memory attach reads the buffer later";
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const size_t n = cmaThreshold() + 1000;
  Bytes out = pattern(n, 1), in(n);
  Request s, r;
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 7).ok());
  ASSERT_FALSE(s.finished());
  // What Communicator::fail does: tell the peer why, then close.
  g.conn(0, 1).sendAbort("rank 0 fails");
  g.conn(0, 1).close(invalidUsage("rank 0 closes"));
  ASSERT_TRUE(s.failed());
  std::fill(out.begin(), out.end(), std::byte{0xEE});  // the caller reuses its buffer, as it may
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 7).ok());
  g.drive([&] { return r.finished(); }, 2);
  EXPECT_TRUE(r.failed()) << "rank 1's receive completed with bytes read from a buffer rank 0 had released"
                          << (std::all_of(in.begin(), in.end(), [](std::byte b) { return b == std::byte{0xEE}; })
                                  ? " (it holds the reused contents)"
                                  : "");
}

// ---- blocking waits ----

TEST(ShmWait, WaitFdWakesAnIdleReceiver) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  for (size_t n : {size_t{1}, size_t{5000}, std::max<size_t>(cmaThreshold(), kMaxChunk) + 1}) {
    SCOPED_TRACE(format("%zu bytes", n));
    const int fd1 = g.t[1]->waitFd();
    ASSERT_GE(fd1, 0);
    Bytes out = pattern(n, 4), in(n);
    Request s, r;
    ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 1).ok());
    // Both idle: rank 1's progress() finds nothing; before it sleeps it arms its wake-up flag.
    ASSERT_TRUE(g.t[1]->progress().ok());
    ASSERT_TRUE(g.t[0]->progress().ok());
    ASSERT_TRUE(g.t[1]->armForSleep()) << "nothing arrived, yet armForSleep says there is work";
    EXPECT_FALSE(readable(fd1, 0)) << "waitFd is readable with nothing to do: the engine would spin";
    ASSERT_TRUE(g.conn(0, 1).isend(s, out, 1).ok());
    EXPECT_TRUE(readable(fd1, 1000)) << "the peer wrote, but waitFd did not become readable within 1 s";
    ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }, 10));
    EXPECT_TRUE(r.done()) << r.error.toString();
    EXPECT_EQ(diff(in, out), "");
    // Everything done and both sides idle again: once armed to sleep, nothing stays readable. (The first try may
    // say "pass again": it takes a wake-up that came meanwhile.)
    for (int side : {0, 1}) {
      bool ready = false;
      for (int i = 0; i < 3 && !ready; ++i) {
        ASSERT_TRUE(g.t[side]->progress().ok());
        ready = g.t[side]->armForSleep();
      }
      EXPECT_TRUE(ready) << "rank " << side << " never gets ready to sleep";
    }
    EXPECT_FALSE(readable(fd1, 0));
    EXPECT_FALSE(readable(g.t[0]->waitFd(), 0));
  }
}

// A receiver that polls (a caller driving its own operation) has not armed its wake-up: the sender's message costs
// no wake-up datagram, and waitFd stays quiet. Once it arms to sleep, the next message wakes it.
TEST(ShmWait, APollingReceiverCostsNoWakeUp) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const int fd1 = g.t[1]->waitFd();
  Bytes out = pattern(64, 7), in(64);
  Request s, r;
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.t[1]->progress().ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 1).ok());
  ASSERT_TRUE(g.t[0]->progress().ok());
  EXPECT_FALSE(readable(fd1, 50)) << "a wake-up reached a receiver that was polling, not sleeping";
  ASSERT_TRUE(g.t[1]->progress().ok());
  ASSERT_TRUE(r.done()) << r.error.toString();
  EXPECT_EQ(diff(in, out), "");
  // Now it sleeps: armed, the next message makes waitFd readable.
  Request s2, r2;
  Bytes in2(64);
  ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 2).ok());
  ASSERT_TRUE(g.t[1]->progress().ok());
  ASSERT_TRUE(g.t[1]->armForSleep());
  ASSERT_TRUE(g.conn(0, 1).isend(s2, out, 2).ok());
  ASSERT_TRUE(g.t[0]->progress().ok());
  EXPECT_TRUE(readable(fd1, 1000)) << "an armed receiver was not woken by the peer's message";
  ASSERT_TRUE(g.drive([&] { return r2.finished() && s2.finished(); }, 10));
  EXPECT_TRUE(r2.done()) << r2.error.toString();
}

// Rank 0 sends more ring-sized messages (below the attach threshold) than the ring holds: after its progress() the
// ring is full and it has asked to be woken when space frees. Rank 1 has posted no receive yet.
struct FullRing {
  size_t each = std::min(kMaxChunk, cmaThreshold() ? cmaThreshold() - 1 : kMaxChunk);
  int k = static_cast<int>(3 * kRing / each) + 2;
  std::vector<Bytes> out, in;
  std::deque<Request> s, r;

  void fill(Group& g, uint32_t seed) {
    out.resize(k);
    in.resize(k);
    s.resize(k);
    r.resize(k);
    for (int i = 0; i < k; ++i) {
      out[i] = pattern(each, seed + i);
      in[i].resize(each);
      ASSERT_TRUE(g.conn(0, 1).isend(s[i], out[i], i).ok());
    }
    ASSERT_TRUE(g.t[0]->progress().ok());
    ASSERT_FALSE(s[k - 1].finished()) << "the ring did not fill";
  }
  // Rank 1 posts every receive and reads once: room in the ring, and a wake-up for rank 0.
  void drain(Group& g) {
    for (int i = 0; i < k; ++i) ASSERT_TRUE(g.conn(1, 0).irecv(r[i], in[i], i).ok());
    ASSERT_TRUE(g.t[1]->progress().ok());
  }
  void expectDelivered(Group& g) {
    ASSERT_TRUE(g.drive(
        [&] {
          for (int i = 0; i < k; ++i)
            if (!s[i].finished() || !r[i].finished()) return false;
          return true;
        },
        30));
    for (int i = 0; i < k; ++i) EXPECT_EQ(diff(in[i], out[i]), "") << i;
  }
};

TEST(ShmWait, WaitFdWakesASenderWaitingForRingSpace) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  FullRing f;
  ASSERT_NO_FATAL_FAILURE(f.fill(g, 50));
  const int fd0 = g.t[0]->waitFd();
  EXPECT_FALSE(readable(fd0, 0));
  ASSERT_NO_FATAL_FAILURE(f.drain(g));
  EXPECT_TRUE(readable(fd0, 1000)) << "ring space freed, but the waiting sender's waitFd stayed quiet";
  ASSERT_NO_FATAL_FAILURE(f.expectDelivered(g));
}

// The wake-up can come before the sender is done with its pass: the receiver read from the full ring and sent the
// datagram while the sender still ran. Arming to sleep must then not swallow it and sleep: the sender has room to
// write. (It did once: streams through the ring stalled for a second at a time, the engine's longest sleep.)
TEST(ShmWait, AWakeUpThatCameBeforeTheSleepIsNotLost) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  FullRing f;
  ASSERT_NO_FATAL_FAILURE(f.fill(g, 70));
  ASSERT_NO_FATAL_FAILURE(f.drain(g));
  const bool ready = g.t[0]->armForSleep();
  EXPECT_TRUE(!ready || readable(g.t[0]->waitFd(), 0))
      << "rank 0 would sleep with room in the ring and its wake-up gone";
  ASSERT_NO_FATAL_FAILURE(f.expectDelivered(g));
}

// ---- a peer in another process that dies ----

void ignoreSigpipe() {
  static bool once = [] {
    ::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)once;
}

bool writeMsg(int fd, const void* data, uint32_t len) {
  std::string buf(reinterpret_cast<const char*>(&len), 4);
  buf.append(static_cast<const char*>(data), len);
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = ::write(fd, buf.data() + off, buf.size() - off);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}
bool writeMsg(int fd, const std::string& s) { return writeMsg(fd, s.data(), static_cast<uint32_t>(s.size())); }

bool readExact(int fd, void* dst, size_t len, const Deadline& d) {
  size_t off = 0;
  while (off < len) {
    pollfd p{fd, POLLIN, 0};
    int ms = d.msLeft();
    if (ms == 0 || ::poll(&p, 1, ms) != 1) return false;
    ssize_t n = ::read(fd, static_cast<char*>(dst) + off, len - off);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}
std::optional<std::string> readMsg(int fd, double sec = 10) {
  const Deadline d = Deadline::afterSec(sec);
  uint32_t len = 0;
  if (!readExact(fd, &len, 4, d) || len > (1u << 20)) return std::nullopt;
  std::string s(len, '\0');
  if (!readExact(fd, s.data(), len, d)) return std::nullopt;
  return s;
}

// The child's side of a lockstep transfer: on every "go" from the parent, one progress() (with the parent idle,
// it moves at most one ring's worth), then "pushed". Parent and child never run progress() at the same time, so
// the data cannot stream through and the test knows the message is still half way when it kills the child.
void childLockstep(ShmTransport& t, int fromParent, int toParent) {
  for (;;) {
    auto go = readMsg(fromParent, 20);
    if (!go) ::_exit(21);
    (void)t.progress();
    writeMsg(toParent, "pushed");
  }
}

// A rank of a 2-rank communicator in a forked child. The child creates its transport, sends its blob over a
// pipe, reads the parent's, calls connectAll, says "connected", and runs `script`; it never outlives 30 s or its
// parent. The parent's end: `fromChild`, `toChild`.
struct ForkedRank {
  pid_t pid = -1;
  int fromChild = -1, toChild = -1;
  bool reaped = false;

  using Script = std::function<void(ShmTransport&, Connection&, int fromParent, int toParent)>;
  ForkedRank(int rank, uint64_t commId, const Script& script) {
    ignoreSigpipe();
    int up[2], down[2];
    if (::pipe2(up, O_CLOEXEC) != 0 || ::pipe2(down, O_CLOEXEC) != 0) return;
    std::fflush(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::alarm(30);
      ::close(up[0]);
      ::close(down[1]);
      const int toParent = up[1], fromParent = down[0];
      auto tr = ShmTransport::create(configFor(rank, 2, commId));
      if (!tr) ::_exit(10);
      auto blob = (*tr)->listen();
      if (!blob || !writeMsg(toParent, blob->data(), static_cast<uint32_t>(blob->size()))) ::_exit(11);
      auto peerBlob = readMsg(fromParent);
      if (!peerBlob) ::_exit(12);
      std::vector<Bytes> blobs(2);
      blobs[1 - rank] = bytesOf(*peerBlob);
      auto conns = (*tr)->connectAll(blobs, Deadline::afterSec(10));
      if (!conns) {
        writeMsg(toParent, "connect failed: " + conns.error().toString());
        ::_exit(13);
      }
      writeMsg(toParent, "connected");
      script(**tr, *(*conns)[1 - rank], fromParent, toParent);
      ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    fromChild = up[0];
    toChild = down[1];
  }
  ~ForkedRank() {
    if (pid > 0 && !reaped) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (fromChild >= 0) ::close(fromChild);
    if (toChild >= 0) ::close(toChild);
  }
  // SIGKILL, then wait until it is dead, without reaping it (its pid cannot be reused while the test runs).
  void killAndWaitDead() {
    ::kill(pid, SIGKILL);
    siginfo_t si{};
    ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT);
  }
};

// This process's side of a pair with a forked child: the transport and the connection to the child.
struct ParentRank {
  std::unique_ptr<ShmTransport> t;
  std::unique_ptr<Connection> conn;

  ~ParentRank() {
    conn.reset();
    t.reset();
  }
  // Progress until done(), bounded; false on timeout.
  bool drive(const std::function<bool()>& done, double sec) {
    const Deadline d = Deadline::afterSec(sec);
    for (long i = 0; i < 10'000'000; ++i) {
      Status st = t->progress();
      if (!st.ok()) {
        ADD_FAILURE() << "progress: " << st.toString();
        return false;
      }
      if (done()) return true;
      if (d.expired()) return false;
      if (!t->armForSleep()) continue;  // as the engine does before it sleeps
      pollfd p{t->waitFd(), POLLIN, 0};
      ::poll(&p, 1, 5);
    }
    return false;
  }
};

// `rounds` of: the child runs progress() once, then this side does (see childLockstep).
void lockstep(ForkedRank& child, ParentRank& me, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    ASSERT_TRUE(writeMsg(child.toChild, "go"));
    auto pushed = readMsg(child.fromChild);
    ASSERT_TRUE(pushed && *pushed == "pushed") << "the child stopped answering";
    ASSERT_TRUE(me.t->progress().ok());
  }
}

// Forks the child as `childRank`, connects this process as the other rank.
void connectWithChild(ForkedRank& child, ParentRank& me, int myRank, uint64_t commId) {
  ASSERT_GT(child.pid, 0) << "fork failed";
  auto tr = ShmTransport::create(configFor(myRank, 2, commId));
  ASSERT_TRUE(tr) << tr.error().toString();
  me.t = std::move(*tr);
  auto blob = me.t->listen();
  ASSERT_TRUE(blob);
  auto childBlob = readMsg(child.fromChild);
  ASSERT_TRUE(childBlob) << "no blob from the child";
  ASSERT_TRUE(writeMsg(child.toChild, blob->data(), static_cast<uint32_t>(blob->size())));
  std::vector<Bytes> blobs(2);
  blobs[1 - myRank] = bytesOf(*childBlob);
  auto conns = me.t->connectAll(blobs, Deadline::afterSec(10));
  ASSERT_TRUE(conns) << conns.error().toString();
  me.conn = std::move((*conns)[1 - myRank]);
  auto hello = readMsg(child.fromChild);
  ASSERT_TRUE(hello);
  ASSERT_EQ(*hello, "connected");
}

void expectPeerGone(const Request& r, int peer) {
  ASSERT_TRUE(r.failed()) << "state " << static_cast<int>(r.state);
  EXPECT_EQ(r.error.code(), Code::kRemote) << r.error.toString();
  EXPECT_TRUE(contains(r.error.message(), format("rank %d", peer))) << r.error.message();
  EXPECT_TRUE(contains(r.error.message(), "exited")) << r.error.message();
}

// The child (rank 1) sends 64 MiB; it dies with the message a few MiB into the ring (attach off) or with the
// attach header sent and its buffer not yet read (attach on). The parent's pending receive fails with a remote
// error within seconds, its later requests fail too, and its waitFd goes quiet again.
TEST(ShmPeerDeath, KilledInTheMiddleOfALargeMessage) {
  const uint64_t id = freshCommId();
  {
    const size_t n = size_t{64} << 20;
    ForkedRank child(1, id, [n](ShmTransport& t, Connection& c, int fromParent, int toParent) {
      Bytes out = pattern(n, 77);
      Request s;
      if (!c.isend(s, out, 1).ok()) ::_exit(20);
      writeMsg(toParent, "sending");
      childLockstep(t, fromParent, toParent);
    });
    ParentRank me;
    ASSERT_NO_FATAL_FAILURE(connectWithChild(child, me, 0, id));
    Bytes in(n);
    Request r;
    ASSERT_TRUE(me.conn->irecv(r, in, 1).ok());
    auto sending = readMsg(child.fromChild);
    ASSERT_TRUE(sending && *sending == "sending");
    // Ring: take a few MiB of it. Attach: this side does not look, or it would pull the whole message at once.
    if (ringOnly()) {
      ASSERT_NO_FATAL_FAILURE(lockstep(child, me, 4));
    }
    ASSERT_FALSE(r.finished()) << (r.failed() ? r.error.toString() : "64 MiB arrived before the kill");
    child.killAndWaitDead();
    const double t0 = nowSec();
    ASSERT_TRUE(me.drive([&] { return r.finished(); }, 5)) << "the receive from a dead peer still pends after 5 s";
    EXPECT_LT(nowSec() - t0, 3.0);
    expectPeerGone(r, 1);
    // Later requests fail at once, with the same kind of reason.
    Request late, lateSend;
    Bytes small = pattern(10, 1), in2(10);
    ASSERT_TRUE(me.conn->irecv(late, in2, 2).ok());
    ASSERT_TRUE(me.conn->isend(lateSend, small, 2).ok());
    ASSERT_TRUE(me.drive([&] { return late.finished() && lateSend.finished(); }, 5));
    expectPeerGone(late, 1);
    expectPeerGone(lateSend, 1);
    // The dead peer's pidfd does not keep waitFd readable: the engine can sleep again.
    ASSERT_TRUE(me.t->progress().ok());
    EXPECT_TRUE(me.t->armForSleep());
    EXPECT_FALSE(readable(me.t->waitFd(), 0)) << "waitFd stays readable after the peer died";
  }
  EXPECT_EQ(leftoversOf(id), "");
}

// Messages the peer finished writing before it died are still delivered; the ones it had not finished fail.
TEST(ShmPeerDeath, MessagesCompletedBeforeTheDeathAreStillDelivered) {
  const uint64_t id = freshCommId();
  {
    const size_t big = size_t{64} << 20;
    ForkedRank child(1, id, [big](ShmTransport& t, Connection& c, int fromParent, int toParent) {
      Bytes small = pattern(1000, 5), out = pattern(big, 6);
      Request s1, s2;
      if (!c.isend(s1, small, 1).ok() || !c.isend(s2, out, 2).ok()) ::_exit(20);
      writeMsg(toParent, "sent");
      childLockstep(t, fromParent, toParent);
    });
    ParentRank me;
    ASSERT_NO_FATAL_FAILURE(connectWithChild(child, me, 0, id));
    auto sent = readMsg(child.fromChild);
    ASSERT_TRUE(sent && *sent == "sent");
    ASSERT_NO_FATAL_FAILURE(lockstep(child, me, 3));  // nothing posted: what arrives is kept for later
    child.killAndWaitDead();
    me.drive([] { return false; }, 0.2);
    Bytes in1(1000), in2(big), in3(8);
    Request r1, r2, r3;
    ASSERT_TRUE(me.conn->irecv(r1, in1, 1).ok());
    ASSERT_TRUE(me.conn->irecv(r2, in2, 2).ok());
    ASSERT_TRUE(me.conn->irecv(r3, in3, 3).ok());
    ASSERT_TRUE(me.drive([&] { return r1.finished() && r2.finished() && r3.finished(); }, 5));
    EXPECT_TRUE(r1.done()) << r1.error.toString();
    EXPECT_EQ(diff(in1, pattern(1000, 5)), "");
    expectPeerGone(r2, 1);
    expectPeerGone(r3, 1);
  }
  EXPECT_EQ(leftoversOf(id), "");
}

// The parent (rank 1 this time) sends to a child that dies without ever posting its receive: the send fails (it
// waits for an acknowledgement or for ring space that will never come).
TEST(ShmPeerDeath, SendToAPeerThatDiesFails) {
  const uint64_t id = freshCommId();
  {
    ForkedRank child(0, id, [](ShmTransport&, Connection&, int, int toParent) {
      writeMsg(toParent, "idle");
      for (;;) ::pause();  // never reads: a receiver that streams would take 64 MiB in a few milliseconds
    });
    ParentRank me;
    ASSERT_NO_FATAL_FAILURE(connectWithChild(child, me, 1, id));
    ASSERT_TRUE(readMsg(child.fromChild));
    const size_t n = size_t{64} << 20;
    Bytes out = pattern(n, 8);
    Request s;
    ASSERT_TRUE(me.conn->isend(s, out, 1).ok());
    me.drive([] { return false; }, 0.1);
    ASSERT_FALSE(s.finished()) << s.error.toString();
    child.killAndWaitDead();
    ASSERT_TRUE(me.drive([&] { return s.finished(); }, 5)) << "the send to a dead peer still pends after 5 s";
    expectPeerGone(s, 0);
  }
  EXPECT_EQ(leftoversOf(id), "");
}

// The creator of a segment (the lower rank) is killed inside connectAll, after creating the segment and before
// its peer attached: nothing may stay in /dev/shm ("removed on ... crash of the owner"). Segments are anonymous
// memfds handed over by descriptor, so none may appear there at any time, during connect or after the crash.
TEST(ShmPeerDeath, CreatorKilledDuringConnectLeavesNoSegment) {
  const uint64_t id = freshCommId();
  const std::string prefix = segmentPrefix(id);
  {
    ForkedRank child(0, id, [](ShmTransport&, Connection&, int, int) {});
    ASSERT_GT(child.pid, 0);
    auto tr = ShmTransport::create(configFor(1, 2, id));
    ASSERT_TRUE(tr);
    auto blob = (*tr)->listen();
    ASSERT_TRUE(blob);
    ASSERT_TRUE(readMsg(child.fromChild));
    ASSERT_TRUE(writeMsg(child.toChild, blob->data(), static_cast<uint32_t>(blob->size())));
    // Rank 1 never calls connectAll; rank 0 creates the segment and waits for the attach.
    const Deadline d = Deadline::afterSec(0.5);
    while (!d.expired()) {
      ASSERT_TRUE(devShmEntries(prefix).empty()) << "a named segment appeared in /dev/shm during connect";
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    child.killAndWaitDead();
  }
  std::string left = leftoversOf(id);
  EXPECT_EQ(left, "") << "a segment outlived its creator, killed inside connectAll";
  for (const auto& name : devShmEntries(prefix)) ::shm_unlink(("/" + name).c_str());  // keep /dev/shm clean
}

// The attach path in particular: the child's attach header is in the ring, the parent's receive is posted, and
// the child dies before the parent read its buffer. Only meaningful with attach on; the ring variant is
// KilledInTheMiddleOfALargeMessage in the ShmRingPath child.
TEST(ShmPeerDeath, KilledBeforeItsAttachBufferWasRead) {
  if (ringOnly()) GTEST_SKIP() << "cross-memory attach is off";
  const uint64_t id = freshCommId();
  {
    const size_t n = cmaThreshold() + 12345;
    ForkedRank child(1, id, [n](ShmTransport& t, Connection& c, int fromParent, int toParent) {
      Bytes out = pattern(n, 9);
      Request s;
      if (!c.isend(s, out, 1).ok()) ::_exit(20);
      writeMsg(toParent, "sent");
      childLockstep(t, fromParent, toParent);
    });
    ParentRank me;
    ASSERT_NO_FATAL_FAILURE(connectWithChild(child, me, 0, id));
    ASSERT_TRUE(readMsg(child.fromChild));
    child.killAndWaitDead();
    Bytes in(n);
    Request r;
    ASSERT_TRUE(me.conn->irecv(r, in, 1).ok());
    ASSERT_TRUE(me.drive([&] { return r.finished(); }, 5));
    expectPeerGone(r, 1);
  }
  EXPECT_EQ(leftoversOf(id), "");
}

// ---- every data test again with cross-memory attach off: a child process ----

TEST(ShmRingPath, EveryDataTestWithCrossMemoryAttachOff) {
  if (std::getenv("HC_TEST_SHM_CHILD")) GTEST_SKIP() << "this is the child";
  std::string output;
  int rc = testing::runChild(
      {"HETCOMM_SHM_CMA_BYTES=", "HC_TEST_SHM_CHILD=", "GTEST_"}, {"HETCOMM_SHM_CMA_BYTES=0", "HC_TEST_SHM_CHILD=1"},
      "ShmRingPathChild.*:*ShmSizes.*:ShmLarge.*:ShmData.*:ShmErrors.*:ShmFailure.*:ShmWait.*:*Conformance.*/shm:"
      "ShmPeerDeath.KilledInTheMiddleOfALargeMessage:ShmPeerDeath.MessagesCompleted*:"
      "ShmPeerDeath.SendToAPeerThatDiesFails:ShmZzLeftovers.*",
      &output, 240);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_TRUE(contains(output, "HC_SHM_RING_CHILD_OK")) << output;
  EXPECT_FALSE(contains(output, "[  FAILED  ]")) << output;
  // Its timings, for the log.
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("[ info ]", 0) == 0) std::printf("child %s\n", line.c_str());
}

TEST(ShmRingPathChild, AttachIsOff) {
  if (!std::getenv("HC_TEST_SHM_CHILD")) GTEST_SKIP() << "runs only in the child of ShmRingPath.*";
  EXPECT_TRUE(ringOnly()) << "HETCOMM_SHM_CMA_BYTES=" << (std::getenv("HETCOMM_SHM_CMA_BYTES") ?: "(unset)");
  if (!HasFailure()) std::printf("HC_SHM_RING_CHILD_OK\n");
}

// ---- whether attach pays: measured where HETCOMM_SHM_CMA_BYTES is unset ----

TEST(ShmAttachMeasure, ARegionWithoutAChunkIsRefused) {
  auto none = measureAttach(1 << 20, 0);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(std::string(none.error().message()), "no chunk of 0")) << none.error().message();
  auto small = measureAttach(4096, 8192);
  ASSERT_FALSE(small.has_value());
  EXPECT_TRUE(contains(std::string(small.error().message()), "4096 bytes holds no chunk of 8192"))
      << small.error().message();
}

TEST(ShmAttachMeasure, AttachPaysWhenFasterThanTwoCopies) {
  auto m = measureAttach(4 << 20, 256 << 10);
  ASSERT_TRUE(m.has_value()) << m.error().message();
  EXPECT_GT(m->memcpyGBps, 0.01);
  EXPECT_GT(m->attachGBps, 0.01);
  EXPECT_LT(m->memcpyGBps, 1e4);  // a clock that did not move would give an absurd rate
  EXPECT_LT(m->attachGBps, 1e4);
  // Same bytes on both sides: attach's time under twice memcpy's is its rate over half of memcpy's (within
  // rounding at the margin).
  if (std::abs(m->attachGBps * 2 / m->memcpyGBps - 1) > 1e-6) EXPECT_EQ(m->pays, m->attachGBps * 2 > m->memcpyGBps);
  std::printf("[ info ] attach %.1f GB/s, memcpy %.1f GB/s: %s\n", m->attachGBps, m->memcpyGBps,
              m->pays ? "attach pays" : "the ring's two copies are faster");
}

TEST(ShmAttachChoice, UnsetTheMeasureDecides) {
  if (std::getenv("HC_TEST_SHM_MEASURE")) GTEST_SKIP() << "this is the child";
  std::string output;
  int rc = testing::runChild({"HETCOMM_SHM_CMA_BYTES=", "HC_TEST_SHM_CHILD=", "GTEST_"}, {"HC_TEST_SHM_MEASURE=1"},
                             "ShmAttachChoiceChild.*", &output, 60);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_TRUE(contains(output, "HC_SHM_MEASURE_CHILD_OK")) << output;
}

TEST(ShmAttachChoiceChild, ConnectionsReadAsMeasured) {
  if (!std::getenv("HC_TEST_SHM_MEASURE")) GTEST_SKIP() << "runs only in the child of ShmAttachChoice.*";
  ASSERT_EQ(std::getenv("HETCOMM_SHM_CMA_BYTES"), nullptr);
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const std::string how = attachChosen() ? "ring + cross-memory attach" : "ring";
  EXPECT_EQ(g.conn(0, 1).describe(), "r0->r1/shm(" + how + ")");
  EXPECT_EQ(g.conn(1, 0).describe(), "r1->r0/shm(" + how + ")");
  // Data goes through either way, at a size attach would carry.
  ASSERT_NO_FATAL_FAILURE(testing::expectBothDirectionsReceivesFirst(g, 512 << 10, 30));
  if (!HasFailure()) std::printf("HC_SHM_MEASURE_CHILD_OK\n");
}

// ---- last: nothing of ours left in /dev/shm ----

TEST(ShmZzLeftovers, NoSegmentOfThisProcessInDevShm) {
  std::string left;
  for (uint64_t id : usedCommIds()) left += leftoversOf(id);
  EXPECT_EQ(left, "");
  // Other hetcomm programs may run on this machine; their segments are listed, not judged.
  auto others = devShmEntries("hetcomm");
  if (!others.empty()) std::printf("[ info ] other hetcomm entries in /dev/shm: %zu\n", others.size());
}

}  // namespace
}  // namespace hetcomm::transport::shm
