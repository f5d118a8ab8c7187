// reduce_perf: hetcommReduce, nccl-tests style. Only the root's receive buffer holds the result and is checked.
#include "perf/common/perf_common.h"

namespace {
using namespace hetcomm::perf;

const CollTest kReduce{
    .name = "reduce_perf",
    .reduces = true,
    .rooted = true,
    .checkInPlace = true,
    .bytesScaleWithRanks = false,
    .busBwFactor = [](int) { return 1.0; },
    .counts = [](size_t count, size_t, int) { return sameCounts(count); },
    .source =
        [](size_t k, const Layout&) {
          return Source{kAllRanks, k};
        },
    .checksRank = [](const Layout& l) { return l.rank == l.root; },
    .run =
        [](const RunArgs& a) {
          HC_PERF_CHECK(hetcommReduce(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.root, a.comm, a.stream));
        },
    .algo = hetcommCollReduce,
};
}  // namespace

int main(int argc, char** argv) { return runPerfTest(kReduce, argc, argv); }
