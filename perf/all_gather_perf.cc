// all_gather_perf: hetcommAllGather, nccl-tests style. Block j of every rank's receive buffer is rank j's input;
// the count column is the per-rank count, the size column the whole receive buffer.
#include "perf/common/perf_common.h"

namespace {
using namespace hetcomm::perf;

const CollTest kAllGather{
    .name = "all_gather_perf",
    .reduces = false,
    .rooted = false,
    .checkInPlace = true,
    .bytesScaleWithRanks = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .counts =
        [](size_t count, size_t eltSize, int n) {
          const size_t base = perRankCount(count, eltSize, n);  // in place: sendbuff = recvbuff + rank * base
          return CollCounts{base, base * n, base, base, 0};
        },
    .source =
        [](size_t k, const Layout& l) {
          return Source{static_cast<int>(k / l.count), k % l.count};
        },
    .checksRank = nullptr,
    .run =
        [](const RunArgs& a) {
          HC_PERF_CHECK(hetcommAllGather(a.sendbuff, a.recvbuff, a.count, a.type, a.comm, a.stream));
        },
    .algo = hetcommCollAllGather,
};
}  // namespace

int main(int argc, char** argv) { return runPerfTest(kAllGather, argc, argv); }
