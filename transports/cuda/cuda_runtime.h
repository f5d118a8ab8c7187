// cuda_runtime.h: the CUDA runtime, loaded at run time (dlopen of libcudart, as UCX's and Open MPI's CUDA
// components do), so that libhetcomm.so runs unchanged where there is no CUDA and no GPU.
//
// Nothing is loaded until a buffer is classified in a process that already uses CUDA (the driver, libcuda.so.1,
// is mapped): a process that never touched CUDA cannot hold a device pointer, so its buffers are host memory, and
// a pointer that is not mapped there is refused with a message that says so instead of crashing a copy later.
//
// Declares only what hetcomm calls, with the runtime's ABI (cudaError_t is an int, streams and events are opaque
// pointers): no CUDA header is needed to build.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace hetcomm::transports::cuda {

enum class MemoryKind {
  kHost,        // ordinary (pageable) host memory, or CUDA is not in use in this process
  kPinnedHost,  // cudaMallocHost / cudaHostRegister memory: host-readable
  kManaged,     // cudaMallocManaged: host-readable
  kDevice,      // device memory: reachable only through copies or kernels
};
const char* memoryKindName(MemoryKind k);

struct BufferInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // the GPU that owns device memory
};

// Whether CUDA is in use in this process (the driver library is mapped). Cheap: common/library_watch.h.
bool cudaInUse();

// What one buffer argument is. name ("sendbuff") goes into the error. A NULL or empty buffer is host memory.
// cudaLoaded: cudaInUse(), asked once by a caller that classifies several buffers.
Result<BufferInfo> classifyBuffer(const void* p, size_t bytes, const char* name, bool cudaLoaded);

using StreamHandle = void*;  // cudaStream_t
using EventHandle = void*;   // cudaEvent_t

// The loaded runtime. get() loads it on first use; unavailable() says why it could not be (no libcudart, no
// driver, no GPU), for errors that name the cause.
class Runtime {
 public:
  static Runtime* get();
  static std::string unavailable();

  enum CopyKind : int { kHostToDevice = 1, kDeviceToHost = 2, kDefault = 4 };

  Status setDevice(int device) const;
  Status streamCreate(StreamHandle* s) const;  // non-blocking with respect to the legacy default stream
  Status streamDestroy(StreamHandle s) const;
  Status streamSynchronize(StreamHandle s) const;
  Status streamWaitEvent(StreamHandle s, EventHandle e) const;
  Status eventCreate(EventHandle* e) const;  // timing disabled
  Status eventDestroy(EventHandle e) const;
  Status eventRecord(EventHandle e, StreamHandle s) const;
  Status eventSynchronize(EventHandle e) const;
  Result<bool> eventQuery(EventHandle e) const;  // true: done
  Status memcpyAsync(void* dst, const void* src, size_t bytes, StreamHandle s) const;
  // height rows of width bytes, rows spitch and dpitch bytes apart.
  Status memcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                       StreamHandle s) const;
  Status hostAlloc(void** p, size_t bytes, bool mapped) const;  // pinned, portable
  Status freeHost(void* p) const;
  Status hostDevicePointer(void** dev, void* host) const;
  // Makes s wait until the 32-bit word at devAddr (host-mapped memory) is >= value, without a host thread. False
  // where the driver lacks stream memory operations.
  bool canWaitValue() const { return waitValue32_ != nullptr; }
  Status streamWaitValue32(StreamHandle s, void* devAddr, uint32_t value) const;

 private:
  friend struct RuntimeLoader;
  friend Result<BufferInfo> classifyBuffer(const void* p, size_t bytes, const char* name, bool cudaLoaded);
  Status check(int err, const char* what) const;

  using Fn = int (*)();
  int (*getDeviceCount_)(int*) = nullptr;
  int (*pointerGetAttributes_)(void*, const void*) = nullptr;
  const char* (*getErrorString_)(int) = nullptr;
  int (*getLastError_)() = nullptr;
  int (*setDevice_)(int) = nullptr;
  int (*streamCreateWithFlags_)(StreamHandle*, unsigned) = nullptr;
  int (*streamDestroy_)(StreamHandle) = nullptr;
  int (*streamSynchronize_)(StreamHandle) = nullptr;
  int (*streamWaitEvent_)(StreamHandle, EventHandle, unsigned) = nullptr;
  int (*eventCreateWithFlags_)(EventHandle*, unsigned) = nullptr;
  int (*eventDestroy_)(EventHandle) = nullptr;
  int (*eventRecord_)(EventHandle, StreamHandle) = nullptr;
  int (*eventSynchronize_)(EventHandle) = nullptr;
  int (*eventQuery_)(EventHandle) = nullptr;
  int (*memcpyAsync_)(void*, const void*, size_t, int, StreamHandle) = nullptr;
  int (*memcpy2DAsync_)(void*, size_t, const void*, size_t, size_t, size_t, int, StreamHandle) = nullptr;
  int (*hostAlloc_)(void**, size_t, unsigned) = nullptr;
  int (*freeHost_)(void*) = nullptr;
  int (*hostGetDevicePointer_)(void**, void*, unsigned) = nullptr;
  int (*waitValue32_)(StreamHandle, uint64_t, uint32_t, unsigned) = nullptr;  // driver API (CUresult)
};

}  // namespace hetcomm::transports::cuda
