// The contract of transport.h, once, for every backend that runs on any machine (tcp, shm, UCX): messages of any
// size arrive intact both ways at once, whether the receive comes before, during or after the data; receives match
// by tag, never waiting behind messages nobody asked for yet; a receive of the wrong size fails naming both sizes
// and leaves the connection and the tag usable; a second receive on a tag is refused; a peer's abort reaches the
// pending and the next receives with its reason; close fails what is pending, once; set-up skips peers without a
// blob and names a peer that never connects.
//
// What only one backend has (tcp striping and multi-rail, shm rings, cross-memory attach and peer death, UCX
// authentication and rendezvous thresholds) stays in its own file. The shm suite runs this one again with
// cross-memory attach off, and the UCX suite with UCX_TLS=sm (their children's filters name these tests).
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/transport_harness.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/ucx/ucx_transport.h"

namespace hetcomm::transport {
namespace {

using testing::Bytes;
using testing::configFor;
using testing::diff;
using testing::pattern;
using testing::secretOf;

struct Backend {
  const char* name;
  std::function<Result<std::unique_ptr<Transport>>(const Config&)> make;
  std::vector<size_t> sizes;  // both paths of the backend around its thresholds, and large messages
};

// gtest prints the parameter of a failing test: its name, not its bytes.
void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

std::vector<Backend> backends() {
  return {
    {"tcp",
     [](const Config& c) { return testing::asTransport(tcp::TcpTransport::create(c)); },
     {0, 1, 4095, (1u << 20) + 3, 64u << 20}},
    // With few sockets tcp reads them directly; this runs the same contract through its epoll path.
    {"tcp_epoll",
     [](const Config& c) {
       auto t = tcp::TcpTransport::create(c);
       if (t) (*t)->readDirectlyUpTo(0);
       return testing::asTransport(std::move(t));
     },
     {0, 1, 4095, (1u << 20) + 3, 8u << 20}},
        // Around a frame header (32 B) and a ring frame's payload (256 KiB, where cross-memory attach starts by
        // default), and streams of several ring lengths.
        {"shm",
         [](const Config& c) { return testing::asTransport(shm::ShmTransport::create(c)); },
         {0, 1, 31, 32, 33, 4095, (256u << 10) - 1, 256u << 10, (256u << 10) + 1, (1u << 20) + 3, 8u << 20}},
#if HETCOMM_HAVE_UCX
        // Eager and rendezvous sizes.
        {"ucx",
         [](const Config& c) { return testing::asTransport(ucx::UcxTransport::create(c)); },
         {0, 1, 4095, 65536 + 3, (1u << 20) + 3, 16u << 20}},
#endif
  };
}

// A group of its own comm id, torn down a rank per thread at once (as UCX needs).
struct Group : testing::ThreadedTeardownGroup {
  Group() : ThreadedTeardownGroup(0xc0) {}
};

class Conformance : public ::testing::TestWithParam<Backend> {
 protected:
  testing::TransportFactory factory(Group& g, int n) {
    return [this, &g, n](int r) { return GetParam().make(configFor(r, n, secretOf(1), g.commId)); };
  }
  void makeGroup(Group& g, int n) { testing::makeGroup(g, n, factory(g, n)); }
};

// One message of n bytes from rank 0 to rank 1 with this tag, receive first: it arrives intact.
void expectGoesThrough(Group& g, size_t n, uint64_t tag, uint32_t seed) {
  Bytes out = pattern(n, seed), in(n);
  Request s, r;
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, tag).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, tag).ok());
  ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }));
  EXPECT_TRUE(r.done()) << r.error.toString();
  EXPECT_EQ(diff(in, out), "");
}

// ---- data ----

TEST_P(Conformance, EverySizeBothDirectionsAtOnceReceivesPostedFirst) {
  for (size_t n : GetParam().sizes) {
    SCOPED_TRACE(format("%zu bytes", n));
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
    ASSERT_NO_FATAL_FAILURE(testing::expectBothDirectionsReceivesFirst(g, n));
  }
}

TEST_P(Conformance, EverySizeReceivePostedAfterTheDataArrived) {
  for (size_t n : GetParam().sizes) {
    SCOPED_TRACE(format("%zu bytes", n));
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
    Bytes out01 = pattern(n, 3), out10 = pattern(n, 4), in01(n), in10(n);
    Request s01, s10, r01, r10;
    ASSERT_TRUE(g.conn(0, 1).isend(s01, out01, 5).ok());
    ASSERT_TRUE(g.conn(1, 0).isend(s10, out10, 6).ok());
    g.driveFor(0.1);  // whatever can arrive before its receive does (a rendezvous send waits for it)
    ASSERT_TRUE(g.conn(1, 0).irecv(r01, in01, 5).ok());
    ASSERT_TRUE(g.conn(0, 1).irecv(r10, in10, 6).ok());
    ASSERT_TRUE(g.drive([&] { return r01.finished() && r10.finished() && s01.finished() && s10.finished(); }));
    EXPECT_TRUE(r01.done()) << r01.error.toString();
    EXPECT_TRUE(r10.done()) << r10.error.toString();
    EXPECT_TRUE(s01.done()) << s01.error.toString();
    EXPECT_EQ(r01.bytes, n);
    EXPECT_EQ(diff(in01, out01), "");
    EXPECT_EQ(diff(in10, out10), "");
  }
}

TEST_P(Conformance, ReceivePostedWhileTheMessageIsHalfWay) {
  const size_t n = (8u << 20) + 11;
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes out = pattern(n, 9), in(n);
  Request s, r;
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 42).ok());
  for (int i = 0; i < 3; ++i) {  // a few passes: some of it is here, most is not
    ASSERT_TRUE(g.t[1]->progress().ok());
    ASSERT_TRUE(g.t[0]->progress().ok());
  }
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 42).ok());
  ASSERT_TRUE(g.drive([&] { return s.finished() && r.finished(); }));
  EXPECT_TRUE(r.done()) << r.error.toString();
  EXPECT_EQ(diff(in, out), "");
}

TEST_P(Conformance, ManyTagsInFlightOutOfOrderBetweenThreeRanks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
  // Tiny, odd and multi-segment sizes, so the frames of different messages interleave; half the receives first.
  ASSERT_NO_FATAL_FAILURE(testing::expectManyTagsDelivered(
      g, 40, {0, 1, 7, 4095, 65536 + 3, (512u << 10) + 1, (1u << 20) + 7, 33}, 0x1000, 2, 0.05));
}

// transport.h: "a receive with tag T completes with the message the peer sent with tag T, in whatever order
// messages arrive". A posted receive must not wait behind megabytes of other tags nobody asked for yet.
TEST_P(Conformance, PostedReceiveIsNotHeldUpByEarlierUnclaimedMessages) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const size_t big = 3u << 20;
  Bytes b1 = pattern(big, 1), b2 = pattern(big, 2), a = pattern(100, 3), in1(big), in2(big), inA(100);
  Request s1, s2, sA, r1, r2, rA;
  ASSERT_TRUE(g.conn(1, 0).irecv(rA, inA, 3).ok());  // only the small, last message is wanted now
  ASSERT_TRUE(g.conn(0, 1).isend(s1, b1, 1).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s2, b2, 2).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(sA, a, 3).ok());
  EXPECT_TRUE(g.drive([&] { return rA.finished(); }, 5)) << "the receive of tag 3 waits behind 6 MiB nobody asked for";
  ASSERT_TRUE(g.conn(1, 0).irecv(r1, in1, 1).ok());
  ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 2).ok());
  ASSERT_TRUE(g.drive([&] {
    return rA.finished() && r1.finished() && r2.finished() && s1.finished() && s2.finished() && sA.finished();
  }));
  EXPECT_TRUE(rA.done()) << rA.error.toString();
  EXPECT_EQ(diff(inA, a), "");
  EXPECT_EQ(diff(in1, b1), "");
  EXPECT_EQ(diff(in2, b2), "");
}

// ---- errors on the data path ----

// A receive of the wrong size fails naming both sizes and the sender is let go. The message is gone: the next
// receive of that tag gets the next message of that tag, not it, and other tags go through.
TEST_P(Conformance, WrongSizeReceivePostedFirstFailsNamingBothSizes) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes out = pattern(200, 1), in(100);
  Request s, r;
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 9).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 9).ok());
  ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kInvalidUsage);
  EXPECT_TRUE(testing::contains(r.error.message(), "sent 200 bytes")) << r.error.message();
  EXPECT_TRUE(testing::contains(r.error.message(), "expected 100")) << r.error.message();
  g.driveFor(0.1);  // whatever of the rejected message was still coming has come
  Bytes out2 = pattern(200, 2), in2(200);
  Request s2, r2;
  ASSERT_TRUE(g.conn(1, 0).irecv(r2, in2, 9).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s2, out2, 9).ok());
  ASSERT_TRUE(g.drive([&] { return r2.finished() && s2.finished(); }));
  EXPECT_TRUE(r2.done()) << r2.error.toString();
  EXPECT_EQ(diff(in2, out2), "") << (diff(in2, out) == "" ? "got the rejected message again" : "");
  ASSERT_NO_FATAL_FAILURE(expectGoesThrough(g, 300, 10, 3));
}

TEST_P(Conformance, WrongSizeReceivePostedAfterArrivalFailsAndFreesTheTag) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes out = pattern(64, 1), in(65);
  Request s, r;
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 3).ok());
  g.driveFor(0.1);
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 3).ok());
  ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kInvalidUsage);
  EXPECT_TRUE(testing::contains(r.error.message(), "sent 64 bytes")) << r.error.message();
  EXPECT_TRUE(testing::contains(r.error.message(), "expected 65")) << r.error.message();
  ASSERT_NO_FATAL_FAILURE(expectGoesThrough(g, 65, 3, 2));  // the tag is free again
}

TEST_P(Conformance, SecondReceiveWithTheSameTagIsRefused) {
  Bytes a(8), b(8);
  Request r1, r2;  // before the group: closing its connections fails r1, which must still be there
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  ASSERT_TRUE(g.conn(1, 0).irecv(r1, a, 11).ok());
  Status st = g.conn(1, 0).irecv(r2, b, 11);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(testing::contains(st.message(), "already posted")) << st.message();
}

// ---- a peer that gives up, a connection that closes ----

TEST_P(Conformance, SendAbortReachesThePendingReceiveWithTheReason) {
  for (size_t n : {size_t{64}, size_t{4} << 20}) {  // an eager-size receive and a large one
    SCOPED_TRACE(format("pending receive of %zu bytes", n));
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
    Bytes in(n);
    Request pending;
    ASSERT_TRUE(g.conn(1, 0).irecv(pending, in, 8).ok());
    g.driveFor(0.02);
    ASSERT_FALSE(pending.finished());
    g.conn(0, 1).sendAbort("reason: rank 0 hit a collective mismatch #12345");
    ASSERT_TRUE(g.drive([&] { return pending.finished(); }, 10)) << "the abort never arrived";
    ASSERT_TRUE(pending.failed());
    EXPECT_EQ(pending.error.code(), Code::kRemote) << pending.error.toString();
    EXPECT_TRUE(testing::contains(pending.error.message(), "reason: rank 0 hit a collective mismatch #12345"))
        << pending.error.message();
    EXPECT_TRUE(testing::contains(pending.error.message(), "rank 0 aborted")) << pending.error.message();
    // Requests posted afterwards on the aborted connection fail at once with the same reason.
    Request late, lateSend;
    Bytes out = pattern(10, 1);
    ASSERT_TRUE(g.conn(1, 0).irecv(late, in, 9).ok());
    ASSERT_TRUE(g.conn(1, 0).isend(lateSend, out, 9).ok());
    ASSERT_TRUE(late.failed());
    EXPECT_EQ(late.error.code(), Code::kRemote);
    EXPECT_TRUE(testing::contains(late.error.message(), "#12345")) << late.error.message();
    ASSERT_TRUE(lateSend.failed());
    EXPECT_TRUE(testing::contains(lateSend.error.message(), "#12345")) << lateSend.error.message();
  }
}

TEST_P(Conformance, SendAbortWithoutPendingReceiveFailsTheNextOne) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  ASSERT_NO_FATAL_FAILURE(testing::expectAbortFailsTheNextReceive(g));
}

TEST_P(Conformance, CloseIsIdempotentAndFailsOwnRequests) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  Bytes in(10);
  Request r;
  ASSERT_TRUE(g.conn(0, 1).irecv(r, in, 1).ok());
  g.conn(0, 1).close(invalidUsage("closing for the test"));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.message(), "closing for the test");
  g.conn(0, 1).close(invalidUsage("second close"));  // no effect, no crash
  Request r2;
  ASSERT_TRUE(g.conn(0, 1).irecv(r2, in, 2).ok());
  EXPECT_TRUE(r2.failed());
  EXPECT_EQ(r2.error.message(), "closing for the test");
}

// ---- set-up ----

// Ranks 0 and 2 connect; rank 1 has no blob (another transport serves it): no connection to it, no wait for it.
TEST_P(Conformance, SkipsRanksWithEmptyBlobs) {
  Group g;
  const int n = 3;
  g.t.resize(n);
  std::vector<Bytes> blobs(n);
  for (int r : {0, 2}) {
    auto tr = GetParam().make(configFor(r, n, secretOf(1), g.commId));
    ASSERT_TRUE(tr) << tr.error().toString();
    g.t[r] = std::move(*tr);
    auto b = g.t[r]->listen();
    ASSERT_TRUE(b) << b.error().toString();
    blobs[r] = *b;
  }
  std::optional<Result<testing::Conns>> r0, r2;
  std::thread a([&] { r0.emplace(g.t[0]->connectAll({{}, {}, blobs[2]}, Deadline::afterSec(10))); });
  std::thread b([&] { r2.emplace(g.t[2]->connectAll({blobs[0], {}, {}}, Deadline::afterSec(10))); });
  a.join();
  b.join();
  ASSERT_TRUE(*r0) << r0->error().toString();
  ASSERT_TRUE(*r2) << r2->error().toString();
  EXPECT_EQ((**r0)[1], nullptr);
  EXPECT_NE((**r0)[2], nullptr);
  EXPECT_NE((**r2)[0], nullptr);
  g.c.resize(n);
  g.c[0] = std::move(**r0);
  g.c[2] = std::move(**r2);
  Bytes out = pattern(100, 5), in(100);
  Request s, r;
  ASSERT_TRUE(g.conn(2, 0).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.conn(0, 2).isend(s, out, 1).ok());
  ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }));
  EXPECT_EQ(diff(in, out), "");
}

// A rank listens but never calls connectAll: the other gives up at its deadline naming it, and does not hang.
TEST_P(Conformance, PeerThatNeverConnectsTimesOutNamingIt) {
  for (int silent : {0, 1}) {
    SCOPED_TRACE(format("silent rank %d", silent));
    Group g;
    auto out = testing::connectGroup(g, 2, factory(g, 2), 1.0, {silent != 0, silent != 1});
    ASSERT_EQ(out.results.size(), 2u);
    const int active = 1 - silent;
    ASSERT_FALSE(out.results[active]);
    EXPECT_EQ(out.results[active].error().code(), Code::kTimeout) << out.results[active].error().toString();
    EXPECT_TRUE(testing::contains(out.results[active].error().message(), std::to_string(silent)))
        << out.results[active].error().message();
    EXPECT_LT(out.seconds[active], 4.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance, ::testing::ValuesIn(backends()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hetcomm::transport
