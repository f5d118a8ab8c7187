// trees.h: packing weighted spanning trees over the hosts of a LinkGraph, the heart of schedule synthesis
// (ForestColl, Blink). Each tree carries a share of the data through host-to-host hops; a hop from host a to host
// b loads a's port and b's port on the fabric the pair uses (or several, striped over rails), each port a resource
// with its rate in each direction. The packing spreads the data over trees so that the most loaded port, relative
// to its rate, is as light as it can be: that port's time is the schedule's bandwidth term, and the bounds
// (topology/bounds.h) say how close to optimal it is.
//
// Three uses:
//   kBoth  allreduce: a share goes up a tree to a root (reduction) and back down a tree from it (result): the same
//          tree both ways (rooted at its centre), or, where that is cheaper, the best tree into some host and the
//          best tree out of it (a reduce-scatter and an allgather with that host owning the share)
//   kOut   broadcast, allgather: trees directed away from a given root host
//   kIn    reduce, reduce-scatter: trees directed towards a given root host
//
// The method is Frank-Wolfe on a smoothed maximum of the port loads: each round finds, for every root, the tree that
// is cheapest under the gradient (Prim's algorithm; exact for kBoth, greedy for the directed ones), and moves the
// mix a step towards it. On up to 32 hosts (where the directed searches are exact too) the packing's linear program
// then takes over (packing_lp.h, GLPK): its exact optimum over those trees and the ones its prices lead the
// searches to, pruned to a few trees per root one tree at a time, the weights solved again after each cut; the
// directed packings then meet their bounds (ForestColl's condition). Above 32 hosts, or where the simplex fails,
// Frank-Wolfe's trees are pruned to the heaviest few per root and their weights re-balanced by more rounds.
// Deterministic: the same graph gives the same trees on every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "topology/link_graph.h"

namespace hetcomm::coll::synth {

enum class TreeUse { kBoth, kOut, kIn };

struct HostTree {
  int root = 0;
  std::vector<int> parent;                 // per host; -1 at the root
  std::vector<int> way;                    // per host: which of LinkGraph::waysOf its hops to and from its parent take
  std::vector<std::vector<int>> children;  // per host, ascending
  int depth = 0;                           // hops from the root to the farthest host
};

struct WeightedTree {
  HostTree tree;      // kOut: the tree out of the root; kIn and kBoth: the tree into it (child to parent)
  HostTree down;      // kBoth: the tree the result goes back out along (parent to child)
  double weight = 0;  // share of its root's data; a root's weights sum to 1
  // kBoth, a tree between two hosts that goes up and down the same edges: the tree rooted at each (tree and down
  // are the first); piece p's part of tree t takes turn p + t. Empty otherwise.
  std::vector<HostTree> turns;
  const HostTree& upAt(size_t turn) const { return turns.empty() ? tree : turns[turn % turns.size()]; }
  const HostTree& downAt(size_t turn) const { return turns.empty() ? down : turns[turn % turns.size()]; }
  size_t turnCount() const { return turns.empty() ? 1 : turns.size(); }
};

struct Packing {
  TreeUse use = TreeUse::kBoth;
  // Per root host: its trees (kBoth: one list, index 0, whatever the roots). Empty for roots with no demand.
  std::vector<std::vector<WeightedTree>> byRoot;
  // The most loaded port's time per unit of demand, us per byte: a demand of d bytes from every root r (scaled by
  // its weight below) takes usPerByte * d on that port.
  double usPerByte = 0;
  std::vector<double> demand;  // per root host, as given
  // No packing of trees the searches return has a lighter most loaded port than this, us per byte as usPerByte:
  // the linear program's dual bound, on up to 32 hosts (where the directed searches are exact, so it holds for
  // every tree packing of this use; kBoth on more than 16 hosts: for trees into and out of its 16 root hosts).
  // 0 where not computed (more hosts, or the simplex failed first).
  double lowerUsPerByte = 0;
  int maxDepth = 0;
  std::string describe(const topo::LinkGraph& g) const;
};

// demand[h]: how much of the data starts (kOut) or ends (kIn) at host h, relative to the others (kBoth: one entry,
// ignored). Needs a connected graph with two hosts or more.
Packing packTrees(const topo::LinkGraph& g, TreeUse use, const std::vector<double>& demand);

// The same packing, shared: graphs alike in everything packTrees reads (hosts, ports and their rates, the ways
// between hosts; not names or rank numbers) get one packing per process. Groups of different ranks on hosts
// alike in their links are common (a planner weighs thousands of groups; communicators split per stage), and a
// packing over 32 hosts takes tens of milliseconds. Thread-safe; bounded in entries.
std::shared_ptr<const Packing> sharedPacking(const topo::LinkGraph& g, TreeUse use, const std::vector<double>& demand);

// The cheapest spanning arborescence rooted at `root`, as each vertex's parent (-1 at the root): w[u * n + v] is
// what u costs as v's parent (infinite: not allowed). Empty when some vertex cannot be reached. Chu-Liu/Edmonds in
// its dense O(n^2) form; packTrees' directed trees on up to 32 hosts; exposed for tests.
std::vector<int> minArborescence(int n, int root, const std::vector<double>& w);

// The load of a packing on every port direction, per unit of demand: [port * 2] egress, [port * 2 + 1] ingress,
// in bytes per byte; exposed for tests.
std::vector<double> portLoads(const topo::LinkGraph& g, const Packing& p);

}  // namespace hetcomm::coll::synth
