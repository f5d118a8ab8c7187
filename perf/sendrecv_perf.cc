// sendrecv_perf: a ring shift with hetcommSend / hetcommRecv, nccl-tests style. Each rank sends its buffer to
// rank + 1 and receives rank - 1's, both in one group so neither waits for the other. In place is timed but, as
// in nccl-tests, not checked (#wrong N/A).
#include "perf/common/perf_common.h"

namespace {
using namespace hetcomm::perf;

const CollTest kSendRecv{
    .name = "sendrecv_perf",
    .reduces = false,
    .rooted = false,
    .checkInPlace = false,
    .bytesScaleWithRanks = false,
    .busBwFactor = [](int) { return 1.0; },
    .counts = [](size_t count, size_t, int) { return sameCounts(count); },
    .source =
        [](size_t k, const Layout& l) {
          return Source{(l.rank - 1 + l.nranks) % l.nranks, k};
        },
    .checksRank = nullptr,
    .run =
        [](const RunArgs& a) {
          HC_PERF_CHECK(hetcommGroupStart());
          HC_PERF_CHECK(hetcommSend(a.sendbuff, a.count, a.type, (a.rank + 1) % a.nranks, a.comm, a.stream));
          HC_PERF_CHECK(hetcommRecv(a.recvbuff, a.count, a.type, (a.rank - 1 + a.nranks) % a.nranks, a.comm, a.stream));
          HC_PERF_CHECK(hetcommGroupEnd());
        },
};
}  // namespace

int main(int argc, char** argv) { return runPerfTest(kSendRecv, argc, argv); }
