// vector_math.h: the pieces the kernels/nn/ loops are built from, written so that GCC auto-vectorises them.
// Private to kernels/nn/ (callers include nn.h only).
//
// Why these exist:
// - libm's expf and tanhf are scalar calls; GCC vectorises them only under -ffast-math (glibc's SIMD variants
//   are declared for __FAST_MATH__ only). Softmax over a 50k vocabulary and GELU spend their time there, so
//   exp and tanh are written here as branch-free polynomial code that vectorises like any arithmetic.
// - GCC does not vectorise a float sum without reassociation (-ffast-math). The lane helpers accumulate into
//   kLanes independent partial sums in vector registers, so a row sum runs at vector speed in an order fixed
//   by kLanes, not by the CPU's vector width. (Bits can still differ between clones in the last place: GCC
//   fuses multiply-adds where the CPU has FMA, as C++ allows. OpenBLAS differs per CPU anyway.)
// - Functions that hold hot loops carry HC_NN_CLONES (as reduce.cc does): GCC compiles them for x86-64-v4
//   (AVX-512), x86-64-v3 (AVX2 + FMA) and baseline, and the loader picks one. The helpers below are
//   always_inline so that they are compiled inside, and for, each clone.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#define HC_NN_INLINE inline __attribute__((always_inline))
// Cloned per ISA with gcc on x86-64; clang 14 (the sanitizer and fuzz trees) builds the baseline loops only, as it
// refuses wide vectors passed between clones of different targets.
#if !defined(HC_NN_CLONES) && defined(__x86_64__) && !defined(__clang__)
#define HC_NN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif !defined(HC_NN_CLONES)
#define HC_NN_CLONES
#endif

namespace hetcomm::kernels::nn::detail {

// e^x for x <= 88, relative error about 2e-7 (Cephes expf's reduction and polynomial). Results below e^-87
// (near float's smallest normal) are flushed to 0, which is what softmax wants; NaN stays NaN.
HC_NN_INLINE float expFast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 significant bits, so
  constexpr float kLn2Lo = -2.12194440e-4f;  // n * kLn2Hi is exact for the n that occur
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: adding and subtracting it rounds to an integer
  constexpr float kMin = -87.0f, kMax = 88.0f;
  float xc = x < kMin ? kMin : x;
  xc = xc > kMax ? kMax : xc;
  // x = n ln2 + r with |r| <= ln2 / 2; e^x = 2^n e^r.
  float n = (xc * kLog2e + kRound) - kRound;
  float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float er = p * r * r + r + 1.0f;
  // 2^n built in the exponent field; n is in [-126, 127] after the clamp, a normal float.
  float pow2n = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  float y = er * pow2n;
  return x < kMin ? 0.0f : y;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1), absolute error about 1e-7 (what GELU needs: it adds the result to 1).
// Clamped at |x| = 9, beyond which tanh rounds to +-1 in float anyway.
HC_NN_INLINE float tanhFast(float x) {
  float xc = x > 9.0f ? 9.0f : x;
  xc = xc < -9.0f ? -9.0f : xc;
  return 1.0f - 2.0f / (expFast(2.0f * xc) + 1.0f);
}

// Lane accumulators: kLanes partial sums held in one GCC vector, which is one zmm register under AVX-512,
// two ymm under AVX2 and four xmm on baseline x86-64, and in each case the same 16 sums in the same order.
// (Plain float acc[16] arrays vectorise too, but GCC then keeps them on the stack, and every iteration waits
// on a store-to-load forward.) Partial tails are padded with the operation's identity, and the lanes are
// combined in a fixed pairwise tree.
constexpr int kLanes = 16;
// (Passing Lanes by value draws -Wpsabi's note that the ABI differs with and without AVX-512. These helpers
// are always inlined, so no such call exists; kernels/CMakeLists.txt turns the note off for nn/.)
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

HC_NN_INLINE Lanes loadLanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}

// p[0..n) for n < kLanes, the other lanes set to `fill`.
HC_NN_INLINE Lanes loadPartialLanes(const float* p, int n, float fill) {
  float tmp[kLanes];
  for (int j = 0; j < kLanes; ++j) tmp[j] = fill;
  for (int j = 0; j < n; ++j) tmp[j] = p[j];
  return loadLanes(tmp);
}

HC_NN_INLINE float sumLanes(Lanes v) {
  static_assert(kLanes == 16);
  float a[kLanes];
  std::memcpy(a, &v, sizeof a);
  for (int j = 0; j < 8; ++j) a[j] += a[j + 8];  // constant trip counts: GCC unrolls the whole tree
  for (int j = 0; j < 4; ++j) a[j] += a[j + 4];
  for (int j = 0; j < 2; ++j) a[j] += a[j + 2];
  return a[0] + a[1];
}

// sum x[i], i < n.
HC_NN_INLINE float laneSum(const float* x, int n) {
  Lanes acc = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += loadLanes(x + i);
  if (i < n) acc += loadPartialLanes(x + i, n - i, 0.0f);
  return sumLanes(acc);
}

// sum a[i] * b[i], i < n.
HC_NN_INLINE float laneDot(const float* a, const float* b, int n) {
  Lanes acc = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += loadLanes(a + i) * loadLanes(b + i);
  if (i < n) acc += loadPartialLanes(a + i, n - i, 0.0f) * loadPartialLanes(b + i, n - i, 0.0f);
  return sumLanes(acc);
}

// max x[i], i < n (n >= 1). A NaN in x is skipped here; the caller's exp(x - max) carries it on.
HC_NN_INLINE float laneMax(const float* x, int n) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  Lanes acc = loadPartialLanes(x, 0, kLowest);
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Lanes v = loadLanes(x + i);
    acc = v > acc ? v : acc;
  }
  if (i < n) {
    const Lanes v = loadPartialLanes(x + i, n - i, kLowest);
    acc = v > acc ? v : acc;
  }
  float a[kLanes];
  std::memcpy(a, &acc, sizeof a);
  for (int j = 0; j < 8; ++j) a[j] = a[j + 8] > a[j] ? a[j + 8] : a[j];
  for (int j = 0; j < 4; ++j) a[j] = a[j + 4] > a[j] ? a[j + 4] : a[j];
  for (int j = 0; j < 2; ++j) a[j] = a[j + 2] > a[j] ? a[j + 2] : a[j];
  return a[1] > a[0] ? a[1] : a[0];
}

}  // namespace hetcomm::kernels::nn::detail
