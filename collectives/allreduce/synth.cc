// Synthesised allreduce: trees packed over the cluster's link graph (synth/trees.h), each carrying its share of
// the buffer up to its root, summed on the way, and the result back down; every host first sums its ranks'
// contributions over shared memory and hands the result back to them the same way (synth/flows.h). The trees
// spread the traffic over every NIC in proportion to its rate, so it serves any cluster shape: uneven ranks per
// host, uneven islands, hosts with several NICs of different kinds.
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthAllReduce final : public Algorithm {
 public:
  std::string_view name() const override { return "synth"; }
  CollKind kind() const override { return CollKind::kAllReduce; }
  bool applies(const Args&, const GroupView& g) const override { return synth::applies(g); }

  double estimateUs(const Args& a, const GroupView& g) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return synth::estimateUs(g, *synth::packingFor(g, synth::TreeUse::kBoth, -1), synth::FlowMode::kAllReduce, bytes,
                             bytes, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    auto packing = synth::packingFor(g, synth::TreeUse::kBoth, -1);
    Schedule s = newSchedule(a, g);
    const size_t esz = kernels::sizeOf(a.dtype);
    synth::Flow f;
    f.count = a.count;
    f.trees = &packing->byRoot[0];
    f.in = [&](int, size_t lo, size_t n) { return Slice{Buf::kSend, lo * esz, n * esz}; };
    f.out = [&](int, size_t lo, size_t n) { return Slice{Buf::kRecv, lo * esz, n * esz}; };
    synth::emitFlows(s, g, *g.graph, *packing, synth::FlowMode::kAllReduce, {f});
    return s;
  }
};

}  // namespace

const Algorithm& synthAllReduce() {
  static const SynthAllReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
