#include "collectives/synth/trees.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>

#include "common/strings.h"

namespace hetcomm::coll::synth {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kRounds = 80;          // Frank-Wolfe rounds over all trees
constexpr int kRebalanceRounds = 300;  // rounds over the kept trees only (cheap: no tree search)
constexpr double kMinWeight = 0.02;  // a tree lighter than this is not worth its messages

// Per unit of flow through tree t: bytes on each port direction ([2p] egress, [2p+1] ingress).
using Load = std::vector<double>;

void addHop(const topo::LinkGraph& g, int from, int to, int way, double amount, Load& load) {
  for (const topo::LinkGraph::Rail& r : g.waysOf(from, to)[way].rails) {
    load[2 * r.from] += amount * r.share;
    load[2 * r.to + 1] += amount * r.share;
  }
}

// Hops out of the root (out: parent to child) or into it (child to parent).
void addTree(const topo::LinkGraph& g, const HostTree& t, bool out, Load& load) {
  for (int v = 0; v < static_cast<int>(t.parent.size()); ++v) {
    const int p = t.parent[v];
    if (p < 0) continue;
    if (out)
      addHop(g, p, v, t.way[v], 1, load);
    else
      addHop(g, v, p, t.way[v], 1, load);
  }
}

Load treeLoad(const topo::LinkGraph& g, TreeUse use, const WeightedTree& wt) {
  Load load(2 * g.ports.size(), 0.0);
  addTree(g, wt.tree, use == TreeUse::kOut, load);
  if (use == TreeUse::kBoth) addTree(g, wt.down, true, load);
  return load;
}

void finishTree(HostTree& t) {
  const int h = static_cast<int>(t.parent.size());
  t.children.assign(h, {});
  for (int v = 0; v < h; ++v)
    if (t.parent[v] >= 0) t.children[t.parent[v]].push_back(v);
  // Depth by walking up from every host (trees are small).
  t.depth = 0;
  for (int v = 0; v < h; ++v) {
    int d = 0;
    for (int u = v; t.parent[u] >= 0; u = t.parent[u]) ++d;
    t.depth = std::max(t.depth, d);
  }
}

// An undirected tree given as parent links from any root: its adjacency, and each host's distances from `root`
// (with the parents of a walk from there when `par` is given).
class UndirectedTree {
 public:
  UndirectedTree(const std::vector<int>& parent, const std::vector<int>& way)
      : parent_(parent), way_(way), adj_(parent.size()) {
    for (int v = 0; v < size(); ++v)
      if (parent[v] >= 0) {
        adj_[v].push_back(parent[v]);
        adj_[parent[v]].push_back(v);
      }
  }
  int size() const { return static_cast<int>(parent_.size()); }

  // The farthest host's distance from root.
  int eccentricity(int root, std::vector<int>* par = nullptr) const {
    std::vector<int> dist(size(), -1), order{root};
    if (par) par->assign(size(), -1);
    dist[root] = 0;
    for (size_t i = 0; i < order.size(); ++i)
      for (int w : adj_[order[i]])
        if (dist[w] < 0) {
          dist[w] = dist[order[i]] + 1;
          if (par) (*par)[w] = order[i];
          order.push_back(w);
        }
    return *std::max_element(dist.begin(), dist.end());
  }

  // The hosts whose farthest host is nearest (one, or two neighbours), ascending.
  std::vector<int> centres() const {
    std::vector<int> best;
    int bestEcc = size() + 1;
    for (int v = 0; v < size(); ++v)
      if (int ecc = eccentricity(v); ecc < bestEcc) {
        bestEcc = ecc;
        best = {v};
      } else if (ecc == bestEcc) {
        best.push_back(v);
      }
    return best;
  }

  HostTree rootedAt(int root) const {
    HostTree t;
    t.root = root;
    eccentricity(root, &t.parent);
    // The way of a hop belongs to the edge, whichever end is the child now.
    t.way.assign(size(), 0);
    for (int v = 0; v < size(); ++v)
      if (t.parent[v] >= 0) t.way[v] = parent_[v] == t.parent[v] ? way_[v] : way_[t.parent[v]];
    finishTree(t);
    return t;
  }

 private:
  std::vector<int> parent_, way_;
  std::vector<std::vector<int>> adj_;
};

// Re-roots an undirected tree at its centre (the lowest index of two): a shallow tree adds the least latency to
// every piece.
HostTree rootAtCentre(const std::vector<int>& parent, const std::vector<int>& way) {
  const UndirectedTree u(parent, way);
  return u.rootedAt(u.centres().front());
}

// An allreduce tree that goes up and down the same edges loads every port the same from any root: each edge
// carries its share once each way. Between two hosts, both are its centres and pieces take both in turn, so that
// each host starts the call sending (the up-hops of the pieces rooted at the other) instead of waiting for its
// first sums, and ends it receiving: with one root, that root's links idle while the first pieces come in and the
// other's while the last go out (64 MiB on mixed-2x2: 2.5 % of the call, measured). On more hosts a second root
// lengthens some binding port's way from the root as often as it shortens one (three-level-6: 2.5 % slower).
void takeTurnsAtCentres(WeightedTree& wt) {
  if (wt.tree.root != wt.down.root || wt.tree.parent != wt.down.parent || wt.tree.way != wt.down.way) return;
  const UndirectedTree u(wt.tree.parent, wt.tree.way);
  const std::vector<int> centres = u.centres();
  if (centres.size() < 2) return;
  wt.turns.clear();
  for (int c : centres) wt.turns.push_back(u.rootedAt(c));
  wt.tree = wt.down = wt.turns.front();
}

// What each way of each hop costs under the gradient (port weights): cost[a * h + b][w] for a hop from a to b by
// way w; no entry for hosts that share no fabric.
using HopCosts = std::vector<std::vector<double>>;

HopCosts hopCosts(const topo::LinkGraph& g, const std::vector<double>& grad) {
  const int h = g.nhosts();
  HopCosts cost(static_cast<size_t>(h) * h);
  for (int a = 0; a < h; ++a)
    for (int b = 0; b < h; ++b)
      for (const auto& way : g.waysOf(a, b)) {
        double c = 0;
        for (const auto& r : way.rails) c += r.share * (grad[2 * r.from] + grad[2 * r.to + 1]);
        cost[static_cast<size_t>(a) * h + b].push_back(c);
      }
  return cost;
}

// The cheapest spanning arborescence rooted at `root` (Chu-Liu/Edmonds): w[u * n + v] is what u costs as v's parent
// (infinite: not allowed). Contracts the cycles the cheapest in-edges make, solves the smaller graph, and expands.
// O(n^3): for the host counts where greedy trees leave too much on the table. Empty when some vertex cannot be
// reached.
std::vector<int> minArborescence(int n, int root, const std::vector<double>& w) {
  std::vector<int> pre(n, -1);
  for (int v = 0; v < n; ++v) {
    if (v == root) continue;
    for (int u = 0; u < n; ++u)
      if (u != v && w[static_cast<size_t>(u) * n + v] < kInf &&
          (pre[v] < 0 || w[static_cast<size_t>(u) * n + v] < w[static_cast<size_t>(pre[v]) * n + v]))
        pre[v] = u;
    if (pre[v] < 0) return {};
  }
  // Cycles among the chosen in-edges, each made one component; every other vertex a component of its own.
  std::vector<int> comp(n, -1), seen(n, -1);
  std::vector<char> onCycle(n, 0);
  int ncomp = 0;
  for (int v = 0; v < n; ++v) {
    int u = v;
    while (u != root && seen[u] < 0 && comp[u] < 0) {
      seen[u] = v;
      u = pre[u];
    }
    if (u != root && seen[u] == v && comp[u] < 0) {
      for (int x = pre[u];; x = pre[x]) {
        comp[x] = ncomp;
        onCycle[x] = 1;
        if (x == u) break;
      }
      ++ncomp;
    }
  }
  if (ncomp == 0) return pre;
  for (int v = 0; v < n; ++v)
    if (comp[v] < 0) comp[v] = ncomp++;
  // Entering a cycle at v replaces v's cycle edge: its cost counts what that saves.
  std::vector<double> w2(static_cast<size_t>(ncomp) * ncomp, kInf);
  std::vector<std::pair<int, int>> orig(static_cast<size_t>(ncomp) * ncomp, {-1, -1});
  for (int u = 0; u < n; ++u)
    for (int v = 0; v < n; ++v) {
      const double c = w[static_cast<size_t>(u) * n + v];
      if (u == v || comp[u] == comp[v] || !(c < kInf) || v == root) continue;
      const double reduced = onCycle[v] ? c - w[static_cast<size_t>(pre[v]) * n + v] : c;
      const size_t at = static_cast<size_t>(comp[u]) * ncomp + comp[v];
      if (reduced < w2[at]) {
        w2[at] = reduced;
        orig[at] = {u, v};
      }
    }
  const std::vector<int> parent2 = minArborescence(ncomp, comp[root], w2);
  if (parent2.empty()) return {};
  std::vector<int> parent = pre;
  for (int c = 0; c < ncomp; ++c) {
    if (parent2[c] < 0) continue;
    const auto [u, v] = orig[static_cast<size_t>(parent2[c]) * ncomp + c];
    parent[v] = u;
  }
  return parent;
}

constexpr int kExactTreeHosts = 32;  // up to this many hosts, directed trees are exact (Chu-Liu/Edmonds)

// The cheapest tree under the hop costs, from `root` (kOut: edges away from it, kIn: towards it, kBoth: both
// directions of a hop, then re-rooted at the centre), each hop by its cheapest way: Prim's algorithm, exact for
// kBoth; for the directed uses Chu-Liu/Edmonds on clusters of up to kExactTreeHosts hosts, Prim (greedy) above.
HostTree cheapestTree(int h, const HopCosts& cost, TreeUse use, int root) {
  // The cheapest way between a (in the tree) and b (joining), and what it costs.
  auto c = [&](int a, int b, int* way) {
    const auto& ab = cost[static_cast<size_t>(a) * h + b];
    const auto& ba = cost[static_cast<size_t>(b) * h + a];
    double best = kInf;
    for (size_t w = 0; w < ab.size() && w < ba.size(); ++w) {
      const double x = use == TreeUse::kBoth ? ab[w] + ba[w] : use == TreeUse::kOut ? ab[w] : ba[w];
      if (x < best) {
        best = x;
        *way = static_cast<int>(w);
      }
    }
    return best;
  };
  std::vector<int> parent(h, -1), way(h, 0);
  if (use != TreeUse::kBoth && h <= kExactTreeHosts) {
    std::vector<double> w(static_cast<size_t>(h) * h, kInf);
    std::vector<int> wayOf(static_cast<size_t>(h) * h, 0);
    for (int u = 0; u < h; ++u)
      for (int v = 0; v < h; ++v)
        if (u != v) w[static_cast<size_t>(u) * h + v] = c(u, v, &wayOf[static_cast<size_t>(u) * h + v]);
    parent = minArborescence(h, root, w);
    if (!parent.empty()) {
      HostTree t;
      t.root = root;
      t.way.assign(h, 0);
      for (int v = 0; v < h; ++v)
        if (parent[v] >= 0) t.way[v] = wayOf[static_cast<size_t>(parent[v]) * h + v];
      t.parent = std::move(parent);
      finishTree(t);
      return t;
    }
    parent.assign(h, -1);
  }
  std::vector<double> dist(h, kInf);
  std::vector<char> in(h, 0);
  in[root] = 1;
  for (int v = 0; v < h; ++v)
    if (!in[v]) {
      dist[v] = c(root, v, &way[v]);
      parent[v] = root;
    }
  for (int added = 1; added < h; ++added) {
    int next = -1;
    for (int v = 0; v < h; ++v)
      if (!in[v] && (next < 0 || dist[v] < dist[next])) next = v;
    in[next] = 1;
    for (int v = 0; v < h; ++v) {
      int w = 0;
      if (!in[v]) {
        const double x = c(next, v, &w);
        if (x < dist[v]) {
          dist[v] = x;
          parent[v] = next;
          way[v] = w;
        }
      }
    }
  }
  if (use == TreeUse::kBoth) return rootAtCentre(parent, way);
  HostTree t;
  t.root = root;
  t.parent = std::move(parent);
  t.way = std::move(way);
  finishTree(t);
  return t;
}

// What a tree costs under the hop costs, hops out of the root (out) or into it.
double treeCost(int h, const HopCosts& cost, const HostTree& t, bool out) {
  double c = 0;
  for (int v = 0; v < h; ++v) {
    const int p = t.parent[v];
    if (p >= 0) c += out ? cost[static_cast<size_t>(p) * h + v][t.way[v]] : cost[static_cast<size_t>(v) * h + p][t.way[v]];
  }
  return c;
}

// The mix being optimised: per root, distinct trees (kBoth: pairs of trees) with weights, and their loads.
struct Mix {
  std::vector<std::vector<WeightedTree>> trees;
  std::vector<std::vector<Load>> loads;
  std::vector<std::map<std::vector<int>, size_t>> index;  // the trees' parents, ways and roots -> position

  size_t add(int root, WeightedTree t, Load load) {
    std::vector<int> key;
    for (const HostTree* x : {&t.tree, &t.down}) {
      key.insert(key.end(), x->parent.begin(), x->parent.end());
      key.insert(key.end(), x->way.begin(), x->way.end());
      key.push_back(x->root);
    }
    auto [it, fresh] = index[root].emplace(std::move(key), trees[root].size());
    if (fresh) {
      t.weight = 0;
      trees[root].push_back(std::move(t));
      loads[root].push_back(std::move(load));
    }
    return it->second;
  }
};

// Port directions' congestion (bytes per byte over GB/s) of total load L.
double maxCongestion(const topo::LinkGraph& g, const Load& L) {
  double m = 0;
  for (size_t e = 0; e < L.size(); ++e) m = std::max(m, L[e] / g.ports[e / 2].gbps);
  return m;
}

// Softmax weights of the congested port directions, over their rates: the gradient of a smoothed maximum.
std::vector<double> gradient(const topo::LinkGraph& g, const Load& L, double beta) {
  const double m = std::max(maxCongestion(g, L), 1e-300);
  std::vector<double> grad(L.size());
  for (size_t e = 0; e < L.size(); ++e) {
    const double cap = g.ports[e / 2].gbps;
    grad[e] = std::exp(beta * (L[e] / cap - m) / m) / cap;
  }
  return grad;
}

// The step from L towards D that minimises the largest congestion (convex in the step: ternary search).
double lineSearch(const topo::LinkGraph& g, const Load& L, const Load& D, double hi) {
  Load x(L.size());
  auto at = [&](double s) {
    for (size_t e = 0; e < L.size(); ++e) x[e] = (1 - s) * L[e] + s * D[e];
    return maxCongestion(g, x);
  };
  double lo = 0;
  for (int it = 0; it < 40; ++it) {
    const double a = lo + (hi - lo) / 3, b = hi - (hi - lo) / 3;
    if (at(a) <= at(b))
      hi = b;
    else
      lo = a;
  }
  return (lo + hi) / 2;
}

// Frank-Wolfe rounds: the gradient of a smoothed maximum of the port loads (sharper as the mix settles), per root
// the cheapest tree under it (prepare(grad) once per round, then pick(root) gives that tree's index in the mix),
// and the step towards them that lowers the largest load most.
template <class Prepare, class Pick>
void frankWolfe(const topo::LinkGraph& g, Mix& mix, const std::vector<double>& demand, Load& L, int rounds,
                Prepare prepare, Pick pick) {
  for (int k = 1; k <= rounds; ++k) {
    prepare(gradient(g, L, 4 + 36.0 * k / rounds));
    std::vector<size_t> chosen(demand.size(), 0);
    Load D(L.size(), 0.0);
    for (size_t r = 0; r < demand.size(); ++r) {
      if (demand[r] <= 0) continue;
      chosen[r] = pick(static_cast<int>(r));
      const Load& l = mix.loads[r][chosen[r]];
      for (size_t e = 0; e < D.size(); ++e) D[e] += demand[r] * l[e];
    }
    const double step = lineSearch(g, L, D, std::min(1.0, 4.0 / (k + 3)));
    for (size_t e = 0; e < L.size(); ++e) L[e] = (1 - step) * L[e] + step * D[e];
    for (size_t r = 0; r < demand.size(); ++r) {
      if (demand[r] <= 0) continue;
      for (WeightedTree& t : mix.trees[r]) t.weight *= 1 - step;
      mix.trees[r][chosen[r]].weight += step;
    }
  }
}

Load totalLoad(const Mix& mix, const std::vector<double>& demand, size_t size) {
  Load L(size, 0.0);
  for (size_t r = 0; r < demand.size(); ++r)
    for (size_t t = 0; t < mix.trees[r].size(); ++t)
      for (size_t e = 0; e < size; ++e) L[e] += demand[r] * mix.trees[r][t].weight * mix.loads[r][t][e];
  return L;
}

}  // namespace

// The roots an allreduce's reduction may end at (every host; on large clusters the 16 with the most NIC rate, which
// keeps a round's tree searches bounded).
std::vector<int> allreduceRoots(const topo::LinkGraph& g) {
  std::vector<int> roots(g.nhosts());
  for (int v = 0; v < g.nhosts(); ++v) roots[v] = v;
  constexpr size_t kMostRoots = 16;
  if (roots.size() > kMostRoots) {
    std::stable_sort(roots.begin(), roots.end(),
                     [&](int a, int b) { return g.hostEgressGBps(a) > g.hostEgressGBps(b); });
    roots.resize(kMostRoots);
  }
  return roots;
}

Packing packTrees(const topo::LinkGraph& g, TreeUse use, const std::vector<double>& demandIn) {
  const int h = g.nhosts();
  std::vector<double> demand = use == TreeUse::kBoth ? std::vector<double>{1.0} : demandIn;
  demand.resize(use == TreeUse::kBoth ? 1 : h, 0.0);
  const size_t roots = demand.size(), size = 2 * g.ports.size();
  Mix mix;
  mix.trees.resize(roots);
  mix.loads.resize(roots);
  mix.index.resize(roots);
  const std::vector<int> reduceRoots = use == TreeUse::kBoth ? allreduceRoots(g) : std::vector<int>{};
  // Start from the trees that are cheapest by rate alone, all weight on them.
  std::vector<double> byRate(size);
  for (size_t e = 0; e < size; ++e) byRate[e] = 1 / g.ports[e / 2].gbps;
  HopCosts costs = hopCosts(g, byRate);
  // The cheapest tree (kBoth: pair of trees) of root r under the current costs, added to the mix.
  auto searchTree = [&](int r) {
    WeightedTree best;
    if (use != TreeUse::kBoth) {
      best.tree = cheapestTree(h, costs, use, r);
    } else {
      // One tree both ways, or the best tree into a host and the best out of it.
      best.tree = best.down = cheapestTree(h, costs, TreeUse::kBoth, 0);
      double bestCost = treeCost(h, costs, best.tree, false) + treeCost(h, costs, best.down, true);
      for (int root : reduceRoots) {
        WeightedTree pair{
            cheapestTree(h, costs, TreeUse::kIn, root), cheapestTree(h, costs, TreeUse::kOut, root), 0, {}};
        const double c = treeCost(h, costs, pair.tree, false) + treeCost(h, costs, pair.down, true);
        if (c < bestCost * (1 - 1e-9)) {
          bestCost = c;
          best = std::move(pair);
        }
      }
    }
    Load l = treeLoad(g, use, best);
    return mix.add(r, std::move(best), std::move(l));
  };
  for (size_t r = 0; r < roots; ++r)
    if (demand[r] > 0) mix.trees[r][searchTree(static_cast<int>(r))].weight = 1;
  Load L = totalLoad(mix, demand, size);
  frankWolfe(
      g, mix, demand, L, kRounds, [&](const std::vector<double>& grad) { costs = hopCosts(g, grad); }, searchTree);
  // Keep the heaviest trees of each root, then re-balance their weights among themselves.
  const size_t keep = roots == 1 ? 8 : 4;
  for (size_t r = 0; r < roots; ++r) {
    if (demand[r] <= 0) continue;
    std::vector<size_t> order(mix.trees[r].size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return mix.trees[r][a].weight > mix.trees[r][b].weight; });
    std::vector<size_t> kept;
    for (size_t i : order)
      if (kept.size() < keep && (kept.empty() || mix.trees[r][i].weight >= kMinWeight)) kept.push_back(i);
    std::sort(kept.begin(), kept.end());
    std::vector<WeightedTree> trees;
    std::vector<Load> loads;
    double total = 0;
    for (size_t i : kept) total += mix.trees[r][i].weight;
    for (size_t i : kept) {
      trees.push_back(std::move(mix.trees[r][i]));
      trees.back().weight /= total;
      loads.push_back(std::move(mix.loads[r][i]));
    }
    mix.trees[r] = std::move(trees);
    mix.loads[r] = std::move(loads);
  }
  L = totalLoad(mix, demand, size);
  std::vector<double> grad;
  frankWolfe(
      g, mix, demand, L, kRebalanceRounds, [&](std::vector<double> gr) { grad = std::move(gr); },
      [&](int r) {
        size_t best = 0;
        double bestCost = kInf;
        for (size_t t = 0; t < mix.trees[r].size(); ++t) {
          double c = 0;
          for (size_t e = 0; e < size; ++e) c += mix.loads[r][t][e] * grad[e];
          if (c < bestCost) {
            bestCost = c;
            best = t;
          }
        }
        return best;
      });

  Packing p;
  p.use = use;
  p.demand = demand;
  p.byRoot.resize(roots);
  for (size_t r = 0; r < roots; ++r)
    for (WeightedTree& wt : mix.trees[r]) {
      if (wt.weight < 1e-9) continue;
      p.maxDepth = std::max({p.maxDepth, wt.tree.depth, wt.down.depth});
      p.byRoot[r].push_back(std::move(wt));
    }
  if (use == TreeUse::kBoth && h == 2)
    for (WeightedTree& wt : p.byRoot[0]) takeTurnsAtCentres(wt);
  for (auto& list : p.byRoot) {  // weights of a root sum to 1 exactly
    double total = 0;
    for (const auto& wt : list) total += wt.weight;
    for (auto& wt : list) wt.weight /= total;
  }
  p.usPerByte = maxCongestion(g, portLoads(g, p)) / 1e3;
  return p;
}

std::vector<double> portLoads(const topo::LinkGraph& g, const Packing& p) {
  Load L(2 * g.ports.size(), 0.0);
  for (size_t r = 0; r < p.byRoot.size(); ++r)
    for (const WeightedTree& wt : p.byRoot[r]) {
      const Load l = treeLoad(g, p.use, wt);
      for (size_t e = 0; e < L.size(); ++e) L[e] += p.demand[r] * wt.weight * l[e];
    }
  return L;
}

std::string Packing::describe(const topo::LinkGraph& g) const {
  auto edges = [&](const HostTree& t, const char* arrow) {
    std::string e;
    for (int v = 0; v < static_cast<int>(t.parent.size()); ++v)
      if (t.parent[v] >= 0) {
        const int path = g.waysOf(t.parent[v], v)[t.way[v]].path;
        e += format(" %s%s%s", g.hosts[v].name.c_str(), arrow, g.hosts[t.parent[v]].name.c_str());
        if (path >= 0) e += format("(path %d)", path);
      }
    return e;
  };
  std::string out;
  for (size_t r = 0; r < byRoot.size(); ++r)
    for (const WeightedTree& wt : byRoot[r]) {
      out += format("root %s weight %.3f:%s", g.hosts[wt.tree.root].name.c_str(), wt.weight,
                    edges(wt.tree, use == TreeUse::kOut ? "<-" : "->").c_str());
      if (use == TreeUse::kBoth) out += format("; down:%s", edges(wt.down, "<-").c_str());
      for (size_t i = 1; i < wt.turns.size(); ++i)
        out += format("; in turn rooted at %s", g.hosts[wt.turns[i].root].name.c_str());
      out += "\n";
    }
  return out + format("bottleneck %.4g us per byte of demand\n", usPerByte);
}

namespace {

constexpr size_t kSharedPackings = 1024;  // entries kept; the memo starts afresh beyond

// Everything packTrees reads of its inputs, as bytes: the use, the demand, the hosts' count, each port's host and
// rate, and each pair's ways (path, rails and their shares). A change that makes packTrees read more of the graph
// must add it here.
std::string packingKey(const topo::LinkGraph& g, TreeUse use, const std::vector<double>& demand) {
  std::string key;
  auto put = [&key](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(static_cast<int>(use));
  put(g.nhosts());
  put(demand.size());
  for (double d : demand) put(d);
  put(g.ports.size());
  for (const topo::LinkGraph::Port& port : g.ports) put(port.host), put(port.gbps);
  for (int a = 0; a < g.nhosts(); ++a)
    for (int b = 0; b < g.nhosts(); ++b) {
      if (a == b) continue;
      const std::vector<topo::LinkGraph::Way>& ways = g.waysOf(a, b);
      put(ways.size());
      for (const topo::LinkGraph::Way& w : ways) {
        put(w.path);
        put(w.rails.size());
        for (const topo::LinkGraph::Rail& r : w.rails) put(r.from), put(r.to), put(r.share);
      }
    }
  return key;
}

}  // namespace

std::shared_ptr<const Packing> sharedPacking(const topo::LinkGraph& g, TreeUse use, const std::vector<double>& demand) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const Packing>> memo;
  std::string key = packingKey(g, use, demand);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  auto p = std::make_shared<const Packing>(packTrees(g, use, demand));  // outside the lock: it may take a while
  std::lock_guard<std::mutex> lock(mu);
  if (memo.size() >= kSharedPackings) memo.clear();
  return memo.emplace(std::move(key), std::move(p)).first->second;
}

}  // namespace hetcomm::coll::synth
