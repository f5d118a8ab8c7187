// packing_lp.h: the tree packing as a linear program, solved exactly (GLPK's simplex). Frank-Wolfe (trees.cc)
// finds good trees fast but settles near the optimum, not on it, and pruning its mix to a few trees loses more: on
// a random cluster of three hosts whose NICs join only some of the others (hetcomm-topo --random-cluster 5
// --max-hosts 4 --max-ranks 2) its allreduce packing came out 1.168 times the bound, where the best tree packing
// reaches the bound exactly.
//
// The program, over the trees found so far (its columns):
//   minimise z, the most loaded port direction's load over its rate,
//   with, per root r, its trees' weights summing to 1,
//   and, per port direction e, the demand-weighted load of the trees on e at most z times e's rate.
// Its dual prices put a price on each port direction's bytes; the cheapest tree of every root under them, priced
// so and weighted by demand, add up to a bound no packing gets below. packTrees (column generation) adds those
// trees, found by the same exact searches as Frank-Wolfe's, and solves again until that bound meets z.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace hetcomm::coll::synth {

// One exists at a time in the process (a second waits for the first to go): no packing builds two at once.
class PackingLp {
 public:
  // rates[e] > 0 per port direction (GB/s); demand[r] >= 0 per root (a root without demand gets no row).
  PackingLp(std::vector<double> rates, std::vector<double> demand);
  ~PackingLp();
  PackingLp(const PackingLp&) = delete;
  PackingLp& operator=(const PackingLp&) = delete;

  // A tree of root r (with demand) whose load per unit of its root's data is load[e] bytes per byte on port
  // direction e; returns its column.
  size_t addTree(int root, const std::vector<double>& load);
  // Columns that may no longer carry weight (pruned trees).
  void exclude(size_t column);

  // Solves from the last basis; false where the simplex fails (then nothing below is meaningful).
  bool solve();
  double congestion() const;  // z: us per byte of unit demand x 1e3, as maxCongestion measures it
  double weight(size_t column) const;
  // Per port direction, what a byte of load there costs at the optimum (>= 0; times the rates, they sum to 1).
  std::vector<double> portPrices() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hetcomm::coll::synth
