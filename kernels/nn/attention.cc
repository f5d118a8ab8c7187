// attention.cc: causal multi-head self-attention and its backward, per (batch, head) through sgemm.
//
// Per (b, h), with Q, K, V the (T, hs) slices of qkv (strided: leading dimension 3C, no copies):
//   forward:  P = softmax(scale * Q K^T + causal mask),  out = P V,             scale = 1 / sqrt(hs)
//   backward: dV += P^T dout;  dP = dout V^T;  dS = P * (dP - rowsum(P * dP));
//             dQ += scale * dS K;  dK += scale * dS^T Q
//
// Why in row blocks: the mask makes the upper triangle of P zero, so a full T x T product wastes half its
// work. Rows are taken kBlock at a time; block [r0, r1) only needs columns [0, r1), which the GEMMs get as
// smaller sizes. At T = 4 kBlock that is 10/16 of the full products. The small triangle above the diagonal
// inside each block is computed and then zeroed, which keeps P exactly causal for the products that follow.
// Each block runs its GEMMs and its softmax back to back while the block is still in cache, and backward
// needs scratch for one block of rows only (attentionBackward asks for T*T to leave room to change that).
//
// kBlock = 64: at T = 256, hs = 64 (kernels/bench/nn_bench.cc, one OpenBLAS thread) blocks of 32 to 96 rows
// measured within noise of each other, 128 and 256 (no blocking) 10-25% slower forward + backward. Smaller
// blocks skip more of the triangle but give OpenBLAS less work per call.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/nn/nn.h"
#include "kernels/nn/vector_math.h"

namespace hetcomm::kernels::nn {
namespace {

constexpr int kBlock = 64;

// Rows t in [r0, r1) of one (b,h)'s att (T,T): on entry row t holds the scaled scores in [0, t]; on return the
// softmax over [0, t], and zeros in (t, T). Stable: the row maximum is subtracted before exp.
HC_NN_CLONES void softmaxCausalRows(float* att, int r0, int r1, int T) {
  for (int t = r0; t < r1; ++t) {
    float* row = att + static_cast<size_t>(t) * T;
    const int len = t + 1;
    const float m = detail::laneMax(row, len);
    for (int s = 0; s < len; ++s) row[s] = detail::expFast(row[s] - m);
    const float inv = 1.0f / detail::laneSum(row, len);
    for (int s = 0; s < len; ++s) row[s] *= inv;
    for (int s = len; s < T; ++s) row[s] = 0.0f;
  }
}

// Softmax backward for rows [r0, r1). d points at row r0 of a (r1 - r0, T) block holding dP; att at row r0 of
// P. On return the block holds dS = P * (dP - sum(P * dP)) in columns [0, t] of row t and zeros in (t, r1),
// so the products that read columns [0, r1) see an exactly causal dS.
HC_NN_CLONES void softmaxBackwardCausalRows(float* __restrict d, const float* __restrict att, int r0, int r1, int T) {
  for (int t = r0; t < r1; ++t) {
    float* drow = d + static_cast<size_t>(t - r0) * T;
    const float* p = att + static_cast<size_t>(t - r0) * T;
    const int len = t + 1;
    const float dot = detail::laneDot(p, drow, len);
    for (int s = 0; s < len; ++s) drow[s] = p[s] * (drow[s] - dot);
    for (int s = len; s < r1; ++s) drow[s] = 0.0f;
  }
}

}  // namespace

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + static_cast<size_t>(b) * T * C3 + static_cast<size_t>(h) * hs;  // (T,hs), ld 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;                     // (T,T)
      float* o = out + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;  // (T,hs), ld C
      for (int r0 = 0; r0 < T; r0 += kBlock) {
        const int r1 = std::min(r0 + kBlock, T), rows = r1 - r0;
        // a[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, scale, q + static_cast<size_t>(r0) * C3, C3,
                    k, C3, 0.0f, a + static_cast<size_t>(r0) * T, T);
        softmaxCausalRows(a, r0, r1, T);
        // o[r0:r1] = a[r0:r1, 0:r1] @ v[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, a + static_cast<size_t>(r0) * T, T,
                    v, C3, 0.0f, o + static_cast<size_t>(r0) * C, C);
      }
    }
  }
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T,
                       int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t headOffset = static_cast<size_t>(b) * T * C3 + static_cast<size_t>(h) * hs;
      const float* q = qkv + headOffset;  // (T,hs), ld 3C; k and v follow at +C and +2C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + headOffset;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;                       // (T,T)
      const float* dO = dout + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;  // (T,hs), ld C
      for (int r0 = 0; r0 < T; r0 += kBlock) {
        const int r1 = std::min(r0 + kBlock, T), rows = r1 - r0;
        const float* aBlock = a + static_cast<size_t>(r0) * T;    // a[r0:r1, 0:r1], ld T
        const float* dOBlock = dO + static_cast<size_t>(r0) * C;  // dout[r0:r1], ld C
        // datt (rows, r1) = dout[r0:r1] @ v[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, dOBlock, C, v, C3, 0.0f, datt, T);
        // dv[0:r1] += a[r0:r1, 0:r1]^T @ dout[r0:r1]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, aBlock, T, dOBlock, C, 1.0f, dv, C3);
        softmaxBackwardCausalRows(datt, aBlock, r0, r1, T);
        // dq[r0:r1] += scale * dS @ k[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, scale, datt, T, k, C3, 1.0f,
                    dq + static_cast<size_t>(r0) * C3, C3);
        // dk[0:r1] += scale * dS^T @ q[r0:r1]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, scale, datt, T,
                    q + static_cast<size_t>(r0) * C3, C3, 1.0f, dk, C3);
      }
    }
  }
}

}  // namespace hetcomm::kernels::nn
