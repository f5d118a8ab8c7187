// Synthesised allgather: for every host, trees packed over the cluster's link graph out of it (synth/trees.h), each
// host's weight its rank count. Rank r's block leaves its host once per tree hop: r itself sends it to the owners on
// the child hosts, who pass it on down their trees and to their hosts' other ranks (synth/flows.h). Tree packing
// reaches the allgather bound of any cut (ForestColl).
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthAllGather final : public synth::SynthAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kAllGather; }

 protected:
  synth::TreeUse use() const override { return synth::TreeUse::kOut; }
  synth::FlowMode mode() const override { return synth::FlowMode::kBroadcast; }
  bool perRank() const override { return true; }
  void prologue(const Args& a, const GroupView& g, Schedule& s) const override {
    const size_t bytes = a.count * kernels::sizeOf(a.dtype);
    copyUnlessSame(s, {Buf::kRecv, g.rank * bytes, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
  }
  // Rank src's block: from its send buffer to place src of everyone's receive buffer.
  synth::Flow flow(const Args& a, const GroupView& g, const synth::Packing& p, int src) const override {
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    synth::Flow f = synth::wholeBuffer(a, p.byRoot[g.hostOf(src)], src, false);
    f.out = [esz, bytes, src](int, size_t lo, size_t n) { return Slice{Buf::kRecv, src * bytes + lo * esz, n * esz}; };
    return f;
  }
};

}  // namespace

const Algorithm& synthAllGather() {
  static const SynthAllGather algo;
  return algo;
}

}  // namespace hetcomm::coll
