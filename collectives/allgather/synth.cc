// Synthesised allgather: for every host, trees packed over the cluster's link graph from it (synth/trees.h), each
// host's weight its rank count. Rank r's block leaves its host once per tree hop: its own rank sends it to the
// owners on the child hosts, who pass it on down their trees and to their hosts' other ranks (synth/flows.h).
// Tree packing reaches the allgather bound of any cut (ForestColl).
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthAllGather final : public Algorithm {
 public:
  std::string_view name() const override { return "synth"; }
  CollKind kind() const override { return CollKind::kAllGather; }
  bool applies(const Args&, const GroupView& g) const override { return synth::applies(g); }

  double estimateUs(const Args& a, const GroupView& g) const override {
    const double block = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return synth::estimateUs(g, *synth::packingFor(g, synth::TreeUse::kOut, -1), synth::FlowMode::kBroadcast, block,
                             block * g.nranks, block);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    auto packing = synth::packingFor(g, synth::TreeUse::kOut, -1);
    Schedule s = newSchedule(a, g);
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    copyUnlessSame(s, {Buf::kRecv, g.rank * bytes, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
    std::vector<synth::Flow> flows(g.nranks);
    for (int src = 0; src < g.nranks; ++src) {
      synth::Flow& f = flows[src];
      f.count = a.count;
      f.fixedRank = src;
      f.trees = &packing->byRoot[g.hostOf(src)];
      f.in = [esz](int, size_t lo, size_t n) { return Slice{Buf::kSend, lo * esz, n * esz}; };
      f.out = [esz, bytes, src](int, size_t lo, size_t n) { return Slice{Buf::kRecv, src * bytes + lo * esz, n * esz}; };
    }
    synth::emitFlows(s, g, *g.graph, *packing, synth::FlowMode::kBroadcast, flows);
    return s;
  }
};

}  // namespace

const Algorithm& synthAllGather() {
  static const SynthAllGather algo;
  return algo;
}

}  // namespace hetcomm::coll
