// Synthesised reduce: trees packed over the cluster's link graph into the root's host (synth/trees.h), the buffer
// shared out among them by weight. Every host sums its ranks' contributions to a segment at the segment's owner,
// adds its child hosts' partial sums and sends the result up; on the root's host the owners pass the final sums to
// the root (synth/flows.h).
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthReduce final : public synth::SynthAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kReduce; }

 protected:
  synth::TreeUse use() const override { return synth::TreeUse::kIn; }
  synth::FlowMode mode() const override { return synth::FlowMode::kReduce; }
  int rootHost(const Args& a, const GroupView& g) const override { return g.hostOf(a.root); }
  synth::Flow flow(const Args& a, const GroupView& g, const synth::Packing& p, int) const override {
    return synth::wholeBuffer(a, p.byRoot[g.hostOf(a.root)], a.root, /*spread=*/true);
  }
};

}  // namespace

const Algorithm& synthReduce() {
  static const SynthReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
