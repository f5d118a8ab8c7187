#include "collectives/args.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "collectives/group_cache.h"
#include "common/strings.h"

namespace hetcomm::coll {

const char* name(CollKind kind) {
  switch (kind) {
    case CollKind::kAllReduce:
      return "allreduce";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kReduce:
      return "reduce";
    case CollKind::kAllGather:
      return "allgather";
    case CollKind::kReduceScatter:
      return "reducescatter";
    case CollKind::kAlltoAll:
      return "alltoall";
    case CollKind::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

size_t Args::sendBytes(int n) const {
  size_t e = kernels::sizeOf(dtype);
  switch (kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAlltoAll:
      return count * n * e;
    default:
      return count * e;
  }
}

size_t Args::recvBytes(int n) const {
  size_t e = kernels::sizeOf(dtype);
  switch (kind) {
    case CollKind::kAllGather:
    case CollKind::kAlltoAll:
      return count * n * e;
    default:
      return count * e;
  }
}

std::string Args::describe() const {
  switch (kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduceScatter:
      return format("%s(count %zu, %s, %s)", name(kind), count, kernels::name(dtype), kernels::name(op));
    case CollKind::kReduce:
      return format("reduce(count %zu, %s, %s, root %d)", count, kernels::name(dtype), kernels::name(op), root);
    case CollKind::kBroadcast:
      return format("broadcast(count %zu, %s, root %d)", count, kernels::name(dtype), root);
    case CollKind::kAllGather:
    case CollKind::kAlltoAll:
      return format("%s(count %zu, %s)", name(kind), count, kernels::name(dtype));
    case CollKind::kSendRecv:
      return format("send/recv group of %zu operations", p2p.size());
  }
  return "?";
}

namespace {

// A host's rate at buffers of `bytes`: log-linear between the measured sizes around it, the nearest one outside
// them. 0 when the host was not measured.
double rateAt(const std::vector<topo::MemoryRate>& curve, double topo::MemoryRate::*rate, double bytes) {
  if (curve.empty()) return 0;
  if (bytes <= curve.front().bytes) return curve.front().*rate;
  if (bytes >= curve.back().bytes) return curve.back().*rate;
  size_t i = 1;
  while (curve[i].bytes < bytes) ++i;
  const topo::MemoryRate &lo = curve[i - 1], &hi = curve[i];
  const double f = std::log(bytes / lo.bytes) / std::log(hi.bytes / lo.bytes);
  return lo.*rate + f * (hi.*rate - lo.*rate);
}

// A rank's rate alone, shared with its host's other ranks where they outnumber the cores.
double perRank(const GroupView& g, int r, double topo::MemoryRate::*rate, double bytes, double nominal) {
  if (!g.graph || r < 0 || r >= g.graph->nranks()) return nominal;
  const topo::LinkGraph::HostNode& h = g.graph->hosts[g.graph->hostOfRank[r]];
  const double measured = rateAt(h.memory, rate, bytes);
  const double alone = measured > 0 ? measured : nominal;
  const double k = static_cast<double>(h.ranks.size());
  return h.cores > 0 && k > h.cores ? alone * h.cores / k : alone;
}

}  // namespace

double GroupView::copyGBps(int r, double bytes) const {
  return perRank(*this, r, &topo::MemoryRate::copyGBps, bytes, kNominalCopyGBps);
}
double GroupView::reduceGBps(int r, double bytes) const {
  return perRank(*this, r, &topo::MemoryRate::reduceGBps, bytes, kNominalReduceGBps);
}

void GroupView::prepare() { cache = std::make_shared<GroupCache>(); }

GroupView GroupView::fromGraph(int rank, std::shared_ptr<const topo::LinkGraph> graph, size_t chunkBytes) {
  GroupView g;
  g.rank = rank;
  g.nranks = graph->nranks();
  g.chunkBytes = chunkBytes;
  g.host = graph->hostOfRank;
  for (int r = 0; r < g.nranks; ++r) g.island.push_back(graph->hosts[graph->hostOfRank[r]].island);
  g.alpha = graph->alphaUs;
  g.bw = graph->bwGBps;
  g.graph = std::move(graph);
  return g;
}

std::vector<int> GroupView::nicAwareOrder() const {
  std::vector<int> order(nranks);
  for (int r = 0; r < nranks; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::pair(islandOf(a), hostOf(a)) < std::pair(islandOf(b), hostOf(b));
  });
  return order;
}

std::vector<int> GroupView::nicAwareChain(int root) const {
  std::vector<int> order = nicAwareOrder();
  auto key = [&](int r) {
    return std::tuple(islandOf(r) != islandOf(root), hostOf(r) != hostOf(root), r != root);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  return order;
}

double GroupView::ringBwGBps(const std::vector<int>& order) const {
  const int n = static_cast<int>(order.size());
  double worst = n > 1 ? bwGBps(order[0], order[1 % n]) : kNominalBwGBps;
  for (int i = 0; i < n; ++i) worst = std::min(worst, bwGBps(order[i], order[(i + 1) % n]));
  return worst > 0 ? worst : kNominalBwGBps;
}

double GroupView::ringAlphaUs(const std::vector<int>& order) const {
  const int n = static_cast<int>(order.size());
  double worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, alphaUs(order[i], order[(i + 1) % n]));
  return n > 1 ? worst : 0;
}

static std::vector<int> identityOrder(int n) {
  std::vector<int> order(n);
  for (int r = 0; r < n; ++r) order[r] = r;
  return order;
}

double GroupView::ringBwGBps() const { return ringBwGBps(identityOrder(nranks)); }
double GroupView::ringAlphaUs() const { return ringAlphaUs(identityOrder(nranks)); }

}  // namespace hetcomm::coll
