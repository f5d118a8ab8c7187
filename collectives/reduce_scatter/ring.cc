// Ring reduce-scatter: the first half of ring allreduce. Rank r ends with block r; partial sums alternate
// between two scratch slots per chunk (a slot is reused once the send that read it is done). The ring runs in
// NIC-aware order (island, host, rank).
#include "collectives/algorithm_list.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

class RingReduceScatter final : public Algorithm {
 public:
  std::string_view name() const override { return "ring"; }
  CollKind kind() const override { return CollKind::kReduceScatter; }
  double estimateUs(const Args& a, const GroupView& g) const override {
    const std::vector<int> order = g.nicAwareOrder();
    const double alphaUs = g.ringAlphaUs(order), bwGBps = g.ringBwGBps(order);
    double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));  // per rank
    return (g.nranks - 1) * (alphaUs + bytes / (bwGBps * 1e3)) +
           worstMemoryUs(g, 0, (g.nranks - 1.0) * bytes, callBytes(a, g));
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    if (g.nranks == 1) {
      copyUnlessSame(s, {Buf::kRecv, 0, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
      return s;
    }
    // Blocks are the per-rank slices of the input (all the same size), block b the slice of the rank at ring
    // position b; pipelining inside each block.
    const std::vector<int> order = g.nicAwareOrder();
    Ring ring(g, order, a.count * g.nranks, a.dtype);
    const size_t stage = ringStageBytes(ring);
    const size_t slot = ring.ch.per * esz;
    s.scratchBytes = stage + 2 * ring.ch.nchunks * slot;
    auto in = [&](int b, size_t c) { return ring.chunk(Buf::kSend, order[b] * bytes, b, c); };
    auto acc = [&](int k, int b, size_t c) {
      Slice x = ring.chunk(Buf::kScratch, 0, b, c);  // offset within the chunk's slot is c*per*esz
      x.offset = stage + ((k % 2) * ring.ch.nchunks + c) * slot;
      return x;
    };
    auto out = [&](size_t c) { return ring.chunk(Buf::kRecv, 0, ring.r, c); };
    emitRingReduceScatter(s, ring, in, acc, out, 0, 0);
    return s;
  }
};

}  // namespace

const Algorithm& ringReduceScatter() {
  static const RingReduceScatter algo;
  return algo;
}

}  // namespace hetcomm::coll
