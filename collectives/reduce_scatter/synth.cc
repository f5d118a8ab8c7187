// Synthesised reduce-scatter: for every host, trees packed over the cluster's link graph towards it
// (synth/trees.h), each host's weight its rank count. The sums of rank r's block flow up trees rooted at its host:
// each host adds its ranks' contributions at a segment's owner, adds the child hosts' partial sums and sends on;
// on r's host, r itself takes them all (synth/flows.h). The allgather reversed.
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthReduceScatter final : public Algorithm {
 public:
  std::string_view name() const override { return "synth"; }
  CollKind kind() const override { return CollKind::kReduceScatter; }
  bool applies(const Args&, const GroupView& g) const override { return synth::applies(g); }

  double estimateUs(const Args& a, const GroupView& g) const override {
    const double block = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return synth::estimateUs(g, *synth::packingFor(g, synth::TreeUse::kIn, -1), synth::FlowMode::kReduce, block,
                             block * g.nranks, block);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    auto packing = synth::packingFor(g, synth::TreeUse::kIn, -1);
    Schedule s = newSchedule(a, g);
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    std::vector<synth::Flow> flows(g.nranks);
    for (int dst = 0; dst < g.nranks; ++dst) {
      synth::Flow& f = flows[dst];
      f.count = a.count;
      f.fixedRank = dst;
      f.trees = &packing->byRoot[g.hostOf(dst)];
      f.in = [esz, bytes, dst](int, size_t lo, size_t n) { return Slice{Buf::kSend, dst * bytes + lo * esz, n * esz}; };
      f.out = [esz](int, size_t lo, size_t n) { return Slice{Buf::kRecv, lo * esz, n * esz}; };
    }
    synth::emitFlows(s, g, *g.graph, *packing, synth::FlowMode::kReduce, flows);
    return s;
  }
};

}  // namespace

const Algorithm& synthReduceScatter() {
  static const SynthReduceScatter algo;
  return algo;
}

}  // namespace hetcomm::coll
