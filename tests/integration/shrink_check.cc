// shrink_check: a rank's process is killed (SIGKILL) while the others wait for it in an all-reduce; the survivors
// see the error, shrink the communicator (hetcommCommShrink with HETCOMM_SHRINK_ABORT) and go on: the new
// communicator has one rank fewer, ranked in the old order, and its all-reduces are right. Run under
// `hetcomm-run --elastic`, which lets the survivors go on (tests/integration/shrink_check.sh).
//
//   shrink_check VICTIM            the victim dies in an all-reduce; the others shrink
//   shrink_check VICTIM finalize   the victim dies instead of calling finalize; the others' finalize must fail
//                                  at once naming it, not at HETCOMM_TIMEOUT
//
// Each survivor prints "rank R: shrink ok: ..." (or "finalize ok: ...") with its time, and exits 0; anything wrong
// prints "rank R: FAIL ..." and exits 1.
#include <hetcomm/hetcomm.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void failWith(int rank, const std::string& what) {
  std::printf("rank %d: FAIL %s: %s\n", rank, what.c_str(), hetcommGetLastError(nullptr));
  std::fflush(stdout);
  std::exit(1);
}

// Sums (rank + 1) * (i + 1) over comm's ranks for every element i, and checks the result.
bool allReduceIsRight(hetcommComm_t comm, size_t count) {
  int rank = 0, n = 0;
  if (hetcommCommUserRank(comm, &rank) != hetcommSuccess || hetcommCommCount(comm, &n) != hetcommSuccess) return false;
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((rank + 1) * ((i % 64) + 1));
  if (hetcommAllReduce(v.data(), v.data(), count, hetcommFloat32, hetcommSum, comm, nullptr) != hetcommSuccess)
    return false;
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < count; ++i)
    if (v[i] != ranks * static_cast<float>((i % 64) + 1)) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::string(argv[2]) != "finalize")) {
    std::fprintf(stderr, "usage: shrink_check VICTIM [finalize] (under hetcomm-run --elastic)\n");
    return 2;
  }
  const int victim = std::atoi(argv[1]);
  hetcommComm_t comm = nullptr;
  if (hetcommCommInitFromEnv(&comm) != hetcommSuccess) failWith(-1, "init");
  int rank = 0, n = 0;
  hetcommCommUserRank(comm, &rank);
  hetcommCommCount(comm, &n);
  if (victim < 0 || victim >= n || n < 2) failWith(rank, "VICTIM must be a rank of 2 or more");
  constexpr size_t kCount = 1 << 18;  // 1 MiB of floats: the survivors are inside the all-reduce when it dies
  for (int round = 0; round < 3; ++round)
    if (!allReduceIsRight(comm, kCount)) failWith(rank, "all-reduce before the kill");
  if (argc == 3) {  // the finalize case
    if (rank == victim) raise(SIGKILL);
    const auto start = Clock::now();
    if (hetcommCommFinalize(comm) == hetcommSuccess) failWith(rank, "finalize with a dead rank succeeded");
    const std::string why = hetcommGetLastError(nullptr);
    if (why.find("rank " + std::to_string(victim) + "'s process ended") == std::string::npos)
      failWith(rank, "finalize's error does not name rank " + std::to_string(victim));
    std::printf("rank %d: finalize ok: failed after %.3f s: %s\n", rank, since(start), why.c_str());
    hetcommCommDestroy(comm);
    return 0;
  }
  if (rank == victim) {
    usleep(200 * 1000);  // the others are waiting in the next all-reduce by now
    raise(SIGKILL);
  }
  std::vector<float> v(kCount, 1.0f);
  const hetcommResult_t rc = hetcommAllReduce(v.data(), v.data(), kCount, hetcommFloat32, hetcommSum, comm, nullptr);
  const auto failedAt = Clock::now();
  if (rc == hetcommSuccess) failWith(rank, "the all-reduce with a dead rank succeeded");
  std::printf("rank %d: all-reduce failed as expected: %s\n", rank, hetcommGetLastError(nullptr));

  hetcommComm_t next = nullptr;
  if (hetcommCommShrink(comm, nullptr, 0, &next, nullptr, HETCOMM_SHRINK_ABORT) != hetcommSuccess)
    failWith(rank, "shrink");
  const double shrinkSec = since(failedAt);
  int newRank = -1, newN = 0;
  hetcommCommUserRank(next, &newRank);
  hetcommCommCount(next, &newN);
  if (newN != n - 1) failWith(rank, "the shrunk communicator has " + std::to_string(newN) + " ranks");
  if (newRank != (rank < victim ? rank : rank - 1))
    failWith(rank, "old rank " + std::to_string(rank) + " became rank " + std::to_string(newRank));
  for (int round = 0; round < 5; ++round)
    if (!allReduceIsRight(next, kCount)) failWith(rank, "all-reduce on the shrunk communicator");
  if (hetcommCommDestroy(comm) != hetcommSuccess) failWith(rank, "destroying the old communicator");
  if (hetcommCommFinalize(next) != hetcommSuccess || hetcommCommDestroy(next) != hetcommSuccess)
    failWith(rank, "finalizing the shrunk communicator");
  std::printf("rank %d: shrink ok: rank %d of %d now; %.3f s from the error to the new communicator\n", rank, newRank,
              newN, shrinkSec);
  return 0;
}
