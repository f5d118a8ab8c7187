// Hierarchical reduce: the hierarchical broadcast run backwards. Each host sums into its lead (the rank with the
// root's place on the host) along a chain through the host; the leads of each island reduce-scatter the buffer
// over their fast fabric, so the lead of host place h holds the island's sum of share h; share h then flows
// through the islands to the root's island, each adding its island's sum, so every host of an island carries
// 1/m of the buffer over the slow fabric at once (every rank of the host a part of it, one stream each); last,
// the root's island's leads hand their finished shares to the root.
//
// Leads keep their partial sums in scratch (the receive buffer is only the root's, as in NCCL), and so do the
// other ranks of a host chain; every share is cut into chunks that flow through the stages on their own.
#include <algorithm>
#include <functional>

#include "collectives/algorithm_list.h"
#include "collectives/hierarchy.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

constexpr size_t kChainStageSlots = 16;

// Partial sums flow along `chain` (this rank at pos) to its last member: the first sends own(c), every other
// member adds own(c) to what it receives into acc(c) (which may be own's bytes) and passes that on. own(c) may
// be read after ownReady[c]; received chunks wait in staging slots at stageBase. Returns per chunk the step that
// left acc(c) final (the sum of this rank and those before it).
std::vector<uint32_t> emitChainReduce(Schedule& s, const std::vector<int>& chain, int pos, size_t chunks,
                                      const std::function<Slice(size_t)>& own, const std::function<Slice(size_t)>& acc,
                                      const std::vector<uint32_t>& ownReady, size_t stageBase, size_t slotBytes,
                                      uint32_t tagBase) {
  const int n = static_cast<int>(chain.size());
  const size_t slots = std::min(chunks, kChainStageSlots);
  std::vector<uint32_t> done(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    const uint32_t tag = tagBase + static_cast<uint32_t>(c);
    if (pos == 0) {
      done[c] = s.send(chain[1], tag, own(c));
      s.steps[done[c]].dependOn(ownReady[c]);
      continue;
    }
    const Slice mine = own(c);
    const Slice stage{Buf::kScratch, stageBase + (c % slots) * slotBytes, mine.bytes};
    const uint32_t rcv = s.recv(chain[pos - 1], tag, stage);
    if (c >= slots) s.steps[rcv].dependOn(done[c - slots]);  // the slot's previous chunk is reduced
    const uint32_t red = s.reduce(acc(c), mine, stage);
    s.steps[red].dependOn(rcv);
    s.steps[red].dependOn(ownReady[c]);
    done[c] = red;
    if (pos + 1 < n) s.steps[s.send(chain[pos + 1], tag, acc(c))].dependOn(red);
  }
  return done;
}

size_t chainStageBytes(size_t chunks, size_t slotBytes) { return std::min(chunks, kChainStageSlots) * slotBytes; }

class HierReduce final : public HierAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kReduce; }

  double estimate(const Args& a, const GroupView& g, const Hierarchy* h) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return rootedHierUs(a, g, *h, true) + worstMemoryUs(g, 0, bytes, bytes);
  }

  Result<Schedule> planOn(const Args& a, const GroupView& g, const Hierarchy* h, Schedule s) const override {
    const size_t esz = kernels::sizeOf(a.dtype);
    const RootedPaths paths = rootedPaths(*h, a.root);
    const int m = h->size[1];
    const Shares shares(a.count, m, esz, g.chunkBytes);
    const size_t P = shares.ch.nchunks, slotBytes = shares.ch.per * esz;
    const bool isRoot = g.rank == a.root;
    const auto [host, hostPos] = findIn(paths.hostChains, g.rank);
    const bool lead = hostPos == 0;
    // Partial sums (chunk p of share sh at its place in the buffer) at the start of scratch, staging after them.
    auto partial = [&](int sh, size_t p) { return shares.at(Buf::kScratch, sh, p); };
    size_t stageBase = a.count * esz;
    // ready[sh][p]: the step after which partial(sh, p) holds this stage's sum.
    std::vector<std::vector<uint32_t>> ready(m, std::vector<uint32_t>(P));
    uint32_t tag = 0;

    // 1. Each host sums into its lead (lead last in the chain); a host of one rank copies its input.
    std::vector<int> hostChain = paths.hostChains[host];
    std::reverse(hostChain.begin(), hostChain.end());
    // Chunk c of the chain is chunk c % P of share c / P: every share's chunks share the staging slots.
    if (hostChain.size() == 1) {
      for (int sh = 0; sh < m; ++sh)
        for (size_t p = 0; p < P; ++p) ready[sh][p] = s.copy(partial(sh, p), shares.at(Buf::kSend, sh, p));
    } else {
      const std::vector<uint32_t> noWait(m * P, joinSteps(s, {}));
      const std::vector<uint32_t> done = emitChainReduce(
          s, hostChain, static_cast<int>(hostChain.size()) - 1 - hostPos, m * P,
          [&](size_t c) { return shares.at(Buf::kSend, static_cast<int>(c / P), c % P); },
          [&](size_t c) { return partial(static_cast<int>(c / P), c % P); }, noWait, stageBase, slotBytes, tag);
      for (size_t c = 0; c < m * P; ++c) ready[c / P][c % P] = done[c];
    }
    stageBase += chainStageBytes(m * P, slotBytes);
    tag += static_cast<uint32_t>(m * P);
    // Which part of which share this rank carries across the islands (every rank carries one; see step 3).
    const int k = h->size[0];
    // Plain names, not structured bindings: lambdas below capture them, which clang 14 does not allow of bindings.
    const CarriedPart carried = carriedPartOf(paths, g.rank);
    const int carrySh = carried.share, part = carried.part, crossPos = carried.pos;

    // 2. The leads of each island reduce-scatter: host place hp ends with the island's sum of share hp.
    const auto [island, islandPos] = findIn(paths.islandRings, g.rank);
    const int hp = islandPos;
    if (lead && m > 1) {
      Ring ring(g, paths.islandRings[island], hp, P, shares.ch.per, a.dtype);
      auto at = [&](int b, size_t p) { return partial(b, p); };
      auto acc = [&](int, int b, size_t p) { return partial(b, p); };
      auto out = [&](size_t p) { return partial(hp, p); };
      std::vector<uint32_t> inputReady(P);
      for (size_t p = 0; p < P; ++p) {
        std::vector<uint32_t> all;
        for (int b = 0; b < m; ++b) all.push_back(ready[b][p]);
        inputReady[p] = joinSteps(s, all);
      }
      ready[hp] = emitRingReduceScatter(s, ring, at, acc, out, stageBase, tag, inputReady, false).done;
      stageBase += ringStageBytes(ring);
    }
    tag += static_cast<uint32_t>((m - 1) * P);

    // 3. Share sh flows through the islands to the root's island, each island adding its sum, every rank of a
    //    host carrying a part of it: the lead hands part j of each chunk of its island's sum to the rank at place
    //    j over shared memory, the ranks at place j reduce it along their chain through the islands, and in the
    //    root's island hand it back to their lead. A host's NIC carries one stream per rank (see the broadcast).
    if (h->size[2] > 1 && carrySh >= 0) {
      const int sh = carrySh;
      const std::vector<std::vector<int>>& parts = paths.partChains[sh];
      std::vector<int> chain = parts[part];
      std::reverse(chain.begin(), chain.end());
      const int pos = static_cast<int>(chain.size()) - 1 - crossPos, myLead = parts[0][crossPos];
      const uint32_t outTag = tag + static_cast<uint32_t>(P), backTag = outTag + static_cast<uint32_t>(P);
      // A carrier's part of the share, in scratch laid out like the share; in the root's island, the lead takes
      // the parts back into a region of the same shape and copies them home (a receive into the bytes it handed
      // out would wait on a send to the same peer).
      const size_t carryBase = stageBase;
      if (part > 0 || (crossPos == 0 && k > 1)) stageBase += shares.shareBytes();
      auto mine = [&](size_t p) {
        if (part == 0) return partOf(partial(sh, p), esz, 0, k);
        return partOf(shares.inShare(Buf::kScratch, carryBase, sh, p), esz, part, k);
      };
      std::vector<uint32_t> ownReady(P);
      std::vector<std::vector<uint32_t>> handedOut(P);
      for (size_t p = 0; p < P; ++p) {
        if (part > 0) {
          ownReady[p] = s.recv(myLead, outTag + static_cast<uint32_t>(p), mine(p));
          continue;
        }
        ownReady[p] = ready[sh][p];
        for (int j = 1; j < k; ++j) {
          handedOut[p].push_back(
              s.send(parts[j][crossPos], outTag + static_cast<uint32_t>(p), partOf(partial(sh, p), esz, j, k)));
          s.steps[handedOut[p].back()].dependOn(ready[sh][p]);
        }
      }
      const std::vector<uint32_t> done =
          emitChainReduce(s, chain, pos, P, mine, mine, ownReady, stageBase, slotBytes, tag);
      stageBase += chainStageBytes(P, slotBytes);
      for (size_t p = 0; crossPos == 0 && p < P; ++p) {
        const uint32_t t = backTag + static_cast<uint32_t>(p);
        if (part > 0) {
          s.steps[s.send(myLead, t, mine(p))].dependOn(done[p]);
          continue;
        }
        std::vector<uint32_t> all{done[p]};
        for (int j = 1; j < k; ++j) {
          const Slice back = partOf(shares.inShare(Buf::kScratch, carryBase, sh, p), esz, j, k);
          const uint32_t rcv = s.recv(parts[j][0], t, back);
          all.push_back(s.copy(partOf(partial(sh, p), esz, j, k), back));
          s.steps[all.back()].dependOn(rcv);
          s.steps[all.back()].dependOn(handedOut[p][j - 1]);  // the same bytes went out first
        }
        ready[sh][p] = joinSteps(s, all);
      }
    }
    tag += static_cast<uint32_t>(3 * P);
    if (!lead) {
      s.scratchBytes = stageBase;
      return s;
    }

    // 4. The root's island's leads hand their shares to the root, which keeps its own.
    const bool rootIsland = island == findIn(paths.islandRings, a.root).first;
    for (size_t p = 0; rootIsland && p < P; ++p)
      for (int sh = 0; sh < m; ++sh) {
        const uint32_t t = tag + static_cast<uint32_t>(sh * P + p);
        if (!isRoot) {
          if (sh == hp) s.steps[s.send(a.root, t, partial(sh, p))].dependOn(ready[sh][p]);
          continue;
        }
        uint32_t got;
        if (sh == hp) {
          got = s.copy(shares.at(Buf::kRecv, sh, p), partial(sh, p));
        } else {
          got = s.recv(paths.scatter[sh], t, shares.at(Buf::kRecv, sh, p));
        }
        // Own share: once it is final. Others: in place the receive buffer is the input, read in step 1 first.
        s.steps[got].dependOn(ready[sh][p]);
        if (a.op == kernels::RedOp::kAvg) s.steps[s.divide(shares.at(Buf::kRecv, sh, p))].dependOn(got);
      }
    s.scratchBytes = stageBase;
    return s;
  }
};

}  // namespace

const Algorithm& hierReduce() {
  static const HierReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
