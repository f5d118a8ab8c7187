// nccl_abi_check.cc: a program written for NCCL, compiled against NVIDIA's nccl.h and linked with -lnccl, that
// checks every call's results. Run under hetcomm-run with hetcomm's libnccl.so.2 first on the library path, it
// tests the NCCL-ABI library; run with NVIDIA's, it is the reference.
//
//   nccl_abi_check DIR host|device [--bench]
//
// DIR: a directory shared by the ranks, where rank 0 leaves the unique id (NCCL programs pass it out of band; this
// one has no MPI). host: host buffers, CUDA is never touched (calls on stream 0 are blocking). device: cudaMalloc'd
// buffers and calls on a CUDA stream, plus stream-ordering checks; the CUDA runtime is loaded with dlopen so the
// same binary runs where there is none. --bench (device): allreduce bus bandwidth by size, with the bound of a
// device-to-host plus host-to-device copy of the same bytes, and the time of an 8-byte call.
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int gRank = 0, gSize = 1, gPassed = 0, gFailed = 0;
int gMe = 0;  // this rank in the communicator under test
bool gDevice = false;

#define CHECK_NCCL(call)                                                                         \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess) {                                                                     \
      std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", gRank, #call, ncclGetErrorString(r_), \
                   ncclGetLastError(nullptr));                                                   \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

void report(bool ok, const std::string& what) {
  if (ok) {
    ++gPassed;
    return;
  }
  ++gFailed;
  std::fprintf(stderr, "rank %d: FAILED %s\n", gRank, what.c_str());
}

// ---- the CUDA runtime, loaded only in device mode ----
struct Cuda {
  int (*malloc)(void**, size_t);
  int (*free)(void*);
  int (*memcpy)(void*, const void*, size_t, int);
  int (*memcpyAsync)(void*, const void*, size_t, int, cudaStream_t);
  int (*memsetAsync)(void*, int, size_t, cudaStream_t);
  int (*streamCreate)(cudaStream_t*);
  int (*streamSynchronize)(cudaStream_t);
  int (*deviceSynchronize)();
  int (*mallocHost)(void**, size_t);
  int (*launchHostFunc)(cudaStream_t, void (*)(void*), void*);
} cu;

void loadCuda() {
  void* h = nullptr;
  for (const char* n : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"})
    if ((h = dlopen(n, RTLD_NOW))) break;
  if (!h) {
    std::fprintf(stderr, "device mode needs libcudart\n");
    std::exit(2);
  }
  auto sym = [&](const char* n) {
    void* p = dlsym(h, n);
    if (!p) {
      std::fprintf(stderr, "libcudart lacks %s\n", n);
      std::exit(2);
    }
    return p;
  };
  cu.malloc = reinterpret_cast<decltype(cu.malloc)>(sym("cudaMalloc"));
  cu.free = reinterpret_cast<decltype(cu.free)>(sym("cudaFree"));
  cu.memcpy = reinterpret_cast<decltype(cu.memcpy)>(sym("cudaMemcpy"));
  cu.memcpyAsync = reinterpret_cast<decltype(cu.memcpyAsync)>(sym("cudaMemcpyAsync"));
  cu.memsetAsync = reinterpret_cast<decltype(cu.memsetAsync)>(sym("cudaMemsetAsync"));
  cu.streamCreate = reinterpret_cast<decltype(cu.streamCreate)>(sym("cudaStreamCreate"));
  cu.streamSynchronize = reinterpret_cast<decltype(cu.streamSynchronize)>(sym("cudaStreamSynchronize"));
  cu.deviceSynchronize = reinterpret_cast<decltype(cu.deviceSynchronize)>(sym("cudaDeviceSynchronize"));
  cu.mallocHost = reinterpret_cast<decltype(cu.mallocHost)>(sym("cudaMallocHost"));
  cu.launchHostFunc = reinterpret_cast<decltype(cu.launchHostFunc)>(sym("cudaLaunchHostFunc"));
}

#define CK(call)                                                              \
  do {                                                                        \
    int e_ = (call);                                                          \
    if (e_ != 0) {                                                            \
      std::fprintf(stderr, "rank %d: %s: CUDA error %d\n", gRank, #call, e_); \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

cudaStream_t gStream = nullptr;

// A buffer of the mode's kind, filled from and read back to host vectors.
struct Buf {
  size_t bytes = 0;
  void* p = nullptr;
  std::vector<unsigned char> host;
  explicit Buf(size_t n, unsigned char fill = 0) : bytes(n), host(n, fill) {
    if (gDevice) {
      CK(cu.malloc(&p, std::max<size_t>(n, 1)));
    } else {
      p = host.data();
    }
  }
  ~Buf() {
    if (gDevice) cu.free(p);
  }
  void* at(size_t off) { return static_cast<char*>(p) + off; }
  void put() {
    if (gDevice && bytes) CK(cu.memcpy(p, host.data(), bytes, 1));
  }
  void get() {
    if (gDevice && bytes) CK(cu.memcpy(host.data(), p, bytes, 2));
  }
};

void syncStream() {
  if (gDevice) CK(cu.streamSynchronize(gStream));
}

// ---- values: small integers, exact in every type and under every op ----
size_t typeSize(ncclDataType_t t) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return s[t];
}
bool isFloat(ncclDataType_t t) { return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16; }

long long inputValue(int rank, size_t i, ncclRedOp_t op) {
  if (op == ncclProd) return (rank + i) % 3 == 0 ? 2 : 1;
  return static_cast<long long>((rank * 7 + i * 3) % 11) + 1;
}

uint16_t toHalf(float f) {  // exact for the small integers used here
  if (f == 0) return 0;
  int e;
  float m = std::frexp(f, &e);  // f = m * 2^e, 0.5 <= m < 1
  unsigned exp = static_cast<unsigned>(e - 1 + 15);
  unsigned mant = static_cast<unsigned>((m * 2 - 1) * 1024 + 0.5f);
  return static_cast<uint16_t>((exp << 10) | mant);
}
float fromHalf(uint16_t h) {
  unsigned exp = (h >> 10) & 31, mant = h & 1023;
  if (exp == 0) return std::ldexp(static_cast<float>(mant), -24);
  return std::ldexp(1.0f + mant / 1024.0f, static_cast<int>(exp) - 15);
}

void store(void* base, size_t i, ncclDataType_t t, double v) {
  auto* b = static_cast<unsigned char*>(base);
  switch (t) {
    case ncclInt8:
      reinterpret_cast<int8_t*>(b)[i] = static_cast<int8_t>(v);
      break;
    case ncclUint8:
      b[i] = static_cast<uint8_t>(v);
      break;
    case ncclInt32:
      reinterpret_cast<int32_t*>(b)[i] = static_cast<int32_t>(v);
      break;
    case ncclUint32:
      reinterpret_cast<uint32_t*>(b)[i] = static_cast<uint32_t>(v);
      break;
    case ncclInt64:
      reinterpret_cast<int64_t*>(b)[i] = static_cast<int64_t>(v);
      break;
    case ncclUint64:
      reinterpret_cast<uint64_t*>(b)[i] = static_cast<uint64_t>(v);
      break;
    case ncclFloat16:
      reinterpret_cast<uint16_t*>(b)[i] = toHalf(static_cast<float>(v));
      break;
    case ncclFloat32:
      reinterpret_cast<float*>(b)[i] = static_cast<float>(v);
      break;
    case ncclFloat64:
      reinterpret_cast<double*>(b)[i] = v;
      break;
    case ncclBfloat16: {
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      reinterpret_cast<uint16_t*>(b)[i] = static_cast<uint16_t>(u >> 16);
      break;
    }
    default:
      break;
  }
}
double load(const void* base, size_t i, ncclDataType_t t) {
  auto* b = static_cast<const unsigned char*>(base);
  switch (t) {
    case ncclInt8:
      return reinterpret_cast<const int8_t*>(b)[i];
    case ncclUint8:
      return b[i];
    case ncclInt32:
      return reinterpret_cast<const int32_t*>(b)[i];
    case ncclUint32:
      return reinterpret_cast<const uint32_t*>(b)[i];
    case ncclInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(b)[i]);
    case ncclUint64:
      return static_cast<double>(reinterpret_cast<const uint64_t*>(b)[i]);
    case ncclFloat16:
      return fromHalf(reinterpret_cast<const uint16_t*>(b)[i]);
    case ncclFloat32:
      return reinterpret_cast<const float*>(b)[i];
    case ncclFloat64:
      return reinterpret_cast<const double*>(b)[i];
    case ncclBfloat16: {
      uint32_t u = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(b)[i]) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    default:
      return 0;
  }
}

// What op over every rank's inputValue gives, as the type holds it.
double reference(size_t i, ncclDataType_t t, ncclRedOp_t op, int n, size_t offset) {
  double acc = static_cast<double>(inputValue(0, offset + i, op));
  for (int r = 1; r < n; ++r) {
    double v = static_cast<double>(inputValue(r, offset + i, op));
    switch (op) {
      case ncclSum:
      case ncclAvg:
        acc += v;
        break;
      case ncclProd:
        acc *= v;
        break;
      case ncclMax:
        acc = std::max(acc, v);
        break;
      case ncclMin:
        acc = std::min(acc, v);
        break;
      default:
        break;
    }
  }
  if (op == ncclAvg) acc = isFloat(t) ? acc / n : std::trunc(acc / n);
  std::vector<unsigned char> tmp(8);
  store(tmp.data(), 0, t, acc);  // the type's own rounding and wrap-around
  return load(tmp.data(), 0, t);
}

bool close(double got, double want, ncclDataType_t t, ncclRedOp_t op) {
  if (op == ncclAvg && isFloat(t)) return std::fabs(got - want) <= 0.02 * std::max(1.0, std::fabs(want));
  return got == want;
}

const char* typeName(ncclDataType_t t) {
  static const char* n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bf16"};
  return n[t];
}
const char* opName(ncclRedOp_t o) {
  static const char* n[] = {"sum", "prod", "max", "min", "avg"};
  return n[o];
}

void fill(Buf& b, size_t count, ncclDataType_t t, ncclRedOp_t op, int rank, size_t offset = 0) {
  for (size_t i = 0; i < count; ++i) store(b.host.data(), i, t, static_cast<double>(inputValue(rank, offset + i, op)));
  b.put();
}

void checkAllReduce(ncclComm_t comm, int n, ncclDataType_t t, ncclRedOp_t op, size_t count, bool inPlace) {
  const size_t es = typeSize(t);
  Buf send(count * es), recv(count * es);
  fill(send, count, t, op, gMe);
  Buf& out = inPlace ? send : recv;
  CHECK_NCCL(ncclAllReduce(send.p, out.p, count, t, op, comm, gStream));
  syncStream();
  out.get();
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i)
    if (!close(load(out.host.data(), i, t), reference(i, t, op, n, 0), t, op)) ++bad;
  char what[160];
  std::snprintf(what, sizeof what, "allreduce n=%d count=%zu %s %s%s: %zu wrong", n, count, typeName(t), opName(op),
                inPlace ? " in-place" : "", bad);
  report(bad == 0, what);
}

void checkOthers(ncclComm_t comm, int n, ncclDataType_t t, size_t count) {
  const size_t es = typeSize(t);
  const ncclRedOp_t op = ncclSum;
  const int root = n - 1;
  char what[160];
  auto verdict = [&](const char* name, size_t bad) {
    std::snprintf(what, sizeof what, "%s n=%d count=%zu %s: %zu wrong", name, n, count, typeName(t), bad);
    report(bad == 0, what);
  };
  {  // reduce-scatter
    Buf send(n * count * es), recv(count * es);
    fill(send, n * count, t, op, gMe);
    CHECK_NCCL(ncclReduceScatter(send.p, recv.p, count, t, op, comm, gStream));
    syncStream();
    recv.get();
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i)
      if (load(recv.host.data(), i, t) != reference(i, t, op, n, gMe * count)) ++bad;
    verdict("reducescatter", bad);
  }
  {  // allgather in place
    Buf buf(n * count * es);
    for (size_t i = 0; i < count; ++i)
      store(buf.host.data() + gMe * count * es, i, t, static_cast<double>(inputValue(gMe, i, op)));
    buf.put();
    CHECK_NCCL(ncclAllGather(buf.at(gMe * count * es), buf.p, count, t, comm, gStream));
    syncStream();
    buf.get();
    size_t bad = 0;
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        if (load(buf.host.data(), p * count + i, t) != static_cast<double>(inputValue(p, i, op))) ++bad;
    verdict("allgather", bad);
  }
  {  // broadcast, then bcast (in place) back from rank 0
    Buf send(count * es), recv(count * es);
    fill(send, count, t, op, gMe);
    CHECK_NCCL(ncclBroadcast(send.p, recv.p, count, t, root, comm, gStream));
    CHECK_NCCL(ncclBcast(send.p, count, t, 0, comm, gStream));
    syncStream();
    recv.get();
    send.get();
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      if (load(recv.host.data(), i, t) != static_cast<double>(inputValue(root, i, op))) ++bad;
      if (load(send.host.data(), i, t) != static_cast<double>(inputValue(0, i, op))) ++bad;
    }
    verdict("broadcast+bcast", bad);
  }
  {  // reduce to the last rank
    Buf send(count * es), recv(count * es);
    fill(send, count, t, op, gMe);
    CHECK_NCCL(ncclReduce(send.p, recv.p, count, t, op, root, comm, gStream));
    syncStream();
    recv.get();
    size_t bad = 0;
    if (gMe == root)
      for (size_t i = 0; i < count; ++i)
        if (load(recv.host.data(), i, t) != reference(i, t, op, n, 0)) ++bad;
    verdict("reduce", bad);
  }
  {  // alltoall: block j of rank r holds inputValue(r, j*count + i)
    Buf send(n * count * es), recv(n * count * es);
    fill(send, n * count, t, op, gMe);
    CHECK_NCCL(ncclAlltoAll(send.p, recv.p, count, t, comm, gStream));
    syncStream();
    recv.get();
    size_t bad = 0;
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        if (load(recv.host.data(), p * count + i, t) != static_cast<double>(inputValue(p, gMe * count + i, op))) ++bad;
    verdict("alltoall", bad);
  }
  {  // gather to the last rank, scatter from it
    Buf send(count * es), all(n * count * es), back(count * es);
    fill(send, count, t, op, gMe);
    CHECK_NCCL(ncclGather(send.p, all.p, count, t, root, comm, gStream));
    CHECK_NCCL(ncclScatter(all.p, back.p, count, t, root, comm, gStream));
    syncStream();
    all.get();
    back.get();
    size_t bad = 0;
    if (gMe == root)
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i)
          if (load(all.host.data(), p * count + i, t) != static_cast<double>(inputValue(p, i, op))) ++bad;
    for (size_t i = 0; i < count; ++i)
      if (load(back.host.data(), i, t) != static_cast<double>(inputValue(gMe, i, op))) ++bad;
    verdict("gather+scatter", bad);
  }
  {  // grouped send/recv around the ring, both directions
    const int next = (gMe + 1) % n, prev = (gMe + n - 1) % n;
    Buf s1(count * es), s2(count * es), r1(count * es), r2(count * es);
    fill(s1, count, t, op, gMe);
    fill(s2, count, t, op, gMe + 1);
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclSend(s1.p, count, t, next, comm, gStream));
    CHECK_NCCL(ncclSend(s2.p, count, t, prev, comm, gStream));
    CHECK_NCCL(ncclRecv(r1.p, count, t, prev, comm, gStream));
    CHECK_NCCL(ncclRecv(r2.p, count, t, next, comm, gStream));
    CHECK_NCCL(ncclGroupEnd());
    syncStream();
    r1.get();
    r2.get();
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      if (load(r1.host.data(), i, t) != static_cast<double>(inputValue(prev, i, op))) ++bad;
      if (load(r2.host.data(), i, t) != static_cast<double>(inputValue(next + 1, i, op))) ++bad;
    }
    verdict("sendrecv", bad);
  }
}

void runSuite(ncclComm_t comm, bool full) {
  int n = 0;
  CHECK_NCCL(ncclCommCount(comm, &n));
  CHECK_NCCL(ncclCommUserRank(comm, &gMe));
  const ncclDataType_t types[] = {ncclInt8,   ncclUint8,   ncclInt32,   ncclUint32,  ncclInt64,
                                  ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  for (ncclDataType_t t : types)
    for (ncclRedOp_t op : ops)
      for (size_t count : {size_t{1}, size_t{7}, size_t{1023}}) checkAllReduce(comm, n, t, op, count, count == 7);
  if (full) checkAllReduce(comm, n, ncclFloat32, ncclSum, (size_t{5} << 20) + 3, false);  // several staging chunks
  for (ncclDataType_t t : types) checkOthers(comm, n, t, 13);
  checkOthers(comm, n, ncclFloat32, full ? (1 << 20) + 1 : 1001);
}

// ---- NCCL's stream semantics (device mode) ----
void sleepHost(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms))); }

void checkStreamOrder(ncclComm_t comm, int n) {
  const size_t count = (size_t{3} << 20) + 1;  // 12 MiB of floats: several chunks
  std::vector<float> want(count);
  float* pinned = nullptr;
  CK(cu.mallocHost(reinterpret_cast<void**>(&pinned), count * sizeof(float)));
  for (size_t i = 0; i < count; ++i) pinned[i] = static_cast<float>((i + gMe) % 5);
  Buf dev(count * sizeof(float));
  // Work queued before the call: a host function that sleeps 300 ms, then the copy of the input. The call must
  // return at once, and still read the input the copy writes.
  CK(cu.memsetAsync(dev.p, 0, count * sizeof(float), gStream));
  CK(cu.launchHostFunc(gStream, sleepHost, reinterpret_cast<void*>(intptr_t{300})));
  CK(cu.memcpyAsync(dev.p, pinned, count * sizeof(float), 1, gStream));
  auto t0 = std::chrono::steady_clock::now();
  CHECK_NCCL(ncclAllReduce(dev.p, dev.p, count, ncclFloat32, ncclSum, comm, gStream));
  CHECK_NCCL(ncclAllReduce(dev.p, dev.p, count, ncclFloat32, ncclSum, comm, gStream));
  double callMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Work queued after the calls: the copy back must wait for both.
  CK(cu.memcpyAsync(pinned, dev.p, count * sizeof(float), 2, gStream));
  syncStream();
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    float s = 0;
    for (int r = 0; r < n; ++r) s += static_cast<float>((i + r) % 5);
    if (pinned[i] != s * n) ++bad;
  }
  char what[200];
  std::snprintf(what, sizeof what, "stream order: two in-place allreduces between queued copies: %zu wrong", bad);
  report(bad == 0, what);
  std::snprintf(what, sizeof what, "stream order: the calls returned in %.1f ms behind 300 ms of queued work", callMs);
  report(callMs < 150, what);
  if (gMe == 0) std::printf("stream order: calls returned in %.2f ms behind 300 ms of queued work\n", callMs);
}

double nowSec() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void bench(ncclComm_t comm, int n) {
  if (gRank == 0) std::printf("%-12s %10s %10s %10s %14s\n", "bytes", "time_us", "busbw_GBs", "copy_GBs", "busbw/copy");
  for (size_t bytes = size_t{1} << 20; bytes <= (size_t{256} << 20); bytes *= 4) {
    const size_t count = bytes / 4;
    Buf a(bytes);
    a.put();
    void* host = nullptr;
    CK(cu.mallocHost(&host, bytes));
    const int iters = bytes >= (size_t{64} << 20) ? 5 : 20;
    for (int w = 0; w < 2; ++w) CHECK_NCCL(ncclAllReduce(a.p, a.p, count, ncclFloat32, ncclSum, comm, gStream));
    syncStream();
    double t0 = nowSec();
    for (int i = 0; i < iters; ++i) CHECK_NCCL(ncclAllReduce(a.p, a.p, count, ncclFloat32, ncclSum, comm, gStream));
    syncStream();
    double t = (nowSec() - t0) / iters;
    // The staging bound: every byte crosses to the host and back once.
    double c0 = nowSec();
    for (int i = 0; i < iters; ++i) {
      CK(cu.memcpyAsync(host, a.p, bytes, 2, gStream));
      CK(cu.memcpyAsync(a.p, host, bytes, 1, gStream));
    }
    syncStream();
    double copy = (nowSec() - c0) / iters;
    double busbw = n > 1 ? 2.0 * (n - 1) / n * bytes / t / 1e9 : bytes / t / 1e9;
    double copyBw = bytes / copy / 1e9;
    if (gRank == 0) std::printf("%-12zu %10.1f %10.2f %10.2f %14.3f\n", bytes, t * 1e6, busbw, copyBw, busbw / copyBw);
  }
  // Per-call cost of a small allreduce on the stream, call to completion.
  Buf s(8);
  s.put();
  for (int w = 0; w < 20; ++w) CHECK_NCCL(ncclAllReduce(s.p, s.p, 2, ncclFloat32, ncclSum, comm, gStream));
  syncStream();
  std::vector<double> ts;
  for (int i = 0; i < 200; ++i) {
    double t0 = nowSec();
    CHECK_NCCL(ncclAllReduce(s.p, s.p, 2, ncclFloat32, ncclSum, comm, gStream));
    syncStream();
    ts.push_back(nowSec() - t0);
  }
  std::sort(ts.begin(), ts.end());
  if (gRank == 0) std::printf("8-byte allreduce, call to stream sync: median %.1f us\n", ts[ts.size() / 2] * 1e6);
}

int envInt(const char* a, const char* b, int def) {
  for (const char* n : {a, b})
    if (const char* v = std::getenv(n)) return std::atoi(v);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR host|device [--bench]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  gDevice = std::string(argv[2]) == "device";
  const bool benchOnly = argc > 3 && std::string(argv[3]) == "--bench";
  gRank = envInt("HETCOMM_RANK", "RANK", 0);
  gSize = envInt("HETCOMM_WORLD_SIZE", "WORLD_SIZE", 1);
  if (gDevice) {
    loadCuda();
    CK(cu.streamCreate(&gStream));
  }
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  // The unique id, out of band: rank 0 writes it, the others wait for the file.
  ncclUniqueId id;
  const std::string path = dir + "/nccl_id";
  if (gRank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    std::ofstream(path + ".tmp", std::ios::binary).write(id.internal, sizeof id.internal);
    std::rename((path + ".tmp").c_str(), path.c_str());
  } else {
    for (int i = 0; i < 3000 && access(path.c_str(), R_OK) != 0; ++i) usleep(10000);
    std::ifstream in(path, std::ios::binary);
    if (!in.read(id.internal, sizeof id.internal)) {
      std::fprintf(stderr, "rank %d: no unique id at %s\n", gRank, path.c_str());
      return 2;
    }
  }
  ncclComm_t world;
  CHECK_NCCL(ncclCommInitRank(&world, gSize, id, gRank));
  int n = 0, me = -1;
  CHECK_NCCL(ncclCommCount(world, &n));
  CHECK_NCCL(ncclCommUserRank(world, &me));
  report(n == gSize && me == gRank, "ncclCommCount/ncclCommUserRank");
  if (benchOnly) {
    bench(world, n);
  } else {
    runSuite(world, true);
    if (gDevice) {
      gMe = gRank;
      checkStreamOrder(world, n);
    }
    // What NCCL refuses, refused with a message: an fp8 type here.
    int x = 0;
    ncclResult_t r = ncclAllReduce(&x, &x, 1, ncclFloat8e4m3, ncclSum, world, gStream);
    report(r != ncclSuccess && std::strlen(ncclGetLastError(world)) > 0, "fp8 refused with a message");
    r = ncclAllReduce(&x, &x, 1, ncclFloat32, static_cast<ncclRedOp_t>(17), world, gStream);
    report(r == ncclInvalidArgument, "a made-up op is an invalid argument");
    report(std::string(ncclGetErrorString(ncclInvalidUsage)).size() > 0, "ncclGetErrorString");
    // Split into halves, ordered backwards; the suite again on each.
    ncclComm_t half;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.commName = "half";
    CHECK_NCCL(ncclCommSplit(world, gRank % 2, gSize - gRank, &half, &cfg));
    int hn = 0;
    CHECK_NCCL(ncclCommCount(half, &hn));
    report(hn == (gSize + (gRank % 2 == 0 ? 1 : 0)) / 2, "split size");
    runSuite(half, false);
    ncclResult_t async = ncclInternalError;
    CHECK_NCCL(ncclCommGetAsyncError(half, &async));
    report(async == ncclSuccess, "no async error");
    CHECK_NCCL(ncclCommFinalize(half));
    CHECK_NCCL(ncclCommDestroy(half));
  }
  int counts[2] = {gPassed, gFailed};
  {
    Buf b(sizeof counts);
    std::memcpy(b.host.data(), counts, sizeof counts);
    b.put();
    CHECK_NCCL(ncclAllReduce(b.p, b.p, 2, ncclInt32, ncclSum, world, gStream));
    syncStream();
    b.get();
    std::memcpy(counts, b.host.data(), sizeof counts);
  }
  CHECK_NCCL(ncclCommFinalize(world));
  CHECK_NCCL(ncclCommDestroy(world));
  if (gRank == 0)
    std::printf("nccl_abi_check (%s buffers, NCCL API %d) on %d ranks: %d passed, %d failed\n", argv[2], version, gSize,
                counts[0], counts[1]);
  return counts[1] == 0 ? 0 : 1;
}
