// fault_check: a rank that dies in the middle of an allreduce turns into an error on every other rank within
// HETCOMM_TIMEOUT, never a hang. Forks its own ranks (hetcomm-run would stop the survivors as soon as one
// rank dies, which is what a launcher should do, but here the survivors are the subject).
//
//   fault_check NRANKS VICTIM MODE   MODE: kill (SIGKILL mid-run) | stall (stops calling, stays alive)
// Exits 0 when every survivor saw an error (remote error for kill, timeout for stall) in time.
#include <hetcomm/hetcomm.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int runRank(const hetcommUniqueId& id, int rank, int n, int victim, bool stall, double timeoutSec) {
  hetcommConfig_t config = HETCOMM_CONFIG_INITIALIZER;
  config.timeoutSec = static_cast<int>(timeoutSec);
  hetcommComm_t comm;
  hetcommResult_t r = hetcommCommInitRankConfig(&comm, n, id, rank, &config);
  if (r != hetcommSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s\n", rank, hetcommGetLastError(nullptr));
    return 10;
  }
  std::vector<float> buf(4 << 20, 1.0f);  // 16 MiB: long enough to die in the middle
  for (int iter = 0;; ++iter) {
    if (rank == victim && iter == 3) {
      if (stall) {
        pause();  // alive, silent, until the parent kills it
      }
      raise(SIGKILL);
    }
    auto t0 = std::chrono::steady_clock::now();
    r = hetcommAllReduce(buf.data(), buf.data(), buf.size(), hetcommFloat32, hetcommSum, comm, nullptr);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == hetcommSuccess) continue;
    const char* msg = hetcommGetLastError(nullptr);
    hetcommResult_t async = hetcommSuccess;
    hetcommCommGetAsyncError(comm, &async);
    std::printf("rank %d: iteration %d failed after %.2f s with %s (async %d): %s\n", rank, iter, took,
                hetcommGetErrorString(r), static_cast<int>(async), msg);
    bool expected = stall ? (r == hetcommTimeout || r == hetcommRemoteError) : r == hetcommRemoteError;
    bool inTime = took <= timeoutSec + 5;
    hetcommCommAbort(comm);
    return expected && inTime && async == r ? 0 : 11;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fault_check NRANKS VICTIM kill|stall\n");
    return 2;
  }
  int n = std::atoi(argv[1]), victim = std::atoi(argv[2]);
  bool stall = std::strcmp(argv[3], "stall") == 0;
  const double timeoutSec = stall ? 5 : 60;
  // Fork before any thread exists (the store's thread starts with the unique id): a child forked from a
  // multi-threaded process may inherit locks held by threads it does not have (UCX's memory hooks hold one
  // around every mmap). The children get the id through a pipe.
  std::vector<pid_t> pids;
  std::vector<int> idPipes;
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return 3;
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      hetcommUniqueId id;
      size_t got = 0;
      while (got < sizeof(id)) {
        ssize_t k = read(fds[0], reinterpret_cast<char*>(&id) + got, sizeof(id) - got);
        if (k <= 0) _exit(4);
        got += static_cast<size_t>(k);
      }
      _exit(runRank(id, r, n, victim, stall, timeoutSec));
    }
    close(fds[0]);
    pids.push_back(pid);
    idPipes.push_back(fds[1]);
  }
  hetcommUniqueId id;
  if (hetcommGetUniqueId(&id) != hetcommSuccess) return 3;  // the store runs in this (parent) process
  for (int fd : idPipes) {
    if (write(fd, &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) return 3;
    close(fd);
  }
  int failures = 0;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    int status = 0;
    waitpid(pids[r], &status, 0);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) std::fprintf(stderr, "survivor rank %d: bad exit status %d\n", r, status);
    failures += !ok;
  }
  kill(pids[victim], SIGKILL);
  waitpid(pids[victim], nullptr, 0);
  std::printf("fault_check %s: %d passed, %d failed\n", argv[3], n - 1 - failures, failures);
  return failures == 0 ? 0 : 1;
}
