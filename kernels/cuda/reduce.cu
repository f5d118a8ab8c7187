// reduce.cu: the element-wise reductions of kernels/reduce.h on device memory, for every datatype x op, with the
// host kernels' exact semantics so that a reduction gives the same bits wherever it runs: float16 and bfloat16
// combine in float32 and round back to nearest even once per call; integers wrap (two's complement, signed too);
// Max and Min give NaN when either input is NaN; Avg reduces as Sum and divideBy() is its last step.
//
// Built by nvcc into libhetcomm-cuda.so only where CUDA is found; libhetcomm.so never links it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/reduce_cuda.h"

namespace {

enum Op { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

// The arithmetic type of each storage type: float for the 16-bit floats, an unsigned twin for integers (wrapping).
template <class T> struct Math { using type = T; };
template <> struct Math<__half> { using type = float; };
template <> struct Math<__nv_bfloat16> { using type = float; };
template <> struct Math<int8_t> { using type = uint8_t; };
template <> struct Math<int32_t> { using type = uint32_t; };
template <> struct Math<int64_t> { using type = uint64_t; };

template <class T> __device__ typename Math<T>::type up(T v) { return static_cast<typename Math<T>::type>(v); }
// A float16 NaN widens with its payload, as the host's conversion (and F16C) widen it; CUDA's gives a canonical NaN.
template <> __device__ float up(__half v) {
  unsigned short h = __half_as_ushort(v);
  if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu))
    return __uint_as_float((static_cast<unsigned>(h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13));
  return __half2float(v);
}
template <> __device__ float up(__nv_bfloat16 v) { return __bfloat162float(v); }
// Narrowing rounds to nearest even, as the host does; a NaN keeps its top payload bits with the quiet bit set (the
// host's F16C rule), where CUDA's conversions would give a canonical NaN.
template <class T> __device__ T down(typename Math<T>::type v) { return static_cast<T>(v); }
template <> __device__ __half down<__half>(float v) {
  if (v != v) {
    unsigned u = __float_as_uint(v);
    return __ushort_as_half(static_cast<unsigned short>(((u >> 16) & 0x8000u) | 0x7E00u | ((u >> 13) & 0x3FFu)));
  }
  return __float2half_rn(v);
}
template <> __device__ __nv_bfloat16 down<__nv_bfloat16>(float v) {
  if (v != v) return __ushort_as_bfloat16(static_cast<unsigned short>((__float_as_uint(v) | 0x00400000u) >> 16));
  return __float2bfloat16_rn(v);
}

// x86's rule for arithmetic on NaN, which the host kernels follow: the first NaN operand, made quiet, payload kept
// (the GPU's own arithmetic gives a canonical NaN).
__device__ float quiet(float v) { return __uint_as_float(__float_as_uint(v) | 0x00400000u); }
__device__ double quiet(double v) {
  return __longlong_as_double(__double_as_longlong(v) | 0x0008000000000000ll);
}

template <class T> __device__ bool isNan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

template <class M, int O> __device__ M combine(M a, M b) {
  if constexpr (O == kSum || O == kAvg || O == kProd) {
    if constexpr (std::is_floating_point_v<M>) {
      if (isNan(a)) return quiet(a);
      if (isNan(b)) return quiet(b);
    }
    return O == kProd ? a * b : a + b;
  } else {
    if (isNan(a)) return a;
    if (isNan(b)) return b;
    return O == kMax ? (a > b ? a : b) : (a < b ? a : b);
  }
}

// Signed max/min compare as signed: the unsigned twin is only for + and *.
template <class T, int O> __device__ T apply(T a, T b) {
  if constexpr ((O == kMax || O == kMin) && std::is_integral_v<T>) {
    return O == kMax ? (a > b ? a : b) : (a < b ? a : b);
  } else {
    return down<T>(combine<typename Math<T>::type, O>(up(a), up(b)));
  }
}

template <class T, int O>
__global__ void reduceKernel(T* dst, const T* a, const T* b, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = apply<T, O>(a[i], b[i]);
}

template <class T>
__global__ void divideKernel(T* dst, size_t n, int by) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      float x = up(dst[i]);
      dst[i] = down<T>(isNan(x) ? quiet(x) : x / static_cast<float>(by));
    } else if constexpr (std::is_floating_point_v<T>) {
      T x = dst[i];
      dst[i] = isNan(x) ? quiet(x) : x / static_cast<T>(by);
    } else {
      dst[i] = static_cast<T>(dst[i] / static_cast<T>(by));  // integers truncate toward zero
    }
  }
}

dim3 gridFor(size_t n) {
  size_t blocks = (n + 255) / 256;
  return dim3(static_cast<unsigned>(blocks < 4096 ? (blocks ? blocks : 1) : 4096));
}

template <class T>
cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t n, int op, cudaStream_t s) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  switch (op) {
    case kSum: reduceKernel<T, kSum><<<gridFor(n), 256, 0, s>>>(d, x, y, n); break;
    case kProd: reduceKernel<T, kProd><<<gridFor(n), 256, 0, s>>>(d, x, y, n); break;
    case kMax: reduceKernel<T, kMax><<<gridFor(n), 256, 0, s>>>(d, x, y, n); break;
    case kMin: reduceKernel<T, kMin><<<gridFor(n), 256, 0, s>>>(d, x, y, n); break;
    case kAvg: reduceKernel<T, kAvg><<<gridFor(n), 256, 0, s>>>(d, x, y, n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <class T>
cudaError_t launchDivide(void* dst, size_t n, int by, cudaStream_t s) {
  divideKernel<T><<<gridFor(n), 256, 0, s>>>(static_cast<T*>(dst), n, by);
  return cudaGetLastError();
}

// datatype codes: kernels/datatype.h (and hetcomm.h's hetcommDataType_t).
template <template <class> class F, class... A>
cudaError_t byType(int type, A... args) {
  switch (type) {
    case 0: return F<int8_t>::run(args...);
    case 1: return F<uint8_t>::run(args...);
    case 2: return F<int32_t>::run(args...);
    case 3: return F<uint32_t>::run(args...);
    case 4: return F<int64_t>::run(args...);
    case 5: return F<uint64_t>::run(args...);
    case 6: return F<__half>::run(args...);
    case 7: return F<float>::run(args...);
    case 8: return F<double>::run(args...);
    case 9: return F<__nv_bfloat16>::run(args...);
    default: return cudaErrorInvalidValue;
  }
}
template <class T> struct ReduceF {
  static cudaError_t run(void* d, const void* a, const void* b, size_t n, int op, cudaStream_t s) {
    return launchReduce<T>(d, a, b, n, op, s);
  }
};
template <class T> struct DivideF {
  static cudaError_t run(void* d, size_t n, int by, cudaStream_t s) { return launchDivide<T>(d, n, by, s); }
};

}  // namespace

extern "C" int hetcommCudaReduce(void* dst, const void* a, const void* b, size_t count, int type, int op,
                                 void* stream) {
  if (count == 0) return 0;
  return static_cast<int>(
      byType<ReduceF>(type, dst, a, b, count, op, static_cast<cudaStream_t>(stream)));
}

extern "C" int hetcommCudaDivideBy(void* dst, size_t count, int type, int n, void* stream) {
  if (count == 0) return 0;
  if (n < 1) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(byType<DivideF>(type, dst, count, n, static_cast<cudaStream_t>(stream)));
}
