// reduce.cc: the element-wise reduction kernels and half-precision conversions behind reduce.h.
//
// How the speed comes about, and why this way:
// - Each (element type, op) is one plain loop, written once as a template. GCC auto-vectorises it at -O3;
//   there is no hand-written SIMD except the float16 fast path below. Element-wise loops need no
//   -ffast-math (nothing is reassociated), so results are the IEEE results of each single operation.
// - The per-datatype entry points carry target_clones: GCC compiles each three times (x86-64-v4: AVX-512
//   F/BW/DQ/VL; x86-64-v3: AVX2, F16C, FMA; baseline x86-64) and an ifunc resolver picks one by CPU features
//   when the library is loaded, so one binary runs on any x86-64 and still uses the widest vectors the CPU
//   has. x86-64-v4 rather than plain avx512f: 8- and 16-bit elements (int8, float16, bfloat16) need AVX512BW
//   for 512-bit vectors and fall back to 256-bit without it, and GCC 12's target_clones rejects
//   "avx512bw" on its own. Clones sit on the 10 per-datatype templates, not on every (type, op, aliasing)
//   loop, to keep 10 resolvers instead of 120; the loops are always_inline so that they are compiled
//   inside, and for, each clone.
// - dst may be a or b. Each aliasing case gets its own loop whose pointers are __restrict: without that,
//   GCC versions the loop on a runtime overlap check, and exact aliasing (dst == a) fails that check and
//   runs the scalar copy. Every case computes op(a[i], b[i]) in that order, so the bits never depend on
//   which buffer the caller reduces into (it matters for NaN payloads only).
// - float16 and bfloat16 are widened to float, combined, and rounded back once. That is the correctly
//   rounded half-precision result, not merely a close one: float's 24-bit significand is at least 2p+2 for
//   p = 11 (float16) and p = 8 (bfloat16), and for +, *, / such double rounding is known to be innocuous.
//   (The one gap: a bfloat16 product below 2^-126, a float subnormal, is rounded by float with fewer bits;
//   it may then be off by one bfloat16 subnormal ulp. bfloat16 subnormals are float subnormals, so a caller
//   that sets FTZ/DAZ in MXCSR gets them flushed, as its own float code does.)
// - float16 has a fast path on CPUs with F16C (one instruction converts 8 elements each way), chosen once.
//   Elsewhere, and in the public scalar conversions, branch-free bit manipulation produces the same bits,
//   NaNs included (the unit tests compare the two).
#include "kernels/reduce.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include "common/log.h"
#include "common/param.h"

// Multi-versioning and the F16C path are x86-64 with gcc only; elsewhere the same loops compile once, for the
// build's target, and the compiler's own vectoriser for that target applies. (clang 14, which builds the sanitizer
// and fuzz trees, has no target_clones on templates and no x86-64-v* names in __builtin_cpu_supports.)
#if defined(__x86_64__) && !defined(__clang__)
#define HC_KERNEL_X86 1
#include <immintrin.h>
#else
#define HC_KERNEL_X86 0
#endif

#define HC_KERNEL_INLINE inline __attribute__((always_inline))
// A build may predefine HC_KERNEL_CLONES, e.g. as empty (baseline code only) or as
// __attribute__((target("arch=x86-64-v3"))), to test one variant on a CPU whose resolver would pick another.
#if !defined(HC_KERNEL_CLONES) && HC_KERNEL_X86
#define HC_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif !defined(HC_KERNEL_CLONES)
#define HC_KERNEL_CLONES
#endif

namespace hetcomm::kernels {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Half-precision conversions by bit manipulation. Branch-free: every case is computed, then one is selected
// with masks. Selecting with ?: instead lets GCC 12 turn the choice back into a branch that its vectoriser
// cannot if-convert (seen in the x86-64-v3 and -v4 clones), and the loop then runs scalar, ~10x slower.

// All ones where `cond` holds, else zero.
HC_KERNEL_INLINE uint32_t maskIf(bool cond) { return 0u - static_cast<uint32_t>(cond); }
// a where mask is set, else b.
HC_KERNEL_INLINE uint32_t select(uint32_t mask, uint32_t a, uint32_t b) { return (mask & a) | (~mask & b); }

HC_KERNEL_INLINE float halfBitsToFloat(uint16_t h) {
  uint32_t x = h;
  uint32_t sign = (x & 0x8000u) << 16;
  uint32_t mag = x & 0x7FFFu;  // exponent and mantissa
  // Normal: move the fields into place and rebias the exponent from 15 to 127.
  uint32_t normal = (mag << 13) + ((127u - 15u) << 23);
  // Zero and subnormal: the value is mag * 2^-24 exactly (mag < 2^10), a normal float, so let the FPU
  // normalise it; that is exact, and simpler than counting leading zeros.
  uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-24f);
  // Inf and NaN: all-ones exponent, mantissa moved up. NaNs are made quiet, as F16C's vcvtph2ps does.
  uint32_t special = 0x7F800000u | ((mag & 0x3FFu) << 13) | (maskIf(mag > 0x7C00u) & 0x00400000u);
  uint32_t isSubnormal = maskIf(mag < 0x0400u), isSpecial = maskIf(mag >= 0x7C00u);
  uint32_t bits = select(isSubnormal, subnormal, select(isSpecial, special, normal));
  return std::bit_cast<float>(sign | bits);
}

HC_KERNEL_INLINE uint16_t floatToHalfBits(float f) {
  // After F. Giesen's float_to_half_fast3_rtne, with the branches turned into selects and NaN payloads
  // kept as F16C's vcvtps2ph keeps them (quiet bit set, top 10 mantissa bits), so both paths agree.
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t mag = u & 0x7FFFFFFFu;
  // |f| >= 65536 is inf (finite values in [65520, 65536) round up to inf in the normal path below).
  uint32_t big = select(maskIf(mag > 0x7F800000u), 0x7E00u | ((mag >> 13) & 0x3FFu), 0x7C00u);
  // |f| < 2^-14, a float16 subnormal or zero: adding 0.5f puts the float16 ulp (2^-24) at float's ulp of
  // 0.5, so the FPU's own round-to-nearest-even does the rounding; subtracting 0.5f's bits leaves the
  // float16 mantissa. Needs the default rounding mode, which the whole library assumes.
  constexpr uint32_t kHalfBits = 126u << 23;  // 0.5f
  uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(mag) + 0.5f) - kHalfBits;
  // Normal: rebias, then round to nearest even on the 13 dropped bits; a carry out of the mantissa
  // correctly bumps the exponent (and turns 65520 and up into inf).
  uint32_t odd = (mag >> 13) & 1u;
  uint32_t normal = (mag - ((127u - 15u) << 23) + 0x0FFFu + odd) >> 13;
  uint32_t bits = select(maskIf(mag >= (143u << 23)), big, select(maskIf(mag < (113u << 23)), subnormal, normal));
  return static_cast<uint16_t>(sign | bits);
}

// bfloat16 is the top half of a float: widening is a shift, and narrowing rounds the low 16 bits.
HC_KERNEL_INLINE float bfloat16BitsToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

HC_KERNEL_INLINE uint16_t floatToBfloat16Bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  // Round to nearest even; a carry moves into the exponent and the largest finite values round to inf.
  uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  // NaN: truncate and set the quiet bit, since rounding could carry a NaN's payload into inf. Tested as
  // f != f (one float compare; AVX2 has no unsigned integer compare) and selected before narrowing, so
  // each vector narrows once.
  uint32_t bits = select(maskIf(f != f), u | 0x00400000u, rounded);
  return static_cast<uint16_t>(bits >> 16);
}

// ---------------------------------------------------------------------------------------------------------
// Element traits: how a stored element becomes a value to compute with, and back.

template <class T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static HC_KERNEL_INLINE T load(T x) { return x; }
  static HC_KERNEL_INLINE T store(T x) { return x; }
};

struct Half {
  using Storage = uint16_t;
  using Compute = float;
  static HC_KERNEL_INLINE float load(uint16_t x) { return halfBitsToFloat(x); }
  static HC_KERNEL_INLINE uint16_t store(float x) { return floatToHalfBits(x); }
};

struct Bfloat16 {
  using Storage = uint16_t;
  using Compute = float;
  static HC_KERNEL_INLINE float load(uint16_t x) { return bfloat16BitsToFloat(x); }
  static HC_KERNEL_INLINE uint16_t store(float x) { return floatToBfloat16Bits(x); }
};

// ---------------------------------------------------------------------------------------------------------
// Operators. Integers compute in an unsigned type at least as wide as int: signed overflow would be UB,
// and uint8 * uint8 would promote to (signed) int. Converting back to the signed type wraps (C++20).

template <class T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumOp {
  template <class T>
  static HC_KERNEL_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <class T>
  static HC_KERNEL_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Max and Min return NaN when either input is NaN (as NCCL's device code and torch.maximum do), so a NaN
// anywhere in an all-reduce reaches every rank whatever the reduction order. Written as compare, select,
// select: GCC turns the first select into vmaxps/vminps, which return b when either is NaN, and the second
// into a blend that returns a when a is NaN.
struct MaxOp {
  template <class T>
  static HC_KERNEL_INLINE T apply(T a, T b) {
    T r = a > b ? a : b;
    if constexpr (std::is_floating_point_v<T>) r = a != a ? a : r;
    return r;
  }
};

struct MinOp {
  template <class T>
  static HC_KERNEL_INLINE T apply(T a, T b) {
    T r = a < b ? a : b;
    if constexpr (std::is_floating_point_v<T>) r = a != a ? a : r;
    return r;
  }
};

// ---------------------------------------------------------------------------------------------------------
// Loops: one per aliasing case, each with __restrict pointers (see the top of the file).

template <class E, class Op>
HC_KERNEL_INLINE void loopOutOfPlace(typename E::Storage* __restrict dst, const typename E::Storage* __restrict a,
                                     const typename E::Storage* __restrict b, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = E::store(Op::apply(E::load(a[i]), E::load(b[i])));
}

// dst == a.
template <class E, class Op>
HC_KERNEL_INLINE void loopIntoA(typename E::Storage* __restrict a, const typename E::Storage* __restrict b,
                                size_t count) {
  for (size_t i = 0; i < count; ++i) a[i] = E::store(Op::apply(E::load(a[i]), E::load(b[i])));
}

// dst == b.
template <class E, class Op>
HC_KERNEL_INLINE void loopIntoB(const typename E::Storage* __restrict a, typename E::Storage* __restrict b,
                                size_t count) {
  for (size_t i = 0; i < count; ++i) b[i] = E::store(Op::apply(E::load(a[i]), E::load(b[i])));
}

// dst == a == b (x op x: doubling, squaring), where no two pointers may be __restrict.
template <class E, class Op>
HC_KERNEL_INLINE void loopSelf(typename E::Storage* d, size_t count) {
  for (size_t i = 0; i < count; ++i) d[i] = E::store(Op::apply(E::load(d[i]), E::load(d[i])));
}

template <class E, class Op>
HC_KERNEL_INLINE void reduceWith(void* dst, const void* a, const void* b, size_t count) {
  using S = typename E::Storage;
  auto* d = static_cast<S*>(dst);
  const auto* x = static_cast<const S*>(a);
  const auto* y = static_cast<const S*>(b);
  if (d == x && d == y) {
    loopSelf<E, Op>(d, count);
  } else if (d == x) {
    loopIntoA<E, Op>(d, y, count);
  } else if (d == y) {
    loopIntoB<E, Op>(x, d, count);
  } else {
    loopOutOfPlace<E, Op>(d, x, y, count);
  }
}

// One entry point per element type, cloned per ISA. Avg reduces as Sum; divideBy finishes it.
template <class E>
HC_KERNEL_CLONES void reduceAs(void* dst, const void* a, const void* b, size_t count, RedOp op) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return reduceWith<E, SumOp>(dst, a, b, count);
    case RedOp::kProd:
      return reduceWith<E, ProdOp>(dst, a, b, count);
    case RedOp::kMax:
      return reduceWith<E, MaxOp>(dst, a, b, count);
    case RedOp::kMin:
      return reduceWith<E, MinOp>(dst, a, b, count);
  }
}

// Integer division truncates toward zero (C++ semantics); floats divide once, then round.
template <class E>
HC_KERNEL_CLONES void divideAs(void* dst, size_t count, int n) {
  using S = typename E::Storage;
  using C = typename E::Compute;
  // Byte types divide in int: n need not fit in a byte, and int division truncates toward zero too.
  using D = std::conditional_t<(sizeof(C) < sizeof(int)), int, C>;
  auto* d = static_cast<S*>(dst);
  const D divisor = static_cast<D>(n);
  for (size_t i = 0; i < count; ++i) d[i] = E::store(static_cast<C>(static_cast<D>(E::load(d[i])) / divisor));
}

#if HC_KERNEL_X86
// ---------------------------------------------------------------------------------------------------------
// float16 on F16C. The conversions are the expensive part of a float16 reduction (a few dozen integer
// operations per element by bit manipulation), and F16C does each direction in one instruction for 8
// elements. The ops repeat MaxOp/MinOp's NaN rule with intrinsics (vmaxps returns its second operand when
// either is NaN; the blend then returns a when a is NaN).

template <class Op>
__attribute__((target("avx2,f16c"))) HC_KERNEL_INLINE __m256 applyVec(__m256 a, __m256 b) {
  if constexpr (std::is_same_v<Op, SumOp>) {
    return _mm256_add_ps(a, b);
  } else if constexpr (std::is_same_v<Op, ProdOp>) {
    return _mm256_mul_ps(a, b);
  } else if constexpr (std::is_same_v<Op, MaxOp>) {
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  } else {
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
}

template <class Op>
__attribute__((target("avx2,f16c"))) HC_KERNEL_INLINE __m128i combine8(const uint16_t* a, const uint16_t* b) {
  __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  return _mm256_cvtps_ph(applyVec<Op>(x, y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Every 8-element block is loaded before it is stored, so dst may equal a or b.
template <class Op>
__attribute__((target("avx2,f16c"))) void halfLoopF16c(uint16_t* dst, const uint16_t* a, const uint16_t* b,
                                                       size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), combine8<Op>(a + i, b + i));
  }
  if (i < count) {
    // The tail goes through the same instructions (via a padded copy), so every element of a call
    // rounds the same way whatever its position.
    uint16_t ta[8] = {}, tb[8] = {}, td[8];
    size_t rest = count - i;
    std::memcpy(ta, a + i, rest * sizeof(uint16_t));
    std::memcpy(tb, b + i, rest * sizeof(uint16_t));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(td), combine8<Op>(ta, tb));
    std::memcpy(dst + i, td, rest * sizeof(uint16_t));
  }
}

__attribute__((target("avx2,f16c"))) void reduceHalfF16c(void* dst, const void* a, const void* b, size_t count,
                                                         RedOp op) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return halfLoopF16c<SumOp>(d, x, y, count);
    case RedOp::kProd:
      return halfLoopF16c<ProdOp>(d, x, y, count);
    case RedOp::kMax:
      return halfLoopF16c<MaxOp>(d, x, y, count);
    case RedOp::kMin:
      return halfLoopF16c<MinOp>(d, x, y, count);
  }
}

#endif  // HC_KERNEL_X86

using ReduceFn = void (*)(void*, const void*, const void*, size_t, RedOp);

#if HC_KERNEL_X86
// HETCOMM_KERNEL_F16C=0 turns the F16C path off, to compare with it or to test the portable path.
HC_PARAM_INT(kernelF16c, "KERNEL_F16C", 1);
#endif

// Chosen once, on first use (a function-local static, so it is safe however early a caller arrives).
ReduceFn halfReducer() {
#if !HC_KERNEL_X86
  return &reduceAs<Half>;
#else
  static const ReduceFn fn = [] {
    __builtin_cpu_init();
    bool f16c = kernelF16c() != 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    // The same test the target_clones resolvers made, repeated here only to say what they chose.
    const char* isa = __builtin_cpu_supports("x86-64-v4")   ? "x86-64-v4 (AVX-512)"
                      : __builtin_cpu_supports("x86-64-v3") ? "x86-64-v3 (AVX2)"
                                                            : "baseline x86-64";
    HC_INFO(Init, "kernels: reductions use %s code; float16 converts by %s", isa, f16c ? "F16C" : "bit manipulation");
    return f16c ? &reduceHalfF16c : &reduceAs<Half>;
  }();
  return fn;
#endif
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op) {
  HC_CHECK(isValid(type) && isValid(op));
  if (count == 0) return;  // callers may pass null buffers with a zero count
  switch (type) {
    case DataType::kInt8:
      return reduceAs<Plain<int8_t>>(dst, a, b, count, op);
    case DataType::kUint8:
      return reduceAs<Plain<uint8_t>>(dst, a, b, count, op);
    case DataType::kInt32:
      return reduceAs<Plain<int32_t>>(dst, a, b, count, op);
    case DataType::kUint32:
      return reduceAs<Plain<uint32_t>>(dst, a, b, count, op);
    case DataType::kInt64:
      return reduceAs<Plain<int64_t>>(dst, a, b, count, op);
    case DataType::kUint64:
      return reduceAs<Plain<uint64_t>>(dst, a, b, count, op);
    case DataType::kFloat16:
      return halfReducer()(dst, a, b, count, op);
    case DataType::kFloat32:
      return reduceAs<Plain<float>>(dst, a, b, count, op);
    case DataType::kFloat64:
      return reduceAs<Plain<double>>(dst, a, b, count, op);
    case DataType::kBfloat16:
      return reduceAs<Bfloat16>(dst, a, b, count, op);
  }
}

void divideBy(void* dst, size_t count, DataType type, int n) {
  HC_CHECK(isValid(type) && n >= 1);
  if (count == 0 || n == 1) return;
  switch (type) {
    case DataType::kInt8:
      return divideAs<Plain<int8_t>>(dst, count, n);
    case DataType::kUint8:
      return divideAs<Plain<uint8_t>>(dst, count, n);
    case DataType::kInt32:
      return divideAs<Plain<int32_t>>(dst, count, n);
    case DataType::kUint32:
      return divideAs<Plain<uint32_t>>(dst, count, n);
    case DataType::kInt64:
      return divideAs<Plain<int64_t>>(dst, count, n);
    case DataType::kUint64:
      return divideAs<Plain<uint64_t>>(dst, count, n);
    case DataType::kFloat16:
      return divideAs<Half>(dst, count, n);
    case DataType::kFloat32:
      return divideAs<Plain<float>>(dst, count, n);
    case DataType::kFloat64:
      return divideAs<Plain<double>>(dst, count, n);
    case DataType::kBfloat16:
      return divideAs<Bfloat16>(dst, count, n);
  }
}

float halfToFloat(uint16_t h) { return halfBitsToFloat(h); }
uint16_t floatToHalf(float f) { return floatToHalfBits(f); }
float bfloat16ToFloat(uint16_t b) { return bfloat16BitsToFloat(b); }
uint16_t floatToBfloat16(float f) { return floatToBfloat16Bits(f); }

}  // namespace hetcomm::kernels
