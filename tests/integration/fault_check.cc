// fault_check: a rank that dies in the middle of a collective turns into an error on every other rank within
// HETCOMM_TIMEOUT, never a hang, and the error names the rank that died. Forks its own ranks (hetcomm-run would
// stop the survivors as soon as one rank dies, which is what a launcher should do, but here the survivors are the
// subject).
//
//   fault_check NRANKS VICTIM MODE [COLL]   MODE: kill (SIGKILL mid-run) | stall (stops calling, stays alive)
//                                           COLL: allreduce (default), allgather, reducescatter, broadcast, reduce,
//                                                 alltoall, sendrecv (a ring of sends and receives)
// Exits 0 when every survivor saw an error (remote error for kill, timeout for stall) in time, naming the victim
// as the cause (the reason innermost in "rank X aborted: ..." chains). Prints one line per survivor: its error
// time and whether the blame was right, for the fault matrix (tests/integration/fault_matrix.sh).
#include <hetcomm/hetcomm.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// One call of the collective under test on buf (count elements per rank's block where the collective has blocks).
hetcommResult_t runColl(const std::string& coll, std::vector<float>& buf, size_t count, int rank, int n,
                        hetcommComm_t comm) {
  float* b = buf.data();
  if (coll == "allreduce") return hetcommAllReduce(b, b, count, hetcommFloat32, hetcommSum, comm, nullptr);
  if (coll == "allgather") return hetcommAllGather(b + rank * count, b, count, hetcommFloat32, comm, nullptr);
  if (coll == "reducescatter")
    return hetcommReduceScatter(b, b + rank * count, count, hetcommFloat32, hetcommSum, comm, nullptr);
  if (coll == "broadcast") return hetcommBroadcast(b, b, count * n, hetcommFloat32, 0, comm, nullptr);
  if (coll == "reduce") return hetcommReduce(b, b, count * n, hetcommFloat32, hetcommSum, 0, comm, nullptr);
  if (coll == "alltoall") {
    static std::vector<float> out;
    out.resize(buf.size());
    return hetcommAlltoAll(b, out.data(), count, hetcommFloat32, comm, nullptr);
  }
  // sendrecv: every rank sends to the next and receives from the previous, as one group
  hetcommGroupStart();
  hetcommSend(b, count * n / 2, hetcommFloat32, (rank + 1) % n, comm, nullptr);
  hetcommRecv(b + count * n / 2, count * n / 2, hetcommFloat32, (rank + n - 1) % n, comm, nullptr);
  return hetcommGroupEnd();
}

// The cause a message gives: the reason innermost in "rank X aborted: ... rank Y aborted: REASON" chains.
std::string rootCause(const std::string& msg) {
  const std::string key = "aborted: ";
  size_t at = msg.rfind(key);
  return at == std::string::npos ? msg : msg.substr(at + key.size());
}

// Whether text blames rank v: "rank v " / "rank v(" / "rank v," appear in it.
bool names(const std::string& text, int v) {
  for (const char* tail : {" ", "(", ",", ":"})
    if (text.find("rank " + std::to_string(v) + tail) != std::string::npos) return true;
  return false;
}

int runRank(const hetcommUniqueId& id, int rank, int n, int victim, bool stall, double timeoutSec,
            const std::string& coll) {
  hetcommConfig_t config = HETCOMM_CONFIG_INITIALIZER;
  config.timeoutSec = static_cast<int>(timeoutSec);
  hetcommComm_t comm;
  hetcommResult_t r = hetcommCommInitRankConfig(&comm, n, id, rank, &config);
  if (r != hetcommSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s\n", rank, hetcommGetLastError(nullptr));
    return 10;
  }
  std::vector<float> buf(4 << 20, 1.0f);  // 16 MiB: long enough to die in the middle
  const size_t count = buf.size() / static_cast<size_t>(n);
  for (int iter = 0;; ++iter) {
    if (rank == victim && iter == 3) {
      if (stall) {
        pause();  // alive, silent, until the parent kills it
      }
      raise(SIGKILL);
    }
    auto t0 = std::chrono::steady_clock::now();
    r = runColl(coll, buf, count, rank, n, comm);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == hetcommSuccess) continue;
    const char* msg = hetcommGetLastError(nullptr);
    hetcommResult_t async = hetcommSuccess;
    hetcommCommGetAsyncError(comm, &async);
    std::printf("rank %d: iteration %d failed after %.2f s with %s (async %d): %s\n", rank, iter, took,
                hetcommGetErrorString(r), static_cast<int>(async), msg);
    bool expected = stall ? (r == hetcommTimeout || r == hetcommRemoteError) : r == hetcommRemoteError;
    bool inTime = took <= timeoutSec + 5;
    // A stalled rank is still alive: the survivors blame whoever they waited for. A killed one must be named.
    const bool blamed = stall || names(rootCause(msg), victim);
    std::printf("fault %s %s rank %d: error after %.3f s, blame %s\n", coll.c_str(), stall ? "stall" : "kill", rank,
                took, blamed ? "right" : "WRONG");
    std::fflush(stdout);
    hetcommCommAbort(comm);
    // FAULT_BLAME=report: the blame is printed, not required (a transport whose blame is known to miss).
    const char* mode = std::getenv("FAULT_BLAME");
    const bool requireBlame = !(mode && std::strcmp(mode, "report") == 0);
    return expected && inTime && async == r && (blamed || !requireBlame) ? 0 : 11;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: fault_check NRANKS VICTIM kill|stall [COLL]\n");
    return 2;
  }
  const std::string coll = argc == 5 ? argv[4] : "allreduce";
  if (coll != "allreduce" && coll != "allgather" && coll != "reducescatter" && coll != "broadcast" &&
      coll != "reduce" && coll != "alltoall" && coll != "sendrecv") {
    std::fprintf(stderr, "fault_check: unknown collective %s\n", coll.c_str());
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
      _exit(runRank(id, r, n, victim, stall, timeoutSec, coll));
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
