// Ring allreduce: reduce-scatter then all-gather around the ring, both pipelined in chunks. Bandwidth-optimal:
// every rank sends 2(n-1)/n of the buffer; latency 2(n-1) hops. The ring runs in NIC-aware order (island, host,
// rank): a ring's pace is its slowest hop, so it crosses hosts and islands as few times as it can.
#include "collectives/algorithm_list.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

class RingAllReduce final : public Algorithm {
 public:
  std::string_view name() const override { return "ring"; }
  CollKind kind() const override { return CollKind::kAllReduce; }
  double estimateUs(const Args& a, const GroupView& g) const override {
    const std::vector<int> order = g.nicAwareOrder();
    const double alphaUs = g.ringAlphaUs(order), bwGBps = g.ringBwGBps(order);
    double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    int n = g.nranks;
    if (n == 1) return worstMemoryUs(g, a.inPlace ? 0 : bytes, 0, bytes);
    // Each rank reduces the n-1 blocks it receives in the reduce-scatter.
    return 2.0 * (n - 1) * alphaUs + 2.0 * (n - 1) / n * bytes / (bwGBps * 1e3) +
           worstMemoryUs(g, 0, (n - 1.0) / n * bytes, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    const size_t bytes = a.count * kernels::sizeOf(a.dtype);
    if (g.nranks == 1) {
      copyUnlessSame(s, {Buf::kRecv, 0, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
      return s;
    }
    Ring ring(g, g.nicAwareOrder(), a.count, a.dtype);
    s.scratchBytes = ringStageBytes(ring);
    auto in = [&](int b, size_t c) { return ring.chunk(Buf::kSend, ring.blockOffsetBytes(b), b, c); };
    auto res = [&](int b, size_t c) { return ring.chunk(Buf::kRecv, ring.blockOffsetBytes(b), b, c); };
    // Partial sums live in the receive buffer at their final place: each block is reduced once per rank.
    auto rs = emitRingReduceScatter(
        s, ring, in, [&](int, int b, size_t c) { return res(b, c); }, [&](size_t c) { return res(ring.r, c); }, 0, 0);
    const uint32_t agTags = static_cast<uint32_t>((g.nranks - 1) * ring.ch.nchunks);
    // A block received in the all-gather overwrites a partial sum the reduce-scatter sent from: wait for it.
    emitRingAllGather(s, ring, res, res, rs.done, rs.sends, agTags);
    return s;
  }
};

}  // namespace

const Algorithm& ringAllReduce() {
  static const RingAllReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
