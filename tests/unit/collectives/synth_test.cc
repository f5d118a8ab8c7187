// Schedule synthesis (collectives/synth/): tree packings against the bounds of topology/bounds.h, and every
// synthesised collective run by the real executor on random cluster shapes of 2 to 64 ranks, every element checked.
#include "collectives/synth/synth.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <sstream>

#include "collectives/group_cache.h"
#include "collectives/synth/trees.h"
#include "common/strings.h"
#include "tests/unit/collectives/case_runner.h"
#include "topology/bounds.h"
#include "topology/cluster.h"
#include "topology/cluster_spec.h"
#include "topology/link_matrix.h"

namespace hetcomm::coll {
namespace {

using namespace test;  // NOLINT: the case runner is this file's vocabulary

std::shared_ptr<const topo::LinkGraph> graphOf(const topo::ClusterSpec& spec) {
  auto view = topo::ClusterView::build(spec.nodes());
  EXPECT_TRUE(view.has_value());
  return std::make_shared<const topo::LinkGraph>(
      topo::buildLinkGraph(*view, topo::LinkMatrix::nominal(*view, true), true));
}

std::shared_ptr<const topo::LinkGraph> shipped(const std::string& name) {
  auto spec = topo::loadClusterSpec(std::string(HETCOMM_SOURCE_DIR) + "/clusters/" + name + ".json");
  EXPECT_TRUE(spec.has_value()) << spec.error().toString();
  return graphOf(*spec);
}

// The synthesised algorithm where it serves a on v; null where it does not.
const Algorithm* synthAlgorithm(const Args& a, const GroupView& v) {
  for (const Algorithm* algo : allAlgorithms())
    if (algo->name() == "synth" && algo->supports(a, v)) return algo;
  return nullptr;
}

// Where a bound is reachable, how far above it a packing may be: Frank-Wolfe's packing stands where the exact one
// (packing_lp.h) is not 1 % lighter.
constexpr double kWithinExact = 1.0102;

// The use's packing: rootHost >= 0, all the data there; -1, each host's rank count.
synth::Packing packed(const topo::LinkGraph& g, synth::TreeUse use, int rootHost) {
  std::vector<double> demand(g.nhosts(), 0.0);
  for (int h = 0; h < g.nhosts(); ++h)
    demand[h] = rootHost >= 0 ? (h == rootHost) : static_cast<double>(g.hosts[h].ranks.size());
  return synth::packTrees(g, use, demand);
}

// A packing's bandwidth time over the bound's, for the collective its use serves (1: optimal).
double overBound(const topo::LinkGraph& g, const synth::Packing& p, int rootHost) {
  const synth::TreeUse use = p.use;
  const int n = g.nranks();
  switch (use) {
    case synth::TreeUse::kBoth:  // the whole buffer through the trees, against the allreduce bound
      return p.usPerByte / topo::collectiveBound(g, topo::BoundKind::kAllReduce).usPerByte;
    case synth::TreeUse::kOut:
      if (rootHost >= 0)
        return p.usPerByte / topo::collectiveBound(g, topo::BoundKind::kBroadcast, g.hosts[rootHost].ranks[0]).usPerByte;
      // Demand in blocks; the bound per byte of the whole output (n blocks).
      return p.usPerByte / (topo::collectiveBound(g, topo::BoundKind::kAllGather).usPerByte * n);
    case synth::TreeUse::kIn:
      return p.usPerByte / (topo::collectiveBound(g, topo::BoundKind::kReduceScatter).usPerByte * n);
  }
  return 0;
}

double overBound(const topo::LinkGraph& g, synth::TreeUse use, int rootHost) {
  return overBound(g, packed(g, use, rootHost), rootHost);
}

// The cost of a parent array as an arborescence rooted at `root`; infinite when it is not one (a cycle, a missing
// parent, an edge that is not allowed).
double arborescenceCost(int n, int root, const std::vector<double>& w, const std::vector<int>& parent) {
  double cost = 0;
  for (int v = 0; v < n; ++v) {
    if ((v == root) != (parent[v] < 0)) return std::numeric_limits<double>::infinity();
    if (v == root) continue;
    cost += w[static_cast<size_t>(parent[v]) * n + v];
    int steps = 0;
    for (int u = v; u != root; u = parent[u])
      if (++steps > n) return std::numeric_limits<double>::infinity();
  }
  return cost;
}

// Chu-Liu/Edmonds against every parent array, on small graphs with many equal costs (cliques of equal links are
// where cycles nest) and some edges missing.
TEST(Synth, MinArborescenceIsTheCheapestOfAllTrees) {
  const double inf = std::numeric_limits<double>::infinity();
  std::mt19937 rng(7);
  int unreachable = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 2 + trial % 5, root = static_cast<int>(rng() % n);
    const bool ties = trial % 2 == 0;
    std::vector<double> w(static_cast<size_t>(n) * n, inf);
    for (int u = 0; u < n; ++u)
      for (int v = 0; v < n; ++v)
        if (u != v && rng() % 6 != 0)
          w[static_cast<size_t>(u) * n + v] =
              ties ? 1.0 + rng() % 3 : std::uniform_real_distribution<double>(1, 10)(rng);
    double best = inf;
    std::vector<int> parent(n, 0);
    parent[root] = -1;
    for (;;) {  // every parent array, counting through the non-root vertices' parents
      best = std::min(best, arborescenceCost(n, root, w, parent));
      int v = 0;
      for (; v < n; ++v) {
        if (v == root) continue;
        if (++parent[v] < n) break;
        parent[v] = 0;
      }
      if (v == n) break;
    }
    const std::vector<int> got = synth::minArborescence(n, root, w);
    SCOPED_TRACE(format("trial %d: %d vertices, root %d", trial, n, root));
    if (best == inf) {
      ++unreachable;
      EXPECT_TRUE(got.empty());
      continue;
    }
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    EXPECT_NEAR(arborescenceCost(n, root, w, got), best, 1e-9);
  }
  EXPECT_GT(unreachable, 0);  // the draw covers graphs with no spanning tree
}

TEST(Synth, PackingsOfTheShippedClustersReachTheirBounds) {
  for (const char* name : {"mixed-4x2", "eth-4x2", "mixed-2x2", "dualrail-2x2", "island3-lone1", "ranks-1-2-4",
                           "dualnic-4", "three-level-6"}) {
    auto g = shipped(name);
    SCOPED_TRACE(name);
    EXPECT_LT(overBound(*g, synth::TreeUse::kOut, -1), kWithinExact);
    EXPECT_LT(overBound(*g, synth::TreeUse::kIn, -1), kWithinExact);
    EXPECT_LT(overBound(*g, synth::TreeUse::kOut, 0), kWithinExact);
    EXPECT_LT(overBound(*g, synth::TreeUse::kIn, g->nhosts() - 1), kWithinExact);
    // dualnic-4: the aggregate bound counts h0's and h1's InfiniBand NICs as if they could carry any host's
    // transfers, but that fabric joins only the two of them: per element at most one reduction and one result
    // cross it, so the other 4 of the 6 transfers share 300 Mbit/s of Ethernet egress: 1/75 against 1/83.3 s per MB,
    // which the packing reaches, and no tree packing does better (the packing is the linear program's optimum).
    // (Frank-Wolfe's packing is kept where the exact one is not 1 % lighter: within 1.0102 of the optimum.)
    const double best = std::string(name) == "dualnic-4" ? 83.333 / 75 : 1;
    EXPECT_GT(overBound(*g, synth::TreeUse::kBoth, -1), best - 1e-3);
    EXPECT_LT(overBound(*g, synth::TreeUse::kBoth, -1), best * kWithinExact);
  }
}

TEST(Synth, AllReducePackingReachesTheCutBoundWhereAFabricJoinsTwoOfThreeHosts) {
  // The table's random-5 (hetcomm-topo --random-cluster 5 --max-hosts 4 --max-ranks 2): three hosts, h1 and h2
  // joined by a fabric h0 lacks, h1 the binding cut. The best packing roots every share at h0 and splits h1's hops
  // over two fabrics; Frank-Wolfe, pruned to its heaviest trees, settled at 1.168 times the bound.
  topo::RandomClusterLimits limits;
  limits.maxHosts = 4;
  limits.maxRanksPerHost = 2;
  auto g = graphOf(topo::randomClusterSpec(5, limits));
  ASSERT_EQ(g->nhosts(), 3) << g->describe();
  EXPECT_LT(overBound(*g, synth::TreeUse::kBoth, -1), 1.001) << g->describe();
}

// The packing program's dual bound (Packing::lowerUsPerByte): no tree packing is lighter. Where it lies above a
// bound, the bound is not tight (dualnic-4's allreduce: the best tree packing, by brute force over every tree, is
// 1.111 times it); elsewhere the bounds are reachable and it lies within the column generation's gap (0.5 %) below
// them. hetcomm-packing prints it to say, below a bound, whether the bound or the schedule is at fault.
TEST(Synth, TheDualBoundSaysWhetherTreesCanReachTheBound) {
  const std::pair<topo::BoundKind, CollKind> kinds[] = {{topo::BoundKind::kAllReduce, CollKind::kAllReduce},
                                                        {topo::BoundKind::kAllGather, CollKind::kAllGather},
                                                        {topo::BoundKind::kReduceScatter, CollKind::kReduceScatter},
                                                        {topo::BoundKind::kBroadcast, CollKind::kBroadcast},
                                                        {topo::BoundKind::kReduce, CollKind::kReduce}};
  const double bytes = 64 << 20;
  for (const char* name : {"mixed-4x2", "eth-4x2", "mixed-2x2", "dualrail-2x2", "island3-lone1", "ranks-1-2-4",
                           "dualnic-4", "three-level-6"}) {
    auto g = shipped(name);
    for (const auto& [boundKind, collKind] : kinds) {
      SCOPED_TRACE(format("%s %s", name, topo::boundKindName(boundKind)));
      const auto t = synth::packingTimes(*g, collKind, 0, bytes);
      ASSERT_TRUE(t.has_value()) << t.error().toString();
      const double boundUs = topo::collectiveBound(*g, boundKind, 0).usPerByte * bytes;
      EXPECT_LE(t->lowerUs, t->packingUs * (1 + 1e-9));
      const double best = std::string(name) == "dualnic-4" && collKind == CollKind::kAllReduce ? 83.333 / 75 : 1;
      EXPECT_LE(t->lowerUs / boundUs, best * (1 + 1e-4));
      EXPECT_GE(t->lowerUs / boundUs, best * (1 - 0.005));
    }
  }
  auto g = shipped("mixed-2x2");
  const auto alltoall = synth::packingTimes(*g, CollKind::kAlltoAll, 0, bytes);
  ASSERT_FALSE(alltoall.has_value());
  EXPECT_EQ(alltoall.error().code(), Code::kInvalidArgument);
  EXPECT_NE(alltoall.error().toString().find("alltoall"), std::string::npos) << alltoall.error().toString();
  const auto root = synth::packingTimes(*g, CollKind::kBroadcast, g->nranks(), bytes);
  ASSERT_FALSE(root.has_value());
  EXPECT_NE(root.error().toString().find("root 4"), std::string::npos) << root.error().toString();
}

TEST(Synth, PackingsOfRandomClustersNearTheirBounds) {
  // Directed packings against the cut bounds they can reach (ForestColl, Edmonds); allreduce against the cut and
  // aggregate bounds, which are not tight where a fabric joins only some hosts (see dualnic-4 above). Over 40
  // random clusters: never better than a bound, the directed ones on it, the allreduce within this margin.
  double worstDirected = 1, worstBoth = 1;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    auto g = graphOf(topo::randomClusterSpec(seed));
    for (synth::TreeUse use : {synth::TreeUse::kBoth, synth::TreeUse::kOut, synth::TreeUse::kIn}) {
      const synth::Packing p = packed(*g, use, -1);
      const double r = overBound(*g, p, -1);
      EXPECT_GE(r, 1 - 1e-6) << "seed " << seed << ": better than the bound? " << g->describe();
      // No packing below the dual bound; the directed bounds are reachable, so neither is the dual bound above them.
      EXPECT_LE(p.lowerUsPerByte, p.usPerByte * (1 + 1e-9)) << "seed " << seed;
      if (use != synth::TreeUse::kBoth) {
        EXPECT_LE(p.lowerUsPerByte, p.usPerByte / r * (1 + 1e-4)) << "seed " << seed;
      }
      (use == synth::TreeUse::kBoth ? worstBoth : worstDirected) = std::max(use == synth::TreeUse::kBoth ? worstBoth : worstDirected, r);
    }
  }
  RecordProperty("worst_over_bound", format("directed %.3f, allreduce %.3f", worstDirected, worstBoth));
  // The directed packings' bounds are reachable (ForestColl) and the exact packing reaches them; Frank-Wolfe's is
  // kept only within 1 % of it. Frank-Wolfe alone came to 1.106 and 1.296.
  EXPECT_LT(worstDirected, kWithinExact);
  EXPECT_LT(worstBoth, 1.2);
}

TEST(Synth, TreesSpanEveryHostAndWeightsSumToOne) {
  auto g = graphOf(topo::randomClusterSpec(11));
  for (synth::TreeUse use : {synth::TreeUse::kBoth, synth::TreeUse::kOut, synth::TreeUse::kIn}) {
    const synth::Packing p = synth::packTrees(*g, use, std::vector<double>(g->nhosts(), 1.0));
    for (const auto& list : p.byRoot) {
      double total = 0;
      for (const auto& wt : list) {
        total += wt.weight;
        int roots = 0;
        for (int h = 0; h < g->nhosts(); ++h) {
          roots += wt.tree.parent[h] < 0;
          int steps = 0;  // every host reaches the root
          for (int v = h; wt.tree.parent[v] >= 0 && steps <= g->nhosts(); v = wt.tree.parent[v]) ++steps;
          EXPECT_LE(steps, g->nhosts());
        }
        EXPECT_EQ(roots, 1);
      }
      EXPECT_NEAR(total, 1.0, 1e-9);
    }
  }
}

// describe() lists every loaded port direction over the bottleneck, most loaded first: the first at 1.00, none
// above, and on a broadcast out of h0 its NIC's way out among the first (hetcomm-packing --trees prints it).
TEST(Synth, DescribeListsThePortsLoadsOverTheBottleneck) {
  auto g = shipped("island3-lone1");
  const synth::Packing p = packed(*g, synth::TreeUse::kOut, 0);
  const std::string text = p.describe(*g);
  const size_t at = text.find("ports over the bottleneck:");
  ASSERT_NE(at, std::string::npos) << text;
  std::istringstream ports(text.substr(at + std::string("ports over the bottleneck:").size()));
  std::string host, port, dir, line;
  std::getline(ports, line);
  std::istringstream items(line);
  double share = 0, previous = 2;
  int n = 0;
  bool rootOut = false;
  while (items >> host >> port >> dir >> share) {
    EXPECT_TRUE(dir == "in" || dir == "out") << line;
    EXPECT_LE(share, previous + 1e-9) << "most loaded first: " << line;
    if (n == 0) {
      EXPECT_NEAR(share, 1.0, 0.005) << line;
    }
    rootOut = rootOut || (host == g->hosts[0].name && dir == "out" && share > 0.99);
    previous = share;
    ++n;
  }
  EXPECT_GE(n, 2) << line;
  EXPECT_TRUE(items.eof()) << "every entry is host, port, direction, share: " << line;
  EXPECT_TRUE(rootOut) << "the broadcast's root sends at the bottleneck: " << text;
}

// An allreduce tree that goes up and down the same edges costs every port the same from any root. On two hosts
// pieces take turns at both, so each host's links start the call sending instead of waiting for the first sums;
// on more hosts a tree keeps one root.
TEST(Synth, AllReduceTreesOnTwoHostsTakeTurnsAtBothForTheSameLoads) {
  for (const char* name : {"mixed-2x2", "dualrail-2x2", "three-level-6"}) {
    SCOPED_TRACE(name);
    auto g = shipped(name);
    const synth::Packing p = synth::packTrees(*g, synth::TreeUse::kBoth, {1.0});
    size_t turning = 0;
    for (const auto& wt : p.byRoot[0]) {
      if (wt.turns.empty()) continue;
      ++turning;
      EXPECT_EQ(wt.turns.size(), 2u);
      EXPECT_NE(wt.turns[0].root, wt.turns[1].root);
      for (const auto& t : wt.turns) EXPECT_EQ(t.depth, wt.tree.depth);
    }
    EXPECT_EQ(turning, g->nhosts() == 2 ? p.byRoot[0].size() : 0u) << p.describe(*g);
    // The same port loads whichever turn every tree takes.
    const std::vector<double> loads = synth::portLoads(*g, p);
    synth::Packing turned = p;
    for (auto& wt : turned.byRoot[0]) {
      wt.tree = wt.upAt(1);
      wt.down = wt.downAt(1);
    }
    const std::vector<double> after = synth::portLoads(*g, turned);
    ASSERT_EQ(after.size(), loads.size());
    for (size_t e = 0; e < loads.size(); ++e) EXPECT_NEAR(after[e], loads[e], 1e-9) << "port direction " << e;
    // Many pieces, so every tree takes both turns, and every element right.
    testing::SimTopology topo;
    topo.graph = g;
    for (bool inPlace : {false, true})
      runCase({CollKind::kAllReduce, g->nranks(), 100003, DataType::kFloat32, RedOp::kSum, 0, inPlace}, 1024, true,
              "synth", topo);
  }
}

// Every synthesised collective on random shapes: hosts of 1-4 ranks, 1-3 fabrics, 2 to 64 ranks in all.
TEST(Synth, EveryCollectiveOnRandomShapesIsExact) {
  std::mt19937 rng(5);
  topo::RandomClusterLimits lim;
  lim.maxHosts = 16;
  int shapes = 0;
  for (uint64_t seed = 100; shapes < 24; ++seed) {
    const topo::ClusterSpec spec = topo::randomClusterSpec(seed, lim);
    if (spec.nranks() > 64) continue;
    ++shapes;
    testing::SimTopology topo;
    topo.graph = graphOf(spec);
    const int n = spec.nranks();
    SCOPED_TRACE(format("seed %llu: %d ranks on %zu hosts", (unsigned long long)seed, n, spec.hosts.size()));
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
                          CollKind::kReduce}) {
      const size_t count = std::vector<size_t>{1, 7, 333, 5000}[rng() % 4];
      const int root = static_cast<int>(rng() % n);
      const bool inPlace = rng() % 2, late = rng() % 2;
      runCase({kind, n, count, DataType::kInt32, RedOp::kSum, root, inPlace}, 256, late, "synth", topo);
    }
  }
}

TEST(Synth, EveryDatatypeAndOpOnAnIrregularCluster) {
  topo::ClusterSpec spec;
  spec.name = "irregular";
  // Hosts of 1, 2 and 3 ranks; two on an ib fabric, all on Ethernet.
  for (int h = 0; h < 3; ++h) {
    topo::ClusterSpec::HostSpec host{format("h%d", h), h + 1, {{"eth0", topo::NicKind::kEth, 200, "eth"}}};
    if (h < 2) host.nics.push_back({"ib0", topo::NicKind::kIb, 1600, "ib"});
    spec.hosts.push_back(host);
  }
  testing::SimTopology topo;
  topo.graph = graphOf(spec);
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kReduce})
    for (DataType t : kAllTypes)
      for (RedOp op : kAllOps) runCase({kind, 6, 1001, t, op, 4, false}, 512, false, "synth", topo);
  for (CollKind kind : {CollKind::kAllGather, CollKind::kBroadcast})
    for (DataType t : kAllTypes) runCase({kind, 6, 1001, t, RedOp::kSum, 3, true}, 512, true, "synth", topo);
}

TEST(Synth, ManyPiecesPacedWithScratchReused) {
  // Far more pieces than the pacing window: staging regions are reused, in place and out of place.
  auto g = shipped("mixed-4x2");
  testing::SimTopology topo;
  topo.graph = g;
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
                        CollKind::kReduce})
    for (bool inPlace : {false, true})
      runCase({kind, 8, 100003, DataType::kFloat32, RedOp::kSum, 6, inPlace}, 1024, true, "synth", topo);
}

// No algorithm may predict a time the links do not allow: a model faster than the bound picks the wrong algorithm
// (the hierarchical broadcast's model once ran its scatter and its all-gather through the root host's NIC at once,
// predicted twice the speed it had and beat the flat chain only on paper).
TEST(Synth, NoAlgorithmPredictsFasterThanTheBound) {
  const std::pair<CollKind, topo::BoundKind> kinds[] = {
      {CollKind::kAllReduce, topo::BoundKind::kAllReduce}, {CollKind::kAllGather, topo::BoundKind::kAllGather},
      {CollKind::kReduceScatter, topo::BoundKind::kReduceScatter}, {CollKind::kBroadcast, topo::BoundKind::kBroadcast},
      {CollKind::kReduce, topo::BoundKind::kReduce}};
  std::vector<std::pair<std::string, std::shared_ptr<const topo::LinkGraph>>> clusters;
  for (const char* name : {"mixed-4x2", "eth-4x2", "mixed-2x2", "dualrail-2x2", "island3-lone1", "ranks-1-2-4",
                           "dualnic-4", "three-level-6"})
    clusters.emplace_back(name, shipped(name));
  for (uint64_t seed = 1; seed <= 30; ++seed)
    clusters.emplace_back(format("random seed %llu", static_cast<unsigned long long>(seed)),
                          graphOf(topo::randomClusterSpec(seed)));
  for (const auto& [name, g] : clusters) {
    const int n = g->nranks();
    for (const auto& [kind, boundKind] : kinds) {
      Args a;
      a.kind = kind;
      const bool perRank = kind == CollKind::kAllGather || kind == CollKind::kReduceScatter;
      a.count = perRank ? (16u << 20) / n : 16u << 20;  // 64 MiB of float32 in all
      const double bytes = 4.0 * a.count * (perRank ? n : 1);
      const double boundUs = topo::collectiveBound(*g, boundKind, a.root).usPerByte * bytes;
      for (int rank : {0, n - 1}) {
        const GroupView v = GroupView::fromGraph(rank, g, 512 << 10);
        for (const Algorithm* algo : allAlgorithms()) {
          if (!algo->supports(a, v)) continue;
          EXPECT_GE(algo->estimateUs(a, v), 0.99 * boundUs)
              << name << ": " << algo->name() << " " << a.describe() << " on rank " << rank;
        }
      }
    }
  }
}

// What the communicator learned of the synthesised schedules on this cluster (comm/synth_efficiency.h) prices
// the kind it was learned for, and only that kind; nothing learned, the default; never faster than the packing at
// the probe's rates, less the probe's own error.
TEST(Synth, ALearnedEfficiencyPricesItsKindOnly) {
  GroupView v = GroupView::fromGraph(0, shipped("island3-lone1"), 512 << 10);
  auto synthFor = [&](const Args& a) { return synthAlgorithm(a, v); };
  Args ar, bc;
  ar.kind = CollKind::kAllReduce;
  bc.kind = CollKind::kBroadcast;
  ar.count = bc.count = 16u << 20;  // 64 MiB of float32
  ASSERT_NE(synthFor(ar), nullptr);
  ASSERT_NE(synthFor(bc), nullptr);
  EXPECT_DOUBLE_EQ(synth::treeEfficiency(v, CollKind::kAllReduce), 0.92);
  const double arDefault = synthFor(ar)->estimateUs(ar, v), bcDefault = synthFor(bc)->estimateUs(bc, v);
  v.learnedTreeEfficiency[static_cast<size_t>(CollKind::kAllReduce)] = 1.0;
  EXPECT_DOUBLE_EQ(synth::treeEfficiency(v, CollKind::kAllReduce), 1.0);
  const double ratio = synthFor(ar)->estimateUs(ar, v) / arDefault;
  EXPECT_GE(ratio, 0.92) << "the network term scales, the pipeline's fill does not";
  EXPECT_LT(ratio, 0.95);
  EXPECT_DOUBLE_EQ(synthFor(bc)->estimateUs(bc, v), bcDefault);
  v.learnedTreeEfficiency[static_cast<size_t>(CollKind::kAllReduce)] = 1.4;
  EXPECT_DOUBLE_EQ(synth::treeEfficiency(v, CollKind::kAllReduce), 1.05);
}

// A large flow is cut finer than the chunk size gives where the pipeline's ends cost more than the extra messages:
// over slow links each hop of the first and last piece keeps the binding port idle for a piece's time (three-level-6,
// 64 MiB allreduce: 64 pieces 5.40-5.70 s, 256 pieces 4.89-5.01 s), over fast ones the messages cost more. One
// flow per rank (allgather) multiplies the messages, so its flows are cut less finely.
TEST(Synth, LargeFlowsOverSlowLinksAreCutFiner) {
  auto spec = topo::loadClusterSpec(std::string(HETCOMM_SOURCE_DIR) + "/clusters/three-level-6.json");
  ASSERT_TRUE(spec.has_value());
  auto shapeOf = [](const topo::ClusterSpec& s, size_t flows) {
    auto g = graphOf(s);
    const GroupView v = GroupView::fromGraph(0, g, 512 << 10);
    const synth::Packing p = synth::packTrees(*g, synth::TreeUse::kBoth, std::vector<double>(g->nhosts(), 1.0));
    return synth::flowShape(v, *g, p, synth::FlowMode::kAllReduce, 64 << 20, flows);
  };
  const synth::FlowShape slow = shapeOf(*spec, 1);
  EXPECT_GT(slow.pieces, 64u);   // finer than 64 MiB in pieces of two chunks
  EXPECT_LE(slow.pieces, 256u);  // kMaxFinerPieces
  EXPECT_GE((64u << 20) / (slow.pieces * slow.segmentsPerPiece), 4u << 10);  // kMinSegmentBytes
  EXPECT_LT(shapeOf(*spec, 64).pieces, slow.pieces);
  topo::ClusterSpec fast = *spec;
  for (auto& h : fast.hosts)
    for (auto& nic : h.nics) nic.rateMbps *= 1000;
  EXPECT_EQ(shapeOf(fast, 1).pieces, 64u);
}

// A small flow through hosts of several ranks (a segment per tree and per rank of the fullest host) is cut into
// more pieces than twice the pacing window when the pieces' time at the binding ports costs more than their
// messages: three-level-6's 1 MiB allreduce in 12 pieces took 93 ms against its packing's 74, in 24 pieces 82.
TEST(Synth, SmallFlowsThroughSeveralRankHostsAreCutFinely) {
  auto spec = topo::loadClusterSpec(std::string(HETCOMM_SOURCE_DIR) + "/clusters/three-level-6.json");
  ASSERT_TRUE(spec.has_value());
  for (auto& h : spec->hosts)
    for (auto& nic : h.nics) nic.rateMbps = nic.rateMbps * 6 / 10;  // the table's scale
  auto g = graphOf(*spec);
  const GroupView v = GroupView::fromGraph(0, g, 512 << 10);
  const synth::Packing p = synth::packTrees(*g, synth::TreeUse::kBoth, std::vector<double>(g->nhosts(), 1.0));
  const synth::FlowShape shape = synth::flowShape(v, *g, p, synth::FlowMode::kAllReduce, 1 << 20, 1);
  EXPECT_EQ(shape.segmentsPerPiece % 2, 0u) << "hosts of 2 ranks: two segments per tree";
  EXPECT_GT(shape.pieces, 2 * shape.window);
  EXPECT_GE((1u << 20) / (shape.pieces * shape.segmentsPerPiece), 4u << 10);  // kMinSegmentBytes
}

// The pacing (flows.h) waits for what a rank sends and for the answers to it, never for a receive that only
// delivers: on random-3 a rank that forwards the broadcast's heaviest tree waited for two light trees it is a leaf
// of, which lagged behind the root's 31 Mbit/s Ethernet, and held a fully loaded port idle (0.86-0.91 of the bound
// against 0.93). An allreduce's result is such an answer: a rank's next pieces wait for it (without that, every
// host put its whole share on the wire at once: three-level-6's 1 MiB allreduce 103 ms against 82).
TEST(Synth, PiecesArePacedByWhatARankSendsAndTheAnswersToIt) {
  const std::vector<std::pair<std::string, std::shared_ptr<const topo::LinkGraph>>> clusters = {
      {"random seed 3", graphOf(topo::randomClusterSpec(3))}, {"three-level-6", shipped("three-level-6")}};
  auto overlaps = [](const Slice& a, const Slice& b) {
    return a.buf == b.buf && a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes &&
           b.offset < a.offset + a.bytes;
  };
  for (const auto& [name, g] : clusters)
    for (CollKind kind : {CollKind::kBroadcast, CollKind::kAllGather, CollKind::kAllReduce, CollKind::kReduce}) {
      Args a;
      a.kind = kind;
      a.root = g->nranks() - 1;
      const bool perRank = kind == CollKind::kAllGather;
      a.count = perRank ? (4u << 20) / g->nranks() : 4u << 20;  // 16 MiB of float32: many pieces
      bool answersPace = false;
      for (int rank = 0; rank < g->nranks(); ++rank) {
        const GroupView v = GroupView::fromGraph(rank, g, 512 << 10);
        const Algorithm* synth = synthAlgorithm(a, v);
        ASSERT_NE(synth, nullptr) << name << " " << a.describe();
        auto s = synth->plan(a, v);
        ASSERT_TRUE(s.has_value()) << s.error().toString();
        size_t waitsOnDelivery = 0;
        for (const Step& st : s->steps)
          for (int d = 0; d < st.ndeps; ++d) {
            const Step& dep = s->steps[st.deps[d]];
            if (dep.op != Step::Op::kRecv || dep.dst.buf == Buf::kScratch) continue;
            bool answer = false;  // the receive waits for one of this rank's sends
            for (int e = 0; e < dep.ndeps; ++e) answer |= s->steps[dep.deps[e]].op == Step::Op::kSend;
            const bool reads = overlaps(st.src, dep.dst) || overlaps(st.src2, dep.dst);
            waitsOnDelivery += !answer && !reads;
            answersPace |= answer && !reads;
          }
        EXPECT_EQ(waitsOnDelivery, 0u) << name << " " << a.describe() << " rank " << rank
                                       << ": steps wait for receives that only deliver";
      }
      if (kind == CollKind::kAllReduce) {
        EXPECT_TRUE(answersPace) << name << ": the results do not pace the pieces";
      }
    }
}

TEST(Synth, AppliesOnlyWhereTheGraphSpansHosts) {
  GroupView g;
  g.nranks = 4;
  Args a;
  a.kind = CollKind::kAllReduce;
  a.count = 1 << 20;
  EXPECT_EQ(selectAlgorithm(a, g, "synth")->algo->name(), "ring") << "no graph: the automatic choice";
  topo::ClusterSpec one;
  one.name = "one";
  one.hosts.push_back({"h0", 4, {{"eth0", topo::NicKind::kEth, 1000, "eth"}}});
  g = GroupView::fromGraph(0, graphOf(one), 512 << 10);
  EXPECT_NE(selectAlgorithm(a, g, "synth")->algo->name(), "synth") << "one host: nothing to synthesise";
}

// Graphs alike in everything but names and rank numbers share one packing, the same packTrees gives; a graph
// with one port's rate changed, or another use or demand, gets its own.
TEST(Synth, PackingsAreSharedOnlyBetweenGraphsAlikeInTheirLinks) {
  topo::ClusterSpec spec;
  spec.name = "shared";
  for (int h = 0; h < 3; ++h)
    spec.hosts.push_back(
        {"h" + std::to_string(h),
         1,
         {{"ib0", topo::NicKind::kIb, h == 2 ? 1200u : 800u, "ib"}, {"eth0", topo::NicKind::kEth, 200, "eth"}}});
  topo::ClusterSpec renamed = spec, slower = spec;
  for (auto& h : renamed.hosts) h.name = "other-" + h.name, h.ranks = 2;
  slower.hosts[1].nics[1].rateMbps = 100;
  auto g = graphOf(spec), alike = graphOf(renamed), other = graphOf(slower);
  const std::vector<double> demand(3, 1.0);
  auto p = synth::sharedPacking(*g, synth::TreeUse::kOut, demand);
  EXPECT_EQ(synth::sharedPacking(*alike, synth::TreeUse::kOut, demand), p);
  const synth::Packing fresh = synth::packTrees(*g, synth::TreeUse::kOut, demand);
  EXPECT_EQ(p->usPerByte, fresh.usPerByte);
  EXPECT_EQ(p->describe(*g), fresh.describe(*g));
  auto q = synth::sharedPacking(*other, synth::TreeUse::kOut, demand);
  EXPECT_NE(q, p);
  EXPECT_GT(q->usPerByte, p->usPerByte) << "h1's Ethernet at half the rate";
  EXPECT_NE(synth::sharedPacking(*g, synth::TreeUse::kIn, demand), p);
  EXPECT_NE(synth::sharedPacking(*g, synth::TreeUse::kOut, {1.0, 0.0, 0.0}), p);
}

}  // namespace
}  // namespace hetcomm::coll
