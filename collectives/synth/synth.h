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

// The estimate of a synthesised schedule, in microseconds:
//   network   the packing's most loaded port: usPerByte x unitBytes (the bytes of one unit of demand: the buffer, or
//             one rank's block)
//   local     per rank, over shared memory: the host's contributions in and results out (receiver's copy at the
//             host's memory rate), and the reductions of the segments it owns (memoryUs)
//   fill      one segment's way through the trees and the host levels, each hop alpha plus the segment over its own
//             link, less the slowest hop, which the network term already counts (the other pieces follow in its
//             wake)
// The network and the local work overlap (different pieces), so the larger of the two counts.
// dataBytes: what every host handles in all (the buffer; allgather and reduce-scatter: all blocks).
double estimateUs(const GroupView& g, const Packing& p, FlowMode mode, double unitBytes, double dataBytes,
                  double flowBytes);

}  // namespace hetcomm::coll::synth
