// Synthesised broadcast: trees packed over the cluster's link graph out of the root's host (synth/trees.h), the
// buffer shared out among them by weight. The root's host spreads the buffer over its ranks first, so each of them
// drives the NIC with its part; every other host's owner of a segment passes it on to the child hosts and to the
// host's other ranks (synth/flows.h). By Edmonds' theorem such trees reach the broadcast bound.
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthBroadcast final : public synth::SynthAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kBroadcast; }

 protected:
  synth::TreeUse use() const override { return synth::TreeUse::kOut; }
  synth::FlowMode mode() const override { return synth::FlowMode::kBroadcast; }
  int rootHost(const Args& a, const GroupView& g) const override { return g.hostOf(a.root); }
  void prologue(const Args& a, const GroupView& g, Schedule& s) const override {
    const size_t bytes = a.count * kernels::sizeOf(a.dtype);
    if (g.rank == a.root) copyUnlessSame(s, {Buf::kRecv, 0, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
  }
  synth::Flow flow(const Args& a, const GroupView& g, const synth::Packing& p, int) const override {
    return synth::wholeBuffer(a, p.byRoot[g.hostOf(a.root)], a.root, /*spread=*/true);
  }
};

}  // namespace

const Algorithm& synthBroadcast() {
  static const SynthBroadcast algo;
  return algo;
}

}  // namespace hetcomm::coll
