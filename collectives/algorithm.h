// algorithm.h: an algorithm is a pure planner. Given the call and the group it emits the same schedule on
// every rank (no I/O, no clocks), and estimates its time with an alpha-beta model. The table of algorithms is
// explicit (algorithms.cc), and selection picks the cheapest that supports the call; HETCOMM_ALGO overrides.
#pragma once

#include <span>
#include <string_view>

#include "collectives/args.h"
#include "collectives/schedule.h"
#include "common/status.h"

namespace hetcomm::coll {

// An algorithm serves one kind of collective. A new one is one file: its name, its kind, where it applies, its
// estimate and its plan, and a line in algorithms.cc's table.
class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string_view name() const = 0;  // HETCOMM_ALGO value
  virtual CollKind kind() const = 0;
  // Whether it can serve this call on this group (the kind already matches); most algorithms serve every group.
  virtual bool applies(const Args&, const GroupView&) const { return true; }
  bool supports(const Args& args, const GroupView& group) const {
    return args.kind == kind() && applies(args, group);
  }
  // Predicted microseconds: the group's link model (GroupView::alphaUs / bwGBps per rank pair) plus the memory work
  // of the schedule's copies and reductions (memoryUs).
  virtual double estimateUs(const Args& args, const GroupView& group) const = 0;
  virtual Result<Schedule> plan(const Args& args, const GroupView& group) const = 0;
};

std::span<const Algorithm* const> allAlgorithms();

// The start of every plan: an empty schedule for the call (its datatype, reduction, and rank count for Avg).
Schedule newSchedule(const Args& a, const GroupView& g);

// What a rank's own memory work costs: bytes it copies and bytes it reduces (output bytes; a reduction reads two
// inputs), at its host's rates for a call on buffers of `bufferBytes` (GroupView::copyGBps, reduceGBps: a call
// whose buffers stay in cache copies and reduces several times faster than one streaming from memory). Transfers
// are the links' part, not this.
double memoryUs(const GroupView& g, int rank, double copyBytes, double reduceBytes, double bufferBytes);
// The same for the rank with the slowest memory, when every rank does that much work.
double worstMemoryUs(const GroupView& g, double copyBytes, double reduceBytes, double bufferBytes);
// The bytes of a call's larger buffer on each rank (send or receive): what sets whether its memory work stays in
// cache.
double callBytes(const Args& a, const GroupView& g);

// The algorithm for this call: forced (a name from HETCOMM_ALGO; empty or "auto" for automatic) or the cheapest,
// with its predicted time. A forced algorithm that cannot serve the call leaves the automatic choice. The choice is
// kept per (collective, size class, group) in a prepared group's cache.
struct Selection {
  const Algorithm* algo = nullptr;
  double predictedUs = 0;
};
Result<Selection> selectAlgorithm(const Args& args, const GroupView& group, std::string_view forced);

// A buffer of `bytes` pipelined in chunkBytes chunks along `chain` (group ranks, the source first): every hop
// adds its time for one chunk to the first chunk's arrival, and the slowest hop paces the rest.
double pipelinedChainUs(const GroupView& g, const std::vector<int>& chain, double bytes);

// Element blocks of count split n ways as evenly as possible (the first count % n blocks get one more).
struct Blocks {
  std::vector<size_t> offset, count;  // elements
  size_t maxCount = 0;
};
Blocks evenBlocks(size_t count, int n);

// Pipelining of a block into chunks: every block of a layout uses the same number of chunks so that steps line
// up across ranks; chunk c of a block of `count` elements is [c*per, min((c+1)*per, count)), possibly empty.
struct Chunking {
  size_t nchunks = 1;
  size_t per = 0;  // elements per chunk
  size_t begin(size_t c, size_t count) const { return std::min(c * per, count); }
  size_t end(size_t c, size_t count) const { return std::min((c + 1) * per, count); }
};
Chunking chunkingFor(size_t maxCount, size_t elemSize, size_t chunkBytes);

}  // namespace hetcomm::coll
