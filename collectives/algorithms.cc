// algorithms.cc: the explicit table of algorithms (no self-registration: static libraries drop it) and
// selection by estimated time.
#include <algorithm>
#include <cmath>
#include <limits>

#include "collectives/algorithm_list.h"
#include "collectives/group_cache.h"
#include "common/strings.h"

namespace hetcomm::coll {

std::span<const Algorithm* const> allAlgorithms() {
  static const Algorithm* const table[] = {
      &ringAllReduce(),  &hierAllReduce(), &recursiveDoublingAllReduce(), &hostSlotsAllReduce(),
      &ringReduceScatter(), &hierReduceScatter(), &ringAllGather(), &hierAllGather(),
      &chainBroadcast(), &hierBroadcast(), &chainReduce(), &hierReduce(),
      &synthAllReduce(), &synthReduceScatter(), &synthAllGather(), &synthBroadcast(), &synthReduce(),
      &pairwiseAlltoAll(), &directSendRecv(),
  };
  return table;
}

namespace {

// Sizes within a sixteenth of an octave of each other share a choice: it is made once, at the class's middle.
constexpr double kClassesPerOctave = 16;

int sizeClass(size_t bytes) {
  return bytes == 0 ? -1 : static_cast<int>(std::floor(std::log2(static_cast<double>(bytes)) * kClassesPerOctave));
}

// The cheapest algorithm that supports a.
const Algorithm* cheapest(const Args& a, const GroupView& g) {
  const Algorithm* best = nullptr;
  double bestUs = std::numeric_limits<double>::infinity();
  for (const Algorithm* algo : allAlgorithms()) {
    if (!algo->supports(a, g)) continue;
    const double us = algo->estimateUs(a, g);
    if (!best || us < bestUs) {
      bestUs = us;
      best = algo;
    }
  }
  return best;
}

// Whether the same algorithms serve a and b.
bool sameSupport(const Args& a, const Args& b, const GroupView& g) {
  for (const Algorithm* algo : allAlgorithms())
    if (algo->supports(a, g) != algo->supports(b, g)) return false;
  return true;
}

const Algorithm* automatic(const Args& a, const GroupView& g) {
  if (!g.cache) return cheapest(a, g);
  const size_t esz = kernels::sizeOf(a.dtype), bytes = a.count * esz;
  const int cls = sizeClass(bytes);
  Args mid = a;
  if (cls >= 0) mid.count = std::max<size_t>(1, static_cast<size_t>(std::exp2((cls + 0.5) / kClassesPerOctave) / esz));
  // A size shares its class's choice, made at the class's middle, only where the same algorithms serve both: at an
  // algorithm's size limit inside the class (slots: up to 16 KiB) the size is judged alone. Either way the choice
  // is a function of the call, whatever was called before. (Estimates take the cache's lock themselves.)
  if (!sameSupport(a, mid, g)) return cheapest(a, g);
  const GroupCache::SelectionKey key{static_cast<int>(a.kind), a.root, static_cast<int>(a.dtype),
                                     static_cast<int>(a.op), a.inPlace, cls};
  {
    std::lock_guard<std::mutex> lock(g.cache->mu);
    if (auto it = g.cache->selections.find(key); it != g.cache->selections.end()) return it->second;
  }
  const Algorithm* best = cheapest(mid, g);
  if (!best) return nullptr;
  std::lock_guard<std::mutex> lock(g.cache->mu);
  g.cache->selections.emplace(key, best);
  return best;
}

}  // namespace

Schedule newSchedule(const Args& a, const GroupView& g) {
  Schedule s;
  s.dtype = a.dtype;
  s.op = a.op;
  s.nranks = g.nranks;
  return s;
}

double memoryUs(const GroupView& g, int rank, double copyBytes, double reduceBytes, double bufferBytes) {
  return copyBytes / (g.copyGBps(rank, bufferBytes) * 1e3) + reduceBytes / (g.reduceGBps(rank, bufferBytes) * 1e3);
}

double callBytes(const Args& a, const GroupView& g) {
  return static_cast<double>(std::max(a.sendBytes(g.nranks), a.recvBytes(g.nranks)));
}

double worstMemoryUs(const GroupView& g, double copyBytes, double reduceBytes, double bufferBytes) {
  double worst = 0;
  for (int r = 0; r < g.nranks; ++r) worst = std::max(worst, memoryUs(g, r, copyBytes, reduceBytes, bufferBytes));
  return worst;
}

Result<Selection> selectAlgorithm(const Args& args, const GroupView& group, std::string_view forced) {
  if (!forced.empty() && forced != "auto") {
    const Algorithm* named = nullptr;
    for (const Algorithm* a : allAlgorithms())
      if (a->name() == forced) {
        named = named ? named : a;
        if (a->supports(args, group)) return Selection{a, a->estimateUs(args, group)};
      }
    if (!named) {
      std::vector<std::string> names;
      for (const Algorithm* a : allAlgorithms())
        if (std::find(names.begin(), names.end(), a->name()) == names.end()) names.emplace_back(a->name());
      const std::string known = join(names, ", ");
      return invalidArgument("HETCOMM_ALGO=%.*s is not an algorithm hetcomm knows (auto, %s)",
                             static_cast<int>(forced.size()), forced.data(), known.c_str());
    }
  }
  const Algorithm* best = automatic(args, group);
  if (!best) return internalError("no algorithm supports %s", args.describe().c_str());
  return Selection{best, best->estimateUs(args, group)};
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
