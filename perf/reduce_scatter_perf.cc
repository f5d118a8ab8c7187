// reduce_scatter_perf: hetcommReduceScatter, nccl-tests style. Rank r receives block r of the reduction; the
// count column is the per-rank count, the size column the whole send buffer.
#include "perf/common/perf_common.h"

namespace {
using namespace hetcomm::perf;

const CollTest kReduceScatter{
    .name = "reduce_scatter_perf",
    .reduces = true,
    .rooted = false,
    .checkInPlace = true,
    .bytesScaleWithRanks = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .counts =
        [](size_t count, size_t eltSize, int n) {
          const size_t base = perRankCount(count, eltSize, n);  // in place: recvbuff = sendbuff + rank * base
          return CollCounts{base * n, base, base, 0, base};
        },
    .source =
        [](size_t k, const Layout& l) {
          return Source{kAllRanks, l.rank * l.count + k};
        },
    .checksRank = nullptr,
    .run =
        [](const RunArgs& a) {
          HC_PERF_CHECK(hetcommReduceScatter(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.comm, a.stream));
        },
    .algo = hetcommCollReduceScatter,
};
}  // namespace

int main(int argc, char** argv) { return runPerfTest(kReduceScatter, argc, argv); }
