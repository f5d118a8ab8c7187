// Hierarchical all-gather: across islands first, then within each island, then within each host. The rank at
// (island i, host h, place j) first swaps its block with the ranks (i', h, j) of the other islands, so every
// host of an island carries its own ranks' blocks over the slow fabric at once and each block crosses it once;
// the island level then passes those sets between the hosts of the island, and the host level the island's
// sets between the ranks of the host (shared memory, where the bytes are cheapest). The top level moves the
// least: (islands - 1) blocks per rank.
//
// Each block is cut into pieces and every piece flows up the levels on its own: the island ring forwards piece
// p of a block while the slow ring still carries piece p+1.
#include "collectives/algorithm_list.h"
#include "collectives/hierarchy.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

constexpr size_t kMaxPieces = 16;

class HierAllGather final : public HierAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kAllGather; }

  double estimate(const Args& a, const GroupView& g, const Hierarchy* h) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return hierGatherUs(g, *h, a.count * kernels::sizeOf(a.dtype), kMaxPieces, /*topFirst=*/true) +
           worstMemoryUs(g, a.inPlace ? 0 : bytes, 0, callBytes(a, g));
  }

  Result<Schedule> planOn(const Args& a, const GroupView& g, const Hierarchy* h, Schedule s) const override {
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    copyUnlessSame(s, {Buf::kRecv, g.rank * bytes, bytes}, {Buf::kSend, 0, bytes}, a.inPlace);
    // Where an island level follows the slow one, the last pieces are a ramp, and the slow level keeps a few
    // pieces in flight (rampedPieces, paceLevel), so that they reach the island level in order.
    const bool twoNetworkLevels = piecesCrossTwoNetworkLevels(*h);
    const size_t ordinary = piecesFor(bytes, g.chunkBytes, kMaxPieces);
    const Blocks piece = hierPieces(*h, a.count, ordinary, /*rampAtEnd=*/true);
    const size_t S = piece.count.size();

    // ready[q][p]: the step after which piece p of rank q's block is in this rank's output (none yet: the own
    // block, read from the send buffer).
    std::vector<std::vector<uint32_t>> ready(g.nranks);
    const uint32_t start = joinSteps(s, {});
    ready[g.rank].assign(S, start);
    uint32_t tag = 0;
    for (size_t l = h->levels.size(); l-- > 0;) {
      const Level& lv = h->levels[l];
      const int n = static_cast<int>(lv.members.size());
      std::vector<std::vector<int>> sets(n);
      for (int b = 0; b < n; ++b) sets[b] = h->blockRanks(lv.dim, b);
      // Chunk c of member b's set: piece c / nb of the block of rank sets[b][c % nb]. Piece-major, so that every
      // level finishes its first pieces first and the next level can start on them.
      const size_t nb = sets[0].size(), chunks = nb * S;
      Ring ring(g, lv.members, lv.index, chunks, piece.maxCount, a.dtype);
      auto at = [&](int b, size_t c) {
        const size_t p = c / nb;
        return Slice{Buf::kRecv, sets[b][c % nb] * bytes + piece.offset[p] * esz, piece.count[p] * esz};
      };
      auto own = [&](int b, size_t c) {
        const size_t p = c / nb;
        if (sets[b][c % nb] == g.rank) return Slice{Buf::kSend, piece.offset[p] * esz, piece.count[p] * esz};
        return at(b, c);
      };
      std::vector<uint32_t> ownReady(chunks);
      for (size_t c = 0; c < chunks; ++c) ownReady[c] = ready[sets[lv.index][c % nb]][c / nb];
      std::vector<uint32_t> firstSends;
      const std::vector<uint32_t> done = emitRingAllGather(s, ring, at, own, ownReady, {}, tag, &firstSends);
      if (twoNetworkLevels && lv.dim == 2) paceLevel(s, firstSends, nb, done, kLevelWindow + (S - ordinary));
      tag += static_cast<uint32_t>((n - 1) * chunks);
      for (int b = 0; b < n; ++b)
        for (size_t c = 0; c < chunks; ++c) {
          auto& r = ready[sets[b][c % nb]];
          if (r.empty()) r.resize(S);
          r[c / nb] = done[c];
        }
    }
    return s;
  }
};

}  // namespace

const Algorithm& hierAllGather() {
  static const HierAllGather algo;
  return algo;
}

}  // namespace hetcomm::coll
