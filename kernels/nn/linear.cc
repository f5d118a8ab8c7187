// linear.cc: the linear layer, out = inp @ weight^T + bias, and its backward, all three products in sgemm.
//
// Row-major throughout, weight (OC,C) as PyTorch's nn.Linear stores it, so the forward multiplies by the
// transpose (CblasTrans on weight); OpenBLAS packs either layout at the same speed. Backward products pass
// beta = 1, which makes sgemm add into the gradient buffers: accumulation costs nothing extra.
#include <cblas.h>

#include <cstddef>

#include "kernels/nn/nn.h"
#include "kernels/nn/vector_math.h"

namespace hetcomm::kernels::nn {
namespace {

// out[n,:] = bias for every row: the forward then lets sgemm add the product on top (beta = 1), one pass
// over out instead of a product pass plus a bias pass.
HC_NN_CLONES void broadcastRows(float* __restrict out, const float* __restrict bias, int N, int OC) {
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<size_t>(n) * OC;
    for (int o = 0; o < OC; ++o) row[o] = bias[o];
  }
}

// dbias[o] += sum over n of dout[n,o], rows added in order n = 0, 1, ... (deterministic; vectorised along o).
HC_NN_CLONES void addColumnSums(float* __restrict dbias, const float* __restrict dout, int N, int OC) {
  for (int n = 0; n < N; ++n) {
    const float* row = dout + static_cast<size_t>(n) * OC;
    for (int o = 0; o < OC; ++o) dbias[o] += row[o];
  }
}

}  // namespace

void linearForward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
  float beta = 0.0f;
  if (bias != nullptr) {
    broadcastRows(out, bias, N, OC);
    beta = 1.0f;
  }
  // out (N,OC) = inp (N,C) @ weight^T (C,OC) [+ out]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void linearBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                    int N, int C, int OC) {
  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias != nullptr) addColumnSums(dbias, dout, N, OC);
}

void setBlasThreads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }
int blasThreads() { return openblas_get_num_threads(); }

}  // namespace hetcomm::kernels::nn
