// Hierarchical allreduce: reduce-scatter within each host (shared memory), then within each island (hosts joined
// by an RDMA fabric) among the ranks with the same place on their hosts, then all-reduce across islands among the
// ranks with the same place in their islands, so every host of an island carries its share over the slow fabric
// at once; then all-gather back down the same levels. Each level moves 2(n-1)/n of what reaches it, and what
// reaches a level shrinks by the size of every level below, so the slow fabric carries the least.
//
// The buffer is cut into pieces that flow through the levels independently (each level is a ring whose "chunks"
// are the pieces): while the cross-island ring streams piece p, the island rings already work on piece p+1. A
// piece enters the host level only once the top level has reduced the piece kPaceWindow before it (paceToTop).
//
// Needs a uniform shape: the same number of ranks on every host and of hosts in every island, and two levels or
// more (with one, it is the plain ring).
#include "collectives/algorithm_list.h"
#include "collectives/hierarchy.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

constexpr size_t kMaxPieces = 64;

class HierAllReduce final : public HierAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kAllReduce; }

  // Each level moves 2(n-1)/n of what reaches it, in 2(n-1) messages per piece.
  double estimate(const Args& a, const GroupView& g, const Hierarchy* h) const override {
    const size_t total = a.count * kernels::sizeOf(a.dtype);
    const double pieces = static_cast<double>(piecesFor(total, g.chunkBytes, kMaxPieces));
    double reaching = static_cast<double>(total);
    std::vector<double> bytes, messages;
    std::vector<LevelPass> passes;  // a piece goes up through the reduce-scatters and down the all-gathers
    const size_t L = h->levels.size();
    for (size_t l = 0; l < L; ++l) {
      const double n = static_cast<double>(h->levels[l].members.size());
      bytes.push_back(2.0 * (n - 1) / n * reaching);
      messages.push_back(2.0 * (n - 1) * pieces);
      reaching /= n;
      passes.push_back({l, 0.5});
    }
    for (size_t l = L; l-- > 0;) passes.push_back({l, 0.5});
    // Each level's reduce-scatter reduces (n-1)/n of what reaches it.
    double reduced = 0;
    for (size_t l = 0; l < L; ++l) reduced += bytes[l] / 2;
    return pipelinedLevelsUs(g, *h, bytes, messages, pieces, passes) +
           worstMemoryUs(g, 0, reduced, static_cast<double>(total));
  }

  Result<Schedule> planOn(const Args& a, const GroupView& g, const Hierarchy* h, Schedule s) const override {
    const size_t esz = kernels::sizeOf(a.dtype);
    const std::vector<Level>* levels = &h->levels;
    const size_t P = piecesFor(a.count * esz, g.chunkBytes, kMaxPieces);
    const Blocks pieces = evenBlocks(a.count, static_cast<int>(P));
    const size_t L = levels->size();

    // range[l][p]: the elements of piece p that reach level l at this rank (offset, count); level 0 is the piece.
    std::vector<std::vector<std::pair<size_t, size_t>>> range(L + 1, std::vector<std::pair<size_t, size_t>>(P));
    std::vector<std::vector<Blocks>> blocks(L, std::vector<Blocks>(P));
    for (size_t p = 0; p < P; ++p) {
      range[0][p] = {pieces.offset[p], pieces.count[p]};
      for (size_t l = 0; l < L; ++l) {
        const Level& lv = (*levels)[l];
        blocks[l][p] = evenBlocks(range[l][p].second, static_cast<int>(lv.members.size()));
        range[l + 1][p] = {range[l][p].first + blocks[l][p].offset[lv.index], blocks[l][p].count[lv.index]};
      }
    }
    auto slice = [&](Buf buf, size_t l, int b, size_t p) {
      return Slice{buf, (range[l][p].first + blocks[l][p].offset[b]) * esz, blocks[l][p].count[b] * esz};
    };

    std::vector<Ring> rings;
    size_t stage = 0;
    std::vector<size_t> stageBase(L);
    for (size_t l = 0; l < L; ++l) {
      size_t per = 0;
      for (size_t p = 0; p < P; ++p) per = std::max(per, blocks[l][p].maxCount);
      rings.emplace_back(g, (*levels)[l].members, (*levels)[l].index, P, per, a.dtype);
      rings.back().paced = true;
      stageBase[l] = stage;
      stage += ringStageBytes(rings.back());
    }
    s.scratchBytes = stage;

    uint32_t tag = 0;
    std::vector<ReduceScatterSteps> rs(L);
    std::vector<uint32_t> ready;  // per piece: this level's input is complete
    for (size_t l = 0; l < L; ++l) {
      const Ring& ring = rings[l];
      const Buf inBuf = l == 0 ? Buf::kSend : Buf::kRecv;
      auto in = [&, l, inBuf](int b, size_t p) { return slice(inBuf, l, b, p); };
      auto acc = [&, l](int, int b, size_t p) { return slice(Buf::kRecv, l, b, p); };
      auto out = [&, l](size_t p) { return slice(Buf::kRecv, l, rings[l].r, p); };
      rs[l] = emitRingReduceScatter(s, ring, in, acc, out, stageBase[l], tag, ready, l + 1 == L);
      tag += static_cast<uint32_t>((ring.n - 1) * P);
      ready = rs[l].done;
    }
    paceToTop(s, rs[0].sends[0], 1, rs[L - 1].done);
    for (size_t l = L; l-- > 0;) {
      auto at = [&, l](int b, size_t p) { return slice(Buf::kRecv, l, b, p); };
      ready = emitRingAllGather(s, rings[l], at, at, ready, rs[l].sends, tag);
      tag += static_cast<uint32_t>((rings[l].n - 1) * P);
    }
    return s;
  }
};

}  // namespace

const Algorithm& hierAllReduce() {
  static const HierAllReduce algo;
  return algo;
}

}  // namespace hetcomm::coll
