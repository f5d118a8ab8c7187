// p2p_bw: one-way point-to-point bandwidth between rank 0 and rank 1, like osu_bw: rank 0 streams a window of
// messages to rank 1, rank 1 acknowledges each window with one byte, repeated; GB/s = bytes / 1e9 / s. Ranks other
// than 0 and 1 wait. Public API only.
//   hetcomm-run -np 2 p2p_bw [-b 64M] [-e 64M] [-f 2] [-n 20] [-w 5] [--window 4]
#include <hetcomm/hetcomm.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "perf/common/perf_tool.h"

namespace {
void check(hetcommResult_t r, const char* what) { hetcomm::perf::checkCall("p2p_bw", r, what); }
using hetcomm::perf::parseSize;
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"p2p_bw: one-way point-to-point bandwidth from rank 0 to rank 1"};
  std::string minS = "64M", maxS = "64M";
  int factor = 2, iters = 20, warmup = 5, window = 4;
  app.add_option("-b,--minbytes", minS, "smallest message");
  app.add_option("-e,--maxbytes", maxS, "largest message");
  app.add_option("-f,--stepfactor", factor, "size multiplier")->check(CLI::Range(2, 1024));
  app.add_option("-n,--iters", iters, "timed windows")->check(CLI::Range(1, 100000));
  app.add_option("-w,--warmup_iters", warmup, "untimed windows")->check(CLI::Range(0, 100000));
  app.add_option("--window", window, "messages in flight per window")->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);
  const size_t lo = parseSize(minS), hi = parseSize(maxS);
  if (lo == 0 || lo > hi) {
    std::fprintf(stderr, "p2p_bw: need 0 < minbytes <= maxbytes\n");
    return 2;
  }

  // Plain names, not structured bindings: lambdas below capture them, which clang 14 does not allow of bindings.
  const hetcomm::perf::PairTool tool = hetcomm::perf::initPairTool("p2p_bw");
  hetcommComm_t comm = tool.comm;
  const int rank = tool.rank;
  std::vector<std::vector<char>> bufs(window, std::vector<char>(hi, static_cast<char>(rank + 1)));
  char ack = 0;
  if (rank == 0)
    std::printf("# p2p_bw: rank 0 -> rank 1, window %d\n#%12s %12s %10s\n", window, "size(B)", "time(us)", "GB/s");
  for (size_t size = lo; size <= hi; size *= factor) {
    auto oneWindow = [&] {
      if (rank > 1) return;
      check(hetcommGroupStart(), "hetcommGroupStart");
      for (int k = 0; k < window; ++k) {
        if (rank == 0)
          check(hetcommSend(bufs[k].data(), size, hetcommUint8, 1, comm, nullptr), "hetcommSend");
        else
          check(hetcommRecv(bufs[k].data(), size, hetcommUint8, 0, comm, nullptr), "hetcommRecv");
      }
      check(hetcommGroupEnd(), "hetcommGroupEnd");
      // The acknowledgement closes the window on the sender: its sends may complete before the data landed.
      if (rank == 0)
        check(hetcommRecv(&ack, 1, hetcommUint8, 1, comm, nullptr), "hetcommRecv");
      else
        check(hetcommSend(&ack, 1, hetcommUint8, 0, comm, nullptr), "hetcommSend");
    };
    for (int i = 0; i < warmup; ++i) oneWindow();
    check(hetcommAllReduce(&ack, &ack, 1, hetcommUint8, hetcommMax, comm, nullptr), "barrier");
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) oneWindow();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double bytes = static_cast<double>(size) * window * iters;
    if (rank == 0) std::printf(" %12zu %12.1f %10.2f\n", size, s / (iters * window) * 1e6, bytes / s / 1e9);
    if (size > hi / factor) break;
  }
  check(hetcommCommFinalize(comm), "hetcommCommFinalize");
  check(hetcommCommDestroy(comm), "hetcommCommDestroy");
  return 0;
}
