// The UCX transport (UCP active messages). As in the TCP and shm tests, 2 or 3 ranks live in one process:
// listen() on each, connectAll runs on a thread per rank (it blocks until every hello is in), then ONE thread
// drives every transport's progress() in a loop bounded by iterations and wall time, arming each transport
// (armForSleep) before it sleeps briefly in poll() on their fds, as the progress engine does. Checks data
// integrity at eager and rendezvous sizes, receives posted before and after the data, many tags out of order,
// size mismatches, sendAbort and close, malformed blobs, authentication and deadlines.
//
// UCX reads UCX_TLS when the process's first UCP context is created, and the transport shares one context per
// process (SharedContext). So this process runs UCX over TCP (UCX_TLS=tcp is set before main, while no thread
// exists), and UcxOverSharedMemory.* re-runs every Ucx* test of this file in a child process (posix_spawn of this
// binary, as tcp_test.cc and shm_test.cc do) with UCX_TLS=sm and HC_TEST_UCX_CHILD=1. Blobs whose address UCX
// never made are tried in children too (UcxConnect.BlobWith* starts UcxBlobChild.*), so that a crash inside UCX
// fails one test instead of ending the binary.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/strings.h"
#include "tests/support/transport_harness.h"
#include "transports/ucx/ucx_transport.h"

namespace hetcomm::transport::ucx {
namespace {

using testing::Bytes;
using testing::bytesOf;
using testing::configFor;
using testing::ConnectOutcome;
using testing::Conns;
using testing::contains;
using testing::diff;
using testing::expectDelivered;
using testing::expectManyTagsDelivered;
using testing::pattern;
using testing::secretOf;

bool isSmChild() { return std::getenv("HC_TEST_UCX_CHILD") != nullptr; }

// Before main, while this process has no thread: this process's UCX runs over TCP; the child runs over shared
// memory (its parent set UCX_TLS=sm for it).
const bool kTlsChosen = [] {
  if (!isSmChild()) ::setenv("UCX_TLS", "tcp", 1);
  return true;
}();

// What this process's UCX is allowed to use: "tcp" here, "sm" in the child.
std::string expectedTls() { return isSmChild() ? "sm" : "tcp"; }

// Mirrors ucx_transport.cc: from this size on UCX surely uses rendezvous, so a message waits in the sender's
// memory until its receive is posted.
constexpr size_t kRendezvousBytes = 256 << 10;

std::string textOf(const Bytes& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

// A comm id no other test of this process uses (UCX drops messages of another communicator).
uint64_t freshCommId() { return testing::freshCommId(0x5c); }

// n transports of one communicator with a comm id of their own (UCX drops messages of another communicator),
// torn down a rank per thread at once.
struct Group : testing::ThreadedTeardownGroup {
  Group() : ThreadedTeardownGroup(0x5c) {}
};

// Makes and listens on every rank, rank r with secrets[r], then runs connectAll on a thread per rank.
// participates[r] false: rank r listens but never calls connectAll (a peer that hangs).
ConnectOutcome connectGroup(Group& g, int n, const std::vector<crypto::Secret>& secrets, double deadlineSec,
                            std::vector<bool> participates = {}) {
  return testing::connectGroup(
      g, n, [&](int r) { return testing::asTransport(UcxTransport::create(configFor(r, n, secrets[r], g.commId))); },
      deadlineSec, std::move(participates));
}

// A connected group of n ranks with one secret; fails the test when set-up fails.
void makeGroup(Group& g, int n) {
  testing::makeGroup(
      g, n, [&](int r) { return testing::asTransport(UcxTransport::create(configFor(r, n, secretOf(1), g.commId))); });
}

// One message from `from` to `to` and back, checked: the pair works.
void expectPairWorks(Group& g, int from, int to, uint64_t tag, size_t n = 4099) {
  Bytes out = pattern(n, static_cast<uint32_t>(tag)), in(n);
  Request s, r;
  ASSERT_TRUE(g.conn(to, from).irecv(r, in, tag).ok());
  ASSERT_TRUE(g.conn(from, to).isend(s, out, tag).ok());
  ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }, 20)) << from << "->" << to << " timed out";
  EXPECT_TRUE(s.done()) << s.error.toString();
  EXPECT_TRUE(r.done()) << r.error.toString();
  EXPECT_EQ(r.bytes, n);
  EXPECT_EQ(diff(in, out), "");
}

// ---- connection set-up ----

TEST(UcxConnect, TwoRanks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  EXPECT_EQ(allowedTransports(), expectedTls());
  EXPECT_EQ(g.t[0]->properties().kind, Kind::kUcx);
  EXPECT_EQ(g.t[0]->properties().name, "ucx(" + expectedTls() + ")");
  EXPECT_GT(g.t[0]->properties().bandwidthGBps, 0);
  EXPECT_GE(g.t[0]->waitFd(), 0);
  EXPECT_GE(g.t[1]->waitFd(), 0);
  EXPECT_NE(g.t[0]->waitFd(), g.t[1]->waitFd());
  EXPECT_EQ(g.conn(0, 1).describe(), "r0->r1/ucx(" + expectedTls() + ")");
  EXPECT_EQ(g.conn(1, 0).describe(), "r1->r0/ucx(" + expectedTls() + ")");
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 0, 1, 1));
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 1, 0, 1));
}

TEST(UcxConnect, ThreeRanksEveryPairWorks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
  EXPECT_EQ(g.conn(2, 0).describe(), "r2->r0/ucx(" + expectedTls() + ")");
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      if (a != b) {
        SCOPED_TRACE(format("%d->%d", a, b));
        ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, a, b, 10 + a * 3 + b));
      }
}

TEST(UcxConnect, JunkBlobIsAClearRemoteError) {
  auto tr = UcxTransport::create(configFor(0, 2, secretOf(1), freshCommId()));
  ASSERT_TRUE(tr) << tr.error().toString();
  ASSERT_TRUE((*tr)->listen());
  for (const std::string& junk :
       {std::string("hello=world\n"), std::string("\x01\x02\x03garbage", 10),
        std::string("hcucx=1\nhost=h\npid=1\nnonce=zz\naddr=00\n"),
        std::string("hcucx=2\nhost=h\npid=1\nnonce=00000000000000000000000000000000\naddr=0000\n"),
        std::string("hcucx=1\nhost=h\npid=1\nnonce=00000000000000000000000000000000\naddr=abc\n"),
        std::string("hcucx=1\npid=1\nnonce=00000000000000000000000000000000\naddr=0000\n")}) {
    SCOPED_TRACE("blob: " + junk);
    const double t0 = nowSec();
    auto r = (*tr)->connectAll({{}, bytesOf(junk)}, Deadline::afterSec(5));
    ASSERT_FALSE(r) << "connected with a junk blob";
    EXPECT_EQ(r.error().code(), Code::kRemote) << r.error().toString();
    EXPECT_TRUE(contains(r.error().message(), "rank 1's address blob is malformed")) << r.error().message();
    EXPECT_LT(nowSec() - t0, 1.0) << "a malformed blob is known at once; no need to wait for the deadline";
  }
  // The transport is still usable after the failures: a proper pair connects through a fresh group.
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 0, 1, 5));
}

TEST(UcxConnect, TruncatedBlobIsAClearRemoteError) {
  // A real blob cut short (the bootstrap lost its tail): the address line ends with an odd number of hex digits,
  // or the nonce and address lines are gone.
  auto a = UcxTransport::create(configFor(0, 2, secretOf(1), freshCommId()));
  auto b = UcxTransport::create(configFor(1, 2, secretOf(1), freshCommId()));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->listen());
  auto blob = (*b)->listen();
  ASSERT_TRUE(blob) << blob.error().toString();
  const std::string text = textOf(*blob);
  ASSERT_TRUE(contains(text, "hcucx=1\n")) << text;
  const size_t addr = text.find("\naddr=");
  ASSERT_NE(addr, std::string::npos) << text;
  for (size_t cut : {size_t{10}, addr, addr + 6 + 5}) {
    SCOPED_TRACE(format("cut at %zu of %zu", cut, text.size()));
    auto r = (*a)->connectAll({{}, bytesOf(text.substr(0, cut))}, Deadline::afterSec(5));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kRemote) << r.error().toString();
    EXPECT_TRUE(contains(r.error().message(), "rank 1's address blob is malformed")) << r.error().message();
  }
}

TEST(UcxConnect, PeerThatNeverConnectsTimesOutNamingIt) {
  // Rank 1 listens but never calls connectAll (its worker never progresses): rank 0 gives up at its deadline.
  for (int silent : {1, 0}) {
    SCOPED_TRACE(format("silent rank %d", silent));
    Group g;
    const double deadlineSec = 1.0;
    auto out = connectGroup(g, 2, {secretOf(1), secretOf(1)}, deadlineSec, {silent != 0, silent != 1});
    ASSERT_EQ(out.results.size(), 2u);
    const int active = 1 - silent;
    ASSERT_FALSE(out.results[active]) << "connected to a rank that never called connectAll";
    const Status& st = out.results[active].error();
    EXPECT_EQ(st.code(), Code::kTimeout) << st.toString();
    EXPECT_TRUE(contains(st.message(), format("rank %d timed out connecting", active))) << st.message();
    EXPECT_TRUE(contains(st.message(), format("no hello from rank(s) %d", silent))) << st.message();
    EXPECT_TRUE(contains(st.message(), "UCX_TLS=" + expectedTls())) << st.message();
    EXPECT_GE(out.seconds[active], deadlineSec - 0.05);
    EXPECT_LT(out.seconds[active], deadlineSec + 3.0);
  }
}

TEST(UcxConnect, ThreeRanksOneSilentTimesOutNamingOnlyIt) {
  Group g;
  auto out = connectGroup(g, 3, std::vector<crypto::Secret>(3, secretOf(1)), 1.0, {true, false, true});
  ASSERT_EQ(out.results.size(), 3u);
  for (int r : {0, 2}) {
    SCOPED_TRACE(format("rank %d", r));
    ASSERT_FALSE(out.results[r]);
    EXPECT_EQ(out.results[r].error().code(), Code::kTimeout) << out.results[r].error().toString();
    EXPECT_TRUE(contains(out.results[r].error().message(), "no hello from rank(s) 1 "))
        << out.results[r].error().message();
  }
}

// ---- authentication ----

// Rank `liar` has a different secret. Nobody connects, nobody hangs, and the peers that saw the liar's hello say
// it failed authentication. A rank may instead time out waiting for a hello (the liar's side may tear down
// before its own hello is out), naming the rank it waited for; at least one rank names the authentication.
void expectRefused(int n, int liar) {
  Group g;
  std::vector<crypto::Secret> secrets(n, secretOf(1));
  secrets[liar] = secretOf(2);
  const double deadlineSec = 3.0;
  auto out = connectGroup(g, n, secrets, deadlineSec);
  ASSERT_EQ(static_cast<int>(out.results.size()), n);
  int authFailures = 0;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(format("rank %d", r));
    ASSERT_FALSE(out.results[r]) << "connected despite rank " << liar << "'s wrong secret";
    const Status& st = out.results[r].error();
    EXPECT_LT(out.seconds[r], deadlineSec + 3.0);
    if (st.code() == Code::kRemote) {
      EXPECT_TRUE(contains(st.message(), "failed authentication")) << st.message();
      EXPECT_TRUE(contains(st.message(), "HETCOMM_SECRET")) << st.message();
      // Every rank checks each peer's worker address against the secret before UCX sees it, so every rank
      // refuses the liar (the honest ones) or everyone else (the liar) there, by rank.
      if (r != liar) {
        EXPECT_TRUE(contains(st.message(), format("rank %d's worker address", liar))) << st.message();
      }
      ++authFailures;
    } else {
      EXPECT_EQ(st.code(), Code::kTimeout) << st.toString();
      EXPECT_TRUE(contains(st.message(), "no hello from rank(s)")) << st.message();
    }
  }
  EXPECT_GE(authFailures, 1) << "no rank said why: every one timed out";
}

TEST(UcxAuth, RankZeroWithTheWrongSecretIsRefused) { expectRefused(2, 0); }
TEST(UcxAuth, RankOneWithTheWrongSecretIsRefused) { expectRefused(2, 1); }
TEST(UcxAuth, OneOfThreeWithTheWrongSecretIsRefused) { expectRefused(3, 2); }

TEST(UcxAuth, OtherCommunicatorsHellosAreIgnored) {
  // Same secret, different comm id: UCX delivers the hellos, the transport drops them (another communicator's
  // traffic), and both sides time out rather than connect.
  Group g;  // for its teardown; the two ranks get different comm ids
  g.t.resize(2);
  for (int r = 0; r < 2; ++r) {
    auto tr = UcxTransport::create(configFor(r, 2, secretOf(1), freshCommId()));
    ASSERT_TRUE(tr) << tr.error().toString();
    g.t[r] = std::move(*tr);
  }
  auto ba = g.t[0]->listen(), bb = g.t[1]->listen();
  ASSERT_TRUE(ba && bb);
  std::optional<Result<Conns>> ra, rb;
  std::thread ta([&] { ra.emplace(g.t[0]->connectAll({{}, *bb}, Deadline::afterSec(1))); });
  std::thread tb([&] { rb.emplace(g.t[1]->connectAll({*ba, {}}, Deadline::afterSec(1))); });
  ta.join();
  tb.join();
  ASSERT_FALSE(*ra);
  ASSERT_FALSE(*rb);
  EXPECT_EQ(ra->error().code(), Code::kTimeout) << ra->error().toString();
  EXPECT_EQ(rb->error().code(), Code::kTimeout) << rb->error().toString();
}

// ---- data ----

// 0 B, 1 B and 8 KiB are eager everywhere; 64 KiB may go either way (UCX's own thresholds); 1 MiB and 16 MiB are
// rendezvous (lateReceiveIsFree).
class UcxSizes : public ::testing::TestWithParam<size_t> {};

TEST_P(UcxSizes, ReceivePostedAfterTheDataArrived) {
  const size_t n = GetParam();
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes out01 = pattern(n, 3), out10 = pattern(n, 4);
  Request s01, s10;
  ASSERT_TRUE(g.conn(0, 1).isend(s01, out01, 5).ok());
  ASSERT_TRUE(g.conn(1, 0).isend(s10, out10, 6).ok());
  // Long enough for every message (or its rendezvous announcement) to reach the receiver and wait there.
  g.driveFor(0.3);
  if (g.conn(0, 1).lateReceiveIsFree(n)) {
    // Rendezvous: the data is still in the sender's memory, so its send cannot have finished.
    EXPECT_FALSE(s01.finished()) << "a rendezvous-size send finished before its receive was posted";
    EXPECT_FALSE(s10.finished()) << "a rendezvous-size send finished before its receive was posted";
  }
  const bool eager01 = s01.done(), eager10 = s10.done();
  if (n <= (8u << 10)) {
    // Small enough to be eager over every UCX transport: sent (copied out) before any receive exists, so the
    // receives below find the data already here.
    EXPECT_TRUE(eager01 && eager10) << "an eager-size send did not finish without its receive";
  }
  Bytes in01(n), in10(n);
  Request r01, r10;
  ASSERT_TRUE(g.conn(1, 0).irecv(r01, in01, 5).ok());
  ASSERT_TRUE(g.conn(0, 1).irecv(r10, in10, 6).ok());
  // Eager data that is already here completes inside irecv, without another progress().
  if (eager01) {
    EXPECT_TRUE(r01.done()) << "state " << static_cast<int>(r01.state) << " " << r01.error.toString();
  }
  if (eager10) {
    EXPECT_TRUE(r10.done()) << "state " << static_cast<int>(r10.state) << " " << r10.error.toString();
  }
  ASSERT_NO_FATAL_FAILURE(expectDelivered(g, n, {&r01, &r10, &s01, &s10}, {{&in01, &out01}, {&in10, &out10}}));
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxSizes, ::testing::Values(0, 1, 8u << 10, 64u << 10, 1u << 20, 16u << 20),
                         [](const auto& info) { return "bytes" + std::to_string(info.param); });

TEST(UcxData, LateReceiveIsFreeFromTheRendezvousSizeOn) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  for (int from : {0, 1}) {
    Connection& c = g.conn(from, 1 - from);
    EXPECT_FALSE(c.lateReceiveIsFree(0));
    EXPECT_FALSE(c.lateReceiveIsFree(1));
    EXPECT_FALSE(c.lateReceiveIsFree(64u << 10));
    EXPECT_FALSE(c.lateReceiveIsFree(kRendezvousBytes - 1));
    EXPECT_TRUE(c.lateReceiveIsFree(kRendezvousBytes));
    EXPECT_TRUE(c.lateReceiveIsFree(1u << 20));
    EXPECT_TRUE(c.lateReceiveIsFree(size_t{1} << 34));
  }
}

TEST(UcxData, OddSizesAroundTheThresholds) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  uint64_t tag = 1000;
  for (size_t n : {size_t{7}, size_t{8191}, size_t{8193}, size_t{65537}, kRendezvousBytes - 1, kRendezvousBytes,
                   kRendezvousBytes + 1, (size_t{3} << 20) + 5}) {
    SCOPED_TRACE(format("%zu bytes", n));
    ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 0, 1, ++tag, n));
    ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 1, 0, ++tag, n));
  }
}

TEST(UcxData, ManyTagsInFlightInAnyOrderBetweenThreeRanks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
  // Eager, middling and rendezvous sizes mixed, so messages of both protocols overtake each other. A third of the
  // receives first.
  ASSERT_NO_FATAL_FAILURE(expectManyTagsDelivered(
      g, 24, {0, 1, 7, 8192, 65536 + 3, kRendezvousBytes + 1, (1u << 20) + 7, 33}, 0xABCD00000000ull, 3, 0.1));
}

// transport.h: a receive with tag T completes with the message sent with tag T, in whatever order they arrive.
TEST(UcxData, ReceivesMatchByTagNotByArrivalOrder) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const size_t sizes[] = {100, 2u << 20, 5000, 0};
  const uint64_t tags[] = {40, 30, 20, 10};
  Bytes out[4], in[4];
  Request s[4], r[4];
  for (int i = 0; i < 4; ++i) {
    out[i] = pattern(sizes[i], 50 + i);
    in[i].resize(sizes[i]);
    ASSERT_TRUE(g.conn(0, 1).isend(s[i], out[i], tags[i]).ok());
  }
  g.driveFor(0.05);
  for (int i = 3; i >= 0; --i) ASSERT_TRUE(g.conn(1, 0).irecv(r[i], in[i], tags[i]).ok());
  ASSERT_TRUE(g.drive([&] {
    for (int i = 0; i < 4; ++i)
      if (!s[i].finished() || !r[i].finished()) return false;
    return true;
  }));
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(r[i].done()) << i << ": " << r[i].error.toString();
    EXPECT_EQ(diff(in[i], out[i]), "") << i;
  }
}

TEST(UcxData, ATagCanBeReusedOnceItsMessageIsDone) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(format("round %d", round));
    ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 0, 1, 3, round % 2 ? (1u << 20) + round : 64 + round));
  }
}

TEST(UcxWait, ArmedTransportWakesWhenAMessageArrives) {
  // The engine sleeps on waitFd() after armForSleep() said true: a message from the peer must make the fd readable,
  // without the receiver calling progress() in between.
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  g.driveFor(0.05);  // let set-up traffic settle
  for (size_t n : {size_t{1}, size_t{2} << 20}) {
    SCOPED_TRACE(format("%zu bytes", n));
    Bytes out = pattern(n, 8), in(n);
    Request s, r;
    ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 9 + n).ok());
    ASSERT_TRUE(g.t[1]->progress().ok());
    bool armed = false;
    for (int i = 0; i < 100 && !armed; ++i) {
      armed = g.t[1]->armForSleep();
      if (!armed) {
        ASSERT_TRUE(g.t[1]->progress().ok());
      }
    }
    ASSERT_TRUE(armed) << "rank 1 never had nothing to do";
    pollfd p{g.t[1]->waitFd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "readable right after arming, with nothing sent";
    ASSERT_TRUE(g.conn(0, 1).isend(s, out, 9 + n).ok());
    // Only the sender progresses while we wait for the receiver's fd.
    const Deadline d = Deadline::afterSec(10);
    bool woke = false;
    while (!woke && !d.expired()) {
      ASSERT_TRUE(g.t[0]->progress().ok());
      pollfd q{g.t[1]->waitFd(), POLLIN, 0};
      woke = ::poll(&q, 1, 5) == 1 && (q.revents & POLLIN);
    }
    EXPECT_TRUE(woke) << "rank 1's waitFd never became readable";
    ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }));
    EXPECT_TRUE(r.done()) << r.error.toString();
    EXPECT_EQ(diff(in, out), "");
  }
}

// ---- errors ----

// A receive of the wrong size fails naming both sizes, and the connection stays usable: the next message of that
// tag is the one the next receive gets. Posted first or after the arrival, eager or rendezvous.
void expectSizeMismatch(bool postedFirst, size_t sent, size_t expected) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes out = pattern(sent, 1), in(expected);
  Request s, r;
  if (postedFirst) {
    ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 9).ok());
  }
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 9).ok());
  if (!postedFirst) {
    g.driveFor(0.2);
    ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 9).ok());
  }
  // The sender's request finishes too (a rejected rendezvous is released, not left waiting).
  ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }, 20))
      << "receive " << (r.finished() ? "finished" : "pending") << ", send " << (s.finished() ? "finished" : "pending");
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kInvalidUsage) << r.error.toString();
  EXPECT_TRUE(contains(r.error.message(), format("rank 0 sent %zu bytes", sent))) << r.error.message();
  EXPECT_TRUE(contains(r.error.message(), format("rank 1 expected %zu", expected))) << r.error.message();
  EXPECT_FALSE(s.failed()) << s.error.toString();
  g.driveFor(0.05);
  // The rejected message is gone: the tag carries the next message, and nothing of the old one.
  Bytes out2 = pattern(expected, 2), in2(expected);
  Request s2, r2;
  ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 9).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s2, out2, 9).ok());
  ASSERT_TRUE(g.drive([&] { return r2.finished() && s2.finished(); }, 20));
  EXPECT_TRUE(r2.done()) << r2.error.toString();
  EXPECT_TRUE(s2.done()) << s2.error.toString();
  EXPECT_EQ(diff(in2, out2), "");
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 1, 0, 10));
}

TEST(UcxErrors, EagerSizeMismatchReceivePostedFirst) { expectSizeMismatch(true, 200, 100); }
TEST(UcxErrors, EagerSizeMismatchReceivePostedAfterArrival) { expectSizeMismatch(false, 64, 65); }
TEST(UcxErrors, RendezvousSizeMismatchReceivePostedFirst) { expectSizeMismatch(true, 1u << 20, (1u << 20) - 1); }
TEST(UcxErrors, RendezvousSizeMismatchReceivePostedAfterArrival) {
  expectSizeMismatch(false, (2u << 20) + 1, 2u << 20);
}
TEST(UcxErrors, ZeroBytesExpectedButDataSent) { expectSizeMismatch(true, 1, 0); }

TEST(UcxFailure, SendAbortWithoutPendingReceiveFailsTheNextOne) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
  ASSERT_NO_FATAL_FAILURE(expectAbortFailsTheNextReceive(g));
  // The abort concerns that connection only: rank 0 and rank 2 still talk.
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 0, 2, 2));
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 2, 0, 3));
}

TEST(UcxFailure, SendAbortFailsEveryPendingReceiveOfThatPeer) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes a(10), b(1u << 20), c(0);
  Request ra, rb, rc;
  ASSERT_TRUE(g.conn(0, 1).irecv(ra, a, 1).ok());
  ASSERT_TRUE(g.conn(0, 1).irecv(rb, b, 2).ok());
  ASSERT_TRUE(g.conn(0, 1).irecv(rc, c, 3).ok());
  g.conn(1, 0).sendAbort("bye from rank 1");
  ASSERT_TRUE(g.drive([&] { return ra.finished() && rb.finished() && rc.finished(); }, 10));
  for (Request* r : {&ra, &rb, &rc}) {
    EXPECT_TRUE(r->failed());
    EXPECT_EQ(r->error.code(), Code::kRemote);
    EXPECT_TRUE(contains(r->error.message(), "bye from rank 1")) << r->error.message();
  }
}

TEST(UcxFailure, CloseFailsPendingRequestsAndIsIdempotent) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  // A receive nobody sends to, a rendezvous-size send nobody receives, and an eager one.
  Bytes in(10), big = pattern(2u << 20, 1), small = pattern(10, 2);
  Request r, sBig;
  ASSERT_TRUE(g.conn(0, 1).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(sBig, big, 2).ok());
  g.driveFor(0.1);
  ASSERT_FALSE(r.finished());
  ASSERT_FALSE(sBig.finished()) << "a 2 MiB send finished without a receive";
  g.conn(0, 1).close(invalidUsage("closing for the test"));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kInvalidUsage);
  EXPECT_EQ(r.error.message(), "closing for the test");
  ASSERT_TRUE(sBig.failed());
  EXPECT_EQ(sBig.error.message(), "closing for the test");
  g.conn(0, 1).close(invalidUsage("second close"));  // no effect, no crash
  Request r2, s2;
  ASSERT_TRUE(g.conn(0, 1).irecv(r2, in, 3).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s2, small, 3).ok());
  EXPECT_TRUE(r2.failed());
  EXPECT_EQ(r2.error.message(), "closing for the test");
  EXPECT_TRUE(s2.failed());
  EXPECT_EQ(s2.error.message(), "closing for the test");
  // The requests stay as close left them while the transports keep progressing (late UCX callbacks touch nothing).
  g.driveFor(0.2);
  EXPECT_EQ(r.error.message(), "closing for the test");
  EXPECT_EQ(sBig.error.message(), "closing for the test");
}

TEST(UcxFailure, CloseWithAnEarlyMessageWaitingReleasesIt) {
  // Rank 1 has an unreceived eager message and an unreceived rendezvous announcement from rank 0 when it closes:
  // close releases both (no leak, no crash at teardown), and its own late receives fail with the close reason.
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
  Bytes small = pattern(100, 1), big = pattern(1u << 20, 2);
  Request s1, s2;
  ASSERT_TRUE(g.conn(0, 1).isend(s1, small, 1).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s2, big, 2).ok());
  g.driveFor(0.2);
  g.conn(1, 0).close(invalidUsage("rank 1 closes"));
  Bytes in(100);
  Request r;
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 1).ok());
  EXPECT_TRUE(r.failed());
  EXPECT_EQ(r.error.message(), "rank 1 closes");
  g.driveFor(0.2);
  // Ranks 0 and 2, and 1 and 2, still talk.
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 0, 2, 5));
  ASSERT_NO_FATAL_FAILURE(expectPairWorks(g, 2, 1, 6));
}

// ---- child processes: every Ucx* test again over shared memory, and blobs that may crash UCX ----

// Runs this binary again with the filter and the environment given (UCX_TLS and HC_TEST_UCX_* come only from
// extraEnv); returns its exit status and fills its output.
int runChild(const std::vector<std::string>& extraEnv, const std::string& filter, std::string* output,
             double timeoutSec) {
  return testing::runChild({"UCX_TLS=", "HC_TEST_UCX_", "GTEST_"}, extraEnv, filter, output, timeoutSec);
}

TEST(UcxOverSharedMemory, EveryTestAgainWithUcxTlsSm) {
  if (isSmChild()) GTEST_SKIP() << "this is the child";
  std::string output;
  // Not the blob tests: they start children of their own, and what they check (parsing a peer's address) is the
  // same code whatever UCX_TLS says.
  int rc = runChild({"UCX_TLS=sm", "HC_TEST_UCX_CHILD=1"},
                    "Ucx*:*Conformance.*/ucx:-UcxOverSharedMemory.*:UcxConnect.BlobWith*:UcxBlobChild.*", &output, 400);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_TRUE(contains(output, "HC_UCX_SM_CHILD_OK")) << output;
  EXPECT_FALSE(contains(output, "[  FAILED  ]")) << output;
  EXPECT_TRUE(contains(output, "[  PASSED  ]")) << output;
}

TEST(UcxSmChild, RunsOverSharedMemory) {
  if (!isSmChild()) GTEST_SKIP() << "runs only in the child of UcxOverSharedMemory.*";
  EXPECT_EQ(allowedTransports(), "sm");
  auto tr = UcxTransport::create(configFor(0, 1, secretOf(1), freshCommId()));
  ASSERT_TRUE(tr) << tr.error().toString();
  EXPECT_EQ((*tr)->properties().name, "ucx(sm)");
  if (!HasFailure()) std::printf("HC_UCX_SM_CHILD_OK\n");
}

// A blob that is well formed (every field, the address in even hex) but whose address UCX never made: what a
// peer of another version, or a corrupted bootstrap record, hands over. ucp_ep_create parses the address without
// knowing its length, so the transport must not hand it unchecked bytes. Runs in a child, so a crash is a failed
// test here rather than the end of this binary.
std::string blobWithAddress(const std::string& addrHex) {
  return "hcucx=1\nhost=other-host\npid=1\nnonce=00112233445566778899aabbccddeeff\naddr=" + addrHex + "\n";
}

void expectBlobChildPasses(const std::string& test) {
  if (std::getenv("HC_TEST_UCX_BLOB_CHILD")) GTEST_SKIP() << "this is the child";
  std::vector<std::string> env = {"UCX_TLS=" + expectedTls(), "HC_TEST_UCX_BLOB_CHILD=1"};
  if (isSmChild()) env.push_back("HC_TEST_UCX_CHILD=1");
  std::string output;
  int rc = runChild(env, "UcxBlobChild." + test, &output, 60);
  EXPECT_EQ(rc, 0) << "the child " << (rc > 128 ? "died" : "failed") << ":\n" << output;
  EXPECT_TRUE(contains(output, "HC_UCX_BLOB_CHILD_OK " + test)) << output;
}

TEST(UcxConnect, BlobWithANonUcxAddressIsAnErrorNotACrash) { expectBlobChildPasses("NonUcxAddress"); }
TEST(UcxConnect, BlobWithATruncatedAddressIsAnErrorNotACrash) { expectBlobChildPasses("TruncatedAddress"); }

// connectAll with the blob must fail, naming rank 1, before its deadline, and the process must go on.
void expectBlobRefused(const std::string& blob) {
  auto tr = UcxTransport::create(configFor(0, 2, secretOf(1), freshCommId()));
  ASSERT_TRUE(tr) << tr.error().toString();
  ASSERT_TRUE((*tr)->listen());
  const double t0 = nowSec();
  auto r = (*tr)->connectAll({{}, bytesOf(blob)}, Deadline::afterSec(3));
  ASSERT_FALSE(r) << "connected with a blob whose address UCX never made";
  EXPECT_TRUE(contains(r.error().message(), "rank 1")) << r.error().toString();
  EXPECT_LT(nowSec() - t0, 2.5) << r.error().toString();
}

TEST(UcxBlobChild, NonUcxAddress) {
  if (!std::getenv("HC_TEST_UCX_BLOB_CHILD")) GTEST_SKIP() << "runs only in the child of UcxConnect.BlobWith*";
  ASSERT_NO_FATAL_FAILURE(expectBlobRefused(blobWithAddress(std::string(64, 'a'))));
  ASSERT_NO_FATAL_FAILURE(expectBlobRefused(blobWithAddress("00")));
  if (!HasFailure()) std::printf("HC_UCX_BLOB_CHILD_OK NonUcxAddress\n");
}

TEST(UcxBlobChild, TruncatedAddress) {
  if (!std::getenv("HC_TEST_UCX_BLOB_CHILD")) GTEST_SKIP() << "runs only in the child of UcxConnect.BlobWith*";
  // A real peer's blob whose address lost its second half (an even number of hex digits is left).
  auto peer = UcxTransport::create(configFor(1, 2, secretOf(1), freshCommId()));
  ASSERT_TRUE(peer) << peer.error().toString();
  auto blob = (*peer)->listen();
  ASSERT_TRUE(blob);
  const std::string text = textOf(*blob);
  const size_t a = text.find("\naddr=") + 6, e = text.find('\n', a);
  ASSERT_NE(e, std::string::npos) << text;
  const size_t keep = (e - a) / 4 * 2;
  ASSERT_NO_FATAL_FAILURE(expectBlobRefused(text.substr(0, a + keep) + "\n"));
  if (!HasFailure()) std::printf("HC_UCX_BLOB_CHILD_OK TruncatedAddress\n");
}

}  // namespace
}  // namespace hetcomm::transport::ucx
