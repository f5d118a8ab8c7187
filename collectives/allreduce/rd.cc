// Recursive-doubling allreduce, for small messages: log2(p) steps in which every rank swaps its whole running
// sum with the rank whose number differs in one bit, and adds. Latency log2(p) hops against the ring's 2(n-1); each
// step moves the whole buffer, so the ring wins once the bytes dominate (the cost model decides where).
//
// With n not a power of two, the n - p ranks above the largest power of two p first hand their input to rank
// r - p and get the result back at the end. Sums are formed as a + b on one side and b + a on the other, which
// IEEE addition makes bit-identical, so every rank ends with the same bits.
#include <algorithm>
#include <optional>

#include "collectives/algorithm_list.h"

namespace hetcomm::coll {
namespace {

int largestPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

class RecursiveDoublingAllReduce final : public Algorithm {
 public:
  std::string_view name() const override { return "rd"; }
  CollKind kind() const override { return CollKind::kAllReduce; }
  bool applies(const Args&, const GroupView& g) const override { return g.nranks > 1; }

  // Each step is paced by its slowest pair. The ranks of a host whose partners are all off the host at once, over
  // the same kind of link (within their island, or across islands), share that NIC.
  double estimateUs(const Args& a, const GroupView& g) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    const int n = g.nranks, p = largestPowerOfTwo(n);
    auto stepUs = [&](auto partner) {  // partner(i): rank i's peer in this step, or -1
      double worst = 0;
      for (int i = 0; i < n; ++i) {
        const int j = partner(i);
        if (j < 0) continue;
        int sharers = 1;
        if (g.hostOf(i) != g.hostOf(j)) {
          sharers = 0;
          for (int k = 0; k < n; ++k) {
            const int m = partner(k);
            sharers += m >= 0 && g.hostOf(k) == g.hostOf(i) && g.hostOf(m) != g.hostOf(k) &&
                       (g.islandOf(m) == g.islandOf(k)) == (g.islandOf(j) == g.islandOf(i));
          }
        }
        worst = std::max(worst, g.alphaUs(i, j) + bytes * sharers / (g.bwGBps(i, j) * 1e3));
      }
      return worst;
    };
    // The extra ranks' hand-in and hand-back, then one step per bit.
    auto extra = [&](int i) { return i >= p ? i - p : i + p < n ? i + p : -1; };
    double us = p != n ? 2 * stepUs(extra) : 0;
    double reductions = p != n ? 1 : 0;
    for (int d = 1; d < p; d *= 2, ++reductions) us += stepUs([&](int i) { return i < p ? i ^ d : -1; });
    // Every step reduces the whole buffer; the first reads the input where it lies, so nothing is copied.
    return us + worstMemoryUs(g, 0, reductions * bytes, bytes);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    const size_t bytes = a.count * kernels::sizeOf(a.dtype);
    const Slice in{Buf::kSend, 0, bytes}, acc{Buf::kRecv, 0, bytes};
    const int n = g.nranks, r = g.rank, p = largestPowerOfTwo(n);
    uint32_t tag = 0;
    const uint32_t kHandIn = tag++, kHandBack = tag++;
    s.scratchBytes = 2 * bytes;
    auto stage = [&](int k) { return Slice{Buf::kScratch, static_cast<size_t>(k % 2) * bytes, bytes}; };
    if (r >= p) {  // an extra rank: hand the input in, take the (already divided) result back
      uint32_t snd = s.send(r - p, kHandIn, in);
      uint32_t rcv = s.recv(r - p, kHandBack, acc);
      s.steps[rcv].dependOn(snd);  // in place, the result overwrites what was sent
      return s;
    }
    // The running sum starts as the input, where it lies, and lives in the receive buffer from the first reduce on:
    // out of place, nothing is copied (a copy of the whole buffer, on the critical path, at every size).
    Slice sum = in;
    std::optional<uint32_t> last;
    auto after = [&](uint32_t step) {
      if (last) s.steps[step].dependOn(*last);
    };
    std::vector<uint32_t> reduces;
    auto addInto = [&](uint32_t rcv, Slice arrived) {
      uint32_t red = s.reduce(acc, sum, arrived);
      s.steps[red].dependOn(rcv);
      after(red);
      last = red;
      reduces.push_back(red);
      sum = acc;
      return red;
    };
    if (r + p < n) addInto(s.recv(r + p, kHandIn, stage(0)), stage(0));  // take the extra rank's input first
    for (int d = 1; d < p; d *= 2) {
      const int peer = r ^ d;
      const int k = static_cast<int>(reduces.size());
      const uint32_t t = tag++;
      const bool overwritesSent = sum.buf == acc.buf || a.inPlace;  // the reduce below overwrites what is sent
      uint32_t snd = s.send(peer, t, sum);
      after(snd);
      uint32_t rcv = s.recv(peer, t, stage(k));
      if (k >= 2) s.steps[rcv].dependOn(reduces[k - 2]);  // the slot's previous reduce has read it
      uint32_t red = addInto(rcv, stage(k));
      if (overwritesSent) s.steps[red].dependOn(snd);  // the running sum may change only once it has been sent
    }
    if (a.op == kernels::RedOp::kAvg) {
      uint32_t div = s.divide(acc);
      after(div);
      last = div;
    }
    if (r + p < n) {
      uint32_t snd = s.send(r + p, kHandBack, acc);
      after(snd);
    }
    return s;
  }
};

}  // namespace

const Algorithm& recursiveDoublingAllReduce() {
  static const RecursiveDoublingAllReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
