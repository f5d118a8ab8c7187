// Synthesised broadcast: trees packed over the cluster's link graph from the root's host (synth/trees.h), the
// buffer shared out among them by weight. The root's host spreads the buffer over its ranks first, so each of them
// drives the NIC with its part; every other host's owner of a segment passes it on to the child hosts and to the
// host's other ranks (synth/flows.h). By Edmonds' theorem such trees reach the broadcast bound.
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthBroadcast final : public Algorithm {
 public:
  std::string_view name() const override { return "synth"; }
  CollKind kind() const override { return CollKind::kBroadcast; }
  bool applies(const Args&, const GroupView& g) const override { return synth::applies(g); }

  double estimateUs(const Args& a, const GroupView& g) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return synth::estimateUs(g, *synth::packingFor(g, synth::TreeUse::kOut, g.hostOf(a.root)),
                             synth::FlowMode::kBroadcast, bytes, bytes, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    auto packing = synth::packingFor(g, synth::TreeUse::kOut, g.hostOf(a.root));
    Schedule s = newSchedule(a, g);
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    if (g.rank == a.root) copyUnlessSame(s, {Buf::kRecv, 0, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
    synth::Flow f;
    f.count = a.count;
    f.fixedRank = a.root;
    f.spread = true;
    f.trees = &packing->byRoot[g.hostOf(a.root)];
    f.in = [&](int, size_t lo, size_t n) { return Slice{Buf::kSend, lo * esz, n * esz}; };
    f.out = [&](int, size_t lo, size_t n) { return Slice{Buf::kRecv, lo * esz, n * esz}; };
    synth::emitFlows(s, g, *g.graph, *packing, synth::FlowMode::kBroadcast, {f});
    return s;
  }
};

}  // namespace

const Algorithm& synthBroadcast() {
  static const SynthBroadcast algo;
  return algo;
}

}  // namespace hetcomm::coll
