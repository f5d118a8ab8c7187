// Synthesised reduce-scatter: for every host, trees packed over the cluster's link graph into it (synth/trees.h),
// each host's weight its rank count. The sums of rank r's block flow up trees rooted at its host: each host adds
// its ranks' contributions at a segment's owner, adds the child hosts' partial sums and sends on; on r's host, r
// itself takes them all (synth/flows.h). The allgather reversed.
#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"

namespace hetcomm::coll {
namespace {

class SynthReduceScatter final : public synth::SynthAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kReduceScatter; }

 protected:
  synth::TreeUse use() const override { return synth::TreeUse::kIn; }
  synth::FlowMode mode() const override { return synth::FlowMode::kReduce; }
  bool perRank() const override { return true; }
  // Rank dst's block: from place dst of everyone's send buffer to dst's receive buffer.
  synth::Flow flow(const Args& a, const GroupView& g, const synth::Packing& p, int dst) const override {
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    synth::Flow f = synth::wholeBuffer(a, p.byRoot[g.hostOf(dst)], dst, false);
    f.in = [esz, bytes, dst](int, size_t lo, size_t n) { return Slice{Buf::kSend, dst * bytes + lo * esz, n * esz}; };
    return f;
  }
};

}  // namespace

const Algorithm& synthReduceScatter() {
  static const SynthReduceScatter algo;
  return algo;
}

}  // namespace hetcomm::coll
