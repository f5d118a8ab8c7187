#include "collectives/synth/trees.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/strings.h"

namespace hetcomm::coll::synth {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kRounds = 80;          // Frank-Wolfe rounds over all trees
constexpr int kRebalanceRounds = 300;  // rounds over the kept trees only (cheap: no tree search)
constexpr double kMinWeight = 0.02;  // a tree lighter than this is not worth its messages

// Per unit of flow through tree t: bytes on each port direction ([2p] egress, [2p+1] ingress).
using Load = std::vector<double>;

void addHop(const topo::LinkGraph& g, int from, int to, double amount, Load& load) {
  for (const topo::LinkGraph::Rail& r : g.route(from, to)) {
    load[2 * r.from] += amount * r.share;
    load[2 * r.to + 1] += amount * r.share;
  }
}

Load treeLoad(const topo::LinkGraph& g, TreeUse use, const HostTree& t) {
  Load load(2 * g.ports.size(), 0.0);
  for (int v = 0; v < static_cast<int>(t.parent.size()); ++v) {
    const int p = t.parent[v];
    if (p < 0) continue;
    if (use != TreeUse::kIn) addHop(g, p, v, 1, load);
    if (use != TreeUse::kOut) addHop(g, v, p, 1, load);
  }
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

// Re-roots an undirected tree (given as parent links from any root) at its centre: the host whose farthest host is
// nearest, the lowest index among equals. A shallow tree adds the least latency to every piece.
HostTree rootAtCentre(const std::vector<int>& parent) {
  const int h = static_cast<int>(parent.size());
  std::vector<std::vector<int>> adj(h);
  for (int v = 0; v < h; ++v)
    if (parent[v] >= 0) {
      adj[v].push_back(parent[v]);
      adj[parent[v]].push_back(v);
    }
  auto bfs = [&](int root, std::vector<int>* par) {
    std::vector<int> dist(h, -1), order{root};
    if (par) par->assign(h, -1);
    dist[root] = 0;
    for (size_t i = 0; i < order.size(); ++i)
      for (int w : adj[order[i]])
        if (dist[w] < 0) {
          dist[w] = dist[order[i]] + 1;
          if (par) (*par)[w] = order[i];
          order.push_back(w);
        }
    return *std::max_element(dist.begin(), dist.end());
  };
  int best = 0, bestEcc = h + 1;
  for (int v = 0; v < h; ++v)
    if (int ecc = bfs(v, nullptr); ecc < bestEcc) {
      bestEcc = ecc;
      best = v;
    }
  HostTree t;
  t.root = best;
  bfs(best, &t.parent);
  finishTree(t);
  return t;
}

// cost[a * h + b]: what a hop from a to b costs under the gradient (port weights), infinite without a route.
std::vector<double> hopCosts(const topo::LinkGraph& g, const std::vector<double>& grad) {
  const int h = g.nhosts();
  std::vector<double> cost(static_cast<size_t>(h) * h, kInf);
  for (int a = 0; a < h; ++a)
    for (int b = 0; b < h; ++b) {
      const auto& route = g.route(a, b);
      if (route.empty()) continue;
      double c = 0;
      for (const auto& r : route) c += r.share * (grad[2 * r.from] + grad[2 * r.to + 1]);
      cost[static_cast<size_t>(a) * h + b] = c;
    }
  return cost;
}

// The cheapest tree under the hop costs: Prim's algorithm, from `root` (kOut: edges away from it, kIn: towards it,
// kBoth: both directions of a hop, then re-rooted at the centre).
HostTree cheapestTree(int h, const std::vector<double>& cost, TreeUse use, int root) {
  auto c = [&](int a, int b) {
    const double ab = cost[static_cast<size_t>(a) * h + b], ba = cost[static_cast<size_t>(b) * h + a];
    return use == TreeUse::kBoth ? ab + ba : use == TreeUse::kOut ? ab : ba;  // a in the tree, b joining
  };
  std::vector<int> parent(h, -1);
  std::vector<double> dist(h, kInf);
  std::vector<char> in(h, 0);
  in[root] = 1;
  for (int v = 0; v < h; ++v)
    if (!in[v]) {
      dist[v] = c(root, v);
      parent[v] = root;
    }
  for (int added = 1; added < h; ++added) {
    int next = -1;
    for (int v = 0; v < h; ++v)
      if (!in[v] && (next < 0 || dist[v] < dist[next])) next = v;
    in[next] = 1;
    for (int v = 0; v < h; ++v)
      if (!in[v] && c(next, v) < dist[v]) {
        dist[v] = c(next, v);
        parent[v] = next;
      }
  }
  if (use == TreeUse::kBoth) return rootAtCentre(parent);
  HostTree t;
  t.root = root;
  t.parent = std::move(parent);
  finishTree(t);
  return t;
}

// The mix being optimised: per root, distinct trees with weights, and their loads.
struct Mix {
  std::vector<std::vector<HostTree>> trees;
  std::vector<std::vector<Load>> loads;
  std::vector<std::vector<double>> weight;
  std::vector<std::map<std::vector<int>, size_t>> index;  // parent vector (plus root) -> position

  size_t add(int root, HostTree t, Load load) {
    std::vector<int> key = t.parent;
    key.push_back(t.root);
    auto [it, fresh] = index[root].emplace(std::move(key), trees[root].size());
    if (fresh) {
      trees[root].push_back(std::move(t));
      loads[root].push_back(std::move(load));
      weight[root].push_back(0);
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
      for (double& w : mix.weight[r]) w *= 1 - step;
      mix.weight[r][chosen[r]] += step;
    }
  }
}

Load totalLoad(const Mix& mix, const std::vector<double>& demand, size_t size) {
  Load L(size, 0.0);
  for (size_t r = 0; r < demand.size(); ++r)
    for (size_t t = 0; t < mix.trees[r].size(); ++t)
      for (size_t e = 0; e < size; ++e) L[e] += demand[r] * mix.weight[r][t] * mix.loads[r][t][e];
  return L;
}

}  // namespace

Packing packTrees(const topo::LinkGraph& g, TreeUse use, const std::vector<double>& demandIn) {
  const int h = g.nhosts();
  std::vector<double> demand = use == TreeUse::kBoth ? std::vector<double>{1.0} : demandIn;
  demand.resize(use == TreeUse::kBoth ? 1 : h, 0.0);
  const size_t roots = demand.size(), size = 2 * g.ports.size();
  Mix mix;
  mix.trees.resize(roots);
  mix.loads.resize(roots);
  mix.weight.resize(roots);
  mix.index.resize(roots);
  auto treeRoot = [&](int r) { return use == TreeUse::kBoth ? 0 : r; };
  // Start from the trees that are cheapest by rate alone, all weight on them.
  std::vector<double> costs(size);
  for (size_t e = 0; e < size; ++e) costs[e] = 1 / g.ports[e / 2].gbps;
  costs = hopCosts(g, costs);
  auto searchTree = [&](int r) {
    HostTree t = cheapestTree(h, costs, use, treeRoot(r));
    Load l = treeLoad(g, use, t);
    return mix.add(r, std::move(t), std::move(l));
  };
  for (size_t r = 0; r < roots; ++r)
    if (demand[r] > 0) mix.weight[r][searchTree(static_cast<int>(r))] = 1;
  Load L = totalLoad(mix, demand, size);
  frankWolfe(
      g, mix, demand, L, kRounds, [&](const std::vector<double>& grad) { costs = hopCosts(g, grad); }, searchTree);
  // Keep the heaviest trees of each root, then re-balance their weights among themselves.
  const size_t keep = roots == 1 ? 8 : 4;
  for (size_t r = 0; r < roots; ++r) {
    if (demand[r] <= 0) continue;
    std::vector<size_t> order(mix.trees[r].size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mix.weight[r][a] > mix.weight[r][b]; });
    std::vector<size_t> kept;
    for (size_t i : order)
      if (kept.size() < keep && (kept.empty() || mix.weight[r][i] >= kMinWeight)) kept.push_back(i);
    std::sort(kept.begin(), kept.end());
    std::vector<HostTree> trees;
    std::vector<Load> loads;
    std::vector<double> weights;
    double total = 0;
    for (size_t i : kept) total += mix.weight[r][i];
    for (size_t i : kept) {
      trees.push_back(std::move(mix.trees[r][i]));
      loads.push_back(std::move(mix.loads[r][i]));
      weights.push_back(mix.weight[r][i] / total);
    }
    mix.trees[r] = std::move(trees);
    mix.loads[r] = std::move(loads);
    mix.weight[r] = std::move(weights);
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
    for (size_t t = 0; t < mix.trees[r].size(); ++t) {
      if (mix.weight[r][t] < 1e-9) continue;
      p.byRoot[r].push_back({std::move(mix.trees[r][t]), mix.weight[r][t]});
      p.maxDepth = std::max(p.maxDepth, p.byRoot[r].back().tree.depth);
    }
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
      const Load l = treeLoad(g, p.use, wt.tree);
      for (size_t e = 0; e < L.size(); ++e) L[e] += p.demand[r] * wt.weight * l[e];
    }
  return L;
}

std::string Packing::describe(const topo::LinkGraph& g) const {
  std::string out;
  for (size_t r = 0; r < byRoot.size(); ++r)
    for (const WeightedTree& wt : byRoot[r]) {
      out += format("root %s weight %.3f:", g.hosts[wt.tree.root].name.c_str(), wt.weight);
      for (int v = 0; v < static_cast<int>(wt.tree.parent.size()); ++v)
        if (wt.tree.parent[v] >= 0)
          out += format(" %s-%s", g.hosts[wt.tree.parent[v]].name.c_str(), g.hosts[v].name.c_str());
      out += "\n";
    }
  return out + format("bottleneck %.4g us per byte of demand\n", usPerByte);
}

}  // namespace hetcomm::coll::synth
