// A group of point-to-point sends and receives, all posted at once. Operation i uses buffer extraBuf(i); tags
// are the per-peer sequence numbers so the n-th send meets the n-th receive.
#include "collectives/algorithm_list.h"

namespace hetcomm::coll {
namespace {

class DirectSendRecv final : public Algorithm {
 public:
  std::string_view name() const override { return "direct"; }
  CollKind kind() const override { return CollKind::kSendRecv; }
  double estimateUs(const Args& a, const GroupView& g) const override {
    const double alphaUs = g.ringAlphaUs(), bwGBps = g.ringBwGBps();
    size_t most = 0;
    for (const auto& op : a.p2p) most = std::max(most, op.bytes);
    return alphaUs + static_cast<double>(most) / (bwGBps * 1e3);
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    Schedule s = newSchedule(a, g);
    s.p2pTags = true;
    std::vector<size_t> selfSends, selfRecvs;
    for (size_t i = 0; i < a.p2p.size(); ++i) {
      const P2pOp& op = a.p2p[i];
      if (op.peer == g.rank)
        (op.isSend ? selfSends : selfRecvs).push_back(i);
      else if (op.isSend)
        s.send(op.peer, op.seq, {extraBuf(i), 0, op.bytes});
      else
        s.recv(op.peer, op.seq, {extraBuf(i), 0, op.bytes});
    }
    // There is no connection to self: the k-th send to self is a copy into the k-th receive from self.
    if (selfSends.size() != selfRecvs.size())
      return invalidUsage("%zu send(s) to self but %zu receive(s) from self in one group", selfSends.size(),
                          selfRecvs.size());
    for (size_t k = 0; k < selfSends.size(); ++k) {
      size_t bytes = a.p2p[selfSends[k]].bytes;
      if (a.p2p[selfRecvs[k]].bytes != bytes)
        return invalidUsage("a send to self of %zu bytes meets a receive from self of %zu bytes", bytes,
                            a.p2p[selfRecvs[k]].bytes);
      s.copy({extraBuf(selfRecvs[k]), 0, bytes}, {extraBuf(selfSends[k]), 0, bytes});
    }
    return s;
  }
};

}  // namespace

const Algorithm& directSendRecv() {
  static const DirectSendRecv algo;
  return algo;
}

}  // namespace hetcomm::coll
