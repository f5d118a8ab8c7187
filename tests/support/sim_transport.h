// sim_transport.h: an in-memory transport for tests. Connections of one SimHub deliver messages by copying
// between ranks' buffers in the same thread, with the real matching rules (tag, exact size) and rendezvous
// completion, so schedules and the executor run for 1..64 ranks in milliseconds without sockets (Gloo's and
// UCC's habit).
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/executor.h"
#include "common/strings.h"
#include "transports/transport.h"

namespace hetcomm::testing {

class SimHub {
 public:
  using Key = std::tuple<int, int, uint64_t>;  // from, to, tag
  struct Posted {
    transport::Request* req;
    std::span<std::byte> buf;
  };
  struct Waiting {  // a send whose receive is not posted yet
    transport::Request* req;
    std::span<const std::byte> data;
  };
  std::map<Key, Waiting> waiting;
  std::map<Key, Posted> posted;
  size_t messages = 0;
};

class SimConnection final : public transport::Connection {
 public:
  SimConnection(SimHub* hub, int me, int peer) : hub_(hub), me_(me), peer_(peer) {}
  int peer() const override { return peer_; }

  // Rendezvous: a send completes only once its receive has taken the data, the strictest behaviour a transport
  // may have (shm's single-copy path). A schedule that needs eager sends deadlocks here and fails the test.
  Status isend(transport::Request& req, std::span<const std::byte> buf, uint64_t tag) override {
    ++hub_->messages;
    SimHub::Key key{me_, peer_, tag};
    req.state = transport::Request::State::kPending;
    if (auto it = hub_->posted.find(key); it != hub_->posted.end()) {
      deliver(*it->second.req, it->second.buf, buf);
      hub_->posted.erase(it);
      req.state = transport::Request::State::kDone;
      req.bytes = buf.size();
    } else {
      if (hub_->waiting.count(key)) return internalError("tag %#llx sent twice", (unsigned long long)tag);
      hub_->waiting[key] = {&req, buf};
    }
    return okStatus();
  }

  Status irecv(transport::Request& req, std::span<std::byte> buf, uint64_t tag) override {
    req.state = transport::Request::State::kPending;
    SimHub::Key key{peer_, me_, tag};
    if (auto it = hub_->waiting.find(key); it != hub_->waiting.end()) {
      deliver(req, buf, it->second.data);
      it->second.req->state = transport::Request::State::kDone;
      it->second.req->bytes = it->second.data.size();
      hub_->waiting.erase(it);
    } else {
      if (hub_->posted.count(key)) return internalError("receive tag %#llx posted twice", (unsigned long long)tag);
      hub_->posted[key] = {&req, buf};
    }
    return okStatus();
  }

  void sendAbort(std::string_view) noexcept override {}
  void close(const Status&) noexcept override {}
  std::string describe() const override { return format("sim r%d->r%d", me_, peer_); }

 private:
  static void deliver(transport::Request& req, std::span<std::byte> dst, std::span<const std::byte> src) {
    if (dst.size() != src.size()) {
      req.state = transport::Request::State::kFailed;
      req.error = invalidUsage("size mismatch: %zu sent, %zu expected", src.size(), dst.size());
      return;
    }
    if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
    req.state = transport::Request::State::kDone;
    req.bytes = src.size();
  }
  SimHub* hub_;
  int me_, peer_;
};

// Plans args on n ranks with the given algorithm table choice and runs every rank's executor round-robin until
// all finish. bufs[r] = {send, recv, extras...} base pointers. Fails on a planner error, a transfer error, or a
// deadlock (no rank moves).
// lateReceiveFree: plan as for a transport whose late receives are free (GroupView::lateReceiveFree), i.e. with
// the few-slot staging; the simulator's rendezvous completion is exactly that transport.
// Where the simulated ranks are (GroupView::host, island, bw), for topology-aware planners; empty: unknown.
// graph: the whole cluster as a link graph (GroupView::fromGraph), for the synthesised algorithms; it wins over
// the other fields.
struct SimTopology {
  std::vector<int> host, island;
  std::vector<double> bw;  // n x n GB/s
  std::shared_ptr<const topo::LinkGraph> graph;
};

inline Status runSimulated(int n, const std::vector<coll::Args>& args, std::vector<std::vector<std::byte*>> bufs,
                           size_t chunkBytes, const std::string& forcedAlgo = "", SimHub* hubOut = nullptr,
                           bool lateReceiveFree = false, const SimTopology& topo = {}) {
  SimHub hub;
  std::vector<std::vector<std::unique_ptr<SimConnection>>> conns(n);
  std::vector<std::unique_ptr<coll::Executor>> execs(n);
  std::vector<std::vector<std::byte>> scratch(n);
  for (int r = 0; r < n; ++r) {
    std::vector<transport::Connection*> ptrs(n, nullptr);
    for (int p = 0; p < n; ++p) {
      conns[r].push_back(p == r ? nullptr : std::make_unique<SimConnection>(&hub, r, p));
      ptrs[p] = conns[r][p].get();
    }
    coll::GroupView g;
    if (topo.graph) {
      g = coll::GroupView::fromGraph(r, topo.graph, chunkBytes);
    } else {
      g.rank = r;
      g.nranks = n;
      g.chunkBytes = chunkBytes;
      g.host = topo.host;
      g.island = topo.island;
      g.bw = topo.bw;
      if (!g.bw.empty()) g.alpha.assign(g.bw.size(), 10.0);
    }
    g.lateReceiveFree.assign(n, lateReceiveFree ? 1 : 0);
    auto algo = coll::selectAlgorithm(args[r], g, forcedAlgo);
    if (!algo) return algo.error();
    auto plan = algo->algo->plan(args[r], g);
    if (!plan) return plan.error();
    std::string bad = plan->validate(args[r].sendBytes(n), args[r].recvBytes(n));
    if (!bad.empty()) return internalError("rank %d: invalid schedule: %s", r, bad.c_str());
    scratch[r].resize(plan->scratchBytes + 1);
    std::vector<std::byte*> b = bufs[r];
    b.insert(b.begin() + 2, scratch[r].data());
    execs[r] = std::make_unique<coll::Executor>(std::make_shared<const coll::Schedule>(std::move(*plan)), b, ptrs, 1);
  }
  std::vector<bool> done(n, false);
  for (int rounds = 0;; ++rounds) {
    bool allDone = true, moved = false;
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      auto res = execs[r]->advance(&moved);
      if (!res) return Status(res.error().code(), format("rank %d: %s", r, std::string(res.error().message()).c_str()));
      done[r] = *res;
      allDone = allDone && done[r];
    }
    if (allDone) break;
    if (!moved) return internalError("deadlock: no rank can move");
  }
  if (hubOut) *hubOut = std::move(hub);
  return okStatus();
}

}  // namespace hetcomm::testing
