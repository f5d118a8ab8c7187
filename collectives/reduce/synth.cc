// Synthesised reduce: trees packed over the cluster's link graph towards the root's host (synth/trees.h), the
// buffer shared out among them by weight. Every host sums its ranks' contributions to a segment at the segment's
// owner, adds its child hosts' partial sums and sends the result up; on the root's host the owners pass the final
// sums to the root (synth/flows.h).
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthReduce final : public Algorithm {
 public:
  std::string_view name() const override { return "synth"; }
  CollKind kind() const override { return CollKind::kReduce; }
  bool applies(const Args&, const GroupView& g) const override { return synth::applies(g); }

  double estimateUs(const Args& a, const GroupView& g) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return synth::estimateUs(g, *synth::packingFor(g, synth::TreeUse::kIn, g.hostOf(a.root)),
                             synth::FlowMode::kReduce, bytes, bytes, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    auto packing = synth::packingFor(g, synth::TreeUse::kIn, g.hostOf(a.root));
    Schedule s = newSchedule(a, g);
    const size_t esz = kernels::sizeOf(a.dtype);
    synth::Flow f;
    f.count = a.count;
    f.fixedRank = a.root;
    f.spread = true;
    f.trees = &packing->byRoot[g.hostOf(a.root)];
    f.in = [&](int, size_t lo, size_t n) { return Slice{Buf::kSend, lo * esz, n * esz}; };
    f.out = [&](int, size_t lo, size_t n) { return Slice{Buf::kRecv, lo * esz, n * esz}; };
    synth::emitFlows(s, g, *g.graph, *packing, synth::FlowMode::kReduce, {f});
    return s;
  }
};

}  // namespace

const Algorithm& synthReduce() {
  static const SynthReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
