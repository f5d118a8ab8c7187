// coll_check: run under hetcomm-run -np N. Every collective x datatype x op, odd counts, in place and out of
// place, blocking and on streams, grouped send/recv, and communicators made by hetcommCommSplit, checked against
// a serial reference each rank computes for itself (inputs are exact small integers, as in nccl-tests).
// Uses the public API only. Prints "N passed, M failed" on rank 0 and exits non-zero on any failure.
#include <hetcomm/hetcomm.h>

#include "perf/common/perf_data.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int gRank = 0, gSize = 1, gFailed = 0, gPassed = 0;

#define CHECK_HC(call)                                                                              \
  do {                                                                                              \
    hetcommResult_t r_ = (call);                                                                    \
    if (r_ != hetcommSuccess) {                                                                     \
      std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", gRank, #call, hetcommGetErrorString(r_), \
                   hetcommGetLastError(nullptr));                                                   \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

// The perf tools' datatype helpers: one copy for every client of the public API.
using hetcomm::perf::opName;
using hetcomm::perf::typeName;
using hetcomm::perf::typeSize;

bool isUnsigned(hetcommDataType_t t) { return t == hetcommUint8 || t == hetcommUint32 || t == hetcommUint64; }
bool isFloat(hetcommDataType_t t) {
  return t == hetcommFloat16 || t == hetcommFloat32 || t == hetcommFloat64 || t == hetcommBfloat16;
}

// Exact small inputs; each rank can compute every rank's.
long long inputValue(int rank, size_t i, hetcommDataType_t t, hetcommRedOp_t op) {
  if (op == hetcommProd) return ((rank + 3 * i) % 5 == 0) ? 2 : 1;
  long long v = static_cast<long long>((rank * 7 + i * 13) % 5);
  return isUnsigned(t) ? v : v - 2;
}

// Stores v (an exact small integer, or sum/n for avg) in element i of a buffer of type t.
void store(void* base, size_t i, hetcommDataType_t t, double v) {
  switch (t) {
    case hetcommInt8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(static_cast<long long>(v));
      break;
    case hetcommUint8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(static_cast<long long>(v));
      break;
    case hetcommInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case hetcommUint32:
      static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(static_cast<long long>(v));
      break;
    case hetcommInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case hetcommUint64:
      static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(static_cast<long long>(v));
      break;
    case hetcommFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case hetcommFloat64:
      static_cast<double*>(base)[i] = v;
      break;
    case hetcommFloat16:
      static_cast<uint16_t*>(base)[i] = hetcomm::perf::floatToHalf(static_cast<float>(v));
      break;
    case hetcommBfloat16:
      static_cast<uint16_t*>(base)[i] = hetcomm::perf::floatToBfloat16(static_cast<float>(v));
      break;
    default:
      break;
  }
}

double load(const void* base, size_t i, hetcommDataType_t t) {
  switch (t) {
    case hetcommInt8:
      return static_cast<const int8_t*>(base)[i];
    case hetcommUint8:
      return static_cast<const uint8_t*>(base)[i];
    case hetcommInt32:
      return static_cast<const int32_t*>(base)[i];
    case hetcommUint32:
      return static_cast<const uint32_t*>(base)[i];
    case hetcommInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case hetcommUint64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case hetcommFloat32:
      return static_cast<const float*>(base)[i];
    case hetcommFloat64:
      return static_cast<const double*>(base)[i];
    case hetcommFloat16:
      return hetcomm::perf::halfToFloat(static_cast<const uint16_t*>(base)[i]);
    case hetcommBfloat16:
      return hetcomm::perf::bfloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default:
      return 0;
  }
}

// The reduction of every rank's element i, with the wrap-around of the type for integers.
double reference(size_t i, hetcommDataType_t t, hetcommRedOp_t op, int n, size_t offset) {
  std::vector<unsigned char> tmp(8);
  double acc = static_cast<double>(inputValue(0, offset + i, t, op));
  for (int r = 1; r < n; ++r) {
    double v = static_cast<double>(inputValue(r, offset + i, t, op));
    switch (op) {
      case hetcommSum:
      case hetcommAvg:
        acc += v;
        break;
      case hetcommProd:
        acc *= v;
        break;
      case hetcommMax:
        acc = acc > v ? acc : v;
        break;
      case hetcommMin:
        acc = acc < v ? acc : v;
        break;
      default:
        break;
    }
  }
  if (op == hetcommAvg) {
    if (isFloat(t))
      acc /= n;
    else
      acc = std::trunc(acc / n);
  }
  store(tmp.data(), 0, t, acc);  // wrap/round like the type does
  return load(tmp.data(), 0, t);
}

void report(bool ok, const std::string& what) {
  if (ok) {
    ++gPassed;
  } else {
    ++gFailed;
    std::fprintf(stderr, "rank %d: FAILED %s\n", gRank, what.c_str());
  }
}

bool close(double got, double want, hetcommDataType_t t, hetcommRedOp_t op) {
  if (op == hetcommAvg && isFloat(t)) {
    double tol = (t == hetcommFloat16 || t == hetcommBfloat16) ? 1e-2 : 1e-6;
    return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
  }
  return got == want;
}

void checkAllReduce(hetcommComm_t comm, int rank, int n, hetcommDataType_t t, hetcommRedOp_t op, size_t count,
                    bool inPlace, hetcommStream_t stream) {
  size_t es = typeSize(t);
  std::vector<unsigned char> send(count * es + 1), recv(count * es + 1, 0x5a);
  for (size_t i = 0; i < count; ++i) store(send.data(), i, t, static_cast<double>(inputValue(rank, i, t, op)));
  void* out = inPlace ? send.data() : recv.data();
  CHECK_HC(hetcommAllReduce(send.data(), out, count, t, op, comm, stream));
  if (stream) CHECK_HC(hetcommStreamSynchronize(stream));
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i)
    if (!close(load(out, i, t), reference(i, t, op, n, 0), t, op)) ++bad;
  char what[160];
  std::snprintf(what, sizeof(what), "allreduce n=%d count=%zu %s %s %s%s: %zu wrong", n, count, typeName(t), opName(op),
                inPlace ? "in-place" : "out-of-place", stream ? " stream" : "", bad);
  report(bad == 0 && (inPlace || recv[count * es] == 0x5a), what);
}

void checkOthers(hetcommComm_t comm, int rank, int n, hetcommDataType_t t, size_t count) {
  size_t es = typeSize(t);
  const hetcommRedOp_t op = hetcommSum;
  char what[160];
  // reduce-scatter: send n*count, receive count
  {
    std::vector<unsigned char> send(n * count * es), recv(count * es + 1);
    for (size_t i = 0; i < n * count; ++i) store(send.data(), i, t, static_cast<double>(inputValue(rank, i, t, op)));
    CHECK_HC(hetcommReduceScatter(send.data(), recv.data(), count, t, op, comm, nullptr));
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i)
      if (load(recv.data(), i, t) != reference(i, t, op, n, rank * count)) ++bad;
    std::snprintf(what, sizeof(what), "reducescatter n=%d count=%zu %s: %zu wrong", n, count, typeName(t), bad);
    report(bad == 0, what);
  }
  // allgather in place
  {
    std::vector<unsigned char> buf(n * count * es);
    for (size_t i = 0; i < count; ++i)
      store(buf.data() + rank * count * es, i, t, static_cast<double>(inputValue(rank, i, t, op)));
    CHECK_HC(hetcommAllGather(buf.data() + rank * count * es, buf.data(), count, t, comm, nullptr));
    size_t bad = 0;
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        if (load(buf.data(), p * count + i, t) != static_cast<double>(inputValue(p, i, t, op))) ++bad;
    std::snprintf(what, sizeof(what), "allgather n=%d count=%zu %s in-place: %zu wrong", n, count, typeName(t), bad);
    report(bad == 0, what);
  }
  // broadcast and reduce from the last rank
  int root = n - 1;
  {
    std::vector<unsigned char> buf(count * es);
    for (size_t i = 0; i < count; ++i) store(buf.data(), i, t, static_cast<double>(inputValue(rank, i, t, op)));
    CHECK_HC(hetcommBroadcast(buf.data(), buf.data(), count, t, root, comm, nullptr));
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i)
      if (load(buf.data(), i, t) != static_cast<double>(inputValue(root, i, t, op))) ++bad;
    std::snprintf(what, sizeof(what), "broadcast n=%d count=%zu %s root %d: %zu wrong", n, count, typeName(t), root,
                  bad);
    report(bad == 0, what);
  }
  {
    std::vector<unsigned char> send(count * es), recv(count * es);
    for (size_t i = 0; i < count; ++i) store(send.data(), i, t, static_cast<double>(inputValue(rank, i, t, op)));
    CHECK_HC(hetcommReduce(send.data(), rank == root ? recv.data() : nullptr, count, t, op, root, comm, nullptr));
    size_t bad = 0;
    if (rank == root)
      for (size_t i = 0; i < count; ++i)
        if (load(recv.data(), i, t) != reference(i, t, op, n, 0)) ++bad;
    std::snprintf(what, sizeof(what), "reduce n=%d count=%zu %s root %d: %zu wrong", n, count, typeName(t), root, bad);
    report(bad == 0, what);
  }
  // alltoall: block j of rank r holds inputValue(r, j*count + i)
  {
    std::vector<unsigned char> send(n * count * es), recv(n * count * es);
    for (size_t i = 0; i < n * count; ++i) store(send.data(), i, t, static_cast<double>(inputValue(rank, i, t, op)));
    CHECK_HC(hetcommAlltoAll(send.data(), recv.data(), count, t, comm, nullptr));
    size_t bad = 0;
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        if (load(recv.data(), p * count + i, t) != static_cast<double>(inputValue(p, rank * count + i, t, op))) ++bad;
    std::snprintf(what, sizeof(what), "alltoall n=%d count=%zu %s: %zu wrong", n, count, typeName(t), bad);
    report(bad == 0, what);
  }
  // grouped send/recv around the ring, both directions at once
  {
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<unsigned char> s1(count * es), s2(count * es), r1(count * es), r2(count * es);
    for (size_t i = 0; i < count; ++i) {
      store(s1.data(), i, t, static_cast<double>(inputValue(rank, i, t, op)));
      store(s2.data(), i, t, static_cast<double>(inputValue(rank + 1, i, t, op)));
    }
    CHECK_HC(hetcommGroupStart());
    CHECK_HC(hetcommSend(s1.data(), count, t, next, comm, nullptr));
    CHECK_HC(hetcommSend(s2.data(), count, t, prev, comm, nullptr));
    CHECK_HC(hetcommRecv(r1.data(), count, t, prev, comm, nullptr));
    CHECK_HC(hetcommRecv(r2.data(), count, t, next, comm, nullptr));
    CHECK_HC(hetcommGroupEnd());
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      if (load(r1.data(), i, t) != static_cast<double>(inputValue(prev, i, t, op))) ++bad;
      if (load(r2.data(), i, t) != static_cast<double>(inputValue(next + 1, i, t, op))) ++bad;
    }
    std::snprintf(what, sizeof(what), "sendrecv n=%d count=%zu %s: %zu wrong", n, count, typeName(t), bad);
    report(bad == 0, what);
  }
}

void runSuite(hetcommComm_t comm, bool full) {
  int rank, n;
  CHECK_HC(hetcommCommUserRank(comm, &rank));
  CHECK_HC(hetcommCommCount(comm, &n));
  hetcommStream_t stream;
  CHECK_HC(hetcommStreamCreate(&stream));
  const hetcommDataType_t types[] = {hetcommInt8,   hetcommUint8,   hetcommInt32,   hetcommUint32,  hetcommInt64,
                                     hetcommUint64, hetcommFloat16, hetcommFloat32, hetcommFloat64, hetcommBfloat16};
  const hetcommRedOp_t ops[] = {hetcommSum, hetcommProd, hetcommMax, hetcommMin, hetcommAvg};
  for (hetcommDataType_t t : types)
    for (hetcommRedOp_t op : ops)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}})
        checkAllReduce(comm, rank, n, t, op, count, count % 2 == 1, count == 7 ? stream : nullptr);
  if (full) {
    checkAllReduce(comm, rank, n, hetcommFloat32, hetcommSum, (1 << 20) + 3, false, stream);
    checkAllReduce(comm, rank, n, hetcommBfloat16, hetcommSum, (1 << 18) + 5, true, nullptr);
  }
  for (hetcommDataType_t t : types) checkOthers(comm, rank, n, t, 13);
  checkOthers(comm, rank, n, hetcommFloat32, full ? (1 << 18) + 1 : 1001);
  CHECK_HC(hetcommStreamDestroy(stream));
}

}  // namespace

int main() {
  hetcommComm_t world;
  CHECK_HC(hetcommCommInitFromEnv(&world));
  CHECK_HC(hetcommCommUserRank(world, &gRank));
  CHECK_HC(hetcommCommCount(world, &gSize));
  runSuite(world, true);
  // Split into even and odd ranks, ordered backwards by key; every collective again on each half.
  hetcommComm_t half;
  CHECK_HC(hetcommCommSplit(world, gRank % 2, gSize - gRank, &half, nullptr));
  int hr, hn;
  CHECK_HC(hetcommCommUserRank(half, &hr));
  CHECK_HC(hetcommCommCount(half, &hn));
  int expectN = (gSize + (gRank % 2 == 0 ? 1 : 0)) / 2;
  report(hn == expectN, "split size");
  runSuite(half, false);
  // A rank that takes no part gets a NULL communicator.
  hetcommComm_t none = reinterpret_cast<hetcommComm_t>(1);
  CHECK_HC(hetcommCommSplit(world, gRank == 0 ? HETCOMM_SPLIT_NOCOLOR : 0, 0, &none, nullptr));
  report((gRank == 0) == (none == nullptr), "split with HETCOMM_SPLIT_NOCOLOR");
  if (none) {
    runSuite(none, false);
    CHECK_HC(hetcommCommDestroy(none));
  }
  CHECK_HC(hetcommCommFinalize(half));
  CHECK_HC(hetcommCommDestroy(half));
  // Totals over all ranks.
  int counts[2] = {gPassed, gFailed};
  CHECK_HC(hetcommAllReduce(counts, counts, 2, hetcommInt32, hetcommSum, world, nullptr));
  CHECK_HC(hetcommCommFinalize(world));
  CHECK_HC(hetcommCommDestroy(world));
  if (gRank == 0) std::printf("coll_check on %d ranks: %d passed, %d failed\n", gSize, counts[0], counts[1]);
  return counts[1] == 0 ? 0 : 1;
}
