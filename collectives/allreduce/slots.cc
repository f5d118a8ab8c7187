// Host-slot allreduce, for small messages on one host: every rank copies its input into its own slot of a region
// all the ranks map, raises the slot's round, and reduces every rank's slot in rank order into its output as soon
// as their rounds are up. No message, no tag to match: one copy in, n - 1 reductions out of the peers' caches, and
// every rank ends with the same bits (the same order everywhere). The communicator runs it (comm/host_slots.h);
// the plan is only its mark. It applies where GroupView::hostSlotBytes says the region exists and the buffer fits.
#include <algorithm>

#include "collectives/algorithm_list.h"

namespace hetcomm::coll {
namespace {

class HostSlotsAllReduce final : public Algorithm {
 public:
  std::string_view name() const override { return "slots"; }
  CollKind kind() const override { return CollKind::kAllReduce; }
  bool applies(const Args& a, const GroupView& g) const override {
    return g.nranks > 1 && g.hostSlotBytes > 0 && a.count * kernels::sizeOf(a.dtype) <= g.hostSlotBytes;
  }

  // A rank waits for the last peer's round: one cache line from each peer instead of a framed message, so half the
  // pair's message latency; then its own copy in and n - 1 reductions.
  double estimateUs(const Args& a, const GroupView& g) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    double wait = 0;
    for (int q = 0; q < g.nranks; ++q)
      if (q != g.rank) wait = std::max(wait, 0.5 * g.alphaUs(q, g.rank));
    return wait + worstMemoryUs(g, bytes, (g.nranks - 1) * bytes, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    s.hostSlots = true;
    return s;
  }
};

}  // namespace

const Algorithm& hostSlotsAllReduce() {
  static const HostSlotsAllReduce a;
  return a;
}

}  // namespace hetcomm::coll
