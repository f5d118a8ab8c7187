// algorithms.cc: the explicit table of algorithms (no self-registration: static libraries drop it) and
// selection by estimated time.
#include <algorithm>
#include <cmath>
#include <limits>

#include "collectives/algorithm_list.h"
#include "common/strings.h"

namespace hetcomm::coll {

std::span<const Algorithm* const> allAlgorithms() {
  static const Algorithm* const table[] = {
      &ringAllReduce(),  &hierAllReduce(), &recursiveDoublingAllReduce(),
      &ringReduceScatter(), &hierReduceScatter(), &ringAllGather(), &hierAllGather(),
      &chainBroadcast(), &hierBroadcast(), &chainReduce(), &hierReduce(),
      &pairwiseAlltoAll(), &directSendRecv(),
  };
  return table;
}

Result<Selection> selectAlgorithm(const Args& args, const GroupView& group, std::string_view forced) {
  Selection best;
  double bestUs = std::numeric_limits<double>::infinity();
  bool forcedExists = forced.empty();
  for (const Algorithm* a : allAlgorithms()) {
    if (a->name() == forced) forcedExists = true;
    if (!a->supports(args, group)) continue;
    const double us = a->estimateUs(args, group);
    if (!forced.empty() && a->name() == forced) return Selection{a, us};
    if (us < bestUs) {
      bestUs = us;
      best = Selection{a, us};
    }
  }
  if (!forcedExists)
    return invalidArgument("HETCOMM_ALGO=%.*s is not an algorithm hetcomm knows", static_cast<int>(forced.size()),
                           forced.data());
  if (!best.algo) return internalError("no algorithm supports %s", args.describe().c_str());
  return best;
}

double pipelinedChainUs(const GroupView& g, const std::vector<int>& chain, double bytes) {
  const double chunks = std::max(1.0, std::ceil(bytes / static_cast<double>(g.chunkBytes)));
  const double chunk = bytes / chunks;
  double fill = 0, slowest = 0;
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    const double hop = g.alphaUs(chain[i], chain[i + 1]) + chunk / (g.bwGBps(chain[i], chain[i + 1]) * 1e3);
    fill += hop;
    slowest = std::max(slowest, hop);
  }
  return fill + (chunks - 1) * slowest;
}

Blocks evenBlocks(size_t count, int n) {
  Blocks b;
  b.offset.resize(n);
  b.count.resize(n);
  size_t base = count / n, extra = count % n, off = 0;
  for (int i = 0; i < n; ++i) {
    b.count[i] = base + (static_cast<size_t>(i) < extra ? 1 : 0);
    b.offset[i] = off;
    off += b.count[i];
  }
  b.maxCount = base + (extra ? 1 : 0);
  return b;
}

Chunking chunkingFor(size_t maxCount, size_t elemSize, size_t chunkBytes) {
  Chunking ch;
  size_t perChunk = std::max<size_t>(1, chunkBytes / elemSize);
  ch.nchunks = std::max<size_t>(1, (maxCount + perChunk - 1) / perChunk);
  ch.per = std::max<size_t>(1, (maxCount + ch.nchunks - 1) / ch.nchunks);  // balanced chunks
  return ch;
}

}  // namespace hetcomm::coll
