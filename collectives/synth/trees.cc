#include "collectives/synth/trees.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>

#include "collectives/synth/packing_lp.h"
#include "common/strings.h"

namespace hetcomm::coll::synth {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kRounds = 80;          // Frank-Wolfe rounds over all trees
constexpr int kRebalanceRounds = 300;  // rounds over the kept trees only (cheap: no tree search)
constexpr double kMinWeight = 0.02;  // a tree lighter than this is not worth its messages
// Column generation (solveExactly): rounds at most, and the gap to the optimum at which it stops, relative. On the
// 16-host benchmark Frank-Wolfe's trees came within 0.5 % of the optimum, and the 62 rounds that closed that gap
// took 40 ms; the random clusters of the tests need none.
constexpr int kColumnRounds = 10;
constexpr double kColumnGap = 0.005;
// A weight the simplex leaves below this is zero (its tolerance, with the rows' tie-breaks, leaves such crumbs on
// trees excluded: counted as used, they kept the pruning from ending).
constexpr double kNegligibleWeight = 1e-6;
// How much lighter, relative, the exact packing's bottleneck must be than Frank-Wolfe's to be taken instead.
constexpr double kExactGain = 0.01;

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

// What each way of each hop costs under the gradient (port weights), and for the tree searches, flat, the cheapest
// way of each hop: a search reads h^2 of them, once per root per round, so they are found once per round.
struct HopCosts {
  int h = 0;
  // [a * h + b][w]: a hop from a to b by way w; none where the hosts share no fabric.
  std::vector<std::vector<double>> perWay;
  // [u * h + v]: what u costs as v's parent, by the cheapest way (infinite where none): out, the hop u to v; in, the
  // hop v to u; both, the two hops by one way. The ways they take beside them.
  std::vector<double> out, in, both;
  std::vector<int> outWay, inWay, bothWay;
};

HopCosts hopCosts(const topo::LinkGraph& g, const std::vector<double>& grad) {
  const int h = g.nhosts();
  const size_t n = static_cast<size_t>(h) * h;
  HopCosts cost;
  cost.h = h;
  cost.perWay.resize(n);
  for (int a = 0; a < h; ++a)
    for (int b = 0; b < h; ++b)
      for (const auto& way : g.waysOf(a, b)) {
        double c = 0;
        for (const auto& r : way.rails) c += r.share * (grad[2 * r.from] + grad[2 * r.to + 1]);
        cost.perWay[static_cast<size_t>(a) * h + b].push_back(c);
      }
  cost.out.assign(n, kInf);
  cost.in.assign(n, kInf);
  cost.both.assign(n, kInf);
  cost.outWay.assign(n, 0);
  cost.inWay.assign(n, 0);
  cost.bothWay.assign(n, 0);
  for (int a = 0; a < h; ++a)
    for (int b = 0; b < h; ++b) {
      if (a == b) continue;
      const size_t at = static_cast<size_t>(a) * h + b;
      const std::vector<double>& ab = cost.perWay[at];
      const std::vector<double>& ba = cost.perWay[static_cast<size_t>(b) * h + a];
      // A way is usable when it goes both ways; the lowest-numbered of equally cheap ones.
      for (size_t w = 0; w < ab.size() && w < ba.size(); ++w) {
        if (ab[w] < cost.out[at]) {
          cost.out[at] = ab[w];
          cost.outWay[at] = static_cast<int>(w);
        }
        if (ab[w] + ba[w] < cost.both[at]) {
          cost.both[at] = ab[w] + ba[w];
          cost.bothWay[at] = static_cast<int>(w);
        }
      }
    }
  for (int u = 0; u < h; ++u)
    for (int v = 0; v < h; ++v) {
      cost.in[static_cast<size_t>(u) * h + v] = cost.out[static_cast<size_t>(v) * h + u];
      cost.inWay[static_cast<size_t>(u) * h + v] = cost.outWay[static_cast<size_t>(v) * h + u];
    }
  return cost;
}

}  // namespace

// A path grows backwards from a vertex along each vertex's cheapest in-edge. When it closes on itself, the cycle is
// contracted into one vertex whose in-edges cost what they cost over the cycle edge they would replace, and the path
// goes on from there; when it reaches the root or a vertex already joined to it, every vertex on it is joined for
// good. The contractions are then undone from the last: a cycle keeps every edge but the one its chosen in-edge
// replaces. Contracting one cycle at a time, in place, matters: in a clique of equal links (an island) the cheapest
// in-edges close one small cycle at a time, and a pass over the whole graph per cycle made the search O(n^3).
std::vector<int> minArborescence(int n, int root, const std::vector<double>& w) {
  // The contracted graph's vertices are named by one original member each (a rep); nodes of the contraction forest
  // are the originals, 0 to n - 1, then each cycle in the order contracted.
  std::vector<double> cost(w);  // [t * n + s]: from rep t into rep s, reduced by what s's cycles already pay
  std::vector<int> orig(static_cast<size_t>(n) * n);  // the original edge, u * n + v, behind each entry
  for (size_t i = 0; i < orig.size(); ++i) orig[i] = static_cast<int>(i);
  std::vector<int> alive(n), node(n), path;  // alive: the reps, ascending; node: each rep's forest node
  for (int v = 0; v < n; ++v) alive[v] = node[v] = v;
  std::vector<int> up(2 * n, -1), chosen(2 * n, -1);  // per forest node: the cycle it went into; its in-edge
  std::vector<std::vector<int>> cycles;               // per cycle node (from n): its members' forest nodes
  std::vector<double> paid(n, 0);                     // per rep: the reduced cost of its chosen in-edge
  enum : char { kFree, kOnPath, kJoined };
  std::vector<char> state(n, kFree), inCycle(n, 0);
  state[root] = kJoined;
  for (int start = 0; start < n; ++start) {
    if (state[start] != kFree || node[start] != start) continue;  // joined, or contracted into another rep
    path.assign(1, start);
    state[start] = kOnPath;
    for (;;) {
      const int a = path.back();
      int b = -1;
      for (int t : alive)
        if (t != a && (b < 0 ? cost[static_cast<size_t>(t) * n + a] < kInf
                             : cost[static_cast<size_t>(t) * n + a] < cost[static_cast<size_t>(b) * n + a]))
          b = t;
      if (b < 0) return {};
      chosen[node[a]] = orig[static_cast<size_t>(b) * n + a];
      paid[a] = cost[static_cast<size_t>(b) * n + a];
      if (state[b] == kJoined) {
        for (int v : path) state[v] = kJoined;
        break;
      }
      if (state[b] == kFree) {
        state[b] = kOnPath;
        path.push_back(b);
        continue;
      }
      // b is on the path: the path from b on is a cycle, contracted into rep b.
      const auto from = std::find(path.begin(), path.end(), b);
      const std::vector<int> cycle(from, path.end());
      path.erase(from + 1, path.end());
      const int id = n + static_cast<int>(cycles.size());
      cycles.emplace_back();
      for (int m : cycle) {
        cycles.back().push_back(node[m]);
        up[node[m]] = id;
        inCycle[m] = 1;
      }
      for (int t : alive) {
        if (inCycle[t]) continue;
        double bestIn = kInf, bestOut = kInf;
        int origIn = -1, origOut = -1;
        for (int m : cycle) {
          const size_t tm = static_cast<size_t>(t) * n + m, mt = static_cast<size_t>(m) * n + t;
          if (cost[tm] < kInf && cost[tm] - paid[m] < bestIn) {
            bestIn = cost[tm] - paid[m];
            origIn = orig[tm];
          }
          if (cost[mt] < bestOut) {
            bestOut = cost[mt];
            origOut = orig[mt];
          }
        }
        cost[static_cast<size_t>(t) * n + b] = bestIn;
        orig[static_cast<size_t>(t) * n + b] = origIn;
        cost[static_cast<size_t>(b) * n + t] = bestOut;
        orig[static_cast<size_t>(b) * n + t] = origOut;
      }
      alive.erase(std::remove_if(alive.begin(), alive.end(), [&](int t) { return t != b && inCycle[t]; }), alive.end());
      for (int m : cycle) inCycle[m] = 0;
      node[b] = id;
    }
  }
  // Undo the contractions, the last first: each node's in-edge is the one it chose, but for the member of a cycle
  // that holds the head of the cycle's in-edge, which takes that edge instead.
  std::vector<int> in(chosen);
  for (int id = n + static_cast<int>(cycles.size()) - 1; id >= n; --id) {
    int holder = in[id] % n;
    while (up[holder] != id) holder = up[holder];
    for (int m : cycles[id - n])
      if (m == holder) in[m] = in[id];
  }
  std::vector<int> parent(n, -1);
  for (int v = 0; v < n; ++v)
    if (v != root) parent[v] = in[v] / n;
  return parent;
}

namespace {

constexpr int kExactTreeHosts = 32;  // up to this many hosts, directed trees are exact (Chu-Liu/Edmonds)

// The cheapest tree under the hop costs, from `root` (kOut: edges away from it, kIn: towards it, kBoth: both
// directions of a hop, then re-rooted at the centre), each hop by its cheapest way: Prim's algorithm, exact for
// kBoth; for the directed uses Chu-Liu/Edmonds on clusters of up to kExactTreeHosts hosts, Prim (greedy) above.
HostTree cheapestTree(const HopCosts& cost, TreeUse use, int root) {
  const int h = cost.h;
  const std::vector<double>& w = use == TreeUse::kOut ? cost.out : use == TreeUse::kIn ? cost.in : cost.both;
  const std::vector<int>& wayOf = use == TreeUse::kOut ? cost.outWay : use == TreeUse::kIn ? cost.inWay : cost.bothWay;
  auto waysTo = [&](const std::vector<int>& parent) {  // each host's hop from its parent, by the cheapest way
    std::vector<int> way(h, 0);
    for (int v = 0; v < h; ++v)
      if (parent[v] >= 0) way[v] = wayOf[static_cast<size_t>(parent[v]) * h + v];
    return way;
  };
  // A directed tree's children and depth wait for the packing's end (finishTree): most trees searched are not kept.
  auto finish = [&](std::vector<int> parent) {
    HostTree t;
    t.root = root;
    t.way = waysTo(parent);
    t.parent = std::move(parent);
    return t;
  };
  if (use != TreeUse::kBoth && h <= kExactTreeHosts)
    if (std::vector<int> parent = minArborescence(h, root, w); !parent.empty()) return finish(std::move(parent));
  // Prim: each round takes the nearest host not in the tree (the lowest-numbered of equally near ones), found in the
  // same pass that brings the others' distances up to date.
  std::vector<int> parent(h, root);
  std::vector<double> dist(w.begin() + static_cast<ptrdiff_t>(root) * h,
                           w.begin() + static_cast<ptrdiff_t>(root + 1) * h);
  std::vector<int> out;  // the hosts not in the tree, ascending
  out.reserve(h);
  parent[root] = -1;
  int next = -1;
  for (int v = 0; v < h; ++v)
    if (v != root) {
      out.push_back(v);
      if (next < 0 || dist[v] < dist[next]) next = v;
    }
  while (!out.empty()) {
    out.erase(std::find(out.begin(), out.end(), next));
    const double* row = w.data() + static_cast<size_t>(next) * h;
    int nearest = -1;
    for (int v : out) {
      if (row[v] < dist[v]) {
        dist[v] = row[v];
        parent[v] = next;
      }
      if (nearest < 0 || dist[v] < dist[nearest]) nearest = v;
    }
    next = nearest;
  }
  if (use != TreeUse::kBoth) return finish(std::move(parent));
  return rootAtCentre(parent, waysTo(parent));
}

// What a tree costs under the hop costs, hops out of the root (out) or into it.
double treeCost(const HopCosts& cost, const HostTree& t, bool out) {
  const int h = cost.h;
  double c = 0;
  for (int v = 0; v < h; ++v) {
    const int p = t.parent[v];
    if (p >= 0)
      c += out ? cost.perWay[static_cast<size_t>(p) * h + v][t.way[v]]
               : cost.perWay[static_cast<size_t>(v) * h + p][t.way[v]];
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

// Frank-Wolfe's mix, pruned: the heaviest trees of each root, then their weights re-balanced among themselves
// (more Frank-Wolfe rounds, over the kept trees only).
void pruneAndRebalance(const topo::LinkGraph& g, const std::vector<double>& demand, size_t keep, Mix& mix) {
  const size_t roots = demand.size(), size = 2 * g.ports.size();
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
  Load L = totalLoad(mix, demand, size);
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
}

// The exact packing over every tree the searches can return (packing_lp.h), from Frank-Wolfe's trees: column
// generation, the searches priced by the program's duals, until the trees they return could lower the most loaded
// port by less than kColumnGap (the duals give that bound) or after kColumnRounds; then pruned to at most `keep`
// trees of each root that weigh kMinWeight or more. Sets the mix's weights; false (weights untouched) where
// the simplex failed. `lower`: the best of the dual bounds found (0 if none), as maxCongestion measures.
template <class Search>
bool solveExactly(const topo::LinkGraph& g, const std::vector<double>& demand, size_t keep, Mix& mix, Search search,
                  HopCosts& costs, double& lower) {
  const size_t roots = demand.size(), size = 2 * g.ports.size();
  std::vector<double> rates(size);
  for (size_t e = 0; e < size; ++e) rates[e] = g.ports[e / 2].gbps;
  PackingLp lp(rates, demand);
  std::vector<std::vector<size_t>> column(roots);  // per root, per tree of the mix: its column
  auto addNewTrees = [&] {
    for (size_t r = 0; r < roots; ++r)
      while (column[r].size() < mix.trees[r].size())
        column[r].push_back(lp.addTree(static_cast<int>(r), mix.loads[r][column[r].size()]));
  };
  addNewTrees();
  if (!lp.solve()) return false;
  for (int round = 0; round < kColumnRounds; ++round) {
    // The prices weigh the port directions' congestion and sum to 1 over them, so every root's cheapest tree
    // under them, its demand-weighted costs added, is a bound no packing gets below (Lagrangian duality).
    const std::vector<double> price = lp.portPrices();
    costs = hopCosts(g, price);
    double bound = 0;
    for (size_t r = 0; r < roots; ++r) {
      if (demand[r] <= 0) continue;
      const Load& load = mix.loads[r][search(static_cast<int>(r))];
      double cost = 0;
      for (size_t e = 0; e < size; ++e) cost += load[e] * price[e];
      bound += demand[r] * cost;
    }
    lower = std::max(lower, bound);
    if (bound >= (1 - kColumnGap) * lp.congestion()) break;
    addNewTrees();
    if (!lp.solve()) return false;
  }
  // The optimum spreads over many trees (61 on the 16-host benchmark's allreduce), most of them light. Cutting to
  // the heaviest `keep` at once lost most (broadcast on that cluster: 2x the optimum); cutting the lightest tree
  // and solving again, one at a time, least (1.14x; the lightest half of the excess at a time: 1.23x).
  for (;;) {  // each round excludes a used tree for good, so it ends
    bool pruned = false;
    for (size_t r = 0; r < roots; ++r) {
      std::vector<std::pair<double, size_t>> used;  // weight, column
      for (size_t c : column[r])
        if (const double w = lp.weight(c); w > kNegligibleWeight) used.push_back({w, c});
      std::stable_sort(used.begin(), used.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
      size_t kept = std::min(used.size(), keep);
      while (kept > 1 && used[kept - 1].first < kMinWeight) --kept;
      if (kept == used.size()) continue;
      // The next solves choose among the trees used now, less the lightest.
      for (size_t c : column[r])
        if (lp.weight(c) <= kNegligibleWeight) lp.exclude(c);
      lp.exclude(used.back().second);
      pruned = true;
    }
    if (!pruned) break;
    if (!lp.solve()) return false;
  }
  for (size_t r = 0; r < roots; ++r)
    for (size_t t = 0; t < mix.trees[r].size(); ++t) {  // the last round's search may have found trees not added
      const double w = t < column[r].size() ? lp.weight(column[r][t]) : 0;
      mix.trees[r][t].weight = w > kNegligibleWeight ? w : 0;
    }
  return true;
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
      best.tree = cheapestTree(costs, use, r);
    } else {
      // One tree both ways, or the best tree into a host and the best out of it.
      best.tree = best.down = cheapestTree(costs, TreeUse::kBoth, 0);
      double bestCost = treeCost(costs, best.tree, false) + treeCost(costs, best.down, true);
      for (int root : reduceRoots) {
        WeightedTree pair{cheapestTree(costs, TreeUse::kIn, root), cheapestTree(costs, TreeUse::kOut, root), 0, {}};
        const double c = treeCost(costs, pair.tree, false) + treeCost(costs, pair.down, true);
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
  // Trees kept per root: 8 where one root has all the data (allreduce, broadcast, reduce), 4 each where every host
  // is a root. (A broadcast's packing has a demand entry per host, all but one zero: it counts as one root.)
  const size_t keep = std::count_if(demand.begin(), demand.end(), [](double d) { return d > 0; }) == 1 ? 8 : 4;
  // Both ways on up to 32 hosts, the exact packing kept where it is lighter by kExactGain at least: where the two
  // reach the same bottleneck, the program's optimum is a vertex with many ports loaded to the full, and Frank-
  // Wolfe's smoothed maximum leaves the others less loaded (64 MiB on random-3 at scale 0.22: allgather 2.25 s
  // against the program's 2.31-2.44, allreduce 2.96 against 3.01-3.04, the bottlenecks within 0.3 %).
  double lower = 0;
  if (h > kExactTreeHosts) {
    pruneAndRebalance(g, demand, keep, mix);
  } else {
    Mix smooth = mix;  // before the program's searches add to mix
    pruneAndRebalance(g, demand, keep, smooth);
    if (!solveExactly(g, demand, keep, mix, searchTree, costs, lower) ||
        maxCongestion(g, totalLoad(mix, demand, size)) >
            (1 - kExactGain) * maxCongestion(g, totalLoad(smooth, demand, size)))
      mix = std::move(smooth);
  }

  Packing p;
  p.use = use;
  p.demand = demand;
  p.byRoot.resize(roots);
  for (size_t r = 0; r < roots; ++r)
    for (WeightedTree& wt : mix.trees[r]) {
      if (wt.weight < 1e-9) continue;
      finishTree(wt.tree);
      finishTree(wt.down);
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
  p.lowerUsPerByte = lower / 1e3;
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
  // The loaded port directions, most loaded first, over the bottleneck: a port at 1.00 that is not the bound's
  // binding one has no slack, and a schedule's hiccup on it shows at the ends of a call.
  const Load L = portLoads(g, *this);
  const double most = std::max(maxCongestion(g, L), 1e-300);
  std::vector<std::pair<double, size_t>> loaded;
  for (size_t e = 0; e < L.size(); ++e)
    if (L[e] > 0) loaded.push_back({L[e] / g.ports[e / 2].gbps / most, e});
  std::stable_sort(loaded.begin(), loaded.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  out += "ports over the bottleneck:";
  for (const auto& [share, e] : loaded)
    out += format(" %s %s %s %.2f", g.hosts[g.ports[e / 2].host].name.c_str(), g.ports[e / 2].name.c_str(),
                  e % 2 ? "in" : "out", share);
  return out + format("\nbottleneck %.4g us per byte of demand\n", usPerByte);
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
