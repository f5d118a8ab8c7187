// p2p_latency: point-to-point latency between rank 0 and rank 1, like osu_latency: rank 0 sends a message and
// waits for rank 1 to send it back, with blocking hetcommSend / hetcommRecv (no stream); the latency is half the
// round trip. Per size it prints the mean over the timed round trips (osu_latency's figure) and their median and
// 90th percentile, which a shared, noisy machine moves less. Ranks other than 0 and 1 wait. Public API only.
//
// --idle SEC then measures what a wait costs when the peer is late: rank 0 blocks in a receive while rank 1 sleeps
// SEC seconds before it sends, and rank 0 prints the CPU time its process used meanwhile, as a share of one core
// (a waiting rank polls for HETCOMM_SPIN_US, then sleeps: it should be near 0 %).
//   hetcomm-run -np 2 p2p_latency [-b 8] [-e 64K] [-f 2] [-n 10000] [-w 1000] [--idle 2]
#include <hetcomm/hetcomm.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "perf/common/perf_tool.h"

namespace {
void check(hetcommResult_t r, const char* what) { hetcomm::perf::checkCall("p2p_latency", r, what); }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"p2p_latency: ping-pong latency between rank 0 and rank 1"};
  std::string minS = "8", maxS = "64K";
  int factor = 2, iters = 10000, warmup = 1000;
  double idleSec = 0;
  app.add_option("-b,--minbytes", minS, "smallest message")->capture_default_str();
  app.add_option("-e,--maxbytes", maxS, "largest message")->capture_default_str();
  app.add_option("-f,--stepfactor", factor, "size multiplier")->check(CLI::Range(2, 1024))->capture_default_str();
  app.add_option("-n,--iters", iters, "timed round trips per size")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", warmup, "untimed round trips per size")
      ->check(CLI::Range(0, 10000000))
      ->capture_default_str();
  app.add_option("--idle", idleSec, "then: rank 0's CPU use while it waits SEC seconds for a late peer")
      ->check(CLI::Range(0.0, 3600.0));
  CLI11_PARSE(app, argc, argv);
  const size_t lo = hetcomm::perf::parseSize(minS), hi = hetcomm::perf::parseSize(maxS);
  if (lo == 0 || hi == 0 || lo > hi) {
    std::fprintf(stderr, "p2p_latency: -b %s -e %s: need sizes with 0 < minbytes <= maxbytes (8, 4K, 1M)\n",
                 minS.c_str(), maxS.c_str());
    return 2;
  }

  // Plain names, not structured bindings: lambdas below capture them, which clang 14 does not allow of bindings.
  const hetcomm::perf::PairTool tool = hetcomm::perf::initPairTool("p2p_latency");
  hetcommComm_t comm = tool.comm;
  const int rank = tool.rank;
  std::vector<char> buf(hi, static_cast<char>(rank + 1));
  std::vector<double> samples(iters);
  if (rank == 0)
    std::printf("# p2p_latency: rank 0 <-> rank 1, half the round trip\n#%12s %10s %10s %10s\n", "size(B)", "mean(us)",
                "median(us)", "p90(us)");
  for (size_t size = lo; size <= hi; size *= factor) {
    auto roundTrip = [&] {
      if (rank == 0) {
        check(hetcommSend(buf.data(), size, hetcommUint8, 1, comm, nullptr), "hetcommSend");
        check(hetcommRecv(buf.data(), size, hetcommUint8, 1, comm, nullptr), "hetcommRecv");
      } else if (rank == 1) {
        check(hetcommRecv(buf.data(), size, hetcommUint8, 0, comm, nullptr), "hetcommRecv");
        check(hetcommSend(buf.data(), size, hetcommUint8, 0, comm, nullptr), "hetcommSend");
      }
    };
    for (int i = 0; i < warmup; ++i) roundTrip();
    char flag = 0;
    check(hetcommAllReduce(&flag, &flag, 1, hetcommUint8, hetcommMax, comm, nullptr), "barrier");
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    auto last = t0;
    for (int i = 0; i < iters; ++i) {
      roundTrip();
      const auto now = Clock::now();
      samples[i] = std::chrono::duration<double, std::micro>(now - last).count() / 2;
      last = now;
    }
    const double mean = std::chrono::duration<double, std::micro>(last - t0).count() / (2.0 * iters);
    std::sort(samples.begin(), samples.end());
    if (rank == 0)
      std::printf(" %12zu %10.2f %10.2f %10.2f\n", size, mean, samples[iters / 2], samples[iters * 9 / 10]);
    if (size > hi / factor) break;
  }
  if (idleSec > 0) {
    char byte = 0;
    auto cpuSec = [] {
      rusage u{};
      getrusage(RUSAGE_SELF, &u);
      return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
    };
    check(hetcommAllReduce(&byte, &byte, 1, hetcommUint8, hetcommMax, comm, nullptr), "barrier");
    if (rank == 0) {
      const double cpu0 = cpuSec();
      const auto t0 = std::chrono::steady_clock::now();
      check(hetcommRecv(&byte, 1, hetcommUint8, 1, comm, nullptr), "hetcommRecv");
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("# idle wait: %.2f s for a late peer, %.3f s of CPU (%.1f %% of a core)\n", wall, cpuSec() - cpu0,
                  100 * (cpuSec() - cpu0) / wall);
    } else if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::duration<double>(idleSec));
      check(hetcommSend(&byte, 1, hetcommUint8, 0, comm, nullptr), "hetcommSend");
    }
  }
  check(hetcommCommFinalize(comm), "hetcommCommFinalize");
  check(hetcommCommDestroy(comm), "hetcommCommDestroy");
  return 0;
}
