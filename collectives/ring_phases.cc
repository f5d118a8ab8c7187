#include "collectives/ring_phases.h"

#include <algorithm>

namespace hetcomm::coll {

Ring::Ring(const GroupView& g, size_t count, kernels::DataType dtype)
    : n(g.nranks),
      r(g.rank),
      next((g.rank + 1) % g.nranks),
      prev((g.rank + g.nranks - 1) % g.nranks),
      lateReceiveFree(g.lateReceiveIsFree(prev)),
      esz(kernels::sizeOf(dtype)),
      blocks(evenBlocks(count, g.nranks)),
      ch(chunkingFor(blocks.maxCount, kernels::sizeOf(dtype), g.chunkBytes)) {}

Ring::Ring(const GroupView& g, const std::vector<int>& members, int index, size_t chunks, size_t perChunk,
           kernels::DataType dtype)
    : n(static_cast<int>(members.size())),
      r(index),
      next(members[(index + 1) % members.size()]),
      prev(members[(index + members.size() - 1) % members.size()]),
      lateReceiveFree(g.lateReceiveIsFree(prev)),
      esz(kernels::sizeOf(dtype)) {
  ch.nchunks = std::max<size_t>(1, chunks);
  ch.per = std::max<size_t>(1, perChunk);
}

Ring::Ring(const GroupView& g, const std::vector<int>& order, size_t count, kernels::DataType dtype)
    : n(static_cast<int>(order.size())),
      r(static_cast<int>(std::find(order.begin(), order.end(), g.rank) - order.begin())),
      next(order[(r + 1) % n]),
      prev(order[(r + n - 1) % n]),
      lateReceiveFree(g.lateReceiveIsFree(prev)),
      esz(kernels::sizeOf(dtype)),
      blocks(evenBlocks(count, n)),
      ch(chunkingFor(blocks.maxCount, esz, g.chunkBytes)) {}

Slice Ring::chunk(Buf buf, size_t base, int b, size_t c) const {
  size_t cnt = blocks.count[b];
  size_t lo = ch.begin(c, cnt), hi = ch.end(c, cnt);
  return Slice{buf, base + lo * esz, (hi - lo) * esz};
}

// Received chunks wait in a ring of staging slots, reused in receive order.
// - Eager link (the data arrives whether or not the receive is posted, and a late receive costs a copy): a sender
//   puts every chunk of its first step on the wire at once and later ones as fast as it reduces, so one slot per
//   chunk for each of two steps keeps every receive posted in time; scratch stays at two blocks.
// - Late receives free (single-copy rendezvous): a few slots suffice, and being few they stay in cache between
//   the copy that fills a slot and the reduce that reads it (measured here: 2x the busbw of one slot per chunk).
//   Not in a paced ring of more than one step: there, reused in receive order, a slot of step 1 would wait on a
//   later chunk of step 0 (with one step, a slot only ever waits on an earlier chunk).
constexpr size_t kRendezvousStageSlots = 4;
size_t ringStageSlots(const Ring& ring) {
  const size_t all = (ring.n - 1) * ring.ch.nchunks;
  if (ring.lateReceiveFree && (!ring.paced || ring.n == 2)) return std::min(kRendezvousStageSlots, all);
  return std::min<size_t>(ring.n - 1, 2) * ring.ch.nchunks;
}
size_t ringStageBytes(const Ring& ring) { return ringStageSlots(ring) * ring.ch.per * ring.esz; }

ReduceScatterSteps emitRingReduceScatter(Schedule& s, const Ring& ring, const ChunkSlice& input,
                                         const StepChunkSlice& acc, const std::function<Slice(size_t c)>& out,
                                         size_t stageBase, uint32_t tagBase,
                                         const std::vector<uint32_t>& inputReady, bool finalDivide) {
  const int n = ring.n, r = ring.r;
  const size_t nc = ring.ch.nchunks;
  ReduceScatterSteps res;
  res.sends.assign(n - 1, std::vector<uint32_t>(nc));
  std::vector<std::vector<uint32_t>> reduces(n - 1, std::vector<uint32_t>(nc));
  std::vector<uint32_t> byOrder;  // reduce steps in the order chunks are received: slot reuse follows it
  res.done.resize(nc);
  const size_t slotBytes = ring.ch.per * ring.esz, slots = ringStageSlots(ring);
  for (int k = 0; k < n - 1; ++k) {
    const int sendBlock = ring.mod(r - k - 1), recvBlock = ring.mod(r - k - 2);
    for (size_t c = 0; c < nc; ++c) {
      const uint32_t tag = tagBase + static_cast<uint32_t>(k * nc + c);
      // Send: the raw input at step 0, afterwards the partial sum this rank made one step earlier.
      Slice src = k == 0 ? input(sendBlock, c) : acc(k - 1, sendBlock, c);
      uint32_t snd = s.send(ring.next, tag, src);
      if (k > 0) s.steps[snd].dependOn(reduces[k - 1][c]);
      if (k == 0 && !inputReady.empty()) s.steps[snd].dependOn(inputReady[c]);
      res.sends[k][c] = snd;
      // Receive into the next staging slot, free once the reduce that used it `slots` receives ago is done.
      Slice in = input(recvBlock, c);
      const size_t order = byOrder.size();
      Slice stage{Buf::kScratch, stageBase + (order % slots) * slotBytes, in.bytes};
      uint32_t rcv = s.recv(ring.prev, tag, stage);
      if (order >= slots) s.steps[rcv].dependOn(byOrder[order - slots]);
      // Reduce with this rank's contribution; the last step produces the final block r.
      Slice dst = k == n - 2 ? out(c) : acc(k, recvBlock, c);
      uint32_t red = s.reduce(dst, in, stage);
      s.steps[red].dependOn(rcv);
      if (k == 0 && !inputReady.empty()) s.steps[red].dependOn(inputReady[c]);
      // acc slots may be reused every other step (reduce-scatter into scratch): wait for the send that read it.
      if (k >= 1) s.steps[red].dependOn(res.sends[k - 1][c]);
      reduces[k][c] = red;
      byOrder.push_back(red);
      res.done[c] = red;
      if (k == n - 2 && finalDivide && s.op == kernels::RedOp::kAvg) {
        uint32_t div = s.divide(dst);
        s.steps[div].dependOn(red);
        res.done[c] = div;
      }
    }
  }
  return res;
}

uint32_t joinSteps(Schedule& s, const std::vector<uint32_t>& steps) {
  uint32_t join = 0;
  bool first = true;
  for (size_t i = 0; i < steps.size() || first;) {
    join = s.copy(Slice{Buf::kRecv, 0, 0}, Slice{Buf::kRecv, 0, 0});
    if (!first) s.steps[join].dependOn(join - 1);  // the previous join, emitted just before
    for (int d = first ? 0 : 1; d < Step::kMaxDeps && i < steps.size(); ++d) s.steps[join].dependOn(steps[i++]);
    first = false;
  }
  return join;
}

std::vector<uint32_t> emitRingAllGather(Schedule& s, const Ring& ring, const ChunkSlice& at,
                                        const ChunkSlice& ownSource, const std::vector<uint32_t>& ownReady,
                                        const std::vector<std::vector<uint32_t>>& notBefore, uint32_t tagBase,
                                        std::vector<uint32_t>* firstSends) {
  const int n = ring.n, r = ring.r;
  const size_t nc = ring.ch.nchunks;
  std::vector<uint32_t> prevRecv(nc);
  std::vector<std::vector<uint32_t>> arrived(nc);  // per chunk: the receives (and own block) it waits for
  for (int k = 0; k < n - 1; ++k) {
    const int sendBlock = ring.mod(r - k), recvBlock = ring.mod(r - k - 1);
    for (size_t c = 0; c < nc; ++c) {
      const uint32_t tag = tagBase + static_cast<uint32_t>(k * nc + c);
      uint32_t snd = s.send(ring.next, tag, k == 0 ? ownSource(sendBlock, c) : at(sendBlock, c));
      if (k == 0 && !ownReady.empty()) s.steps[snd].dependOn(ownReady[c]);
      if (k == 0 && firstSends) firstSends->push_back(snd);
      if (k > 0) s.steps[snd].dependOn(prevRecv[c]);
      uint32_t rcv = s.recv(ring.prev, tag, at(recvBlock, c));
      if (!notBefore.empty()) s.steps[rcv].dependOn(notBefore[k][c]);
      prevRecv[c] = rcv;
      arrived[c].push_back(rcv);
    }
  }
  std::vector<uint32_t> done(nc);
  for (size_t c = 0; c < nc; ++c) {
    if (!ownReady.empty()) arrived[c].push_back(ownReady[c]);
    done[c] = joinSteps(s, arrived[c]);
  }
  return done;
}

}  // namespace hetcomm::coll
