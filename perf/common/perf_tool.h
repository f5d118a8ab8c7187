// perf_tool.h: what the small point-to-point tools (p2p_bw, p2p_latency) share: a hetcomm call that must succeed,
// and sizes with K/M/G suffixes. Public API only.
#pragma once

#include <hetcomm/hetcomm.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace hetcomm::perf {

// Exits with the call's error (its string and hetcommGetLastError) unless r is hetcommSuccess.
inline void checkCall(const char* tool, hetcommResult_t r, const char* what) {
  if (r == hetcommSuccess) return;
  std::fprintf(stderr, "%s: %s failed: %s: %s\n", tool, what, hetcommGetErrorString(r), hetcommGetLastError(nullptr));
  std::exit(1);
}

// "64", "8K", "64M", "1G" (binary suffixes) in bytes; 0 for text that is not a size.
inline size_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return 0;
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1 << 10;
      ++end;
      break;
    case 'M':
    case 'm':
      v *= 1 << 20;
      ++end;
      break;
    case 'G':
    case 'g':
      v *= 1 << 30;
      ++end;
      break;
    default:
      break;
  }
  return *end ? 0 : static_cast<size_t>(v);
}

// A communicator from the launcher's environment (hetcomm-run, mpirun, srun, torchrun) for a tool that needs ranks
// 0 and 1: exits with a message when the call fails or there are fewer than 2 ranks.
struct PairTool {
  hetcommComm_t comm = nullptr;
  int rank = 0, nranks = 0;
};
inline PairTool initPairTool(const char* tool) {
  PairTool t;
  checkCall(tool, hetcommCommInitFromEnv(&t.comm), "hetcommCommInitFromEnv");
  checkCall(tool, hetcommCommUserRank(t.comm, &t.rank), "hetcommCommUserRank");
  checkCall(tool, hetcommCommCount(t.comm, &t.nranks), "hetcommCommCount");
  if (t.nranks < 2) {
    std::fprintf(stderr, "%s: needs at least 2 ranks, got %d\n", tool, t.nranks);
    std::exit(2);
  }
  return t;
}

}  // namespace hetcomm::perf
