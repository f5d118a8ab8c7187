// ring_phases.h: the two halves every ring collective is made of, emitted into a schedule.
//
// Ring: rank r sends to r+1 and receives from r-1. Reduce-scatter step k (0..n-2): send block r-k-1, receive
// block r-k-2 and reduce it with this rank's own contribution, so after n-1 steps rank r holds block r fully
// reduced. All-gather step k: send block r-k, receive block r-k-1. Each block is cut into chunks and every
// chunk flows independently, so a chunk is on the wire while the previous one is being reduced.
#pragma once

#include <functional>
#include <vector>

#include "collectives/algorithm.h"

namespace hetcomm::coll {

struct Ring {
  Ring(const GroupView& g, size_t count, kernels::DataType dtype);
  // The ring through `order` (every group rank once), blocks numbered by position in it: r is this rank's.
  Ring(const GroupView& g, const std::vector<int>& order, size_t count, kernels::DataType dtype);
  // A ring over some of the group's ranks, for planners that lay out blocks and chunks themselves through the
  // slice functions (blocks/chunk() stay empty): members in ring order, this rank at members[index], `chunks`
  // chunks per block of at most perChunk elements each (the staging slot size).
  Ring(const GroupView& g, const std::vector<int>& members, int index, size_t chunks, size_t perChunk,
       kernels::DataType dtype);
  int n, r, next, prev;
  bool lateReceiveFree;  // from prev (GroupView::lateReceiveIsFree)
  // Elsewhere in the plan later chunks wait on earlier ones (paceToTop): a staging slot may then only pass from a
  // chunk to the same chunk's next step, never to a later chunk, or the waits close a cycle across ranks.
  bool paced = false;
  size_t esz;
  Blocks blocks;
  Chunking ch;
  int mod(int x) const { return ((x % n) + n) % n; }
  // Chunk c of block b inside buffer buf, where the block's first element sits at byte base.
  Slice chunk(Buf buf, size_t base, int b, size_t c) const;
  size_t blockBytes(int b) const { return blocks.count[b] * esz; }
  size_t blockOffsetBytes(int b) const { return blocks.offset[b] * esz; }
};

// Where data of block b, chunk c lives: the rank's own input, and the running partial sums.
using ChunkSlice = std::function<Slice(int block, size_t c)>;
using StepChunkSlice = std::function<Slice(int step, int block, size_t c)>;

struct ReduceScatterSteps {
  std::vector<uint32_t> done;                // per chunk: the step that leaves block r final (reduce or divide)
  std::vector<std::vector<uint32_t>> sends;  // [k][c]
};

// input(b, c): this rank's contribution; acc(k, b, c): partial sum written by step k < n-2; out(c): the final
// chunk of block r. Tags start at tagBase. Needs scratch for two staging slots per chunk at stageBase.
// inputReady[c] (may be empty): the step after which chunk c of every input block may be read. finalDivide:
// whether Avg divides here (a hierarchical plan divides once, in its last reduce-scatter).
ReduceScatterSteps emitRingReduceScatter(Schedule& s, const Ring& ring, const ChunkSlice& input,
                                         const StepChunkSlice& acc, const std::function<Slice(size_t c)>& out,
                                         size_t stageBase, uint32_t tagBase,
                                         const std::vector<uint32_t>& inputReady = {}, bool finalDivide = true);

// Block b of the result lives at at(b, c); block r is ready after ownReady[c] (may be empty: no dependency).
// Receives into block b wait for notBefore[k][c] (may be empty), for buffers still being read. Returns per
// chunk a step after which chunk c of every block is in place; firstSends (if given) gets each chunk's send of
// the own block.
std::vector<uint32_t> emitRingAllGather(Schedule& s, const Ring& ring, const ChunkSlice& at,
                                        const ChunkSlice& ownSource, const std::vector<uint32_t>& ownReady,
                                        const std::vector<std::vector<uint32_t>>& notBefore, uint32_t tagBase,
                                        std::vector<uint32_t>* firstSends = nullptr);

// A step that completes once all of `steps` have (a chain of empty copies, Step::kMaxDeps at a time).
uint32_t joinSteps(Schedule& s, const std::vector<uint32_t>& steps);

// Scratch bytes for the staging slots of received chunks (see ring_phases.cc).
size_t ringStageBytes(const Ring& ring);

}  // namespace hetcomm::coll
