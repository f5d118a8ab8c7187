// broadcast_perf: hetcommBroadcast, nccl-tests style. The root's input ends up in every rank's receive buffer.
#include "perf/common/perf_common.h"

namespace {
using namespace hetcomm::perf;

const CollTest kBroadcast{
    .name = "broadcast_perf",
    .reduces = false,
    .rooted = true,
    .checkInPlace = true,
    .bytesScaleWithRanks = false,
    .busBwFactor = [](int) { return 1.0; },
    .counts = [](size_t count, size_t, int) { return sameCounts(count); },
    .source =
        [](size_t k, const Layout& l) {
          return Source{l.root, k};
        },
    .checksRank = nullptr,
    .run =
        [](const RunArgs& a) {
          HC_PERF_CHECK(hetcommBroadcast(a.sendbuff, a.recvbuff, a.count, a.type, a.root, a.comm, a.stream));
        },
    .algo = hetcommCollBroadcast,
};
}  // namespace

int main(int argc, char** argv) { return runPerfTest(kBroadcast, argc, argv); }
