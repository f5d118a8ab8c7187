// cuda_runtime.cc: finding and loading libcudart, and classifying buffers with it.
#include "transports/cuda/cuda_runtime.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/library_watch.h"
#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"

namespace hetcomm::transports::cuda {

HC_PARAM_STR(cudartPathParam, "CUDART", "")

const char* memoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kPinnedHost:
      return "pinned host";
    case MemoryKind::kManaged:
      return "managed";
    case MemoryKind::kDevice:
      return "device";
  }
  return "?";
}

bool cudaInUse() {
  // Whether the driver is mapped already: a process whose CUDA calls never reached the driver has no device memory.
  static LibraryWatch* driver = new LibraryWatch("libcuda.so");  // never destroyed: calls may run at exit
  return driver->loaded();
}

// The runtime's ABI, from its documentation: these values do not change between CUDA versions.
namespace abi {
constexpr int kSuccess = 0;
constexpr int kNotReady = 600;
constexpr unsigned kStreamNonBlocking = 0x01;
constexpr unsigned kEventDisableTiming = 0x02;
constexpr unsigned kHostAllocPortable = 0x01;
constexpr unsigned kHostAllocMapped = 0x02;
struct PointerAttributes {
  int type;  // 0 unregistered, 1 host, 2 device, 3 managed
  int device;
  void* devicePointer;
  void* hostPointer;
  long reserved[8];
};
}  // namespace abi

struct RuntimeLoader {
  std::once_flag once;
  Runtime rt;
  bool ok = false;
  std::string why;

  template <class F>
  static bool sym(void* h, const char* name, F& out) {
    out = reinterpret_cast<F>(dlsym(h, name));
    return out != nullptr;
  }

  void load() {
    std::string tried;
    void* h = nullptr;
    std::string forced = cudartPathParam();
    const char* names[] = {"libcudart.so",
                           "libcudart.so.13",
                           "libcudart.so.12",
                           "libcudart.so.11.0",
                           "/usr/local/cuda/lib64/libcudart.so",
                           "/usr/local/cuda/lib64/libcudart.so.13",
                           "/usr/local/cuda/lib64/libcudart.so.12"};
    if (!forced.empty()) {
      h = dlopen(forced.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        why = format("HETCOMM_CUDART=%s cannot be loaded: %s", forced.c_str(), dlerror());
        return;
      }
    }
    for (const char* n : names) {
      if (h) break;
      h = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (!h) tried += tried.empty() ? n : std::string(", ") + n;
    }
    if (!h) {
      why = format("the CUDA runtime was not found (tried %s; set HETCOMM_CUDART to its path)", tried.c_str());
      return;
    }
    bool all =
        sym(h, "cudaGetDeviceCount", rt.getDeviceCount_) &&
        sym(h, "cudaPointerGetAttributes", rt.pointerGetAttributes_) &&
        sym(h, "cudaGetErrorString", rt.getErrorString_) && sym(h, "cudaGetLastError", rt.getLastError_) &&
        sym(h, "cudaSetDevice", rt.setDevice_) && sym(h, "cudaStreamCreateWithFlags", rt.streamCreateWithFlags_) &&
        sym(h, "cudaStreamDestroy", rt.streamDestroy_) && sym(h, "cudaStreamSynchronize", rt.streamSynchronize_) &&
        sym(h, "cudaStreamWaitEvent", rt.streamWaitEvent_) &&
        sym(h, "cudaEventCreateWithFlags", rt.eventCreateWithFlags_) && sym(h, "cudaEventDestroy", rt.eventDestroy_) &&
        sym(h, "cudaEventRecord", rt.eventRecord_) && sym(h, "cudaEventSynchronize", rt.eventSynchronize_) &&
        sym(h, "cudaEventQuery", rt.eventQuery_) && sym(h, "cudaMemcpyAsync", rt.memcpyAsync_) &&
        sym(h, "cudaMemcpy2DAsync", rt.memcpy2DAsync_) && sym(h, "cudaHostAlloc", rt.hostAlloc_) &&
        sym(h, "cudaFreeHost", rt.freeHost_) && sym(h, "cudaHostGetDevicePointer", rt.hostGetDevicePointer_);
    if (!all) {
      why = format("the CUDA runtime lacks a function hetcomm needs: %s", dlerror());
      return;
    }
    int n = 0;
    int err = rt.getDeviceCount_(&n);
    if (err != abi::kSuccess || n == 0) {
      why = err != abi::kSuccess ? format("the CUDA runtime sees no usable GPU: %s", rt.getErrorString_(err))
                                 : std::string("the CUDA runtime sees no GPU");
      rt.getLastError_();
      return;
    }
    // Stream memory operations are driver API; the driver is loaded by now.
    if (void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
      if (!sym(drv, "cuStreamWaitValue32_v2", rt.waitValue32_)) sym(drv, "cuStreamWaitValue32", rt.waitValue32_);
    }
    ok = true;
  }
};

namespace {
RuntimeLoader& loader() {
  static RuntimeLoader* l = new RuntimeLoader;  // never destroyed: work may still be queued at exit
  std::call_once(l->once, [] { l->load(); });
  return *l;
}

// Pages found mapped before, per thread (page address | 1, so that an empty slot matches nothing). Calls pass the
// same buffers again and again, and mincore costs a system call: 1.5 us on the development VM, where two per
// buffer made a 1 us ping-pong message cost 4.7 us. A page unmapped after it was found mapped is not caught again
// (the copy faults, as it would in NCCL or MPI); a pointer never seen mapped is always checked.
struct MappedPages {
  static constexpr int kSlots = 16;
  uintptr_t slot[kSlots] = {};
  unsigned next = 0;
  bool has(uintptr_t page) const {
    for (uintptr_t s : slot)
      if (s == (page | 1)) return true;
    return false;
  }
  void add(uintptr_t page) { slot[next++ % kSlots] = page | 1; }
};

// The range's first and last pages are mapped: a made-up or device pointer in a process without CUDA is caught
// here rather than by a fault in a copy.
bool mapped(const void* p, size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  thread_local MappedPages seen;
  auto probe = [](uintptr_t a) {
    const uintptr_t first = a & ~uintptr_t(page - 1);
    if (seen.has(first)) return true;
    unsigned char v;
    const bool ok = mincore(reinterpret_cast<void*>(first), 1, &v) == 0 || errno != ENOMEM;
    if (ok) seen.add(first);
    return ok;
  };
  auto a = reinterpret_cast<uintptr_t>(p);
  return probe(a) && (bytes <= 1 || probe(a + bytes - 1));
}
}  // namespace

Runtime* Runtime::get() {
  RuntimeLoader& l = loader();
  return l.ok ? &l.rt : nullptr;
}

std::string Runtime::unavailable() {
  RuntimeLoader& l = loader();
  return l.ok ? std::string() : l.why;
}

Result<BufferInfo> classifyBuffer(const void* p, size_t bytes, const char* name, bool cudaLoaded) {
  BufferInfo info;
  if (!p || bytes == 0) return info;
  if (!cudaLoaded) {
    if (!mapped(p, bytes))
      return invalidArgument(
          "%s %p (%zu bytes) is not memory this process can read: CUDA is not in use in this process (libcuda.so.1 "
          "is not loaded), so it cannot be a device buffer either",
          name, p, bytes);
    return info;
  }
  Runtime* rt = Runtime::get();
  if (!rt) {
    if (!mapped(p, bytes))
      return invalidArgument("%s %p (%zu bytes) is not host memory, and device buffers need the CUDA runtime: %s", name,
                             p, bytes, Runtime::unavailable().c_str());
    return info;
  }
  abi::PointerAttributes a{};
  int err = rt->pointerGetAttributes_(&a, p);
  if (err != abi::kSuccess) {
    rt->getLastError_();  // clears the sticky "invalid value" old runtimes leave for host pointers
    if (!mapped(p, bytes))
      return invalidArgument("%s %p is neither host nor CUDA memory: %s", name, p, rt->getErrorString_(err));
    return info;
  }
  switch (a.type) {
    case 1:
      info.kind = MemoryKind::kPinnedHost;
      break;
    case 2:
      info.kind = MemoryKind::kDevice;
      break;
    case 3:
      info.kind = MemoryKind::kManaged;
      break;
    default:
      if (!mapped(p, bytes)) return invalidArgument("%s %p is neither host nor CUDA memory", name, p);
      info.kind = MemoryKind::kHost;
      break;
  }
  info.device = a.device;
  return info;
}

Status Runtime::check(int err, const char* what) const {
  if (err == abi::kSuccess) return okStatus();
  getLastError_();
  return systemError("CUDA %s failed: %s (error %d)", what, getErrorString_(err), err);
}

Status Runtime::setDevice(int device) const { return check(setDevice_(device), "cudaSetDevice"); }
Status Runtime::streamCreate(StreamHandle* s) const {
  return check(streamCreateWithFlags_(s, abi::kStreamNonBlocking), "cudaStreamCreateWithFlags");
}
Status Runtime::streamDestroy(StreamHandle s) const { return check(streamDestroy_(s), "cudaStreamDestroy"); }
Status Runtime::streamSynchronize(StreamHandle s) const {
  return check(streamSynchronize_(s), "cudaStreamSynchronize");
}
Status Runtime::streamWaitEvent(StreamHandle s, EventHandle e) const {
  return check(streamWaitEvent_(s, e, 0), "cudaStreamWaitEvent");
}
Status Runtime::eventCreate(EventHandle* e) const {
  return check(eventCreateWithFlags_(e, abi::kEventDisableTiming), "cudaEventCreateWithFlags");
}
Status Runtime::eventDestroy(EventHandle e) const { return check(eventDestroy_(e), "cudaEventDestroy"); }
Status Runtime::eventRecord(EventHandle e, StreamHandle s) const {
  return check(eventRecord_(e, s), "cudaEventRecord");
}
Status Runtime::eventSynchronize(EventHandle e) const { return check(eventSynchronize_(e), "cudaEventSynchronize"); }
Result<bool> Runtime::eventQuery(EventHandle e) const {
  int err = eventQuery_(e);
  if (err == abi::kNotReady) return false;
  HC_TRY(check(err, "cudaEventQuery"));
  return true;
}
Status Runtime::memcpyAsync(void* dst, const void* src, size_t bytes, StreamHandle s) const {
  return check(memcpyAsync_(dst, src, bytes, kDefault, s), "cudaMemcpyAsync");
}
Status Runtime::memcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              StreamHandle s) const {
  return check(memcpy2DAsync_(dst, dpitch, src, spitch, width, height, kDefault, s), "cudaMemcpy2DAsync");
}
Status Runtime::hostAlloc(void** p, size_t bytes, bool mappedMem) const {
  return check(hostAlloc_(p, bytes, abi::kHostAllocPortable | (mappedMem ? abi::kHostAllocMapped : 0)),
               "cudaHostAlloc");
}
Status Runtime::freeHost(void* p) const { return check(freeHost_(p), "cudaFreeHost"); }
Status Runtime::hostDevicePointer(void** dev, void* host) const {
  return check(hostGetDevicePointer_(dev, host, 0), "cudaHostGetDevicePointer");
}
Status Runtime::streamWaitValue32(StreamHandle s, void* devAddr, uint32_t value) const {
  if (!waitValue32_) return invalidUsage("the CUDA driver has no stream memory operations");
  int err = waitValue32_(s, reinterpret_cast<uint64_t>(devAddr), value, 0 /* CU_STREAM_WAIT_VALUE_GEQ */);
  if (err != 0) return systemError("cuStreamWaitValue32 failed (CUresult %d)", err);
  return okStatus();
}

}  // namespace hetcomm::transports::cuda
