#include "collectives/hierarchy.h"

#include <algorithm>
#include <map>
#include <optional>

#include "collectives/group_cache.h"

namespace hetcomm::coll {

namespace {

std::optional<Hierarchy> deriveHierarchy(const GroupView& g) {
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
  std::vector<int> islandIds;
  for (const auto& [i, hosts] : islandHosts) islandIds.push_back(i);
  auto placeIn = [](const std::vector<int>& v, int x) {
    return static_cast<int>(std::find(v.begin(), v.end(), x) - v.begin());
  };

  Hierarchy h;
  h.me = g.rank;
  h.size = {static_cast<int>(k), static_cast<int>(m), static_cast<int>(islandIds.size())};
  h.coord.resize(g.nranks);
  for (int r = 0; r < g.nranks; ++r)
    h.coord[r] = {placeIn(hostRanks[g.hostOf(r)], r), placeIn(islandHosts[g.islandOf(r)], g.hostOf(r)),
                  placeIn(islandIds, g.islandOf(r))};
  for (int dim = 0; dim < 3; ++dim) {
    if (h.size[dim] < 2) continue;
    Level l;
    l.dim = dim;
    l.sharers = dim == 0 ? 1 : static_cast<int>(k);
    Hierarchy::Coord c = h.coord[g.rank];
    for (int b = 0; b < h.size[dim]; ++b) {
      c[dim] = b;
      l.members.push_back(h.rankAt(c));
    }
    l.index = h.coord[g.rank][dim];
    h.levels.push_back(std::move(l));
  }
  if (h.levels.size() < 2) return std::nullopt;
  return h;
}

}  // namespace

std::shared_ptr<const Hierarchy> hierarchyOf(const GroupView& g) {
  auto derive = [&]() -> std::shared_ptr<const Hierarchy> {
    auto h = deriveHierarchy(g);
    return h ? std::make_shared<const Hierarchy>(std::move(*h)) : nullptr;
  };
  if (!g.cache) return derive();
  std::lock_guard<std::mutex> lock(g.cache->mu);
  if (!g.cache->hierarchyDone) {
    g.cache->hierarchy = derive();
    g.cache->hierarchyDone = true;
  }
  return g.cache->hierarchy;
}

double HierAlgorithm::estimateUs(const Args& a, const GroupView& g) const {
  auto h = hierarchyOf(g);
  return h ? estimate(a, g, h.get()) : 1e30;
}

Result<Schedule> HierAlgorithm::plan(const Args& a, const GroupView& g) const {
  auto h = hierarchyOf(g);
  if (!h) return invalidUsage("hier: the group is not uniform (equal ranks per host and hosts per island)");
  return planOn(a, g, h.get(), newSchedule(a, g));
}

int Hierarchy::rankAt(const Coord& c) const {
  for (size_t r = 0; r < coord.size(); ++r)
    if (coord[r] == c) return static_cast<int>(r);
  return -1;
}

const Level* Hierarchy::levelOf(int dim) const {
  for (const Level& l : levels)
    if (l.dim == dim) return &l;
  return nullptr;
}

std::vector<int> Hierarchy::blockRanks(int dim, int b) const {
  std::vector<int> out;
  Coord c = coord[me];
  c[dim] = b;
  // Enumerate the coordinates above dim (at most two), highest first.
  const int hiA = dim + 1 < 3 ? size[dim + 1] : 1, hiB = dim + 2 < 3 ? size[dim + 2] : 1;
  for (int y = 0; y < hiB; ++y)
    for (int x = 0; x < hiA; ++x) {
      if (dim + 1 < 3) c[dim + 1] = x;
      if (dim + 2 < 3) c[dim + 2] = y;
      out.push_back(rankAt(c));
    }
  return out;
}

std::vector<std::vector<int>> Hierarchy::groupsOf(int dim) const {
  std::vector<std::vector<int>> groups;
  for (size_t r = 0; r < coord.size(); ++r) {
    if (coord[r][dim] != 0) continue;  // one group per rank at place 0
    std::vector<int> g;
    Coord c = coord[r];
    for (int b = 0; b < size[dim]; ++b) {
      c[dim] = b;
      g.push_back(rankAt(c));
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

RootedPaths rootedPaths(const Hierarchy& h, int root) {
  RootedPaths p;
  const Hierarchy::Coord rc = h.coord[root];
  const int k = h.size[0], m = h.size[1], islands = h.size[2];
  auto lead = [&](int island, int host) { return h.rankAt({rc[0], host, island}); };
  for (int hp = 0; hp < m; ++hp) p.scatter.push_back(lead(rc[2], hp));
  for (int hp = 0; hp < m; ++hp) {
    std::vector<std::vector<int>> parts(k);
    for (int j = 0; j < k; ++j)
      for (int t = 0; t < islands; ++t) parts[j].push_back(h.rankAt({(rc[0] + j) % k, hp, (rc[2] + t) % islands}));
    p.partChains.push_back(std::move(parts));
  }
  for (int i = 0; i < islands; ++i) {
    std::vector<int> ring;
    for (int hp = 0; hp < m; ++hp) ring.push_back(lead(i, hp));
    p.islandRings.push_back(std::move(ring));
    for (int hp = 0; hp < m; ++hp) {
      std::vector<int> chain;
      for (int t = 0; t < k; ++t) chain.push_back(h.rankAt({(rc[0] + t) % k, hp, i}));
      p.hostChains.push_back(std::move(chain));
    }
  }
  return p;
}

double rootedHierUs(const Args& a, const GroupView& g, const Hierarchy& hier, bool toRoot) {
  const Hierarchy* h = &hier;
  const RootedPaths paths = rootedPaths(*h, a.root);
  const int m = h->size[1];
  const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
  const double pieces = static_cast<double>(Shares(a.count, m, kernels::sizeOf(a.dtype), g.chunkBytes).ch.nchunks);
  std::vector<StageCost> stages;
  // A chain of `hops` hops is that many stages of the same cost: a piece crosses them one after another, which
  // pipelinedStagesUs counts as the fill.
  auto add = [&](StageCost c, double b, double msgs, int hops = 1) {
    c.bytes = b;
    c.messages = msgs;
    for (int i = 0; i < hops; ++i) stages.push_back(c);
  };
  if (m > 1) {
    // The scatter to the island's leads and the leads' all-gather both go through the root host's NIC (gather and
    // reduce-scatter into it, for reduce): one stage of twice the bytes, not two that overlap.
    std::vector<std::vector<int>> rootLinks;
    for (int lead : paths.scatter)
      if (lead != a.root) rootLinks.push_back(toRoot ? std::vector<int>{lead, a.root} : std::vector<int>{a.root, lead});
    const StageCost scatter = pathsCost(g, rootLinks, false), ring = pathsCost(g, paths.islandRings, true);
    StageCost both;
    both.bwGBps = std::min(scatter.bwGBps, ring.bwGBps);
    both.alphaUs = std::max(scatter.alphaUs, ring.alphaUs);
    add(both, 2 * bytes * (m - 1) / m, 2 * (m - 1) * pieces);
  }
  if (h->size[2] > 1) {  // every rank of a host carries 1/k of its share, k of them sharing the NIC
    const int k = h->size[0];
    std::vector<std::vector<int>> chains;
    for (const auto& parts : paths.partChains) chains.insert(chains.end(), parts.begin(), parts.end());
    add(pathsCost(g, chains, false, k), bytes / (m * k), pieces, h->size[2] - 1);
  }
  if (h->size[0] > 1) add(pathsCost(g, paths.hostChains, false), bytes, m * pieces, h->size[0] - 1);
  return pipelinedStagesUs(stages, pieces);
}

CarriedPart carriedPartOf(const RootedPaths& paths, int rank) {
  for (size_t sh = 0; sh < paths.partChains.size(); ++sh) {
    const auto [j, pos] = findIn(paths.partChains[sh], rank);
    if (j >= 0) return {static_cast<int>(sh), j, pos};
  }
  return {};
}

Slice partOf(Slice whole, size_t esz, int j, int k) {
  const Blocks b = evenBlocks(whole.bytes / esz, k);
  return Slice{whole.buf, whole.offset + b.offset[j] * esz, b.count[j] * esz};
}

std::pair<int, int> findIn(const std::vector<std::vector<int>>& paths, int rank) {
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < paths[i].size(); ++j)
      if (paths[i][j] == rank) return {static_cast<int>(i), static_cast<int>(j)};
  return {-1, -1};
}

double StageCost::us() const { return messages * alphaUs + bytes / (bwGBps * 1e3); }

double pipelinedStagesUs(const std::vector<StageCost>& stages, double pieces) {
  double sum = 0, slowest = 0;
  for (const StageCost& st : stages) {
    const double t = st.us();
    sum += t;
    slowest = std::max(slowest, t);
  }
  return slowest + (sum - slowest) / std::max(1.0, pieces);
}

StageCost pathCost(const GroupView& g, const std::vector<int>& path, bool closed, int sharers) {
  StageCost c;
  c.bwGBps = 1e30;
  const size_t n = path.size(), hops = closed ? n : n - 1;
  for (size_t j = 0; n > 1 && j < hops; ++j) {
    c.bwGBps = std::min(c.bwGBps, g.bwGBps(path[j], path[(j + 1) % n]) / sharers);
    c.alphaUs = std::max(c.alphaUs, g.alphaUs(path[j], path[(j + 1) % n]));
  }
  return c;
}

StageCost pathsCost(const GroupView& g, const std::vector<std::vector<int>>& paths, bool closed, int sharers) {
  StageCost worst;
  worst.bwGBps = 1e30;
  for (const auto& p : paths) {
    const StageCost c = pathCost(g, p, closed, sharers);
    worst.bwGBps = std::min(worst.bwGBps, c.bwGBps);
    worst.alphaUs = std::max(worst.alphaUs, c.alphaUs);
  }
  return worst;
}

double pipelinedLevelsUs(const GroupView& g, const Hierarchy& h, const std::vector<double>& bytes,
                         const std::vector<double>& messages, double pieces, const std::vector<LevelPass>& passes) {
  // levelUs[l][k]: level l's whole-operation time in its k-th group.
  std::vector<std::vector<std::vector<int>>> groups(h.levels.size());
  std::vector<std::vector<double>> levelUs(h.levels.size());
  double slowest = 0;
  for (size_t l = 0; l < h.levels.size(); ++l) {
    groups[l] = h.groupsOf(h.levels[l].dim);
    for (const auto& grp : groups[l]) {
      StageCost c = pathCost(g, grp, true, h.levels[l].sharers);
      c.bytes = bytes[l];
      c.messages = messages[l];
      levelUs[l].push_back(c.us());
      slowest = std::max(slowest, levelUs[l].back());
    }
  }
  std::vector<double> ready(g.nranks, 0.0);  // one piece's critical path, per rank
  for (const LevelPass& p : passes)
    for (size_t k = 0; k < groups[p.level].size(); ++k) {
      double start = 0;
      for (int r : groups[p.level][k]) start = std::max(start, ready[r]);
      for (int r : groups[p.level][k]) ready[r] = start + p.share * levelUs[p.level][k];
    }
  double sum = 0;
  for (double path : ready) sum += slowest + std::max(0.0, path - slowest) / std::max(1.0, pieces);
  return sum / std::max(1, g.nranks);
}

double hierGatherUs(const GroupView& g, const Hierarchy& hier, size_t blockBytes, size_t maxPieces, bool topFirst) {
  const Hierarchy* h = &hier;
  const size_t L = h->levels.size();
  const double pieces = static_cast<double>(piecesFor(blockBytes, g.chunkBytes, maxPieces));
  std::vector<double> bytes(L), messages(L);
  std::vector<LevelPass> passes;
  double held = 1;
  for (size_t l = L; l-- > 0;) {
    const double n = static_cast<double>(h->levels[l].members.size());
    bytes[l] = (n - 1) * held * static_cast<double>(blockBytes);
    messages[l] = (n - 1) * held * pieces;
    held *= n;
    passes.push_back({l, 1.0});
  }
  if (!topFirst) std::reverse(passes.begin(), passes.end());
  return pipelinedLevelsUs(g, *h, bytes, messages, pieces, passes);
}

size_t piecesFor(size_t bytes, size_t chunkBytes, size_t most) {
  return std::clamp<size_t>(bytes / std::max<size_t>(1, 2 * chunkBytes), 1, most);
}

bool piecesCrossTwoNetworkLevels(const Hierarchy& h) { return h.levelOf(1) && h.levelOf(2); }

Blocks hierPieces(const Hierarchy& h, size_t count, size_t ordinary, bool rampAtEnd) {
  if (piecesCrossTwoNetworkLevels(h)) return rampedPieces(count, ordinary, rampAtEnd);
  return evenBlocks(count, static_cast<int>(ordinary));
}

Blocks rampedPieces(size_t count, size_t ordinary, bool fromEnd) {
  if (ordinary < kRampFrom) return evenBlocks(count, static_cast<int>(ordinary));
  // Weights in units of the smallest piece: 1, 1, 2, 4, ..., then 2^kRampPieces for every other piece.
  const size_t full = size_t{1} << kRampPieces, pieces = ordinary + kRampPieces;
  auto weight = [&](size_t k) {
    const size_t fromSmall = fromEnd ? pieces - 1 - k : k;
    return fromSmall <= kRampPieces ? size_t{1} << (fromSmall == 0 ? 0 : fromSmall - 1) : full;
  };
  const size_t units = ordinary * full;
  Blocks b;
  b.offset.resize(pieces);
  b.count.resize(pieces);
  // Offsets from the cumulative weight, so the rounding never leaves a gap or an overlap: count * before / units,
  // without overflowing.
  for (size_t k = 0, before = 0; k < pieces; before += weight(k++))
    b.offset[k] = count / units * before + count % units * before / units;
  for (size_t k = 0; k < pieces; ++k) {
    b.count[k] = (k + 1 < pieces ? b.offset[k + 1] : count) - b.offset[k];
    b.maxCount = std::max(b.maxCount, b.count[k]);
  }
  return b;
}

void paceToTop(Schedule& s, const std::vector<uint32_t>& entries, size_t perPiece, const std::vector<uint32_t>& topDone,
               size_t window) {
  for (size_t c = window * perPiece; c < entries.size(); ++c)
    s.steps[entries[c]].dependOn(topDone[c / perPiece - window]);
}

void paceLevel(Schedule& s, const std::vector<uint32_t>& sends, size_t perPiece, const std::vector<uint32_t>& done,
               size_t window) {
  for (size_t c = window * perPiece; c < sends.size(); ++c) s.steps[sends[c]].dependOn(done[c - window * perPiece]);
}

}  // namespace hetcomm::coll
