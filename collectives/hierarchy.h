// hierarchy.h: the three levels hierarchical collectives run over. Every rank has three coordinates: its place
// on its host (level 0, shared memory), its host's place in its island (level 1, the island's fast fabric) and
// its island's place (level 2, the slow fabric between islands). A level's group is the ranks that differ from
// this rank only in that coordinate; a level with one member is left out.
//
// The planners need a uniform shape (the same number of ranks on every host and of hosts in every island), so
// that every coordinate combination is a rank and the groups of a level all have the same size.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "collectives/algorithm.h"

namespace hetcomm::coll {

struct Level {
  int dim = 0;               // the coordinate it varies: 0 host, 1 island, 2 across islands
  std::vector<int> members;  // group ranks, by their place in dim (ring order)
  int index = 0;             // this rank's position in members
  int sharers = 1;           // ranks of one host that cross the same NIC at once at this level
};

struct Hierarchy {
  using Coord = std::array<int, 3>;
  std::vector<Coord> coord;   // per group rank
  Coord size{};               // ranks per host, hosts per island, islands
  std::vector<Level> levels;  // this rank's, lowest first
  int me = 0;

  int rankAt(const Coord& c) const;
  const Level* levelOf(int dim) const;  // nullptr where the level has one member
  // The ranks whose coordinate dim is b and whose lower coordinates are this rank's, the higher ones taking
  // every value (ordered by them, highest first). Hierarchical all-gather and reduce-scatter pass these sets
  // between a level's members: what a level gathers is everything the levels above it gathered.
  std::vector<int> blockRanks(int dim, int b) const;
  // Every group of the level that varies dim (not only this rank's), each by place: what a cost estimate reads,
  // so that every rank predicts the same time and picks the same algorithm.
  std::vector<std::vector<int>> groupsOf(int dim) const;
};

// Rooted plans (broadcast, reduce) send through the ranks that have the root's place on their hosts, the leads:
// one per host carries the host's traffic over the network. The root's island splits the buffer into one share
// per host place; host place h of every island carries share h across the slow fabric.
struct RootedPaths {
  std::vector<int> scatter;                   // the leads of the root's island, by host place
  // Per host place and part j: the rank at place j of that host's chain in every island, the root's island
  // first (part 0: the leads). Every rank of a host carries one part of its share over the slow fabric, so a
  // host's NIC carries as many streams as it has ranks instead of one.
  std::vector<std::vector<std::vector<int>>> partChains;
  std::vector<std::vector<int>> islandRings;  // per island: its leads, by host place
  std::vector<std::vector<int>> hostChains;   // per host: its ranks, the lead first
};

// The buffer of a rooted plan as m shares with equal chunk counts: chunk p of share sh.
struct Shares {
  Shares(size_t count, int m, size_t esz, size_t chunkBytes)
      : blocks(evenBlocks(count, m)), ch(chunkingFor(blocks.maxCount, esz, chunkBytes)), esz(esz) {}
  Blocks blocks;
  Chunking ch;
  size_t esz;
  Slice at(Buf buf, int sh, size_t p) const {
    const size_t lo = ch.begin(p, blocks.count[sh]), hi = ch.end(p, blocks.count[sh]);
    return Slice{buf, (blocks.offset[sh] + lo) * esz, (hi - lo) * esz};
  }
  // Chunk p of share sh in a region laid out like one share, from byte base of buf.
  Slice inShare(Buf buf, size_t base, int sh, size_t p) const {
    Slice s = at(buf, sh, p);
    s.offset = s.offset - blocks.offset[sh] * esz + base;
    return s;
  }
  size_t shareBytes() const { return blocks.maxCount * esz; }
};

RootedPaths rootedPaths(const Hierarchy& h, int root);
// Where a rank carries its part across the islands: share (its host place), part (its place in the host chain)
// and pos (its island's place in the chain, the root's island 0). Every rank has one.
struct CarriedPart {
  int share = -1, part = 0, pos = 0;
};
CarriedPart carriedPartOf(const RootedPaths& paths, int rank);
// Part j of k of a slice of elements of esz bytes: k nearly equal runs of whole elements.
Slice partOf(Slice whole, size_t esz, int j, int k);
// The time of a hierarchical broadcast (toRoot false) or reduce (true), from the stages of rootedPaths: the
// root's island scatters (gathers) the shares, its ring all-gathers (reduce-scatters) them, share h crosses the
// islands in parts along host place h's part chains, and each host passes the whole buffer along its ranks.
double rootedHierUs(const Args& a, const GroupView& g, const Hierarchy& h, bool toRoot);
// This rank's place in whichever of `paths` holds it: {path index, position}, or {-1, -1}.
std::pair<int, int> findIn(const std::vector<std::vector<int>>& paths, int rank);

// Null when the group is not uniform or has fewer than two levels (one level is the plain ring). Derived once per
// prepared group (GroupView::cache).
std::shared_ptr<const Hierarchy> hierarchyOf(const GroupView& g);

// The shared prologue of the hierarchical planners ("hier"): they serve groups of three ranks or more whose
// hierarchy is uniform, and estimate and plan from it.
class HierAlgorithm : public Algorithm {
 public:
  std::string_view name() const final { return "hier"; }
  bool applies(const Args&, const GroupView& g) const final { return g.nranks > 2 && hierarchyOf(g) != nullptr; }
  double estimateUs(const Args& a, const GroupView& g) const final;
  Result<Schedule> plan(const Args& a, const GroupView& g) const final;

 protected:
  virtual double estimate(const Args& a, const GroupView& g, const Hierarchy* h) const = 0;
  // s: the call's empty schedule (newSchedule).
  virtual Result<Schedule> planOn(const Args& a, const GroupView& g, const Hierarchy* h, Schedule s) const = 0;
};

// One stage of a pipelined plan: what one rank sends in it, in how many messages, over its slowest link.
struct StageCost {
  double bytes = 0, messages = 0, bwGBps = 1, alphaUs = 0;
  double us() const;  // alone: latency per message plus bytes over the link
};
// Pipelined over `pieces`, the slowest stage sets the pace and the others add their share of one piece (fill
// and drain).
double pipelinedStagesUs(const std::vector<StageCost>& stages, double pieces);
// The slowest link and the worst latency along `path` (consecutive pairs; as a ring when closed), shared by
// `sharers` ranks of a host.
StageCost pathCost(const GroupView& g, const std::vector<int>& path, bool closed, int sharers = 1);
// The slowest of several paths that run at once.
StageCost pathsCost(const GroupView& g, const std::vector<std::vector<int>>& paths, bool closed, int sharers = 1);

// The alpha-beta time of a pipelined hierarchy. A level's time, per group, is latency per message plus its bytes
// over the slowest link of that group's ring (shared by `sharers` ranks of a host); bytes[l] is what a rank of
// level l sends in the whole operation, messages[l] how many messages it sends. Pipelined over `pieces`, the
// slowest level of any group sets the pace, and each rank adds its own fill and drain: its critical path through
// `passes` (the levels in the order one piece visits them, each with its share of the level's time), where a
// group starts a pass once its last member is ready, over pieces. The result is the mean over ranks (what
// all_reduce_perf reports by default), computed from every group, so every rank predicts the same time.
struct LevelPass {
  size_t level;
  double share;
};
double pipelinedLevelsUs(const GroupView& g, const Hierarchy& h, const std::vector<double>& bytes,
                         const std::vector<double>& messages, double pieces, const std::vector<LevelPass>& passes);

// Hierarchical all-gather (the top level first) or reduce-scatter (the host level first) of blockBytes per rank,
// cut into pieces: a level with n members, each holding a set of as many blocks as the levels above have members
// together, sends n-1 sets.
double hierGatherUs(const GroupView& g, const Hierarchy& h, size_t blockBytes, size_t maxPieces, bool topFirst);

// Pieces of a pipelined hierarchical plan: about two chunks each, so the top level's messages stay a useful
// size; at most `most`.
size_t piecesFor(size_t bytes, size_t chunkBytes, size_t most);

// count elements in `ordinary` even pieces, the first of them (the last, for `fromEnd`) cut into kRampPieces + 1
// that shrink towards the end: 1/2, 1/4, 1/8 and 1/8 of an ordinary piece. A pipelined plan's first piece must
// cross every level below the top before the top level starts (its last piece, every level below the top after
// the top ends); the smaller it is, the sooner the slow level is busy. Fewer than kRampFrom ordinary pieces: even.
constexpr size_t kRampPieces = 3, kRampFrom = 4;
Blocks rampedPieces(size_t count, size_t ordinary, bool fromEnd);
// Whether pieces cross the network at two levels (between the hosts of an island, and across islands): only then
// does a piece wait for a network level before the slow one (reduce-scatter) or after it (all-gather), so only
// then do the ramp and the level window pay; with shared memory below the top (one host per island), their extra
// messages and waits only cost (eth-4x2: 1-2 % slower).
bool piecesCrossTwoNetworkLevels(const Hierarchy& h);
// A hierarchical plan's pieces: rampedPieces where pieces cross two network levels, else `ordinary` even ones.
Blocks hierPieces(const Hierarchy& h, size_t count, size_t ordinary, bool rampAtEnd);

// Pieces a pipelined plan lets its lowest level run ahead of its top level's reduce-scatter. Unpaced, every piece
// is ready at the start, so the fast lower levels run the whole buffer at once: on an oversubscribed host that
// burst takes every core while the slow top level, which sets the time, waits for its first piece, and its
// messages queue behind it. A few pieces in flight keep every level busy (a piece crosses the levels below the
// top faster than the top sends one) and the top level fed from its first piece on.
constexpr size_t kPaceWindow = 4;
// Makes entries[c], a first-level step of piece c / perPiece, wait for topDone of the piece kPaceWindow earlier.
// Deadlock-free only if every other wait in the plan points to the same or earlier pieces: the plans' rings must be
// marked paced (Ring::paced), so that no staging slot waits on a later piece.
// window: in pieces (kPaceWindow, plus the extra pieces of a ramp, so that it holds as many bytes).
void paceToTop(Schedule& s, const std::vector<uint32_t>& entries, size_t perPiece, const std::vector<uint32_t>& topDone,
               size_t window = kPaceWindow);

// Pieces a network level keeps in flight of its own where another network level waits for its pieces (the island
// level under a reduce-scatter's slow level, the slow level over an all-gather's island level). Given every piece
// at once, a level hands them all to the transport, which shares the link among them (several sockets and several
// ranks per NIC), so its first piece, the one the next level waits for, arrives late: on mixed-4x2 (a per-step
// trace) a reduce-scatter's island level delivered its first piece halfway through the 16 MiB it had in flight.
// Two in flight keep the level's links busy between pieces.
constexpr size_t kLevelWindow = 2;
// Makes sends[c], a level's first send of chunk c (piece c / perPiece), wait for done[c - window * perPiece], that
// level's result of the same chunk place `window` pieces earlier. Deadlock-free under paceToTop's terms.
void paceLevel(Schedule& s, const std::vector<uint32_t>& sends, size_t perPiece, const std::vector<uint32_t>& done,
               size_t window = kLevelWindow);

}  // namespace hetcomm::coll
