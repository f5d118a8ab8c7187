// all_reduce_perf: hetcommAllReduce, nccl-tests style. Every rank ends with the reduction of every element.
#include "perf/common/perf_common.h"

namespace {
using namespace hetcomm::perf;

const CollTest kAllReduce{
    .name = "all_reduce_perf",
    .reduces = true,
    .rooted = false,
    .checkInPlace = true,
    .bytesScaleWithRanks = false,
    .busBwFactor = [](int n) { return 2.0 * (n - 1) / n; },
    .counts = [](size_t count, size_t, int) { return sameCounts(count); },
    .source =
        [](size_t k, const Layout&) {
          return Source{kAllRanks, k};
        },
    .checksRank = nullptr,
    .run =
        [](const RunArgs& a) {
          HC_PERF_CHECK(hetcommAllReduce(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.comm, a.stream));
        },
    .algo = hetcommCollAllReduce,
};
}  // namespace

int main(int argc, char** argv) { return runPerfTest(kAllReduce, argc, argv); }
