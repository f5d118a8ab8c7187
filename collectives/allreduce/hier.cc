// Hierarchical allreduce: reduce-scatter within each host (shared memory), then within each island (hosts joined
// by an RDMA fabric) among the ranks with the same place on their hosts, then all-reduce across islands among the
// ranks with the same place in their islands, so every host of an island carries its share over the slow fabric
// at once; then all-gather back down the same levels. Each level moves 2(n-1)/n of what reaches it, and what
// reaches a level shrinks by the size of every level below, so the slow fabric carries the least.
//
// The buffer is cut into pieces that flow through the levels independently (each level is a ring whose "chunks"
// are the pieces): while the cross-island ring streams piece p, the island rings already work on piece p+1.
//
// Needs a uniform shape: the same number of ranks on every host and of hosts in every island, and two levels or
// more (with one, it is the plain ring).
#include <algorithm>
#include <map>
#include <optional>

#include "collectives/algorithm_list.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

struct Level {
  std::vector<int> members;  // group ranks, in ring order
  int index = 0;             // this rank's position in members
  int sharers = 1;           // ranks of one host that cross the same NIC at once at this level
};

// The levels rank g.rank runs, lowest first; nullopt when the group is not uniform or has fewer than two levels.
std::optional<std::vector<Level>> levelsOf(const GroupView& g) {
  std::map<int, std::vector<int>> hostRanks;    // host -> ranks, ascending
  std::map<int, std::vector<int>> islandHosts;  // island -> hosts, ascending
  for (int r = 0; r < g.nranks; ++r) {
    hostRanks[g.hostOf(r)].push_back(r);
    auto& hosts = islandHosts[g.islandOf(r)];
    if (std::find(hosts.begin(), hosts.end(), g.hostOf(r)) == hosts.end()) hosts.push_back(g.hostOf(r));
  }
  const size_t k = hostRanks.begin()->second.size(), m = islandHosts.begin()->second.size();
  for (const auto& [h, ranks] : hostRanks)
    if (ranks.size() != k) return std::nullopt;
  for (auto& [i, hosts] : islandHosts) {
    if (hosts.size() != m) return std::nullopt;
    std::sort(hosts.begin(), hosts.end());
  }
  // Coordinates: place on the host, host's place in its island, island's place.
  auto localOf = [&](int r) {
    const auto& v = hostRanks[g.hostOf(r)];
    return static_cast<int>(std::find(v.begin(), v.end(), r) - v.begin());
  };
  auto hostPlace = [&](int r) {
    const auto& v = islandHosts[g.islandOf(r)];
    return static_cast<int>(std::find(v.begin(), v.end(), g.hostOf(r)) - v.begin());
  };
  std::vector<int> islandIds;
  for (const auto& [i, hosts] : islandHosts) islandIds.push_back(i);
  auto islandPlace = [&](int r) {
    return static_cast<int>(std::find(islandIds.begin(), islandIds.end(), g.islandOf(r)) - islandIds.begin());
  };
  const int me = g.rank;
  std::vector<Level> levels;
  auto addLevel = [&](auto sameGroup, auto place, int sharers) {
    Level l;
    l.sharers = sharers;
    std::vector<std::pair<int, int>> byPlace;
    for (int r = 0; r < g.nranks; ++r)
      if (sameGroup(r)) byPlace.push_back({place(r), r});
    std::sort(byPlace.begin(), byPlace.end());
    for (auto [p, r] : byPlace) {
      if (r == me) l.index = static_cast<int>(l.members.size());
      l.members.push_back(r);
    }
    if (l.members.size() > 1) levels.push_back(std::move(l));
  };
  addLevel([&](int r) { return g.hostOf(r) == g.hostOf(me); }, localOf, 1);
  addLevel([&](int r) { return g.islandOf(r) == g.islandOf(me) && localOf(r) == localOf(me); }, hostPlace,
           static_cast<int>(k));
  addLevel([&](int r) { return localOf(r) == localOf(me) && hostPlace(r) == hostPlace(me); }, islandPlace,
           static_cast<int>(k));
  if (levels.size() < 2) return std::nullopt;
  return levels;
}

// Pieces: about two chunks each, so the top level's messages stay a useful size; at most 64.
size_t piecesFor(size_t bytes, size_t chunkBytes) {
  return std::clamp<size_t>(bytes / std::max<size_t>(1, 2 * chunkBytes), 1, 64);
}

class HierAllReduce final : public Algorithm {
 public:
  std::string_view name() const override { return "hier"; }
  bool supports(const Args& a, const GroupView& g) const override {
    return a.kind == CollKind::kAllReduce && g.nranks > 2 && levelsOf(g).has_value();
  }

  // Every level streams its share of every piece; pipelined, the slowest level sets the pace and the others add
  // their part of one piece (fill and drain).
  double estimateUs(const Args& a, const GroupView& g) const override {
    auto levels = levelsOf(g);
    if (!levels) return 1e30;
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    const double pieces = static_cast<double>(piecesFor(a.count * kernels::sizeOf(a.dtype), g.chunkBytes));
    double reaching = bytes, sum = 0, slowest = 0;
    for (const Level& l : *levels) {
      const int n = static_cast<int>(l.members.size());
      double bw = 1e30, alpha = 0;
      for (int i = 0; i < n; ++i) {
        bw = std::min(bw, g.bwGBps(l.members[i], l.members[(i + 1) % n]) / l.sharers);
        alpha = std::max(alpha, g.alphaUs(l.members[i], l.members[(i + 1) % n]));
      }
      const double t = 2.0 * (n - 1) * alpha * pieces + 2.0 * (n - 1) / n * reaching / (bw * 1e3);
      sum += t;
      slowest = std::max(slowest, t);
      reaching /= n;
    }
    return slowest + (sum - slowest) / pieces;
  }

  Result<Schedule> plan(const Args& a, const GroupView& g) const override {
    auto levels = levelsOf(g);
    if (!levels) return invalidUsage("hier: the group is not uniform (equal ranks per host and hosts per island)");
    Schedule s;
    s.dtype = a.dtype;
    s.op = a.op;
    s.nranks = g.nranks;
    const size_t esz = kernels::sizeOf(a.dtype);
    const size_t P = piecesFor(a.count * esz, g.chunkBytes);
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
