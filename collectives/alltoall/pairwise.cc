// Pairwise all-to-all: block j goes to rank j, every exchange posted at once (the transport interleaves them).
// In place, outgoing blocks are staged in scratch first (see plan()).
#include "collectives/algorithm_list.h"

namespace hetcomm::coll {
namespace {

class PairwiseAlltoAll final : public Algorithm {
 public:
  std::string_view name() const override { return "pairwise"; }
  CollKind kind() const override { return CollKind::kAlltoAll; }
  double estimateUs(const Args& a, const GroupView& g) const override {
    const double alphaUs = g.ringAlphaUs(), bwGBps = g.ringBwGBps();
    double block = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return alphaUs + (g.nranks - 1) * block / (bwGBps * 1e3) + worstMemoryUs(g, block, 0, callBytes(a, g));
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    const int n = g.nranks, r = g.rank;
    const size_t block = a.count * kernels::sizeOf(a.dtype);
    copyUnlessSame(s, {Buf::kRecv, r * block, block}, {Buf::kSend, r * block, block}, a.inPlace);
    // In place, an incoming block overwrites the outgoing one of the same peer. Waiting for that send to finish
    // would deadlock on a transport whose large sends complete only when the peer receives (single-copy
    // rendezvous): the peer waits the same way. So outgoing blocks are first copied to scratch, and a receive
    // waits only for the copy of the block it overwrites.
    std::vector<uint32_t> staged(n);
    if (a.inPlace) s.scratchBytes = (n - 1) * block;
    for (int k = 1; k < n; ++k) {
      const int to = (r + k) % n;
      Slice src{Buf::kSend, to * block, block};
      if (!a.inPlace) {
        s.send(to, 0, src);
        continue;
      }
      Slice scratch{Buf::kScratch, (k - 1) * block, block};
      staged[to] = s.copy(scratch, src);
      s.steps[s.send(to, 0, scratch)].dependOn(staged[to]);
    }
    for (int k = 1; k < n; ++k) {
      const int from = (r - k + n) % n;
      uint32_t rcv = s.recv(from, 0, {Buf::kRecv, from * block, block});
      if (a.inPlace) s.steps[rcv].dependOn(staged[from]);
    }
    return s;
  }
};

}  // namespace

const Algorithm& pairwiseAlltoAll() {
  static const PairwiseAlltoAll algo;
  return algo;
}

}  // namespace hetcomm::coll
