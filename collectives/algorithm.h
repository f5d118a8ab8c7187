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

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string_view name() const = 0;  // HETCOMM_ALGO value
  virtual bool supports(const Args& args, const GroupView& group) const = 0;
  // Predicted microseconds, from the group's link model (GroupView::alphaUs / bwGBps per rank pair).
  virtual double estimateUs(const Args& args, const GroupView& group) const = 0;
  virtual Result<Schedule> plan(const Args& args, const GroupView& group) const = 0;
};

std::span<const Algorithm* const> allAlgorithms();

// The algorithm for this call: forced (a name from HETCOMM_ALGO, empty for automatic) or the cheapest, with its
// predicted time.
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
