// Pipelined chain reduce: partial sums flow along the broadcast chain reversed (GroupView::nicAwareChain: the
// rank farthest from the root first, the root last), chunk by chunk; each rank adds its
// contribution and forwards. Non-root ranks keep partial sums in two scratch slots per chunk position (the
// receive buffer is only the root's, as in NCCL).
#include <algorithm>

#include "collectives/algorithm_list.h"

namespace hetcomm::coll {
namespace {

class ChainReduce final : public Algorithm {
 public:
  std::string_view name() const override { return "chain"; }
  CollKind kind() const override { return CollKind::kReduce; }
  double estimateUs(const Args& a, const GroupView& g) const override {
    std::vector<int> chain = g.nicAwareChain(a.root);
    std::reverse(chain.begin(), chain.end());  // partial sums flow to the root
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return pipelinedChainUs(g, chain, bytes) + worstMemoryUs(g, 0, bytes, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    const int n = g.nranks;
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    const bool isRoot = g.rank == a.root;
    if (n == 1) {
      copyUnlessSame(s, {Buf::kRecv, 0, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
      if (a.op == kernels::RedOp::kAvg && bytes) s.divide({Buf::kRecv, 0, bytes});
      return s;
    }
    std::vector<int> chain = g.nicAwareChain(a.root);
    std::reverse(chain.begin(), chain.end());  // the root last
    const int pos = static_cast<int>(std::find(chain.begin(), chain.end(), g.rank) - chain.begin());
    const int next = chain[(pos + 1) % n], prev = chain[(pos + n - 1) % n];
    Chunking ch = chunkingFor(a.count, esz, g.chunkBytes);
    const size_t slot = ch.per * esz;
    // Scratch: staging slots [0, 2) then partial-sum slots [2, 4), alternating by chunk parity.
    s.scratchBytes = pos == 0 ? 0 : 4 * slot;
    std::vector<uint32_t> reduces(ch.nchunks), sends(ch.nchunks);
    for (size_t c = 0; c < ch.nchunks; ++c) {
      size_t lo = ch.begin(c, a.count) * esz, len = ch.end(c, a.count) * esz - lo;
      uint32_t tag = static_cast<uint32_t>(c);
      Slice mine{Buf::kSend, lo, len};
      if (pos == 0) {
        sends[c] = s.send(next, tag, mine);
        continue;
      }
      Slice stage{Buf::kScratch, (c % 2) * slot, len};
      uint32_t rcv = s.recv(prev, tag, stage);
      if (c >= 2) s.steps[rcv].dependOn(reduces[c - 2]);
      Slice acc = isRoot ? Slice{Buf::kRecv, lo, len} : Slice{Buf::kScratch, (2 + c % 2) * slot, len};
      uint32_t red = s.reduce(acc, mine, stage);
      s.steps[red].dependOn(rcv);
      if (!isRoot && c >= 2) s.steps[red].dependOn(sends[c - 2]);  // the slot's previous sum is on its way
      reduces[c] = red;
      if (isRoot) {
        if (a.op == kernels::RedOp::kAvg) s.steps[s.divide(acc)].dependOn(red);
      } else {
        sends[c] = s.send(next, tag, acc);
        s.steps[sends[c]].dependOn(red);
      }
    }
    return s;
  }
};

}  // namespace

const Algorithm& chainReduce() {
  static const ChainReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
