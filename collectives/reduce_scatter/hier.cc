// Hierarchical reduce-scatter: the all-gather's levels in reverse. Within each host first (shared memory, where
// the whole buffer is reduced), the rank at place j ends with the host's sum of the blocks of every rank at place
// j; within each island next, the rank on host h ends with the island's sum of the blocks of the ranks (i', h, j)
// for every island i'; across islands last, each rank swaps only those, one block per island, so every host of
// an island carries its share over the slow fabric at once.
//
// Partial sums live in scratch laid out like the input (rank q's block at q * bytes): a level reads there what
// the level below left and adds into the same place. Each block is cut into pieces that flow up on their own,
// paced by the top level (paceToTop).
#include "collectives/algorithm_list.h"
#include "collectives/hierarchy.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

constexpr size_t kMaxPieces = 16;

class HierReduceScatter final : public HierAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kReduceScatter; }

  double estimate(const Args& a, const GroupView& g, const Hierarchy* h) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return hierGatherUs(g, *h, a.count * kernels::sizeOf(a.dtype), kMaxPieces, /*topFirst=*/false) +
           worstMemoryUs(g, 0, (g.nranks - 1.0) * bytes, callBytes(a, g));
  }

  Result<Schedule> planOn(const Args& a, const GroupView& g, const Hierarchy* h, Schedule s) const override {
    const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
    // Where an island level precedes the slow one, the first pieces are a ramp, and that level keeps a few pieces
    // in flight (rampedPieces, paceLevel).
    const bool twoNetworkLevels = piecesCrossTwoNetworkLevels(*h);
    const size_t ordinary = piecesFor(bytes, g.chunkBytes, kMaxPieces);
    const Blocks piece = hierPieces(*h, a.count, ordinary, /*rampAtEnd=*/false);
    const size_t S = piece.count.size(), ramp = S - ordinary;
    const size_t L = h->levels.size();

    // Scratch: partial sums at q * bytes, then each level's staging slots.
    size_t stageBase = g.nranks * bytes;
    // done[q][p]: the step that left this rank's partial sum of piece p of rank q's block final for the level.
    std::vector<std::vector<uint32_t>> done(g.nranks);
    std::vector<uint32_t> firstSends;  // the lowest level's first sends, chunk c of piece c / nb0
    size_t nb0 = 1;
    uint32_t tag = 0;
    for (size_t l = 0; l < L; ++l) {
      const Level& lv = h->levels[l];
      const int n = static_cast<int>(lv.members.size());
      const bool first = l == 0, last = l + 1 == L;
      std::vector<std::vector<int>> sets(n);
      for (int b = 0; b < n; ++b) sets[b] = h->blockRanks(lv.dim, b);
      // Chunk c of member b's set: piece c / nb of the block of rank sets[b][c % nb]. Piece-major, so that every
      // level finishes its first pieces first and the next level can start on them.
      const size_t nb = sets[0].size(), chunks = nb * S;
      Ring ring(g, lv.members, lv.index, chunks, piece.maxCount, a.dtype);
      ring.paced = true;
      auto at = [&](Buf buf, int b, size_t c) {
        const size_t p = c / nb;
        return Slice{buf, sets[b][c % nb] * bytes + piece.offset[p] * esz, piece.count[p] * esz};
      };
      auto in = [&](int b, size_t c) { return at(first ? Buf::kSend : Buf::kScratch, b, c); };
      auto acc = [&](int, int b, size_t c) { return at(Buf::kScratch, b, c); };
      auto out = [&](size_t c) {
        if (!last) return at(Buf::kScratch, lv.index, c);
        const size_t p = c / nb;  // the top level's set is this rank alone
        return Slice{Buf::kRecv, piece.offset[p] * esz, piece.count[p] * esz};
      };
      // Chunk c of every member's set must be final at the level below before this level reads it.
      std::vector<uint32_t> inputReady;
      if (!first) {
        inputReady.resize(chunks);
        for (size_t c = 0; c < chunks; ++c) {
          std::vector<uint32_t> below;
          for (int b = 0; b < n; ++b) below.push_back(done[sets[b][c % nb]][c / nb]);
          inputReady[c] = joinSteps(s, below);
        }
      }
      const ReduceScatterSteps rs = emitRingReduceScatter(s, ring, in, acc, out, stageBase, tag, inputReady, last);
      if (twoNetworkLevels && lv.dim == 1) paceLevel(s, rs.sends[0], nb, rs.done, kLevelWindow + ramp);
      if (first) {
        firstSends = rs.sends[0];
        nb0 = nb;
      }
      stageBase += ringStageBytes(ring);
      tag += static_cast<uint32_t>((n - 1) * chunks);
      for (size_t c = 0; c < chunks; ++c) {
        auto& d = done[sets[lv.index][c % nb]];
        if (d.empty()) d.resize(S);
        d[c / nb] = rs.done[c];
      }
    }
    paceToTop(s, firstSends, nb0, done[h->me], kPaceWindow + ramp);
    s.scratchBytes = stageBase;
    return s;
  }
};

}  // namespace

const Algorithm& hierReduceScatter() {
  static const HierReduceScatter algo;
  return algo;
}

}  // namespace hetcomm::coll
