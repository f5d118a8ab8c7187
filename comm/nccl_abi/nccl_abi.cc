// nccl_abi.cc: libnccl.so.2 on hetcomm. Every function of the NCCL 2.x API, as NVIDIA's nccl.h declares it (the
// header this file is compiled against, never copied here), mapped onto hetcomm's public C API: a program built
// against nccl.h and linked with -lnccl runs on hetcomm when this library comes first on its library path.
//
// The mapping is direct where the two APIs agree (result codes 0-7, data types 0-9, ops 0-4, unique ids of 128
// bytes, communicator handles). A cudaStream_t becomes a hetcomm stream ordered on it (hetcommStreamCreateForCuda),
// made once per CUDA stream; in a process that never touched CUDA (host buffers only) calls are blocking, which is
// what a later cudaStreamSynchronize would have waited for. What hetcomm does not have is refused with
// ncclInvalidUsage and a message for ncclGetLastError: fp8 types, pre-multiplied sums, symmetric windows, shrink,
// revoke and group simulation.
#include <dlfcn.h>
#include <hetcomm/hetcomm.h>
#include <nccl.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/library_watch.h"

#define NCCL_ABI extern "C" __attribute__((visibility("default")))
// NCCL's profiling entry points (pnccl*) are the same functions.
#define PNCCL_ALIAS(name) extern "C" __attribute__((visibility("default"), alias(#name))) decltype(name) p##name;

namespace {

thread_local std::string tError;  // this layer's own refusals; hetcomm's messages otherwise

ncclResult_t refuse(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t refuse(ncclResult_t code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tError = buf;
  return code;
}

ncclResult_t map(hetcommResult_t r) {
  tError.clear();
  switch (r) {
    case hetcommSuccess:
      return ncclSuccess;
    case hetcommUnhandledError:
      return ncclUnhandledCudaError;
    case hetcommSystemError:
      return ncclSystemError;
    case hetcommInternalError:
      return ncclInternalError;
    case hetcommInvalidArgument:
      return ncclInvalidArgument;
    case hetcommInvalidUsage:
      return ncclInvalidUsage;
    case hetcommRemoteError:
      return ncclRemoteError;
    case hetcommInProgress:
      return ncclInProgress;
    case hetcommTimeout:
      return ncclRemoteError;  // a peer that never answered
    default:
      return ncclInternalError;
  }
}

hetcommComm_t H(ncclComm_t c) { return reinterpret_cast<hetcommComm_t>(c); }
ncclComm_t N(hetcommComm_t c) { return reinterpret_cast<ncclComm_t>(c); }

bool typeOk(ncclDataType_t t, hetcommDataType_t* out) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= static_cast<int>(hetcommNumTypes)) return false;
  *out = static_cast<hetcommDataType_t>(t);  // ncclInt8 .. ncclBfloat16 are hetcomm's 0 .. 9
  return true;
}
#define CHECK_TYPE(t, out)                                                                       \
  hetcommDataType_t out;                                                                         \
  if (!typeOk(t, &out))                                                                          \
    return refuse(static_cast<int>(t) == ncclFloat8e4m3 || static_cast<int>(t) == ncclFloat8e5m2 \
                      ? ncclInvalidUsage                                                         \
                      : ncclInvalidArgument,                                                     \
                  "datatype %d is not supported by hetcomm (int8 to bfloat16 are; fp8 is not)", static_cast<int>(t));
#define CHECK_OP(o, out)                                                                            \
  hetcommRedOp_t out;                                                                               \
  if (static_cast<int>(o) < 0 || static_cast<int>(o) >= static_cast<int>(hetcommNumOps))            \
    return refuse(ncclInvalidArgument, "reduction op %d is not a built-in op (ncclSum to ncclAvg)", \
                  static_cast<int>(o));                                                             \
  out = static_cast<hetcommRedOp_t>(o);

// ---- CUDA streams: one hetcomm stream per cudaStream_t, made on first use ----
bool cudaInUse() {
  static auto* driver = new hetcomm::LibraryWatch("libcuda.so");  // never destroyed: calls may run at exit
  return driver->loaded();
}

ncclResult_t streamFor(cudaStream_t s, hetcommStream_t* out) {
  *out = nullptr;
  if (!cudaInUse()) return ncclSuccess;  // host buffers only: blocking calls
  static std::mutex mu;
  static auto* streams = new std::unordered_map<cudaStream_t, hetcommStream_t>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams->find(s);
  if (it != streams->end()) {
    *out = it->second;
    return ncclSuccess;
  }
  hetcommStream_t hs = nullptr;
  if (ncclResult_t r = map(hetcommStreamCreateForCuda(&hs, s)); r != ncclSuccess) return r;
  (*streams)[s] = hs;
  *out = hs;
  return ncclSuccess;
}
#define STREAM(s, out) \
  hetcommStream_t out; \
  if (ncclResult_t r_ = streamFor(s, &out); r_ != ncclSuccess) return r_;

// The checks every operation makes, then the call: f(type, op, stream) with hetcomm's values. op is null for the
// operations that do not reduce.
template <class F>
ncclResult_t checkedCall(ncclDataType_t datatype, const ncclRedOp_t* op, cudaStream_t stream, F&& f) {
  CHECK_TYPE(datatype, t)
  hetcommRedOp_t o = hetcommSum;
  if (op) {
    CHECK_OP(*op, checked)
    o = checked;
  }
  STREAM(stream, s)
  return map(f(t, o, s));
}

ncclResult_t configFrom(const ncclConfig_t* in, hetcommConfig_t* out) {
  *out = HETCOMM_CONFIG_INITIALIZER;
  if (!in) return ncclSuccess;
  if (in->magic != 0xcafebeef || in->size < offsetof(ncclConfig_t, commName) + sizeof(const char*))
    return refuse(ncclInvalidArgument, "config was not made with NCCL_CONFIG_INITIALIZER (magic %#x, size %zu)",
                  in->magic, in->size);
  if (in->blocking != NCCL_CONFIG_UNDEF_INT) out->blocking = in->blocking;
  out->commName = in->commName;
  return ncclSuccess;
}

// The CUDA runtime for the few calls that are about CUDA itself (ncclMemAlloc, ncclCommCuDevice).
void* cudart(const char* fn) {
  static void* h = [] {
    for (const char* n : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"})
      if (void* p = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return p;
    return static_cast<void*>(nullptr);
  }();
  return h ? dlsym(h, fn) : nullptr;
}

}  // namespace

// ---- versions and errors ----
NCCL_ABI ncclResult_t ncclGetVersion(int* version) {
  if (!version) return refuse(ncclInvalidArgument, "version is NULL");
  *version = NCCL_VERSION_CODE;  // the API this library implements
  return ncclSuccess;
}
PNCCL_ALIAS(ncclGetVersion)

NCCL_ABI const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with HETCOMM_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with HETCOMM_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the hetcomm developers";
    case ncclInvalidArgument:
      return "invalid argument (see ncclGetLastError)";
    case ncclInvalidUsage:
      return "invalid usage (see ncclGetLastError)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}
PNCCL_ALIAS(ncclGetErrorString)

NCCL_ABI const char* ncclGetLastError(ncclComm_t comm) {
  if (!tError.empty()) return tError.c_str();
  return hetcommGetLastError(H(comm));
}
PNCCL_ALIAS(ncclGetLastError)

// ---- communicators ----
NCCL_ABI ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return refuse(ncclInvalidArgument, "uniqueId is NULL");
  static_assert(sizeof(ncclUniqueId) == sizeof(hetcommUniqueId));
  hetcommUniqueId h;
  ncclResult_t r = map(hetcommGetUniqueId(&h));
  if (r == ncclSuccess) std::memcpy(id, &h, sizeof h);
  return r;
}
PNCCL_ALIAS(ncclGetUniqueId)

NCCL_ABI ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                             ncclConfig_t* config) {
  if (!comm) return refuse(ncclInvalidArgument, "comm is NULL");
  hetcommConfig_t cfg;
  if (ncclResult_t r = configFrom(config, &cfg); r != ncclSuccess) return r;
  hetcommUniqueId id;
  std::memcpy(&id, &commId, sizeof id);
  hetcommComm_t c = nullptr;
  ncclResult_t r = map(hetcommCommInitRankConfig(&c, nranks, id, rank, &cfg));
  *comm = N(c);
  return r;
}
PNCCL_ALIAS(ncclCommInitRankConfig)

NCCL_ABI ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}
PNCCL_ALIAS(ncclCommInitRank)

NCCL_ABI ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                               ncclConfig_t* config) {
  // Several ids spread NCCL's bootstrap over several roots; hetcomm's store serves from one: the first.
  if (nId < 1 || !commIds) return refuse(ncclInvalidArgument, "nId %d with commIds %p: at least one id", nId, commIds);
  return ncclCommInitRankConfig(comm, nranks, commIds[0], myrank, config);
}
PNCCL_ALIAS(ncclCommInitRankScalable)

NCCL_ABI ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  static_assert(sizeof(ncclComm_t) == sizeof(hetcommComm_t));
  return map(hetcommCommInitAll(reinterpret_cast<hetcommComm_t*>(comms), ndev, devlist));
}
PNCCL_ALIAS(ncclCommInitAll)

NCCL_ABI ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  hetcommConfig_t cfg;
  if (ncclResult_t r = configFrom(config, &cfg); r != ncclSuccess) return r;
  return map(hetcommCommSplit(H(comm), color, key, reinterpret_cast<hetcommComm_t*>(newcomm), config ? &cfg : nullptr));
}
PNCCL_ALIAS(ncclCommSplit)

NCCL_ABI ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                     ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  static_assert(NCCL_SHRINK_DEFAULT == HETCOMM_SHRINK_DEFAULT && NCCL_SHRINK_ABORT == HETCOMM_SHRINK_ABORT);
  hetcommConfig_t cfg;
  if (ncclResult_t r = configFrom(config, &cfg); r != ncclSuccess) return r;
  return map(hetcommCommShrink(H(comm), excludeRanksList, excludeRanksCount, reinterpret_cast<hetcommComm_t*>(newcomm),
                               config ? &cfg : nullptr, shrinkFlags));
}
PNCCL_ALIAS(ncclCommShrink)

NCCL_ABI ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return map(hetcommCommRevoke(H(comm), revokeFlags));
}
PNCCL_ALIAS(ncclCommRevoke)

NCCL_ABI ncclResult_t ncclCommFinalize(ncclComm_t comm) { return map(hetcommCommFinalize(H(comm))); }
PNCCL_ALIAS(ncclCommFinalize)
NCCL_ABI ncclResult_t ncclCommDestroy(ncclComm_t comm) { return map(hetcommCommDestroy(H(comm))); }
PNCCL_ALIAS(ncclCommDestroy)
NCCL_ABI ncclResult_t ncclCommAbort(ncclComm_t comm) { return map(hetcommCommAbort(H(comm))); }
PNCCL_ALIAS(ncclCommAbort)

NCCL_ABI ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!asyncError) return refuse(ncclInvalidArgument, "asyncError is NULL");
  hetcommResult_t e = hetcommSuccess;
  ncclResult_t r = map(hetcommCommGetAsyncError(H(comm), &e));
  if (r == ncclSuccess) *asyncError = map(e);
  return r;
}
PNCCL_ALIAS(ncclCommGetAsyncError)

NCCL_ABI ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) { return map(hetcommCommCount(H(comm), count)); }
PNCCL_ALIAS(ncclCommCount)
NCCL_ABI ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return map(hetcommCommUserRank(H(comm), rank));
}
PNCCL_ALIAS(ncclCommUserRank)

NCCL_ABI ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  int n = 0;
  if (ncclResult_t r = map(hetcommCommCount(H(comm), &n)); r != ncclSuccess) return r;
  if (!device) return refuse(ncclInvalidArgument, "device is NULL");
  // The communicator serves whatever device its buffers are on; the device current on this thread is the answer a
  // program that set it before init expects.
  auto getDevice = reinterpret_cast<int (*)(int*)>(cudart("cudaGetDevice"));
  if (!getDevice || getDevice(device) != 0)
    return refuse(ncclInvalidUsage, "ncclCommCuDevice: no usable CUDA runtime or GPU in this process");
  return ncclSuccess;
}
PNCCL_ALIAS(ncclCommCuDevice)

// Registration is a hint for zero-copy paths; hetcomm stages device buffers and needs none. The handle is the
// buffer, so deregistration can check it.
NCCL_ABI ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  int n = 0;
  if (ncclResult_t r = map(hetcommCommCount(H(comm), &n)); r != ncclSuccess) return r;
  if (!handle) return refuse(ncclInvalidArgument, "handle is NULL");
  if (!buff && size > 0) return refuse(ncclInvalidArgument, "buff is NULL");
  *handle = buff;
  return ncclSuccess;
}
PNCCL_ALIAS(ncclCommRegister)
NCCL_ABI ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  int n = 0;
  (void)handle;
  return map(hetcommCommCount(H(comm), &n));
}
PNCCL_ALIAS(ncclCommDeregister)

NCCL_ABI ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t*, int) {
  return refuse(ncclInvalidUsage, "symmetric memory windows are not supported by hetcomm");
}
PNCCL_ALIAS(ncclCommWindowRegister)
NCCL_ABI ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) {
  return refuse(ncclInvalidUsage, "symmetric memory windows are not supported by hetcomm");
}
PNCCL_ALIAS(ncclCommWindowDeregister)

NCCL_ABI ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return refuse(ncclInvalidArgument, "ptr is NULL");
  auto cudaMalloc = reinterpret_cast<int (*)(void**, size_t)>(cudart("cudaMalloc"));
  if (!cudaMalloc) return refuse(ncclInvalidUsage, "ncclMemAlloc needs the CUDA runtime, which was not found");
  if (int e = cudaMalloc(ptr, size); e != 0)
    return refuse(ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc of %zu bytes failed (error %d)", size, e);
  return ncclSuccess;
}
PNCCL_ALIAS(ncclMemAlloc)
NCCL_ABI ncclResult_t ncclMemFree(void* ptr) {
  auto cudaFree = reinterpret_cast<int (*)(void*)>(cudart("cudaFree"));
  if (!cudaFree) return refuse(ncclInvalidUsage, "ncclMemFree needs the CUDA runtime, which was not found");
  if (int e = cudaFree(ptr); e != 0)
    return refuse(ncclUnhandledCudaError, "ncclMemFree: cudaFree failed (error %d)", e);
  return ncclSuccess;
}
PNCCL_ALIAS(ncclMemFree)

NCCL_ABI ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t) {
  return refuse(ncclInvalidUsage, "pre-multiplied sums (ncclRedOpCreatePreMulSum) are not supported by hetcomm");
}
PNCCL_ALIAS(ncclRedOpCreatePreMulSum)
NCCL_ABI ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t) {
  return refuse(ncclInvalidArgument, "op %d was not made by ncclRedOpCreatePreMulSum", static_cast<int>(op));
}
PNCCL_ALIAS(ncclRedOpDestroy)

// ---- collectives ----
NCCL_ABI ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return checkedCall(datatype, &op, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommAllReduce(sendbuff, recvbuff, count, t, o, H(comm), s);
  });
}
PNCCL_ALIAS(ncclAllReduce)

NCCL_ABI ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  return checkedCall(datatype, nullptr, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommBroadcast(sendbuff, recvbuff, count, t, root, H(comm), s);
  });
}
PNCCL_ALIAS(ncclBroadcast)

NCCL_ABI ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
PNCCL_ALIAS(ncclBcast)

NCCL_ABI ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return checkedCall(datatype, &op, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommReduce(sendbuff, recvbuff, count, t, o, root, H(comm), s);
  });
}
PNCCL_ALIAS(ncclReduce)

NCCL_ABI ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream) {
  return checkedCall(datatype, nullptr, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommAllGather(sendbuff, recvbuff, sendcount, t, H(comm), s);
  });
}
PNCCL_ALIAS(ncclAllGather)

NCCL_ABI ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                        ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return checkedCall(datatype, &op, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommReduceScatter(sendbuff, recvbuff, recvcount, t, o, H(comm), s);
  });
}
PNCCL_ALIAS(ncclReduceScatter)

NCCL_ABI ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
  return checkedCall(datatype, nullptr, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommAlltoAll(sendbuff, recvbuff, count, t, H(comm), s);
  });
}
PNCCL_ALIAS(ncclAlltoAll)

NCCL_ABI ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
  return checkedCall(datatype, nullptr, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommSend(sendbuff, count, t, peer, H(comm), s);
  });
}
PNCCL_ALIAS(ncclSend)

NCCL_ABI ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
  return checkedCall(datatype, nullptr, stream, [&](hetcommDataType_t t, hetcommRedOp_t o, hetcommStream_t s) {
    return hetcommRecv(recvbuff, count, t, peer, H(comm), s);
  });
}
PNCCL_ALIAS(ncclRecv)

NCCL_ABI ncclResult_t ncclGroupStart() { return map(hetcommGroupStart()); }
PNCCL_ALIAS(ncclGroupStart)
NCCL_ABI ncclResult_t ncclGroupEnd() { return map(hetcommGroupEnd()); }
PNCCL_ALIAS(ncclGroupEnd)
NCCL_ABI ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return refuse(ncclInvalidUsage,
                "ncclGroupSimulateEnd is not supported by hetcomm (hetcommCommGetAlgorithm predicts "
                "a collective's time)");
}
PNCCL_ALIAS(ncclGroupSimulateEnd)

// Gather and scatter as NCCL builds them: a group of sends and receives (the root's own block is a send to self).
namespace {
ncclResult_t rootedExchange(bool gather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                            int root, ncclComm_t comm, cudaStream_t stream) {
  CHECK_TYPE(datatype, t)
  int n = 0, me = 0;
  if (ncclResult_t r = map(hetcommCommCount(H(comm), &n)); r != ncclSuccess) return r;
  if (ncclResult_t r = map(hetcommCommUserRank(H(comm), &me)); r != ncclSuccess) return r;
  if (root < 0 || root >= n) return refuse(ncclInvalidArgument, "root %d is out of range for %d ranks", root, n);
  static const size_t kSize[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  const size_t block = count * kSize[t];
  STREAM(stream, s)
  ncclResult_t first = map(hetcommGroupStart());
  auto keep = [&](hetcommResult_t r) {
    if (first == ncclSuccess) first = map(r);
  };
  if (gather) {
    keep(hetcommSend(sendbuff, count, t, root, H(comm), s));
    if (me == root)
      for (int r = 0; r < n; ++r) keep(hetcommRecv(static_cast<char*>(recvbuff) + r * block, count, t, r, H(comm), s));
  } else {
    if (me == root)
      for (int r = 0; r < n; ++r)
        keep(hetcommSend(static_cast<const char*>(sendbuff) + r * block, count, t, r, H(comm), s));
    keep(hetcommRecv(recvbuff, count, t, root, H(comm), s));
  }
  std::string why = first == ncclSuccess ? std::string() : hetcommGetLastError(nullptr);
  ncclResult_t end = map(hetcommGroupEnd());
  if (first != ncclSuccess) return refuse(first, "%s", why.c_str());
  return end;
}
}  // namespace

NCCL_ABI ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  return rootedExchange(true, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
PNCCL_ALIAS(ncclGather)

NCCL_ABI ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  return rootedExchange(false, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
PNCCL_ALIAS(ncclScatter)
