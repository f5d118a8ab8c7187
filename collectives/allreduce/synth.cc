// Synthesised allreduce: each share of the buffer goes up a tree into some host, summed on the way, and its result
// back down a tree out of that host; the trees are packed over the cluster's link graph (synth/trees.h) so that
// the traffic spreads over every NIC in proportion to its rate. Every host first sums its ranks' contributions
// over shared memory and hands the result back to them the same way (synth/flows.h). It serves any cluster shape:
// uneven ranks per host, uneven islands, hosts with several NICs of different kinds.
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthAllReduce final : public synth::SynthAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kAllReduce; }

 protected:
  synth::TreeUse use() const override { return synth::TreeUse::kBoth; }
  synth::FlowMode mode() const override { return synth::FlowMode::kAllReduce; }
  synth::Flow flow(const Args& a, const GroupView&, const synth::Packing& p, int) const override {
    return synth::wholeBuffer(a, p.byRoot[0], -1, false);
  }
};

}  // namespace

const Algorithm& synthAllReduce() {
  static const SynthAllReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
