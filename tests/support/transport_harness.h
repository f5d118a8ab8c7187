// transport_harness.h: the ranks of one transport as objects of one process, for the transport tests (tcp, shm,
// ucx, verbs). connectGroup() makes a transport per rank through a factory, listens on each and runs connectAll on
// a thread per rank (it blocks until every pair is connected); then ONE thread drives every transport's progress()
// in a loop bounded by iterations and wall time, arming each transport (armForSleep) before it naps in poll() on
// their fds, as the progress engine does. Also: test data (pattern, diff), checks that messages arrived intact
// (expectDelivered, expectManyTagsDelivered), and runChild(), which starts this binary again as a child process
// for the parameters a transport reads once per process.
//
// Not here: what differs per backend (its Config, comm ids, teardown order, /dev/shm checks). A test file derives
// from TransportGroup for that and wraps connectGroup()/makeGroup() with a factory of its transport.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/strings.h"
#include "transports/transport.h"

extern char** environ;

namespace hetcomm::testing {

using Bytes = std::vector<std::byte>;
using Conns = std::vector<std::unique_ptr<transport::Connection>>;  // [peer]; null for itself and skipped peers
// Makes rank `rank`'s transport, not listening yet.
using TransportFactory = std::function<Result<std::unique_ptr<transport::Transport>>(int rank)>;

// A backend's create() result as a TransportFactory returns it.
template <class T>
Result<std::unique_ptr<transport::Transport>> asTransport(Result<std::unique_ptr<T>> created) {
  if (!created) return created.error();
  return std::unique_ptr<transport::Transport>(std::move(*created));
}

// ---- configuration and data ----

inline crypto::Secret secretOf(uint8_t seed) {
  crypto::Secret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed * 31 + i);
  return s;
}

// Every rank of the tests on one host by default: peers dial 127.0.0.1 (tcp), map each other's segments (shm),
// and are watched through their pidfd (ucx; our own pid).
inline transport::Config configFor(int rank, int n, const crypto::Secret& secret, uint64_t commId,
                                   const std::string& hostId = "unit-test-host") {
  transport::Config cfg;
  cfg.rank = rank;
  cfg.nranks = n;
  cfg.secret = secret;
  cfg.commId = commId;
  cfg.timeoutSec = 10;
  cfg.hostId = hostId;
  return cfg;
}

// Deterministic, position-dependent bytes, so a misplaced or dropped segment shows up (xorshift64, a word at a
// time: 256 MiB in a fraction of a second).
inline Bytes pattern(size_t n, uint32_t seed) {
  Bytes v(n);
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = next();
    std::memcpy(v.data() + i, &w, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<std::byte>(next());
  return v;
}

// "" when equal, else where they first differ.
inline std::string diff(const Bytes& got, const Bytes& want) {
  if (got.size() != want.size()) return format("size %zu, expected %zu", got.size(), want.size());
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  auto m = std::mismatch(got.begin(), got.end(), want.begin());
  return format("first difference at byte %zu of %zu", static_cast<size_t>(m.first - got.begin()), got.size());
}

inline bool contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

inline Bytes bytesOf(const std::string& s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

// ---- a group of ranks in this process ----

struct TransportGroup;
inline bool driveGroups(const std::vector<TransportGroup*>& groups, const std::function<bool()>& done, double wallSec,
                        long maxIters);

// n transports of one communicator and their connections; a test may leave t[r] or c[r] empty. Teardown destroys
// every connection before any transport (a connection may point into its transport); a backend whose teardown
// must go otherwise does it in its own destructor, which runs first.
struct TransportGroup {
  std::vector<std::unique_ptr<transport::Transport>> t;
  std::vector<Conns> c;  // c[rank][peer]

  TransportGroup() = default;
  TransportGroup(const TransportGroup&) = delete;
  TransportGroup& operator=(const TransportGroup&) = delete;
  ~TransportGroup() { tearDown(); }

  void tearDown() {
    c.clear();
    t.clear();
  }
  transport::Connection& conn(int from, int to) { return *c[from][to]; }

  // Calls progress() on every transport until done() holds. Bounded by iterations and wall time; when a pass
  // finds nothing done it arms every transport and, if all agree nothing is waiting, sleeps in poll() on their
  // fds for at most 2 ms (a short nap, so a missed wake-up costs time here, not a hang).
  bool drive(const std::function<bool()>& done, double wallSec = 60, long maxIters = 5'000'000) {
    return driveGroups({this}, done, wallSec, maxIters);
  }
  // Drives for a while without a goal (lets data in flight land).
  void driveFor(double sec) {
    const Deadline d = Deadline::afterSec(sec);
    drive([&] { return d.expired(); }, sec + 5);
  }
};

// A comm id no other test of this process uses (prefix: the test file's own byte, so files never collide).
inline uint64_t freshCommId(uint8_t prefix) {
  static std::atomic<uint32_t> counter{0};
  return (static_cast<uint64_t>(prefix) << 56) | (static_cast<uint64_t>(getpid() & 0xffffff) << 32) | ++counter;
}

// A group with a comm id of its own whose teardown runs every rank's on its own thread at once, as separate
// processes would: a UCX transport's destructor progresses only its own worker while its endpoints close, and an
// endpoint's close may need the peer's worker to progress too. Each rank's connections go before its transport.
struct ThreadedTeardownGroup : TransportGroup {
  uint64_t commId;
  explicit ThreadedTeardownGroup(uint8_t idPrefix) : commId(freshCommId(idPrefix)) {}
  ~ThreadedTeardownGroup() {
    c.resize(std::max(c.size(), t.size()));
    std::vector<std::thread> threads;
    for (size_t r = 0; r < c.size(); ++r)
      threads.emplace_back([this, r] {
        c[r].clear();
        if (r < t.size()) t[r].reset();
      });
    for (auto& th : threads) th.join();
  }
};

// drive() over the transports of several groups at once (communicators that share a progress engine).
inline bool driveGroups(const std::vector<TransportGroup*>& groups, const std::function<bool()>& done, double wallSec,
                        long maxIters) {
  const Deadline deadline = Deadline::afterSec(wallSec);
  std::vector<pollfd> fds;
  for (TransportGroup* g : groups)
    for (auto& tr : g->t)
      if (tr) fds.push_back({tr->waitFd(), POLLIN, 0});
  for (long i = 0; i < maxIters; ++i) {
    for (TransportGroup* g : groups)
      for (auto& tr : g->t) {
        if (!tr) continue;
        Status st = tr->progress();
        if (!st.ok()) {
          ADD_FAILURE() << "progress: " << st.toString();
          return false;
        }
      }
    if (done()) return true;
    if (deadline.expired()) return false;
    bool sleep = true;
    for (TransportGroup* g : groups)
      for (auto& tr : g->t)
        if (tr && !tr->armForSleep()) sleep = false;
    if (sleep) ::poll(fds.data(), fds.size(), 2);
  }
  return false;
}

struct ConnectOutcome {
  std::vector<Result<Conns>> results;  // empty when a transport could not be made or listen
  std::vector<double> seconds;         // how long each connectAll took
};

// Makes a transport per rank and listens on each, then runs connectAll on a thread per rank, every rank with all
// blobs but its own. participates[r] false: rank r listens but never calls connectAll (a peer that hangs).
inline ConnectOutcome connectGroup(TransportGroup& g, int n, const TransportFactory& make, double deadlineSec,
                                   std::vector<bool> participates = {}) {
  if (participates.empty()) participates.assign(n, true);
  ConnectOutcome out;
  std::vector<Bytes> blobs(n);
  g.t.resize(n);
  for (int r = 0; r < n; ++r) {
    auto tr = make(r);
    EXPECT_TRUE(tr) << tr.error().toString();
    if (!tr) return out;
    g.t[r] = std::move(*tr);
    auto blob = g.t[r]->listen();
    EXPECT_TRUE(blob) << blob.error().toString();
    if (!blob) return out;
    blobs[r] = std::move(*blob);
  }
  std::vector<std::optional<Result<Conns>>> res(n);
  out.seconds.assign(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    if (!participates[r]) continue;
    threads.emplace_back([&, r] {
      std::vector<Bytes> mine = blobs;
      mine[r].clear();
      double t0 = nowSec();
      res[r].emplace(g.t[r]->connectAll(mine, Deadline::afterSec(deadlineSec)));
      out.seconds[r] = nowSec() - t0;
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r)
    out.results.push_back(res[r] ? std::move(*res[r]) : Result<Conns>(internalError("did not take part")));
  return out;
}

// A connected group of n ranks (a 20 s deadline): every rank has a connection to every other, naming its peer.
// Fails the test (fatally) when set-up fails.
inline void makeGroup(TransportGroup& g, int n, const TransportFactory& make) {
  auto out = connectGroup(g, n, make, 20);
  ASSERT_EQ(static_cast<int>(out.results.size()), n);
  g.c.resize(n);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(out.results[r]) << "rank " << r << ": " << out.results[r].error().toString();
    g.c[r] = std::move(*out.results[r]);
    ASSERT_EQ(static_cast<int>(g.c[r].size()), n);
    for (int p = 0; p < n; ++p) {
      if (p == r) {
        EXPECT_EQ(g.c[r][p], nullptr);
      } else {
        ASSERT_NE(g.c[r][p], nullptr) << r << "->" << p;
        EXPECT_EQ(g.c[r][p]->peer(), p);
      }
    }
  }
}

// Drives g until every request of `reqs` finishes, then expects each done with n bytes and every receive buffer
// equal to what was sent into it (`delivered`: {received, sent} pairs). Fails fatally on a timeout.
inline void expectDelivered(TransportGroup& g, size_t n, std::initializer_list<transport::Request*> reqs,
                            std::initializer_list<std::pair<const Bytes*, const Bytes*>> delivered,
                            double wallSec = 60) {
  ASSERT_TRUE(g.drive(
      [&] { return std::all_of(reqs.begin(), reqs.end(), [](transport::Request* r) { return r->finished(); }); },
      wallSec))
      << "timed out";
  for (transport::Request* r : reqs) {
    EXPECT_TRUE(r->done()) << r->error.toString();
    EXPECT_EQ(r->bytes, n);
  }
  for (auto [got, want] : delivered) EXPECT_EQ(diff(*got, *want), "");
}

// Ranks 0 and 1 of g exchange n bytes both ways at once with the same tag (a different message per direction),
// receives posted before the sends. Expects both delivered intact within wallSec.
inline void expectBothDirectionsReceivesFirst(TransportGroup& g, size_t n, double wallSec = 60) {
  Bytes out01 = pattern(n, 1), out10 = pattern(n, 2);
  Bytes in01(n), in10(n);
  transport::Request r01, r10, s01, s10;
  ASSERT_TRUE(g.conn(1, 0).irecv(r01, in01, 77).ok());
  ASSERT_TRUE(g.conn(0, 1).irecv(r10, in10, 77).ok());
  EXPECT_EQ(r01.state, transport::Request::State::kPending);
  ASSERT_TRUE(g.conn(0, 1).isend(s01, out01, 77).ok());
  ASSERT_TRUE(g.conn(1, 0).isend(s10, out10, 77).ok());
  ASSERT_NO_FATAL_FAILURE(expectDelivered(g, n, {&r01, &r10, &s01, &s10}, {{&in01, &out01}, {&in10, &out10}}, wallSec));
}

// Rank 1 aborts its connection to rank 0 with nothing pending; the receive rank 0 posts afterwards fails with
// kRemote and the reason.
inline void expectAbortFailsTheNextReceive(TransportGroup& g) {
  g.conn(1, 0).sendAbort("rank 1 gives up");  // the higher rank aborts this time
  g.driveFor(0.1);
  Bytes in(4);
  transport::Request r;
  ASSERT_TRUE(g.conn(0, 1).irecv(r, in, 1).ok());
  ASSERT_TRUE(g.drive([&] { return r.finished(); }, 5));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kRemote);
  EXPECT_TRUE(contains(r.error.message(), "rank 1 gives up")) << r.error.message();
}

// Many messages in flight at once, matched by tag in whatever order they come: kMsgs from every rank of g to
// every other, message i of sizes[i % sizes.size()] bytes with tag tagBase + 977 i. The receives of every
// firstEvery-th message are posted first, in reverse order; then every send goes, in order; then, after settleSec
// of driving, the other receives, reversed again. Expects every message delivered intact.
inline void expectManyTagsDelivered(TransportGroup& g, int kMsgs, const std::vector<size_t>& sizes, uint64_t tagBase,
                                    int firstEvery, double settleSec) {
  const int n = static_cast<int>(g.t.size());
  struct Msg {
    int from, to, i;
    Bytes out, in;
    transport::Request s, r;
  };
  std::deque<Msg> msgs;  // stable addresses for the requests
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b)
        for (int i = 0; i < kMsgs; ++i) {
          Msg& m = msgs.emplace_back();
          m.from = a;
          m.to = b;
          m.i = i;
          m.out = pattern(sizes[i % sizes.size()], a * 1000 + b * 100 + i);
          m.in.resize(sizes[i % sizes.size()]);
        }
  auto tag = [&](const Msg& m) { return tagBase + 977ull * m.i; };
  for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
    if (it->i % firstEvery == 0) {
      ASSERT_TRUE(g.conn(it->to, it->from).irecv(it->r, it->in, tag(*it)).ok());
    }
  for (auto& m : msgs) ASSERT_TRUE(g.conn(m.from, m.to).isend(m.s, m.out, tag(m)).ok());
  g.driveFor(settleSec);
  for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
    if (it->i % firstEvery != 0) {
      ASSERT_TRUE(g.conn(it->to, it->from).irecv(it->r, it->in, tag(*it)).ok());
    }
  ASSERT_TRUE(g.drive([&] {
    return std::all_of(msgs.begin(), msgs.end(), [](const Msg& m) { return m.s.finished() && m.r.finished(); });
  }));
  for (auto& m : msgs) {
    SCOPED_TRACE(format("%d->%d #%d (%zu bytes)", m.from, m.to, m.i, m.out.size()));
    EXPECT_TRUE(m.s.done()) << m.s.error.toString();
    EXPECT_TRUE(m.r.done()) << m.r.error.toString();
    EXPECT_EQ(m.r.bytes, m.out.size());
    EXPECT_EQ(diff(m.in, m.out), "");
  }
}

// ---- this binary again, as a child process ----

// Runs this binary again with --gtest_filter=filter, its environment without the variables that start with one of
// dropPrefixes, plus extraEnv. Returns the child's exit status (128 + signal when killed by one; -1 when it could
// not start, -2 when it ran past timeoutSec and was killed) and fills *output with what it printed.
inline int runChild(const std::vector<std::string>& dropPrefixes, const std::vector<std::string>& extraEnv,
                    const std::string& filter, std::string* output, double timeoutSec) {
  char path[] = "/tmp/hc_transport_child.XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return -1;
  ::close(fd);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    if (std::any_of(dropPrefixes.begin(), dropPrefixes.end(), [&](const std::string& p) { return s.rfind(p, 0) == 0; }))
      continue;
    envs.push_back(s);
  }
  envs.insert(envs.end(), extraEnv.begin(), extraEnv.end());
  std::vector<char*> envp;
  for (auto& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", f = "--gtest_filter=" + filter;
  char* argv[] = {exe.data(), f.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, path, O_WRONLY | O_TRUNC, 0);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ::unlink(path);
    return -1;
  }
  int status = 0;
  bool killed = false;
  const Deadline deadline = Deadline::afterSec(timeoutSec);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (deadline.expired()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      *output = "child timed out and was killed\n";
      killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  *output += ss.str();
  ::unlink(path);
  if (killed) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace hetcomm::testing
