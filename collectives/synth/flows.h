// flows.h: one rank's schedule from a tree packing (trees.h). The collective's data is one or more flows (the
// whole buffer for allreduce, broadcast and reduce; one block per rank for allgather and reduce-scatter), each cut
// into pieces (pipelining), each piece into one part per tree (by the tree's weight), each part into segments that
// the ranks of a host take turns to carry (so every rank of a host drives its share of the host's NIC).
//
// A segment moves through its tree host by host. On each host one rank, its owner there, does the host's work:
//   up (reduction): the host's other ranks send it their contribution over shared memory, the owners of the child
//       hosts send their partial sums; it adds them to its own and sends the sum to its parent host's owner
//   down (result, or broadcast data): it receives from its parent host's owner, sends to its child hosts' owners
//       and to the other ranks of its host
// allreduce runs up then down the same tree; reduce and reduce-scatter up only, to a fixed rank at the root host;
// broadcast and allgather down only, from a fixed rank there.
//
// Pieces are paced: a rank starts piece p once it has finished piece p - W, W enough pieces to cover the trees'
// depth; finished, that is, with what it sends and the answers to it, not the receives that only deliver data it
// forwards nowhere (a leaf's part of a broadcast: those complete in their own time, see pacedSteps). That bounds
// the data in flight (and the scratch: staging slots are reused every W pieces) and keeps the fast links from
// bursting through the whole buffer while the slow ones wait. No step of a piece waits on a later piece, so the
// pacing cannot deadlock.
#pragma once

#include <functional>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/synth/trees.h"

namespace hetcomm::coll::synth {

enum class FlowMode { kAllReduce, kReduce, kBroadcast };

struct Flow {
  size_t count = 0;  // elements
  // The fixed rank at the root host: kReduce, the one that ends with the sum; kBroadcast, the one that holds the
  // data. -1 for kAllReduce.
  int fixedRank = -1;
  // The fixed rank's host spreads the flow over all its ranks (they scatter it from, or gather it to, the fixed
  // rank over shared memory), so that every one of them drives the NIC; otherwise the fixed rank carries it all.
  bool spread = false;
  const std::vector<WeightedTree>* trees = nullptr;  // weights sum to 1; kReduce/kBroadcast: rooted at its host
  // Where rank r's contribution (or the source's data) of elements [lo, lo + n) is, and where rank r's result goes.
  std::function<Slice(int rank, size_t lo, size_t n)> in, out;
};

// How `flows` flows of flowBytes at most are cut: pieces per flow, segments per piece of one flow (parts times
// subsegments), pieces in flight (the pacing window), and for the estimate the pipeline's fill at that cut: one
// segment's way through the trees and the host levels (each hop alpha plus the segment over its own link) less its
// slowest hop, the longest over the trees, in microseconds.
struct FlowShape {
  size_t pieces = 1, segmentsPerPiece = 1, window = 1;
  double fillUs = 0;
};
FlowShape flowShape(const GroupView& g, const topo::LinkGraph& graph, const Packing& packing, FlowMode mode,
                    size_t flowBytes, size_t flows);

// Appends this rank's steps for every flow to s (whose dtype, op and nranks are set) and sets s.scratchBytes.
// Every rank must call it with the same arguments but its own g.rank.
void emitFlows(Schedule& s, const GroupView& g, const topo::LinkGraph& graph, const Packing& packing, FlowMode mode,
               const std::vector<Flow>& flows);

}  // namespace hetcomm::coll::synth
