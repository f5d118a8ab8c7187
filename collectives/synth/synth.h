// synth.h: what the synthesised algorithms ("synth": allreduce, allgather, reduce-scatter, broadcast, reduce) share:
// where they apply, their tree packings (cached per group), and their cost estimate.
#pragma once

#include <memory>

#include "collectives/synth/flows.h"
#include "collectives/synth/trees.h"

namespace hetcomm::coll::synth {

// The group's graph is known, spans two hosts or more that reach each other, and is the group's own.
bool applies(const GroupView& g);

// The packing for a use: rootHost >= 0, trees rooted there (broadcast, reduce); -1 with kOut or kIn, trees from or
// to every host, its demand its rank count (allgather, reduce-scatter); kBoth ignores it. Cached per group.
std::shared_ptr<const Packing> packingFor(const GroupView& g, TreeUse use, int rootHost);

// A collective's tree packing on a graph, its rates as they are, in microseconds for `bytes` (nccl-tests' size;
// root: broadcast and reduce). Allreduce, allgather, reduce-scatter, broadcast and reduce; invalid argument for
// the others and for a graph no packing spans. Against the bound (topology/bounds.h) it says, where a schedule
// stays below the bound, whether the bound (no tree packing reaches it), the packing, or the execution is at
// fault (hetcomm-packing prints the three).
struct PackingTimes {
  double lowerUs = 0;    // no tree packing is faster (the linear program's dual bound); 0 where not computed
  double packingUs = 0;  // the packing the synthesised schedule runs: its most loaded port's time
  std::string trees;     // that packing's trees and port loads (Packing::describe)
};
Result<PackingTimes> packingTimes(const topo::LinkGraph& graph, CollKind kind, int rootRank, double bytes);

// The estimate of a synthesised schedule, in microseconds:
//   network   the packing's most loaded port: usPerByte x unitBytes (the bytes of one unit of demand: the buffer, or
//             one rank's block)
//   local     per rank, over shared memory: the host's contributions in and results out (receiver's copy at the
//             host's memory rate), and the reductions of the segments it owns (memoryUs)
//   fill      one segment's way through the trees and the host levels, each hop alpha plus the segment over its own
//             link, less the slowest hop, which the network term already counts (the other pieces follow in its
//             wake)
// The network and the local work overlap (different pieces), so the larger of the two counts.
// flows flows of flowBytes each (one for the buffer; allgather and reduce-scatter: one per rank's block): every
// host handles flows x flowBytes in all.
// efficiency: the share of the packing's rate the schedule reaches (treeEfficiency).
double estimateUs(const GroupView& g, const Packing& p, FlowMode mode, double unitBytes, double flowBytes,
                  size_t flows, double efficiency);

// The share of the packing's rate a synthesised `kind` gets on the group's cluster: what earlier calls showed
// (GroupView::learnedTreeEfficiency), else the default (kDefaultTreeEfficiency in synth.cc).
double treeEfficiency(const GroupView& g, CollKind kind);

// What the five synthesised algorithms share: their name, where they apply, their estimate and their plan, from
// what each says of itself: its kind, how its trees are used, how data flows through them, where their roots are,
// and its flows.
class SynthAlgorithm : public Algorithm {
 public:
  std::string_view name() const final { return "synth"; }
  bool applies(const Args&, const GroupView& g) const final { return synth::applies(g); }
  double estimateUs(const Args& a, const GroupView& g) const final;
  Result<Schedule> plan(const Args& a, const GroupView& g) const final;

 protected:
  virtual TreeUse use() const = 0;
  virtual FlowMode mode() const = 0;
  // The host the trees are rooted at (broadcast, reduce: the root's), or -1: trees from (to) every host, each
  // with its ranks' blocks (allgather, reduce-scatter; allreduce, whose roots the packing chooses).
  virtual int rootHost(const Args&, const GroupView&) const { return -1; }
  // One flow for the whole buffer, or one per rank's block.
  virtual bool perRank() const { return false; }
  // Flow `i` (a rank's block when perRank) of this call, its trees given; and the plan's copies before the flows.
  virtual Flow flow(const Args& a, const GroupView& g, const Packing& p, int i) const = 0;
  virtual void prologue(const Args&, const GroupView&, Schedule&) const {}
};

// The whole buffer (allreduce, broadcast, reduce): a rank's contribution in its send buffer, its result at the same
// place of its receive buffer.
Flow wholeBuffer(const Args& a, const std::vector<WeightedTree>& trees, int fixedRank, bool spread);

}  // namespace hetcomm::coll::synth
