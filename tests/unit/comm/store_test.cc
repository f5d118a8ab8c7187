// The rendezvous store: set / get / add, get waiting for a set from another thread, bounded waits, the secret
// handshake, and allGather / barrier with ranks as threads.
#include "comm/bootstrap/store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"

namespace hetcomm::comm {
namespace {

using Bytes = std::vector<std::byte>;

Bytes bytesOf(const std::string& s) {
  return Bytes(reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size());
}
std::string textOf(const Bytes& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

crypto::Secret secretOf(uint8_t seed) {
  crypto::Secret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed + 3 * i);
  return s;
}

class Store : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StoreServer::start("127.0.0.1", 0, secret_);
    ASSERT_TRUE(s) << s.error().toString();
    server_ = std::move(*s);
    ASSERT_NE(server_->port(), 0);
  }
  std::unique_ptr<StoreClient> client(double timeoutSec = 10) {
    auto c = StoreClient::connect("127.0.0.1", server_->port(), secret_, Deadline::afterSec(timeoutSec));
    EXPECT_TRUE(c) << c.error().toString();
    return c ? std::move(*c) : nullptr;
  }

  crypto::Secret secret_ = secretOf(7);
  std::unique_ptr<StoreServer> server_;
};

TEST_F(Store, SetThenGet) {
  auto c = client();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->set("alpha", bytesOf("one")).ok());
  auto v = c->get("alpha", Deadline::afterSec(5));
  ASSERT_TRUE(v) << v.error().toString();
  EXPECT_EQ(textOf(*v), "one");
  // Overwrite; empty values; binary values.
  ASSERT_TRUE(c->set("alpha", bytesOf("two")).ok());
  EXPECT_EQ(textOf(*c->get("alpha", Deadline::afterSec(5))), "two");
  ASSERT_TRUE(c->set("empty", {}).ok());
  auto e = c->get("empty", Deadline::afterSec(5));
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->empty());
  Bytes bin(100000);
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<std::byte>(i * 7);
  ASSERT_TRUE(c->set("bin", bin).ok());
  EXPECT_EQ(*c->get("bin", Deadline::afterSec(5)), bin);
}

TEST_F(Store, ValuesAreSharedBetweenClients) {
  auto a = client(), b = client();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->set("k", bytesOf("from a")).ok());
  auto v = b->get("k", Deadline::afterSec(5));
  ASSERT_TRUE(v);
  EXPECT_EQ(textOf(*v), "from a");
}

// A key owned by a connection lives as long as the connection: when the owner goes (its process exits), the key
// goes and "<key>/gone" appears, waking a get that waits for it. What shrink's liveness rests on.
TEST_F(Store, AnOwnedKeyGoesWithItsConnectionAndSaysSo) {
  auto owner = client(), watcher = client();
  ASSERT_TRUE(owner && watcher);
  ASSERT_TRUE(owner->own("live/3", bytesOf("here")).ok());
  auto seen = watcher->tryGet("live/3");
  ASSERT_TRUE(seen) << seen.error().toString();
  ASSERT_TRUE(seen->has_value());
  EXPECT_EQ(textOf(**seen), "here");
  auto notYet = watcher->tryGet("live/3/gone");
  ASSERT_TRUE(notYet);
  EXPECT_FALSE(notYet->has_value());
  std::thread leave([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    owner.reset();  // closes the connection, as the kernel does for a killed process
  });
  auto gone = watcher->get("live/3/gone", Deadline::afterSec(5));
  leave.join();
  ASSERT_TRUE(gone) << gone.error().toString();
  auto after = watcher->tryGet("live/3");
  ASSERT_TRUE(after);
  EXPECT_FALSE(after->has_value()) << "the owned key is removed with its owner";
}

TEST_F(Store, CreateSetsOnlyAMissingKey) {
  auto c = client();
  ASSERT_TRUE(c);
  auto first = c->create("once", bytesOf("a"));
  ASSERT_TRUE(first);
  EXPECT_TRUE(*first);
  auto second = c->create("once", bytesOf("b"));
  ASSERT_TRUE(second);
  EXPECT_FALSE(*second);
  EXPECT_EQ(textOf(*c->get("once", Deadline::afterSec(5))), "a");
  // The connection is still in step after a refused create.
  ASSERT_TRUE(c->set("after", bytesOf("x")).ok());
  EXPECT_EQ(textOf(*c->get("after", Deadline::afterSec(5))), "x");
}

TEST_F(Store, AddCountsFromZero) {
  auto a = client(), b = client();
  ASSERT_TRUE(a && b);
  auto r = a->add("n", 5);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 5);
  r = b->add("n", -2);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 3);
  r = a->add("n", 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 3);
  r = a->add("other", 1);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 1);
}

TEST_F(Store, GetWaitsForASetFromAnotherThread) {
  auto getter = client(), setter = client();
  ASSERT_TRUE(getter && setter);
  Result<Bytes> got = internalError("not run");
  double waited = 0;
  std::thread t([&] {
    double t0 = nowSec();
    got = getter->get("late", Deadline::afterSec(10));
    waited = nowSec() - t0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(setter->set("late", bytesOf("here")).ok());
  t.join();
  ASSERT_TRUE(got) << got.error().toString();
  EXPECT_EQ(textOf(*got), "here");
  EXPECT_GE(waited, 0.25);  // it really waited for the set
  EXPECT_LT(waited, 5.0);
}

TEST_F(Store, GetTimesOutWithinItsDeadline) {
  auto c = client();
  ASSERT_TRUE(c);
  double t0 = nowSec();
  auto v = c->get("never-set", Deadline::afterMs(400));
  double waited = nowSec() - t0;
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kTimeout);
  EXPECT_NE(v.error().message().find("never-set"), std::string::npos) << v.error().message();
  EXPECT_GE(waited, 0.35);
  EXPECT_LT(waited, 3.0);
  // The server is fine: a new client works.
  auto d = client();
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->set("x", bytesOf("y")).ok());
  EXPECT_EQ(textOf(*d->get("x", Deadline::afterSec(5))), "y");
}

TEST_F(Store, WrongSecretIsRefused) {
  auto c = StoreClient::connect("127.0.0.1", server_->port(), secretOf(8), Deadline::afterSec(5));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kRemote);
  EXPECT_NE(c.error().message().find("secret"), std::string::npos) << c.error().message();
  // The honest clients still get served.
  auto ok = client();
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->set("a", bytesOf("b")).ok());
}

TEST_F(Store, ClientWaitingInGetFailsWhenTheServerGoesAway) {
  auto c = client();
  ASSERT_TRUE(c);
  Result<Bytes> got = internalError("not run");
  double waited = 0;
  std::thread t([&] {
    double t0 = nowSec();
    got = c->get("never", Deadline::afterSec(20));
    waited = nowSec() - t0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  server_.reset();
  t.join();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code(), Code::kRemote) << got.error().toString();
  EXPECT_LT(waited, 10.0) << "the client noticed only at its deadline";
}

TEST(StoreConnect, NoServerTimesOutWithinTheDeadline) {
  // A port nobody listens on: bind one and close it.
  auto s = StoreServer::start("127.0.0.1", 0, secretOf(1));
  ASSERT_TRUE(s);
  uint16_t port = (*s)->port();
  s->reset();
  double t0 = nowSec();
  auto c = StoreClient::connect("127.0.0.1", port, secretOf(1), Deadline::afterMs(600));
  double waited = nowSec() - t0;
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kTimeout);
  EXPECT_NE(c.error().message().find("cannot reach the rendezvous store"), std::string::npos) << c.error().message();
  EXPECT_LT(waited, 3.0);
}

TEST(StoreConnect, ClientRetriesUntilTheServerComesUp) {
  // Reserve a port, free it, and start the server there only after the client began dialing.
  auto s = StoreServer::start("127.0.0.1", 0, secretOf(2));
  ASSERT_TRUE(s);
  uint16_t port = (*s)->port();
  s->reset();
  Result<std::unique_ptr<StoreClient>> c = internalError("not run");
  std::thread t([&] { c = StoreClient::connect("127.0.0.1", port, secretOf(2), Deadline::afterSec(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto late = StoreServer::start("127.0.0.1", port, secretOf(2));
  t.join();
  ASSERT_TRUE(late) << late.error().toString();
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_TRUE((*c)->set("k", bytesOf("v")).ok());
}

// A unique id lists every interface of rank 0's host; a rank reaches the store at whichever answers with the job's
// secret. Here the first address holds another job's store on the same port, the second this job's.
TEST(StoreConnect, SeveralAddressesAreTriedInTurn) {
  auto mine = StoreServer::start("127.0.0.1", 0, secretOf(3));
  ASSERT_TRUE(mine) << mine.error().toString();
  const uint16_t port = (*mine)->port();
  auto other = StoreServer::start("127.0.0.2", port, secretOf(4));
  ASSERT_TRUE(other) << other.error().toString();
  auto c = StoreClient::connect("127.0.0.2,127.0.0.1", port, secretOf(3), Deadline::afterSec(10));
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_TRUE((*c)->set("k", bytesOf("v")).ok());
  // With only the wrong store to try, the refusal is the answer.
  auto refused = StoreClient::connect("127.0.0.2", port, secretOf(3), Deadline::afterSec(10));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kRemote) << refused.error().toString();
  // Nothing answers anywhere: the deadline, naming every address.
  auto none = StoreClient::connect("127.0.0.3,127.0.0.4", port, secretOf(3), Deadline::afterMs(600));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Code::kTimeout);
  EXPECT_NE(none.error().message().find("127.0.0.3,127.0.0.4"), std::string::npos) << none.error().message();
}

// A fixed port that another socket holds for a moment (a neighbouring job's listener took it by binding port 0) is
// waited out; one held past busyPortWait is an error that says how long it waited.
TEST(StoreConnect, AFixedPortHeldForAMomentIsWaitedOut) {
  auto holder = StoreServer::start("127.0.0.1", 0, secretOf(5));
  ASSERT_TRUE(holder) << holder.error().toString();
  const uint16_t port = (*holder)->port();
  StoreServer::Limits brief;
  brief.busyPortWait = std::chrono::milliseconds(200);
  auto refused = StoreServer::start("127.0.0.1", port, secretOf(6), brief);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("still, after 200 ms"), std::string::npos) << refused.error().message();
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    holder->reset();
  });
  auto s = StoreServer::start("127.0.0.1", port, secretOf(6));
  release.join();
  ASSERT_TRUE(s) << s.error().toString();
  auto c = StoreClient::connect("127.0.0.1", port, secretOf(6), Deadline::afterSec(10));
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_TRUE((*c)->set("k", bytesOf("v")).ok());
}

TEST(StoreConnect, BadBindAddressIsAnInvalidArgument) {
  auto s = StoreServer::start("not-an-ip", 0, secretOf(1));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), Code::kInvalidArgument);
  EXPECT_NE(s.error().message().find("not-an-ip"), std::string::npos);
}

TEST_F(Store, AllGatherWithFourThreads) {
  const int n = 4;
  std::vector<Result<std::vector<Bytes>>> results(n, internalError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto c = client();
      if (!c) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * (n - r)));  // arrive in reverse order
      results[r] =
          c->allGather("ag", r, n, bytesOf("rank" + std::to_string(r) + std::string(r, '+')), Deadline::afterSec(10));
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r]) << "rank " << r << ": " << results[r].error().toString();
    ASSERT_EQ(results[r]->size(), static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) EXPECT_EQ(textOf((*results[r])[p]), "rank" + std::to_string(p) + std::string(p, '+'));
  }
}

TEST_F(Store, AllGatherNamesTheMissingRankOnTimeout) {
  auto c = client();
  ASSERT_TRUE(c);
  auto r = c->allGather("lonely", 0, 2, bytesOf("x"), Deadline::afterMs(300));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout);
  EXPECT_NE(r.error().message().find("rank 1 did not join"), std::string::npos) << r.error().message();
}

TEST_F(Store, BarrierWithFourThreads) {
  const int n = 4;
  std::atomic<int> arrived{0};
  std::vector<int> seenAfter(n, -1);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto c = client();
      if (!c) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * r));  // staggered arrivals
      arrived.fetch_add(1);
      st[r] = c->barrier("bar", n, Deadline::afterSec(10));
      seenAfter[r] = arrived.load();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].toString();
    EXPECT_EQ(seenAfter[r], n) << "rank " << r << " left the barrier before everyone arrived";
  }
}

TEST_F(Store, BarrierTimesOutWhenARankIsMissing) {
  const int n = 3;
  std::vector<Status> st(n - 1);
  std::vector<std::thread> threads;
  double t0 = nowSec();
  for (int r = 0; r < n - 1; ++r)
    threads.emplace_back([&, r] {
      auto c = client();
      if (c) st[r] = c->barrier("bar2", n, Deadline::afterMs(500));
    });
  for (auto& t : threads) t.join();
  EXPECT_LT(nowSec() - t0, 5.0);
  for (auto& s : st) EXPECT_EQ(s.code(), Code::kTimeout) << s.toString();
}

// ---- hardening: what strangers and bad peers may cost the store ----

// A plain TCP connection to the store that says nothing (a port scanner, a half-open peer).
int rawConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Seconds until the server closes fd (reads return 0 or fail), reading and dropping its hello; -1 past limitSec.
double secondsUntilClosed(int fd, double limitSec) {
  const double t0 = nowSec();
  char buf[256];
  while (nowSec() - t0 < limitSec) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) > 0) {
      ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
      if (r <= 0) return nowSec() - t0;
    }
  }
  return -1;
}

TEST(StoreHardening, AConnectionThatNeverAuthenticatesIsDropped) {
  StoreServer::Limits limits;
  limits.handshake = std::chrono::milliseconds(300);
  auto s = StoreServer::start("127.0.0.1", 0, secretOf(5), limits);
  ASSERT_TRUE(s) << s.error().toString();
  int fd = rawConnect((*s)->port());
  ASSERT_GE(fd, 0);
  const double closedAfter = secondsUntilClosed(fd, 5.0);
  ::close(fd);
  EXPECT_GE(closedAfter, 0.2) << "dropped before its deadline";
  EXPECT_GE(closedAfter, 0) << "still open 5 s later: the handshake deadline did not fire";
  EXPECT_LT(closedAfter, 3.0);
  // The store still serves its job.
  auto c = StoreClient::connect("127.0.0.1", (*s)->port(), secretOf(5), Deadline::afterSec(5));
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_TRUE((*c)->set("k", bytesOf("v")).ok());
}

TEST(StoreHardening, UnauthenticatedConnectionsAreCapped) {
  StoreServer::Limits limits;
  limits.maxUnauthenticated = 4;
  auto s = StoreServer::start("127.0.0.1", 0, secretOf(6), limits);
  ASSERT_TRUE(s) << s.error().toString();
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(rawConnect((*s)->port()));
  for (int fd : held) ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server has taken them in
  // The next stranger is closed at once; the first four wait for their handshake deadline (10 s).
  int extra = rawConnect((*s)->port());
  ASSERT_GE(extra, 0);
  const double closedAfter = secondsUntilClosed(extra, 3.0);
  EXPECT_GE(closedAfter, 0) << "a fifth unauthenticated connection was kept";
  ::close(extra);
  EXPECT_LT(secondsUntilClosed(held[0], 0.3), 0) << "a connection within the cap was dropped early";
  // Once they go, room again: a real client connects.
  for (int fd : held) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto c = StoreClient::connect("127.0.0.1", (*s)->port(), secretOf(6), Deadline::afterSec(5));
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_TRUE((*c)->set("k", bytesOf("v")).ok());
}

TEST(StoreHardening, AnAuthenticatedPeerCannotGrowTheStorePastItsBudget) {
  StoreServer::Limits limits;
  limits.maxHeldBytes = 4 << 20;
  auto s = StoreServer::start("127.0.0.1", 0, secretOf(8), limits);
  ASSERT_TRUE(s) << s.error().toString();
  auto c = StoreClient::connect("127.0.0.1", (*s)->port(), secretOf(8), Deadline::afterSec(5));
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_TRUE((*c)->set("a", Bytes(3 << 20)).ok());
  // 3 MiB held: 2 MiB more is past the 4 MiB budget, and the server closes the connection.
  Status st = (*c)->set("b", Bytes(2 << 20));
  EXPECT_FALSE(st.ok());
  // Replacing a value counts its new size only; other clients are served.
  auto d = StoreClient::connect("127.0.0.1", (*s)->port(), secretOf(8), Deadline::afterSec(5));
  ASSERT_TRUE(d) << d.error().toString();
  EXPECT_TRUE((*d)->set("a", Bytes(1 << 20)).ok());
  EXPECT_TRUE((*d)->set("b", Bytes(2 << 20)).ok());
  auto v = (*d)->get("b", Deadline::afterSec(5));
  ASSERT_TRUE(v) << v.error().toString();
  EXPECT_EQ(v->size(), size_t{2} << 20);
}

TEST_F(Store, ADuplicateRankFailsAtOnceSayingSo) {
  auto first = client();
  auto second = client();
  ASSERT_TRUE(first && second);
  // Rank 1 of 2 joins; a second process claiming rank 1 joins too. The real rank 0 never comes: the duplicate
  // must fail now, not at the deadline.
  std::thread t([&] { (void)first->allGather("job/peers", 1, 2, bytesOf("real"), Deadline::afterMs(1500)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double t0 = nowSec();
  auto dup = second->allGather("job/peers", 1, 2, bytesOf("impostor"), Deadline::afterSec(30));
  const double took = nowSec() - t0;
  t.join();
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code(), Code::kInvalidUsage) << dup.error().toString();
  EXPECT_NE(dup.error().message().find("duplicate rank"), std::string::npos) << dup.error().message();
  EXPECT_LT(took, 2.0);
}

}  // namespace
}  // namespace hetcomm::comm
