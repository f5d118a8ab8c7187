// alltoall_perf: hetcommAlltoAll, nccl-tests style. Block j of rank r's receive buffer is block r of rank j's
// send buffer. In place (sendbuff == recvbuff) is timed but, as in nccl-tests, not checked (#wrong N/A).
#include "perf/common/perf_common.h"

namespace {
using namespace hetcomm::perf;

const CollTest kAlltoAll{
    .name = "alltoall_perf",
    .reduces = false,
    .rooted = false,
    .checkInPlace = false,
    .bytesScaleWithRanks = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .counts =
        [](size_t count, size_t eltSize, int n) {
          const size_t base = perRankCount(count, eltSize, n);
          return CollCounts{base * n, base * n, base, 0, 0};
        },
    .source =
        [](size_t k, const Layout& l) {
          return Source{static_cast<int>(k / l.count), l.rank * l.count + k % l.count};
        },
    .checksRank = nullptr,
    .run =
        [](const RunArgs& a) {
          HC_PERF_CHECK(hetcommAlltoAll(a.sendbuff, a.recvbuff, a.count, a.type, a.comm, a.stream));
        },
    .algo = hetcommCollAlltoAll,
};
}  // namespace

int main(int argc, char** argv) { return runPerfTest(kAlltoAll, argc, argv); }
