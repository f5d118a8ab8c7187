// The TCP transport with 2 or 3 ranks in one process: connectAll runs on a thread per rank (it blocks until every
// pair is connected), then ONE thread drives every transport's progress() in a loop bounded by iterations and wall
// time, like the progress engine does. What every transport must do is in conformance_test.cc; here, what is
// TCP's own: socket set-up and its description, authentication, a peer closing its sockets (between and in the
// middle of messages), striping over several sockets and multi-rail shares.
//
// HETCOMM_NSOCKS_PERPEER is read once per process, so the striping tests re-run this binary as a child process
// with the variable set (TcpStriping.* starts TcpStripingChild.Run).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/strings.h"
#include "tests/support/transport_harness.h"
#include "transports/blob.h"
#include "transports/tcp/tcp_connection.h"
#include "transports/tcp/tcp_transport.h"

namespace hetcomm::transport::tcp {
namespace {

using testing::Bytes;
using testing::configFor;
using testing::ConnectOutcome;
using testing::Conns;
using testing::diff;
using testing::expectDelivered;
using testing::expectManyTagsDelivered;
using testing::pattern;
using testing::secretOf;
// n transports of one communicator, connected to each other. Connections go before transports (their sockets
// belong to the transport's io_context).
using Group = testing::TransportGroup;

// Makes, listens and runs connectAll on a thread per rank, rank r with secrets[r] and commIds[r]. participates[r]
// false: that rank listens but never calls connectAll (a peer that hangs).
ConnectOutcome connectGroup(Group& g, int n, const std::vector<crypto::Secret>& secrets,
                            const std::vector<uint64_t>& commIds, double deadlineSec,
                            std::vector<bool> participates = {}) {
  return testing::connectGroup(
      g, n, [&](int r) { return testing::asTransport(TcpTransport::create(configFor(r, n, secrets[r], commIds[r]))); },
      deadlineSec, std::move(participates));
}

// A connected group of n ranks with one secret and comm id; fails the test when set-up fails.
void makeGroup(Group& g, int n) {
  testing::makeGroup(
      g, n, [n](int r) { return testing::asTransport(TcpTransport::create(configFor(r, n, secretOf(1), 0xC0FFEE))); });
}

// ---- connection set-up ----

TEST(TcpConnect, TwoRanks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  EXPECT_EQ(g.t[0]->properties().kind, Kind::kTcp);
  EXPECT_EQ(g.t[0]->properties().name, "tcp");
  EXPECT_GE(g.t[0]->waitFd(), 0);
  std::string d = g.conn(0, 1).describe();
  // Default: one socket to a peer on the same host (the test's transports share a host id).
  EXPECT_EQ(d.rfind("r0->r1/tcp(1 socket via ", 0), 0u) << d;
  EXPECT_EQ(g.conn(1, 0).describe().rfind("r1->r0/tcp(1 socket", 0), 0u) << g.conn(1, 0).describe();
}

TEST(TcpConnect, ThreeRanks) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
  EXPECT_NE(g.conn(2, 0).describe().find("r2->r0"), std::string::npos);
}

TEST(TcpConnect, ConnectAllBeforeListenIsInvalidUsage) {
  auto tr = TcpTransport::create(configFor(0, 2, secretOf(1), 1));
  ASSERT_TRUE(tr);
  auto r = (*tr)->connectAll({{}, pattern(10, 1)}, Deadline::afterSec(1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidUsage);
  EXPECT_NE(r.error().message().find("before listen"), std::string::npos) << r.error().message();
}

TEST(TcpConnect, MalformedBlobIsRejected) {
  auto tr = TcpTransport::create(configFor(0, 2, secretOf(1), 1));
  ASSERT_TRUE(tr);
  ASSERT_TRUE((*tr)->listen());
  std::string junk = "hello=world\n";
  Bytes blob(reinterpret_cast<const std::byte*>(junk.data()),
             reinterpret_cast<const std::byte*>(junk.data()) + junk.size());
  auto r = (*tr)->connectAll({{}, blob}, Deadline::afterSec(2));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kRemote);
  EXPECT_NE(r.error().message().find("rank 1's tcp address blob is malformed"), std::string::npos)
      << r.error().message();
}

// ---- data ----

TEST(TcpData, ConnectionsOfDifferentTransportsInOneProcessStayApart) {
  // Two communicators' groups at once, same tags: each message lands in its own group.
  Group a, b;
  ASSERT_NO_FATAL_FAILURE(makeGroup(a, 2));
  ASSERT_NO_FATAL_FAILURE(makeGroup(b, 2));
  Bytes outA = pattern(1000, 1), outB = pattern(1000, 2), inA(1000), inB(1000);
  Request sa, sb, ra, rb;
  ASSERT_TRUE(a.conn(1, 0).irecv(ra, inA, 1).ok());
  ASSERT_TRUE(b.conn(1, 0).irecv(rb, inB, 1).ok());
  ASSERT_TRUE(a.conn(0, 1).isend(sa, outA, 1).ok());
  ASSERT_TRUE(b.conn(0, 1).isend(sb, outB, 1).ok());
  const Deadline d = Deadline::afterSec(30);
  while (!(ra.finished() && rb.finished()) && !d.expired()) {
    a.drive([] { return true; });  // one pass each
    b.drive([] { return true; });
  }
  EXPECT_TRUE(ra.done()) << ra.error.toString();
  EXPECT_TRUE(rb.done()) << rb.error.toString();
  EXPECT_EQ(diff(inA, outA), "");
  EXPECT_EQ(diff(inB, outB), "");
}

// ---- authentication ----

// Rank `liar` has a different secret (or comm id). Its peer refuses it; nobody hangs, and each side says why.
void expectRefused(int liar, bool badCommId) {
  Group g;
  std::vector<crypto::Secret> secrets = {secretOf(1), secretOf(1)};
  std::vector<uint64_t> ids = {99, 99};
  if (badCommId)
    ids[liar] = 100;
  else
    secrets[liar] = secretOf(2);
  const double deadlineSec = 2.0;
  auto out = connectGroup(g, 2, secrets, ids, deadlineSec);
  ASSERT_EQ(out.results.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(format("rank %d", r));
    ASSERT_FALSE(out.results[r]) << "connected despite the wrong " << (badCommId ? "comm id" : "secret");
    EXPECT_LT(out.seconds[r], deadlineSec + 3.0);
  }
  // Rank 0 dials and is refused during the handshake: a remote error that says so.
  const Status& dialer = out.results[0].error();
  EXPECT_EQ(dialer.code(), Code::kRemote) << dialer.toString();
  EXPECT_NE(dialer.message().find("rank 0 cannot reach rank 1"), std::string::npos) << dialer.message();
  EXPECT_NE(dialer.message().find(badCommId ? "communicator" : "secret"), std::string::npos)
      << "the reason (refused in the handshake) is lost: " << dialer.message();
  // Rank 1 accepts, refuses, and waits for a proper rank 0 until its deadline.
  const Status& acceptor = out.results[1].error();
  EXPECT_EQ(acceptor.code(), Code::kTimeout) << acceptor.toString();
  EXPECT_NE(acceptor.message().find("waiting for rank(s) 0"), std::string::npos) << acceptor.message();
}

TEST(TcpAuth, DialerWithTheWrongSecretIsRefused) { expectRefused(0, false); }
TEST(TcpAuth, AcceptorWithTheWrongSecretIsRefused) { expectRefused(1, false); }
TEST(TcpAuth, OtherCommunicatorIsRefused) { expectRefused(0, true); }

// Strangers on a rank's listening port while its communicator sets up (a port scanner, a flood of half-open
// connections): a bounded number wait for their handshake deadline, the rest are closed at once, and the real
// peers connect as if nobody else were there.
TEST(TcpAuth, StrangersOnTheListenerAreCappedAndThePeersStillConnect) {
  std::vector<std::unique_ptr<TcpTransport>> ts;
  std::vector<std::vector<std::byte>> blobs;
  for (int r = 0; r < 2; ++r) {
    auto t = TcpTransport::create(configFor(r, 2, secretOf(1), 0xBEEF));
    ASSERT_TRUE(t) << t.error().toString();
    auto b = (*t)->listen();
    ASSERT_TRUE(b) << b.error().toString();
    blobs.push_back(*b);
    ts.push_back(std::move(*t));
  }
  const TextBlob blob = TextBlob::parse(blobs[1], "hctcp", 1);
  const std::string* port = blob.find("port");
  ASSERT_TRUE(port);
  constexpr int kStrangers = 120;  // rank 1 lets 64 strangers and rank 0's 16 possible dials wait: 80
  std::vector<int> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(*port)));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
    strangers.push_back(fd);
  }
  std::vector<std::optional<Result<std::vector<std::unique_ptr<Connection>>>>> conns(2);
  std::vector<std::thread> threads;
  const double t0 = nowSec();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { conns[r].emplace(ts[r]->connectAll(blobs, Deadline::afterSec(20))); });
  // While set-up runs, count the strangers closed on them (recv 0 after the listener's hello, if any).
  int closed = 0;
  std::vector<bool> isClosed(kStrangers, false);
  while (nowSec() - t0 < 2.0) {
    for (int i = 0; i < kStrangers; ++i) {
      if (isClosed[i]) continue;
      char buf[256];
      ssize_t n = ::recv(strangers[i], buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        isClosed[i] = true;
        ++closed;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : threads) t.join();
  const double took = nowSec() - t0;
  for (int fd : strangers) ::close(fd);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(*conns[r]) << "rank " << r << ": " << conns[r]->error().toString();
  EXPECT_LT(took, 15.0) << "the strangers held set-up up";
  EXPECT_GE(closed, kStrangers - 80) << "strangers beyond the cap were kept waiting";
  EXPECT_LE(closed, kStrangers - 64) << "strangers within the cap were closed before their handshake deadline";
  for (auto& c : conns) (*c)->clear();  // connections before transports
  ts.clear();
}

// ---- a peer goes away ----

TEST(TcpFailure, PeerClosesItsConnection) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
  Bytes in(100);
  Request pending;
  ASSERT_TRUE(g.conn(1, 0).irecv(pending, in, 1).ok());
  g.driveFor(0.02);
  EXPECT_FALSE(pending.finished());
  g.c[0][1].reset();  // rank 0 closes (what destroying its communicator does)
  ASSERT_TRUE(g.drive([&] { return pending.finished(); }, 10)) << "the pending receive never failed";
  ASSERT_TRUE(pending.failed());
  EXPECT_EQ(pending.error.code(), Code::kRemote);
  EXPECT_NE(pending.error.message().find("rank 0"), std::string::npos) << pending.error.message();
  // Later requests on the dead connection fail at once, with the same kind of reason.
  Request late, lateSend;
  Bytes out = pattern(10, 1);
  ASSERT_TRUE(g.conn(1, 0).irecv(late, in, 2).ok());
  ASSERT_TRUE(g.conn(1, 0).isend(lateSend, out, 2).ok());
  ASSERT_TRUE(g.drive([&] { return late.finished() && lateSend.finished(); }, 5));
  EXPECT_TRUE(late.failed());
  EXPECT_EQ(late.error.code(), Code::kRemote);
  EXPECT_NE(late.error.message().find("rank 0"), std::string::npos) << late.error.message();
  EXPECT_TRUE(lateSend.failed());
  // Ranks 1 and 2 are unaffected.
  Bytes o = pattern(5000, 7), i(5000);
  Request s, r;
  ASSERT_TRUE(g.conn(2, 1).irecv(r, i, 3).ok());
  ASSERT_TRUE(g.conn(1, 2).isend(s, o, 3).ok());
  ASSERT_TRUE(g.drive([&] { return s.finished() && r.finished(); }));
  EXPECT_TRUE(r.done()) << r.error.toString();
  EXPECT_EQ(diff(i, o), "");
}

TEST(TcpFailure, PeerClosesInTheMiddleOfALargeMessage) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  const size_t n = 64u << 20;
  Bytes out = pattern(n, 1), in(n);
  Request s, r;
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.conn(0, 1).isend(s, out, 1).ok());
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(g.t[0]->progress().ok());
    ASSERT_TRUE(g.t[1]->progress().ok());
  }
  ASSERT_FALSE(r.finished()) << "64 MiB arrived in 3 passes: cannot test a close in the middle";
  g.conn(0, 1).close(invalidUsage("test closes rank 0's side"));
  EXPECT_TRUE(s.failed());  // close fails the closer's own pending requests
  EXPECT_NE(s.error.message().find("test closes"), std::string::npos) << s.error.message();
  ASSERT_TRUE(g.drive([&] { return r.finished(); }, 10));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kRemote);
  EXPECT_NE(r.error.message().find("rank 0"), std::string::npos) << r.error.message();
}

// ---- striping over several sockets: a child process with HETCOMM_NSOCKS_PERPEER set ----

// ---- multi-rail striping ----

TEST(TcpStripeShares, SharesFollowTheWeightsAndEveryPathFinishesTogether) {
  const std::vector<double> mbps = {69, 342, 198};  // three rails, not in order
  const size_t total = 512 << 10;
  std::vector<size_t> s = stripeShares(total, mbps);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0] + s[1] + s[2], total);
  EXPECT_EQ(s[0] % kStripeAlign, 0u);
  EXPECT_EQ(s[2] % kStripeAlign, 0u);
  double slowest = 0, fastest = 1e300;
  for (size_t i = 0; i < 3; ++i) {
    const double t = static_cast<double>(s[i]) / mbps[i];
    slowest = std::max(slowest, t);
    fastest = std::min(fastest, t);
  }
  // Page rounding costs under 4 KiB on a path: within 8 % of each other here, and never a whole 128 KiB segment.
  EXPECT_LT(slowest / fastest, 1.08) << s[0] << " " << s[1] << " " << s[2];
}

TEST(TcpStripeShares, SlowPathWithATinyShareSitsTheMessageOut) {
  const std::vector<double> mbps = {1000, 10, 1000};
  std::vector<size_t> s = stripeShares(1 << 20, mbps);  // the slow path's share would be 5 KiB
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1], 0u);
  EXPECT_EQ(s[0] + s[2], 1u << 20);
  EXPECT_EQ(s[0], s[2]);
}

TEST(TcpStripeShares, SmallMessageOrOnePathIsNotCut) {
  EXPECT_TRUE(stripeShares(40 << 10, std::vector<double>{1, 1}).empty());  // 20 KiB each: under the minimum
  EXPECT_TRUE(stripeShares(64 << 20, std::vector<double>{5}).empty());
  EXPECT_TRUE(stripeShares(64 << 20, std::vector<double>{5, 0}).empty());  // weight 0: never striped over
  EXPECT_TRUE(stripeShares(64 << 20, std::vector<double>{}).empty());
  std::vector<size_t> s = stripeShares(64 << 10, std::vector<double>{1, 1});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], 32u << 10);
  EXPECT_EQ(s[1], 32u << 10);
}

TEST(TcpStripingChild, Run) {
  if (!std::getenv("HC_TEST_STRIPING_CHILD"))
    GTEST_SKIP() << "runs only as the child process of TcpStriping.* (with HETCOMM_NSOCKS_PERPEER set)";
  const char* nsocksEnv = std::getenv("HETCOMM_NSOCKS_PERPEER");
  ASSERT_NE(nsocksEnv, nullptr);
  const int nsocks = std::atoi(nsocksEnv);
  if (nsocks < 0 || nsocks > 16) {
    auto tr = TcpTransport::create(configFor(0, 2, secretOf(1), 1));
    ASSERT_FALSE(tr);
    EXPECT_EQ(tr.error().code(), Code::kInvalidArgument);
    EXPECT_NE(tr.error().message().find(std::string("HETCOMM_NSOCKS_PERPEER=") + nsocksEnv), std::string::npos)
        << tr.error().message();
  } else {
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 3));
    const int expected = nsocks == 0 ? 1 : nsocks;  // automatic: all three ranks share the test's host id
    const std::string want = format("(%d socket%s via ", expected, expected == 1 ? "" : "s");
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        if (a != b) {
          EXPECT_NE(g.conn(a, b).describe().find(want), std::string::npos) << g.conn(a, b).describe();
        }
    // Large messages cut into segments over every socket, plus small ones in between, every direction at once.
    const size_t sizes[] = {(16u << 20) + 5, 1, 4095, (1u << 20) + 3, 0, (3u << 20) + 1};
    struct Msg {
      Bytes out, in;
      Request s, r;
    };
    std::deque<Msg> msgs;
    int k = 0;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        if (a != b)
          for (size_t i = 0; i < std::size(sizes); ++i, ++k) {
            Msg& m = msgs.emplace_back();
            m.out = pattern(sizes[i], k);
            m.in.resize(sizes[i]);
            if (i % 2) {  // odd: posted first
              ASSERT_TRUE(g.conn(b, a).irecv(m.r, m.in, 100 + i).ok());
            }
            ASSERT_TRUE(g.conn(a, b).isend(m.s, m.out, 100 + i).ok());
          }
    g.driveFor(0.05);
    k = 0;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        if (a != b)
          for (size_t i = 0; i < std::size(sizes); ++i, ++k)
            if (i % 2 == 0) {
              ASSERT_TRUE(g.conn(b, a).irecv(msgs[k].r, msgs[k].in, 100 + i).ok());
            }
    ASSERT_TRUE(g.drive([&] {
      return std::all_of(msgs.begin(), msgs.end(), [](const Msg& m) { return m.s.finished() && m.r.finished(); });
    }));
    for (size_t j = 0; j < msgs.size(); ++j) {
      EXPECT_TRUE(msgs[j].r.done()) << j << ": " << msgs[j].r.error.toString();
      EXPECT_EQ(diff(msgs[j].in, msgs[j].out), "") << j;
    }
  }
  if (!HasFailure()) std::printf("HC_TEST_STRIPING_CHILD_OK %s\n", nsocksEnv);
}

// Runs this binary again with only childTest, var=value (read once per process, so a process of its own) and
// marker=expect; the child prints "<marker>_OK <expect>" when it passed.
void expectChildPasses(const char* childTest, const std::string& var, const std::string& value,
                       const std::string& marker, const std::string& expect) {
  std::string output;
  int rc =
      testing::runChild({var + "=", marker + "="}, {var + "=" + value, marker + "=" + expect}, childTest, &output, 120);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_NE(output.find(marker + "_OK " + expect), std::string::npos) << output;
}

void expectChildPasses(const std::string& nsocks) {
  expectChildPasses("TcpStripingChild.Run", "HETCOMM_NSOCKS_PERPEER", nsocks, "HC_TEST_STRIPING_CHILD", nsocks);
}

TEST(TcpStriping, FourSocketsPerPeer) { expectChildPasses("4"); }
TEST(TcpStriping, OneSocketPerPeer) { expectChildPasses("1"); }
TEST(TcpStriping, OutOfRangeSocketCountIsRejected) {
  expectChildPasses("17");
  expectChildPasses("-1");
}

// 0 is "automatic": one socket between ranks of one host, two between hosts.
TEST(TcpStriping, AutomaticPicksOneSocketOnOneHost) { expectChildPasses("0"); }

// ---- congestion control ----

// The system's default for new sockets ("bbr", "cubic").
std::string systemCongestion() {
  std::string name;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control"), name);
  return name;
}

TEST(TcpCongestion, LoopbackSocketsGetRenoOthersKeepTheSystems) {
  EXPECT_EQ(congestionFor("", true), kLoopbackCongestion);
  EXPECT_EQ(congestionFor("", false), "");
  EXPECT_EQ(congestionFor("system", true), "");
  EXPECT_EQ(congestionFor("system", false), "");
  EXPECT_EQ(congestionFor("cubic", true), "cubic");
  EXPECT_EQ(congestionFor("cubic", false), "cubic");
}

TEST(TcpCongestion, ASocketStaysOnTheMachineOverLoopbackOrToItsOwnAddress) {
  auto ep = [](const char* addr) { return boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address(addr), 4000); };
  EXPECT_TRUE(staysOnMachine(ep("127.0.0.1"), ep("127.0.0.1")));
  EXPECT_TRUE(staysOnMachine(ep("127.0.0.1"), ep("127.0.1.1")));
  EXPECT_TRUE(staysOnMachine(ep("::1"), ep("::1")));
  EXPECT_TRUE(staysOnMachine(ep("10.0.0.1"), ep("10.0.0.1")));  // this host's own address: the kernel loops it
  EXPECT_FALSE(staysOnMachine(ep("10.0.0.1"), ep("10.0.0.2")));
  EXPECT_FALSE(staysOnMachine(ep("fe80::1"), ep("fe80::2")));
}

TEST(TcpCongestion, NamesThatCannotBeACongestionControlAreRefused) {
  for (const char* ok : {"", "system", "cubic", "bbr", "reno", "dctcp", "h-tcp_2"})
    EXPECT_TRUE(checkCongestionName(ok).ok()) << ok;
  for (const char* bad : {"a b", "cubic;reno", "sixteen-letters!", "0123456789abcdef", "../x"}) {
    Status st = checkCongestionName(bad);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find(std::string("HETCOMM_TCP_CONGESTION=") + bad), std::string::npos) << st.message();
  }
}

TEST(TcpCongestion, SetOnASocketAndRefusalsSayWhatTheKernelOffers) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(setCongestion(fd, "reno").ok());  // every process may choose reno
  EXPECT_EQ(congestionOf(fd), "reno");
  Status st = setCongestion(fd, "nosuchcc");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("congestion control nosuchcc"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("this kernel has: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("reno"), std::string::npos) << st.message();
  EXPECT_EQ(congestionOf(fd), "reno");  // unchanged
  ::close(fd);
}

// HETCOMM_TCP_CONGESTION is read once per process: the cases run as child processes with it set.
TEST(TcpCongestionChild, Run) {
  const char* setting = std::getenv("HC_TEST_CONGESTION_CHILD");
  if (!setting) GTEST_SKIP() << "runs only as the child process of TcpCongestion.* (with HETCOMM_TCP_CONGESTION set)";
  const std::string want = setting;
  if (want == "unknown") {  // the kernel refuses it: init fails, naming the setting and what the kernel has
    Group g;
    ConnectOutcome out = connectGroup(g, 2, {secretOf(1), secretOf(1)}, {7, 7}, 10);
    ASSERT_EQ(out.results.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      ASSERT_FALSE(out.results[r]) << r;
      const Status& st = out.results[r].error();
      EXPECT_EQ(st.code(), Code::kInvalidArgument);
      EXPECT_NE(st.message().find("HETCOMM_TCP_CONGESTION=nosuchcc"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("this kernel has: "), std::string::npos) << st.message();
    }
  } else if (want == "malformed") {
    auto tr = TcpTransport::create(configFor(0, 2, secretOf(1), 1));
    ASSERT_FALSE(tr);
    EXPECT_EQ(tr.error().code(), Code::kInvalidArgument);
    EXPECT_NE(tr.error().message().find("HETCOMM_TCP_CONGESTION=a b"), std::string::npos) << tr.error().message();
  } else {
    Group g;
    ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
    for (int a = 0; a < 2; ++a) {
      const std::string d = g.conn(a, 1 - a).describe();
      EXPECT_NE(d.find(", congestion " + want + ")"), std::string::npos) << d;
    }
  }
  if (!HasFailure()) std::printf("HC_TEST_CONGESTION_CHILD_OK %s\n", setting);
}

void expectCongestionChildPasses(const std::string& setting, const std::string& expect) {
  expectChildPasses("TcpCongestionChild.Run", "HETCOMM_TCP_CONGESTION", setting, "HC_TEST_CONGESTION_CHILD", expect);
}

TEST(TcpCongestion, LoopbackConnectionsUseRenoByDefault) {
  Group g;
  ASSERT_NO_FATAL_FAILURE(makeGroup(g, 2));
  for (int a = 0; a < 2; ++a) {
    const std::string d = g.conn(a, 1 - a).describe();
    EXPECT_NE(d.find(std::string(", congestion ") + kLoopbackCongestion + ")"), std::string::npos) << d;
  }
}
TEST(TcpCongestion, SystemKeepsTheSystemsDefault) { expectCongestionChildPasses("system", systemCongestion()); }
TEST(TcpCongestion, ANameIsSetOnEverySocket) { expectCongestionChildPasses("reno", "reno"); }
TEST(TcpCongestion, ANameTheKernelRefusesFailsInit) { expectCongestionChildPasses("nosuchcc", "unknown"); }
TEST(TcpCongestion, AMalformedNameFailsCreate) { expectCongestionChildPasses("a b", "malformed"); }

}  // namespace
}  // namespace hetcomm::transport::tcp
