// Pipelined chain broadcast: the root sends chunk by chunk to the next rank, each rank forwards a chunk as soon
// as it has it. Every link carries the buffer once; latency (n-1) hops plus one chunk per chunk. The chain runs
// in NIC-aware order from the root (GroupView::nicAwareChain), crossing each slow fabric as few times as it can.
#include <algorithm>

#include "collectives/algorithm_list.h"

namespace hetcomm::coll {
namespace {

class ChainBroadcast final : public Algorithm {
 public:
  std::string_view name() const override { return "chain"; }
  CollKind kind() const override { return CollKind::kBroadcast; }
  double estimateUs(const Args& a, const GroupView& g) const override {
    std::vector<int> chain = g.nicAwareChain(a.root);
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return pipelinedChainUs(g, chain, bytes) + memoryUs(g, a.root, a.inPlace ? 0 : bytes, 0, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    const int n = g.nranks;
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    const std::vector<int> chain = g.nicAwareChain(a.root);
    const int pos = static_cast<int>(std::find(chain.begin(), chain.end(), g.rank) - chain.begin());  // 0 = root
    const int next = chain[(pos + 1) % n], prev = chain[(pos + n - 1) % n];
    if (pos == 0) copyUnlessSame(s, {Buf::kRecv, 0, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
    if (n == 1) return s;
    Chunking ch = chunkingFor(a.count, esz, g.chunkBytes);
    for (size_t c = 0; c < ch.nchunks; ++c) {
      size_t lo = ch.begin(c, a.count) * esz, len = ch.end(c, a.count) * esz - lo;
      uint32_t tag = static_cast<uint32_t>(c);
      if (pos == 0) {
        s.send(next, tag, {Buf::kSend, lo, len});
        continue;
      }
      uint32_t rcv = s.recv(prev, tag, {Buf::kRecv, lo, len});
      if (pos < n - 1) s.steps[s.send(next, tag, {Buf::kRecv, lo, len})].dependOn(rcv);
    }
    return s;
  }
};

}  // namespace

const Algorithm& chainBroadcast() {
  static const ChainBroadcast algo;
  return algo;
}

}  // namespace hetcomm::coll
