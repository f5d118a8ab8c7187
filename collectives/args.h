// args.h: what a collective call asks for, as the collectives layer sees it (no pointers: planners are pure).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/datatype.h"
#include "topology/link_graph.h"

namespace hetcomm::coll {

struct GroupCache;

enum class CollKind : uint8_t { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kSendRecv };
inline constexpr size_t kCollKinds = static_cast<size_t>(CollKind::kSendRecv) + 1;
const char* name(CollKind kind);  // "allreduce", ...

// One send or receive of a point-to-point group; seq numbers the messages between this rank and peer in one
// direction, so the n-th send matches the n-th receive.
struct P2pOp {
  bool isSend = true;
  int peer = 0;
  size_t bytes = 0;
  uint32_t seq = 0;
};

struct Args {
  CollKind kind = CollKind::kAllReduce;
  // allreduce, broadcast, reduce: elements; allgather: per-rank send count; reduce-scatter: per-rank receive
  // count; alltoall: elements per peer block.
  size_t count = 0;
  kernels::DataType dtype = kernels::DataType::kFloat32;
  kernels::RedOp op = kernels::RedOp::kSum;
  int root = 0;
  bool inPlace = false;
  std::vector<P2pOp> p2p;  // kSendRecv only

  size_t sendBytes(int nranks) const;  // size of the send buffer the call reads
  size_t recvBytes(int nranks) const;  // size of the receive buffer the call writes
  // "allreduce(count 1024, float, sum)" for messages.
  std::string describe() const;
};

// The group a collective runs on, as a planner sees it.
struct GroupView {
  int rank = 0;
  int nranks = 1;
  size_t chunkBytes = 512 << 10;  // pipelining unit
  // Per rank: whether a chunk-sized message from it waits at the sender until the receive is posted (a late
  // receive is free), from the connections' lateReceiveIsFree. Empty: assume eager (a late receive costs a copy).
  std::vector<uint8_t> lateReceiveFree;
  bool lateReceiveIsFree(int peer) const {
    return peer >= 0 && static_cast<size_t>(peer) < lateReceiveFree.size() && lateReceiveFree[peer];
  }

  // Where the ranks are, from the topology: a host and an island (hosts joined by one fast fabric) per rank,
  // numbered densely from 0. Empty: every rank its own host, all in one island (nothing known).
  std::vector<int> host, island;
  int hostOf(int r) const { return host.empty() ? r : host[r]; }
  int islandOf(int r) const { return island.empty() ? 0 : island[r]; }

  // The link model the cost model reads: alpha (us) and bandwidth (GB/s, 1e9 B/s) per ordered rank pair, row
  // major n x n, from the topology's link matrix (nominal, or measured by the probe). Empty: a nominal 10 GbE
  // link for every pair.
  std::vector<double> alpha, bw;
  static constexpr double kNominalAlphaUs = 20, kNominalBwGBps = 1.25;
  double alphaUs(int i, int j) const { return alpha.empty() ? kNominalAlphaUs : alpha[size_t(i) * nranks + j]; }
  double bwGBps(int i, int j) const { return bw.empty() ? kNominalBwGBps : bw[size_t(i) * nranks + j]; }
  // The slowest hop of the ring in rank order (what bounds ring and chain algorithms), and its worst alpha; or
  // of the ring through `order` (group ranks).
  double ringBwGBps() const;
  double ringAlphaUs() const;
  double ringBwGBps(const std::vector<int>& order) const;
  double ringAlphaUs(const std::vector<int>& order) const;
  // The cluster as a capacitated graph (hosts, their NICs on fabrics, routes, memory rates): what schedule
  // synthesis packs trees over. Null when nothing is known of it (then synthesis does not apply).
  std::shared_ptr<const topo::LinkGraph> graph;
  // Per collective kind, the share of its tree packing's rate the synthesised schedules reached on this cluster in
  // earlier calls (comm/synth_efficiency.h); 0 where nothing was learned (the model's default then prices).
  std::array<double, kCollKinds> learnedTreeEfficiency{};
  // What rank r copies and reduces on its own per second (GB/s of output) in a call on buffers of `bytes`: its
  // host's measured rates at that size (in cache for small buffers, out of cache for large ones; between two
  // measured sizes, interpolated on the log of the size), shared with the host's other ranks where they outnumber
  // its cores. Nominal figures (out of cache) without a graph or where the host was not measured.
  static constexpr double kNominalCopyGBps = 8, kNominalReduceGBps = 5;
  double copyGBps(int r, double bytes) const;
  double reduceGBps(int r, double bytes) const;

  // Bytes of the slot every rank has in a region of shared memory all the group's ranks map (comm/host_slots.h):
  // set only where they all run on one host and talk over shm. 0: no such region (the slots algorithm needs one).
  size_t hostSlotBytes = 0;

  // What is derived from the group once and kept (its hierarchy, synthesised trees, selections): set by prepare();
  // without it every use derives afresh (tests that build views by hand).
  std::shared_ptr<GroupCache> cache;
  void prepare();
  // A view of rank `rank` from the graph: ranks, hosts, islands and the link matrix's alpha and bandwidth.
  static GroupView fromGraph(int rank, std::shared_ptr<const topo::LinkGraph> graph, size_t chunkBytes);

  // The ranks in an order that crosses hosts and islands as few times as possible: by island, then host, then
  // rank. The same on every rank. Rank order when nothing is known of the topology.
  std::vector<int> nicAwareOrder() const;
  // A chain from root through every rank with the fewest slow hops: root, the rest of its host, the rest of its
  // island, then the other islands host by host (nicAwareOrder's grouping).
  std::vector<int> nicAwareChain(int root) const;
};

}  // namespace hetcomm::coll
