#include "collectives/synth/flows.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "collectives/algorithm_list.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll::synth {
namespace {

// Pieces by the chunk size at most kMaxPieces; cut finer, where that pays (flowShape), kMaxFinerPieces.
constexpr size_t kMaxPieces = 64, kMaxFinerPieces = 256;
constexpr size_t kMaxSubsegments = 8;
constexpr size_t kMinPaceWindow = 4;
// Segments are cut no finer than this: below it a message's fixed costs swamp its bytes. A piece is cut into a
// segment per tree and per rank of the fullest host, so this floor sets how finely a small flow through hosts of
// several ranks can be cut into pieces. At 8 KiB a 1 MiB allreduce on three-level-6 (scale 0.6; 4 trees, hosts of
// 2 ranks) went in 12 pieces, each 6 ms at the binding Ethernet ports, and took 93 ms where the packing's rate
// gives 74 (the same cluster with one rank per host: 24 pieces, 80 ms); at 4 KiB in 24 pieces, 82 ms (2026-11-29,
// AMD EPYC VM, alternated twice; the 4 MiB call 315 -> 303 ms; no change measured on mixed-4x2, ranks-1-2-4,
// random-5, eth-4x2 or dualrail-2x2, whose flows were cut as finely as the pieces' cost wants already).
constexpr size_t kMinSegmentBytes = 4 << 10;
// Message kinds within a segment (tags: segment * kKinds + kind).
enum Kind : uint32_t { kHostIn, kUp, kDown, kHostOut, kScatter, kGather, kKinds };

size_t maxTrees(const Packing& p) {
  size_t t = 1;
  for (const auto& list : p.byRoot) t = std::max(t, list.size());
  return t;
}

size_t subsegments(const topo::LinkGraph& graph) {
  size_t k = 1;
  for (const auto& h : graph.hosts) k = std::max(k, h.ranks.size());
  return std::min(k, kMaxSubsegments);
}

// Element counts of the parts of n by the trees' weights (largest remainder: they add up to n exactly, the same
// on every rank).
std::vector<size_t> splitByWeight(size_t n, const std::vector<WeightedTree>& trees) {
  std::vector<size_t> part(trees.size());
  std::vector<std::pair<double, size_t>> rest;
  size_t given = 0;
  for (size_t t = 0; t < trees.size(); ++t) {
    const double exact = static_cast<double>(n) * trees[t].weight;
    part[t] = static_cast<size_t>(std::floor(exact));
    given += part[t];
    rest.push_back({exact - static_cast<double>(part[t]), t});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < n; ++i, ++given) ++part[rest[i % rest.size()].second];
  return part;
}

// Scratch of one piece, in one of W regions; offsets are fixed up to their region once the region size is known.
struct Arena {
  size_t used = 0, most = 0;
  Slice take(size_t bytes) {
    Slice s{Buf::kScratch, used, bytes};
    used += bytes;
    most = std::max(most, used);
    return s;
  }
};

class Emitter {
 public:
  Emitter(Schedule& s, const GroupView& g, const topo::LinkGraph& graph, FlowMode mode, size_t esz)
      : s_(s), graph_(graph), mode_(mode), esz_(esz), me_(g.rank), myHost_(graph.hostOfRank[g.rank]) {}

  // One segment: elements [lo, lo + n) of flow f, carried by trees wt at its turn `turn`; `key` rotates the
  // owners; tag its first tag.
  void segment(const Flow& f, const WeightedTree& wt, size_t turn, size_t lo, size_t n, size_t key, uint32_t tag,
               uint32_t start, Arena& arena) {
    // Up the reduction's tree, down the result's (allreduce: each may be its own), both rooted at one host.
    const HostTree& tree = wt.upAt(turn);
    const HostTree& down = mode_ == FlowMode::kAllReduce ? wt.downAt(turn) : tree;
    const int root = tree.root;
    auto owner = [&](int host) {
      const auto& ranks = graph_.hosts[host].ranks;
      if (host == root && f.fixedRank >= 0 && !f.spread) return f.fixedRank;
      return ranks[key % ranks.size()];
    };
    const int o = owner(myHost_);
    const bool isOwner = me_ == o;
    const auto& peers = graph_.hosts[myHost_].ranks;
    const size_t bytes = n * esz_;
    auto dep = [&](uint32_t step, uint32_t on) { s_.steps[step].dependOn(on); };

    uint32_t have = start;  // the owner holds the segment's data (down) after this step
    Slice data{};
    std::optional<uint32_t> hostInSend, upSend;
    if (mode_ != FlowMode::kBroadcast) {
      if (!isOwner) {
        hostInSend = s_.send(o, tag + kHostIn, f.in(me_, lo, n));
        dep(*hostInSend, start);
      } else {
        std::vector<std::pair<uint32_t, Slice>> incoming;
        for (int q : peers)
          if (q != o) incoming.push_back({s_.recv(q, tag + kHostIn, arena.take(bytes)), {}});
        for (int c : tree.children[myHost_]) incoming.push_back({s_.recv(owner(c), tag + kUp, arena.take(bytes)), {}});
        for (auto& [step, slot] : incoming) {
          slot = s_.steps[step].dst;
          dep(step, start);
        }
        const bool final = myHost_ == root;
        // Where the sum builds up: the result's own place where this rank keeps it, else scratch.
        const bool keeps = mode_ == FlowMode::kAllReduce || (final && o == f.fixedRank);
        Slice acc = keeps ? f.out(o, lo, n) : arena.take(bytes);
        Slice partial = f.in(o, lo, n);
        uint32_t ready = start;
        for (size_t i = 0; i < incoming.size(); ++i) {
          const uint32_t red = s_.reduce(acc, i == 0 ? partial : acc, incoming[i].second);
          dep(red, incoming[i].first);
          if (i > 0) dep(red, ready);
          ready = red;
        }
        if (!incoming.empty()) partial = acc;
        if (!final) {
          upSend = s_.send(owner(tree.parent[myHost_]), tag + kUp, partial);
          s_.steps[*upSend].path = pathOf(myHost_, tree.parent[myHost_], tree.way[myHost_]);
          dep(*upSend, ready);
        } else {
          if (s_.op == kernels::RedOp::kAvg) {
            const uint32_t div = s_.divide(acc);
            dep(div, ready);
            ready = div;
          }
          if (mode_ == FlowMode::kReduce && o != f.fixedRank) dep(s_.send(f.fixedRank, tag + kGather, acc), ready);
          have = ready;
          data = acc;
        }
      }
      if (mode_ == FlowMode::kReduce && myHost_ == root && me_ == f.fixedRank && !isOwner) {
        const uint32_t got = s_.recv(o, tag + kGather, f.out(me_, lo, n));
        dep(got, start);
        if (hostInSend) dep(got, *hostInSend);  // the sum of what it sent: the pacing's answer to it (pacedSteps)
      }
      if (mode_ == FlowMode::kReduce) return;
    }

    // Down: the result, or the broadcast's data, from the root host's owner to every rank.
    const bool sourceHere = mode_ == FlowMode::kBroadcast && myHost_ == root;
    if (isOwner) {
      if (sourceHere && o == f.fixedRank) {
        data = f.in(o, lo, n);
      } else if (sourceHere) {
        data = f.out(o, lo, n);
        have = s_.recv(f.fixedRank, tag + kScatter, data);
        dep(have, start);
      } else if (myHost_ != root) {
        data = f.out(o, lo, n);
        have = s_.recv(owner(down.parent[myHost_]), tag + kDown, data);
        dep(have, start);
        if (upSend) dep(have, *upSend);  // the partial sum went out from the same place
      }
      for (int c : down.children[myHost_]) {
        const uint32_t send = s_.send(owner(c), tag + kDown, data);
        s_.steps[send].path = pathOf(myHost_, c, down.way[c]);
        dep(send, have);
      }
      for (int q : peers)
        if (q != o && !(sourceHere && q == f.fixedRank)) dep(s_.send(q, tag + kHostOut, data), have);
      return;
    }
    if (sourceHere && me_ == f.fixedRank) {
      dep(s_.send(o, tag + kScatter, f.in(me_, lo, n)), start);
      return;
    }
    const uint32_t got = s_.recv(o, tag + kHostOut, f.out(me_, lo, n));
    dep(got, start);
    if (hostInSend) dep(got, *hostInSend);  // in place, the result lands where the contribution was read
  }

 private:
  int8_t pathOf(int from, int to, int way) const { return static_cast<int8_t>(graph_.waysOf(from, to)[way].path); }

  Schedule& s_;
  const topo::LinkGraph& graph_;
  FlowMode mode_;
  size_t esz_;
  int me_, myHost_;
};

// What the pacing waits for of one piece's steps [first, end): those no other step of the piece waits for, less
// the receives that only deliver (into the caller's buffers, after no send of this rank: the broadcast's and the
// all-gather's data where this rank forwards nothing of it). A rank's pace is what it sends and the answers to it
// (an allreduce's result comes back after the rank's own contribution went up: waiting for it is what keeps every
// host from putting its whole share on the wire at once). A receive that answers nothing it sent held its
// forwarding back for no reason: on random-3 (scale 0.22), h2 forwards the broadcast's heaviest tree to h3's
// Ethernet, which the packing loads fully, and is a leaf of two light trees that come through the root's 31 Mbit/s
// Ethernet into h1; waiting for those, h2 held h3's port idle whenever they lagged, a time that port cannot make
// up, and a 64 MiB broadcast took 2.94-3.12 s (0.86-0.91 of the bound); paced as here, 2.88-2.90 s (0.93), and 1
// MiB 44.7-45.3 ms against 46.6-49.3 (alternated 7 and 3 times, 2026-11-29, AMD EPYC VM; no change measured in the
// all-gathers of random-2, random-5 and dualrail-2x2, nor in random-5's broadcast).
std::vector<uint32_t> pacedSteps(const Schedule& s, uint32_t first, uint32_t end) {
  std::vector<char> needed(end - first, 0);
  for (uint32_t i = first; i < end; ++i)
    for (int d = 0; d < s.steps[i].ndeps; ++d)
      if (s.steps[i].deps[d] >= first && s.steps[i].deps[d] < end) needed[s.steps[i].deps[d] - first] = 1;
  auto onlyDelivers = [&](const Step& st) {
    if (st.op != Step::Op::kRecv || st.dst.buf == Buf::kScratch) return false;
    for (int d = 0; d < st.ndeps; ++d)
      if (s.steps[st.deps[d]].op == Step::Op::kSend) return false;
    return true;
  };
  std::vector<uint32_t> out;
  for (uint32_t i = first; i < end; ++i)
    if (!needed[i - first] && !onlyDelivers(s.steps[i])) out.push_back(i);
  return out;
}

}  // namespace

// The pipeline's fill, in microseconds: one segment's way through the trees and the host levels (each hop alpha
// plus the segment over its own link) less its slowest hop, the longest over the trees.
static double fillUs(const GroupView& g, const topo::LinkGraph& graph, const Packing& p, FlowMode mode,
                     double segmentBytes) {
  auto hopUs = [&](int from, int to, int way) {
    double bw = 1e30;
    for (const auto& r : graph.waysOf(from, to)[way].rails)
      bw = std::min(bw, std::min(graph.ports[r.from].gbps, graph.ports[r.to].gbps) / r.share);
    return g.alphaUs(graph.hosts[from].ranks.front(), graph.hosts[to].ranks.front()) + segmentBytes / (bw * 1e3);
  };
  // The slowest way from a leaf to the root (up) or from the root to a leaf (down), with its slowest hop.
  auto deepest = [&](const HostTree& t, bool up, double* slowestHop) {
    double worst = 0;
    for (int v = 0; v < graph.nhosts(); ++v) {
      double path = 0, hop = 0;
      for (int u = v; t.parent[u] >= 0; u = t.parent[u]) {
        const double h = up ? hopUs(u, t.parent[u], t.way[u]) : hopUs(t.parent[u], u, t.way[u]);
        path += h;
        hop = std::max(hop, h);
      }
      if (path > worst) {
        worst = path;
        *slowestHop = hop;
      }
    }
    return worst;
  };
  double hostHop = 0;
  for (const auto& host : graph.hosts)
    if (host.ranks.size() > 1)
      hostHop = std::max(hostHop, g.alphaUs(host.ranks[0], host.ranks[1]) + segmentBytes / (host.memGBps * 1e3));
  double fill = 0;
  for (const auto& list : p.byRoot)
    for (const WeightedTree& wt : list)
      for (size_t turn = 0; turn < wt.turnCount(); ++turn) {
        double slowest = hostHop, hop = 0, path = 0;
        if (mode != FlowMode::kBroadcast) {
          path += deepest(wt.upAt(turn), true, &hop) + hostHop;
          slowest = std::max(slowest, hop);
        }
        if (mode != FlowMode::kReduce) {
          path += deepest(mode == FlowMode::kAllReduce ? wt.downAt(turn) : wt.upAt(turn), false, &hop) + hostHop;
          slowest = std::max(slowest, hop);
        }
        fill = std::max(fill, path - slowest);
      }
  return fill;
}

FlowShape flowShape(const GroupView& g, const topo::LinkGraph& graph, const Packing& packing, FlowMode mode,
                    size_t flowBytes, size_t flows) {
  FlowShape sh;
  const size_t perPiece = maxTrees(packing) * subsegments(graph);
  sh.segmentsPerPiece = perPiece;
  // A piece of about two chunks, and segments of a quarter chunk at least.
  const size_t pieceBytes = std::max(2 * g.chunkBytes, perPiece * g.chunkBytes / 4);
  sh.pieces = std::clamp<size_t>(flowBytes / std::max<size_t>(1, pieceBytes), 1, kMaxPieces);
  // A flow too small for kMaxPieces such pieces (a few MiB and less) is cut finer: into twice the pacing window
  // at least, so that the pacing holds back half of it (every host sending its whole share at once filled the
  // switch queues into the hosts of a slow fabric). As one piece, a 1 MiB allreduce on three-level-6 (scale 0.6)
  // took 134 ms against the ring's 131 (each host forwards a segment only once it has all of it, and 50 ms queues
  // dropped packets); in 8 pieces, all in flight at once, 96-120 ms; in 16 pieces, 8 in flight, 82 ms, as estimated.
  //
  // Then finer again, at any size, while that pays. Every tree spans every host, so each hop of a piece's way
  // passes the whole piece (all its segments) through the hosts' ports, the binding one included: the binding
  // port idles for that many piece-times while the first piece comes to it (the result's way back, in an
  // allreduce) and the last leaves. So the pipeline's ends cost hops x the piece's time at the binding port,
  // and every segment costs a message on each hop, priced at the slowest hop's latency, once per flow. Measured
  // on three-level-6 (scale 0.6), 64 MiB allreduce: 64 pieces of 1 MiB 5.40-5.70 s (the binding Ethernet ports
  // idled for about 0.3 s at each end of a call, sampled from the emulated NICs' counters), 128 pieces 5.15-5.20,
  // 256 pieces 4.89-5.01, 512 pieces 4.96-5.14 (each piece's segments are messages on a host's cores, which the
  // probe's latency does not price: hence kMaxFinerPieces).
  const size_t window = std::max<size_t>(kMinPaceWindow, 2 * static_cast<size_t>(packing.maxDepth) + 2);
  const size_t finest = std::clamp<size_t>(flowBytes / (perPiece * kMinSegmentBytes), 1, kMaxFinerPieces);
  sh.pieces = std::max(sh.pieces, std::min(finest, 2 * window));
  double alphaMax = 0;
  for (int a = 0; a < graph.nhosts(); ++a)
    for (int b = 0; b < graph.nhosts(); ++b)
      if (a != b) alphaMax = std::max(alphaMax, g.alphaUs(graph.hosts[a].ranks.front(), graph.hosts[b].ranks.front()));
  auto fillAt = [&](size_t pieces) {
    const double segment = static_cast<double>(flowBytes) / static_cast<double>(pieces * perPiece);
    return fillUs(g, graph, packing, mode, segment);
  };
  auto messagesUs = [&](size_t pieces) { return static_cast<double>(pieces * perPiece * flows) * alphaMax; };
  const double hops = static_cast<double>(mode == FlowMode::kAllReduce ? 2 * packing.maxDepth : packing.maxDepth);
  const double networkUs = packing.usPerByte * static_cast<double>(flowBytes);
  auto endsUs = [&](size_t pieces) { return hops * networkUs / static_cast<double>(pieces); };
  double best = endsUs(sh.pieces) + messagesUs(sh.pieces);
  for (size_t pieces = sh.pieces * 2; pieces <= finest; pieces *= 2)
    if (const double cost = endsUs(pieces) + messagesUs(pieces); cost < best) {
      best = cost;
      sh.pieces = pieces;
    }
  sh.fillUs = fillAt(sh.pieces);
  sh.window = std::min(sh.pieces, window);
  return sh;
}

void emitFlows(Schedule& s, const GroupView& g, const topo::LinkGraph& graph, const Packing& packing, FlowMode mode,
               const std::vector<Flow>& flows) {
  const size_t esz = kernels::sizeOf(s.dtype);
  size_t most = 0;
  for (const Flow& f : flows) most = std::max(most, f.count);
  const FlowShape shape = flowShape(g, graph, packing, mode, most * esz, flows.size());
  const size_t P = shape.pieces, W = shape.window, S = subsegments(graph), T = maxTrees(packing);
  Emitter emit(s, g, graph, mode, esz);

  std::vector<uint32_t> done(P);
  std::vector<std::pair<uint32_t, uint32_t>> pieceSteps(P);  // [first, end) of each piece's steps
  size_t region = 0;
  std::vector<Arena> arenas(P);
  for (size_t p = 0; p < P; ++p) {
    const uint32_t start = p >= W ? done[p - W] : joinSteps(s, {});
    const uint32_t first = static_cast<uint32_t>(s.steps.size());
    for (size_t fi = 0; fi < flows.size(); ++fi) {
      const Flow& f = flows[fi];
      const Blocks pieces = evenBlocks(f.count, static_cast<int>(P));
      const std::vector<size_t> parts = splitByWeight(pieces.count[p], *f.trees);
      size_t lo = pieces.offset[p];
      for (size_t t = 0; t < parts.size(); ++t) {
        const Blocks subs = evenBlocks(parts[t], static_cast<int>(S));
        for (size_t q = 0; q < S; ++q) {
          const size_t seg = ((p * flows.size() + fi) * T + t) * S + q;
          if (subs.count[q] > 0)
            emit.segment(f, (*f.trees)[t], p + t, lo + subs.offset[q], subs.count[q], q + t + p + fi,
                         static_cast<uint32_t>(seg * kKinds), start, arenas[p]);
        }
        lo += parts[t];
      }
    }
    const uint32_t end = static_cast<uint32_t>(s.steps.size());
    pieceSteps[p] = {first, end};
    done[p] = end > first ? joinSteps(s, pacedSteps(s, first, end)) : start;
    region = std::max(region, arenas[p].most);
  }
  // Piece p's scratch lives in region p % W: the pacing has finished piece p - W before piece p starts.
  for (size_t p = 0; p < P; ++p)
    for (uint32_t i = pieceSteps[p].first; i < pieceSteps[p].second; ++i)
      for (Slice* sl : {&s.steps[i].src, &s.steps[i].src2, &s.steps[i].dst})
        if (sl->buf == Buf::kScratch && sl->bytes > 0) sl->offset += (p % W) * region;
  s.scratchBytes = std::max(s.scratchBytes, W * region);
}

}  // namespace hetcomm::coll::synth
