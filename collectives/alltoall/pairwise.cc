// Pairwise all-to-all: block j goes to rank j, every exchange posted at once (the transport interleaves them).
// In place, a block may only be overwritten by its incoming data once it has been sent.
#include "collectives/algorithm_list.h"

namespace hetcomm::coll {
namespace {

class PairwiseAlltoAll final : public Algorithm {
 public:
  std::string_view name() const override { return "pairwise"; }
  bool supports(const Args& a, const GroupView&) const override { return a.kind == CollKind::kAlltoAll; }
  double estimateUs(const Args& a, const GroupView& g, double alphaUs, double bwGBps) const override {
    double block = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return alphaUs + (g.nranks - 1) * block / (bwGBps * 1e3);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s;
    s.dtype = a.dtype;
    s.nranks = g.nranks;
    const int n = g.nranks, r = g.rank;
    const size_t block = a.count * kernels::sizeOf(a.dtype);
    copyUnlessSame(s, {Buf::kRecv, r * block, block}, {Buf::kSend, r * block, block}, a.inPlace);
    std::vector<uint32_t> sendTo(n);
    for (int k = 1; k < n; ++k) {
      int to = (r + k) % n;
      sendTo[to] = s.send(to, 0, {Buf::kSend, to * block, block});
    }
    for (int k = 1; k < n; ++k) {
      int from = (r - k + n) % n;
      uint32_t rcv = s.recv(from, 0, {Buf::kRecv, from * block, block});
      if (a.inPlace) s.steps[rcv].dependOn(sendTo[from]);
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
