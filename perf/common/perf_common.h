// perf_common.h: the shared body of the hetcomm perf tests (nccl-tests' common.cu, host-side): flags, timing,
// validation and the result table. A tool is a CollTest descriptor plus a main() of one line:
//
//   int main(int argc, char** argv) { return hetcomm::perf::runPerfTest(kAllReduceTest, argc, argv); }
//
// Like any user program it uses only the public API <hetcomm/hetcomm.h>; it never includes library internals.
// Errors are exceptions here (perf/ may throw); runPerfTest turns them into a message on the failing rank's
// stderr, an aborted communicator and a non-zero exit code.
#pragma once

#include <hetcomm/hetcomm.h>

#include <cstddef>
#include <stdexcept>

#include "perf/common/perf_data.h"

namespace hetcomm::perf {

// A failed hetcomm call: the call's text, hetcommGetErrorString and hetcommGetLastError(NULL), with file:line.
class CallError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
[[noreturn]] void throwCallError(const char* call, hetcommResult_t result, const char* file, int line);

// Runs a hetcomm call; throws CallError unless it returns hetcommSuccess.
#define HC_PERF_CHECK(call)                                                        \
  do {                                                                             \
    const hetcommResult_t hc_perf_result_ = (call);                                \
    if (hc_perf_result_ != hetcommSuccess) {                                       \
      ::hetcomm::perf::throwCallError(#call, hc_perf_result_, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

// Element counts of one row, as nccl-tests' getCollByteCount computes them (all in elements of the datatype).
struct CollCounts {
  size_t sendCount;          // elements a rank's send buffer holds
  size_t recvCount;          // elements of the receive buffer that are checked
  size_t paramCount;         // the count argument of the call; printed in the "count" column
  size_t sendInplaceOffset;  // in place: sendbuff = recvbuff + sendInplaceOffset * rank
  size_t recvInplaceOffset;  // in place: recvbuff = recvbuff + recvInplaceOffset * rank
};

// count elements split over nranks, rounded down to a multiple of 16 bytes (nccl-tests' per-rank count for
// allgather, reduce-scatter and alltoall).
size_t perRankCount(size_t count, size_t eltSize, int nranks);
// The counts of a collective whose buffers all hold `count` elements (allreduce, broadcast, reduce, sendrecv).
CollCounts sameCounts(size_t count);

// One call of the collective, with the pointers already chosen for in-place or out-of-place.
struct RunArgs {
  const void* sendbuff;
  void* recvbuff;
  size_t count;  // CollCounts::paramCount
  hetcommDataType_t type;
  hetcommRedOp_t op;  // reductions only
  int root;           // rooted collectives only
  int rank;
  int nranks;
  hetcommComm_t comm;
  hetcommStream_t stream;  // NULL with -z 1: the call blocks until done
};

// What one tool measures. Every rank fills its send buffer with inputValue(rank, i); `source` says what each
// element of the receive buffer must then hold.
struct CollTest {
  const char* name;                   // "all_reduce_perf": printed in the header and footer
  bool reduces;                       // takes an op (-o; the redop column), else the column says "none"
  bool rooted;                        // takes a root (-r; the root column), else the column says -1
  bool checkInPlace;                  // false: in-place #wrong is N/A (alltoall, sendrecv), as in nccl-tests
  bool bytesScaleWithRanks;           // algbw counts paramCount * nranks elements (allgather, reduce-scatter, alltoall)
  double (*busBwFactor)(int nranks);  // busbw = algbw * factor
  CollCounts (*counts)(size_t count, size_t eltSize, int nranks);  // count = row bytes / eltSize
  SourceFn source;                                                 // where recv element k comes from
  bool (*checksRank)(const Layout& layout);                        // nullptr: every rank's recv buffer is checked
  void (*run)(const RunArgs& args);                                // one call; throws CallError on failure
  // The collective for hetcommCommGetAlgorithm: rows then show the algorithm and its predicted time (hetcomm's
  // own columns after nccl-tests' ones). -1: none (sendrecv).
  int algo = -1;
};

// Parses nccl-tests' flags, initialises a communicator from the launcher's environment (hetcomm-run, mpirun,
// srun, torchrun), runs every (datatype, op, root, size) row and prints the table from rank 0. Returns the
// process exit code: 0, or non-zero after bad flags, a failed call or any wrong element.
int runPerfTest(const CollTest& test, int argc, char** argv);

}  // namespace hetcomm::perf
