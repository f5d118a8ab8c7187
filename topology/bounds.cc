#include "topology/bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "common/strings.h"

namespace hetcomm::topo {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Dinic's max-flow on a small graph with real capacities.
class FlowNet {
 public:
  explicit FlowNet(int n) : adj_(n) {}
  void add(int from, int to, double cap) {
    adj_[from].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, cap});
    adj_[to].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0});
  }
  double maxflow(int s, int t) {
    for (auto& e : edges_) e.flow = 0;
    double total = 0;
    while (levels(s, t)) {
      next_.assign(adj_.size(), 0);
      while (double f = push(s, t, kInf)) total += f;
    }
    return total;
  }
  // After maxflow: the vertices the source still reaches (its side of a minimum cut).
  std::vector<int> sourceSide(int s) {
    levels(s, -1);
    std::vector<int> side;
    for (int v = 0; v < static_cast<int>(adj_.size()); ++v)
      if (level_[v] >= 0) side.push_back(v);
    return side;
  }

 private:
  struct Edge {
    int to;
    double cap, flow = 0;
  };
  static constexpr double kEps = 1e-12;
  bool levels(int s, int t) {
    level_.assign(adj_.size(), -1);
    level_[s] = 0;
    std::queue<int> q;
    q.push(s);
    while (!q.empty()) {
      const int v = q.front();
      q.pop();
      for (int id : adj_[v]) {
        const Edge& e = edges_[id];
        if (level_[e.to] < 0 && e.cap - e.flow > kEps) {
          level_[e.to] = level_[v] + 1;
          q.push(e.to);
        }
      }
    }
    return t >= 0 && level_[t] >= 0;
  }
  double push(int v, int t, double f) {
    if (v == t) return f;
    for (size_t& i = next_[v]; i < adj_[v].size(); ++i) {
      Edge& e = edges_[adj_[v][i]];
      if (level_[e.to] != level_[v] + 1 || e.cap - e.flow <= kEps) continue;
      if (double got = push(e.to, t, std::min(f, e.cap - e.flow)); got > kEps) {
        e.flow += got;
        edges_[adj_[v][i] ^ 1].flow -= got;
        return got;
      }
    }
    return 0;
  }
  std::vector<Edge> edges_;
  std::vector<std::vector<int>> adj_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

// Hosts 0..H-1, fabrics H..H+F-1, then `extra` more vertices. reversed: every edge turned around (reduce,
// reduce-scatter: the flows run towards the ranks that combine).
FlowNet hostNet(const LinkGraph& g, bool reversed, int extra = 0) {
  const int h = g.nhosts();
  FlowNet net(h + static_cast<int>(g.fabrics.size()) + extra);
  for (const LinkGraph::Port& p : g.ports) {
    const int host = p.host, fabric = h + p.fabric;
    net.add(reversed ? fabric : host, reversed ? host : fabric, p.gbps);
    net.add(reversed ? host : fabric, reversed ? fabric : host, p.gbps);
  }
  return net;
}

std::string hostSet(const LinkGraph& g, const std::vector<int>& side, bool complement) {
  std::vector<char> in(g.nhosts(), 0);
  for (int v : side)
    if (v < g.nhosts()) in[v] = 1;
  std::string out;
  for (int h = 0; h < g.nhosts(); ++h)
    if ((in[h] != 0) != complement) out += (out.empty() ? "" : ",") + g.hosts[h].name;
  return "{" + out + "}";
}

double minMemGBps(const LinkGraph& g) {
  double m = kInf;
  for (const auto& h : g.hosts) m = std::min(m, h.memGBps);
  return m;
}

// us per byte from GB/s (1 GB/s = 1e3 bytes per us).
double usPerByte(double gbps) { return gbps > 0 ? 1.0 / (gbps * 1e3) : kInf; }

// Rooted: the rate from the root's rank to the worst-placed rank (or back, reversed).
CollectiveBound rootedBound(const LinkGraph& g, int root, bool reversed) {
  CollectiveBound b;
  const int rootHost = g.hostOfRank[root];
  double rate = g.nranks() > 1 ? g.hosts[rootHost].memGBps : kInf;
  b.binding = format("the root's memory (%.3g GB/s)", rate);
  FlowNet net = hostNet(g, false);
  for (int v = 0; v < g.nhosts(); ++v) {
    if (v == rootHost) continue;
    const double f = reversed ? net.maxflow(v, rootHost) : net.maxflow(rootHost, v);
    if (f < rate) {
      rate = f;
      const std::vector<int> side = net.sourceSide(reversed ? v : rootHost);
      b.binding = format("cut %s: %.4g GB/s %s", hostSet(g, side, reversed).c_str(), f,
                         reversed ? "into the root's side" : "out of the root's side");
    }
    if (g.hosts[v].memGBps < rate) {
      rate = g.hosts[v].memGBps;
      b.binding = format("the memory of a rank on %s (%.3g GB/s)", g.hosts[v].name.c_str(), rate);
    }
  }
  b.usPerByte = usPerByte(rate);
  return b;
}

// Allgather: the largest rate x (GB/s of one rank's block) at which every cut can take in the blocks held outside
// it. Checked for x by one max-flow per host from a source feeding each host x times its ranks: every host must be
// able to receive x times all ranks. Reduce-scatter is the same on the reversed graph: a cut sends out partial sums
// of the blocks of the ranks outside it.
CollectiveBound gatherBound(const LinkGraph& g, bool reversed) {
  CollectiveBound b;
  const int n = g.nranks(), h = g.nhosts();
  if (n < 2) return b;
  // A rank alone takes in n-1 blocks through its memory.
  double rankLimit = minMemGBps(g) / (n - 1);
  double best = rankLimit;
  b.binding = format("the memory of one rank (%.3g GB/s for %d blocks)", minMemGBps(g), n - 1);
  if (h > 1) {
    const int src = h + static_cast<int>(g.fabrics.size());
    auto feasible = [&](double x, std::string* where) {
      FlowNet net = hostNet(g, reversed, 1);
      for (int v = 0; v < h; ++v) net.add(src, v, x * static_cast<double>(g.hosts[v].ranks.size()));
      for (int v = 0; v < h; ++v)
        if (net.maxflow(src, v) < x * n * (1 - 1e-9)) {
          if (where) *where = hostSet(g, net.sourceSide(src), /*complement=*/true);
          return false;
        }
      return true;
    };
    double lo = 0, hi = 0;
    for (int v = 0; v < h; ++v) hi = std::max(hi, g.hostEgressGBps(v));
    hi = std::min(hi + 1e-9, best);
    if (!feasible(hi, nullptr)) {
      for (int it = 0; it < 60; ++it) {
        const double mid = (lo + hi) / 2;
        (feasible(mid, nullptr) ? lo : hi) = mid;
      }
      std::string where;
      feasible(hi, &where);
      best = lo;
      b.binding = format("cut %s: it %s the blocks of the ranks outside it at %.4g GB/s per rank", where.c_str(),
                         reversed ? "sends out the sums of" : "takes in", lo);
    }
  }
  // size = n blocks; one block takes 1/x.
  b.usPerByte = usPerByte(best) / n;
  return b;
}

CollectiveBound allReduceBound(const LinkGraph& g) {
  CollectiveBound b;
  const int n = g.nranks(), h = g.nhosts();
  if (n < 2) return b;
  // Cut bound: the smallest cut between ranks, each way; a rank alone is cut off by its memory link.
  double cut = minMemGBps(g);
  std::string cutWhere = format("one rank's memory (%.3g GB/s)", cut);
  if (h > 1) {
    FlowNet net = hostNet(g, false);
    for (int v = 1; v < h; ++v)
      for (bool back : {false, true}) {
        const double f = back ? net.maxflow(v, 0) : net.maxflow(0, v);
        if (f < cut) {
          cut = f;
          const std::vector<int> side = net.sourceSide(back ? v : 0);
          const size_t inside = std::count_if(side.begin(), side.end(), [&](int x) { return x < h; });
          cutWhere = format("cut %s: %.4g GB/s each way", hostSet(g, side, 2 * inside > size_t(h)).c_str(), f);
        }
      }
  }
  b.cutUsPerByte = usPerByte(cut);
  // Aggregate bound over the hosts' NICs, and over the ranks' memory.
  double hostAgg = 0, rankAgg = 0, egress = 0, mem = 0;
  for (int v = 0; v < h; ++v) {
    egress += g.hostEgressGBps(v);
    mem += g.hosts[v].memGBps * static_cast<double>(g.hosts[v].ranks.size());
  }
  if (h > 1) hostAgg = 2.0 * (h - 1) * usPerByte(egress);
  rankAgg = 2.0 * (n - 1) * usPerByte(mem);
  b.aggregateUsPerByte = std::max(hostAgg, rankAgg);
  const std::string aggWhere = hostAgg >= rankAgg
                                   ? format("aggregate over %d hosts (%.4g GB/s of NICs)", h, egress)
                                   : format("aggregate over %d ranks' memory (%.4g GB/s)", n, mem);
  b.usPerByte = std::max(b.cutUsPerByte, b.aggregateUsPerByte);
  b.binding = b.cutUsPerByte >= b.aggregateUsPerByte ? cutWhere : aggWhere;
  return b;
}

}  // namespace

const char* boundKindName(BoundKind kind) {
  switch (kind) {
    case BoundKind::kAllReduce:
      return "allreduce";
    case BoundKind::kAllGather:
      return "allgather";
    case BoundKind::kReduceScatter:
      return "reducescatter";
    case BoundKind::kBroadcast:
      return "broadcast";
    case BoundKind::kReduce:
      return "reduce";
  }
  return "?";
}

double busFactor(BoundKind kind, int n) {
  switch (kind) {
    case BoundKind::kAllReduce:
      return 2.0 * (n - 1) / n;
    case BoundKind::kAllGather:
    case BoundKind::kReduceScatter:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

double CollectiveBound::busGBps(int nranks) const {
  if (!(usPerByte > 0) || std::isinf(usPerByte)) return std::isinf(usPerByte) ? 0 : kInf;
  return 1.0 / (usPerByte * 1e3) * busFactor(kind, nranks);
}

CollectiveBound collectiveBound(const LinkGraph& g, BoundKind kind, int root) {
  CollectiveBound b;
  switch (kind) {
    case BoundKind::kAllReduce:
      b = allReduceBound(g);
      break;
    case BoundKind::kAllGather:
      b = gatherBound(g, false);
      break;
    case BoundKind::kReduceScatter:
      b = gatherBound(g, true);
      break;
    case BoundKind::kBroadcast:
      b = rootedBound(g, root, false);
      break;
    case BoundKind::kReduce:
      b = rootedBound(g, root, true);
      break;
  }
  b.kind = kind;
  return b;
}

}  // namespace hetcomm::topo
