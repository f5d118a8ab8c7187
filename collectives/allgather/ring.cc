// Ring all-gather: n-1 steps, each forwarding the block received in the previous step; pipelined in chunks. The
// ring runs in NIC-aware order (island, host, rank), so it crosses each slow fabric as few times as it can.
#include "collectives/algorithm_list.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

class RingAllGather final : public Algorithm {
 public:
  std::string_view name() const override { return "ring"; }
  CollKind kind() const override { return CollKind::kAllGather; }
  double estimateUs(const Args& a, const GroupView& g) const override {
    const std::vector<int> order = g.nicAwareOrder();
    const double alphaUs = g.ringAlphaUs(order), bwGBps = g.ringBwGBps(order);
    double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));  // per rank
    return (g.nranks - 1) * (alphaUs + bytes / (bwGBps * 1e3)) +
           worstMemoryUs(g, a.inPlace ? 0 : bytes, 0, callBytes(a, g));
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    copyUnlessSame(s, {Buf::kRecv, g.rank * bytes, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
    if (g.nranks == 1) return s;
    // Block b is the block of the rank at ring position b: it lands at that rank's place in the output.
    const std::vector<int> order = g.nicAwareOrder();
    Ring ring(g, order, a.count * g.nranks, a.dtype);
    auto at = [&](int b, size_t c) { return ring.chunk(Buf::kRecv, order[b] * bytes, b, c); };
    // This rank's own block is sent straight from the send buffer: no need to wait for the local copy.
    auto own = [&](int b, size_t c) { return ring.chunk(Buf::kSend, 0, b, c); };
    emitRingAllGather(s, ring, at, own, {}, {}, 0);
    return s;
  }
};

}  // namespace

const Algorithm& ringAllGather() {
  static const RingAllGather algo;
  return algo;
}

}  // namespace hetcomm::coll
