// adamw.cc: the AdamW update and the two helpers of gradient clipping (global norm, scale).
//
// The update follows nn.h's formula term by term, in float per element like PyTorch's (non-fused) AdamW; the
// bias corrections 1 - beta^t are computed once per call in double, since beta2^t for beta2 = 0.999 loses
// digits in float over thousands of steps. The norm accumulates in double across eight lanes (a fixed order,
// in vector registers like vector_math.h's float lanes): a float sum of millions of squares would lose the small ones.
#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/nn/nn.h"
#include "kernels/nn/vector_math.h"

namespace hetcomm::kernels::nn {
namespace {

HC_NN_CLONES void adamwLoop(float* __restrict params, const float* __restrict grads, float* __restrict m,
                            float* __restrict v, size_t n, float lr, float beta1, float beta2, float eps,
                            float weightDecay, float biasCorrection1, float biasCorrection2) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / biasCorrection1;
    const float vhat = vi / biasCorrection2;
    params[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weightDecay * params[i]);
  }
}

HC_NN_CLONES double sumSquares(const float* x, size_t n) {
  constexpr int kLanes = 8;
  typedef double DoubleLanes __attribute__((vector_size(kLanes * sizeof(double))));
  typedef float FloatLanes __attribute__((vector_size(kLanes * sizeof(float))));
  DoubleLanes acc = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    FloatLanes f;
    std::memcpy(&f, x + i, sizeof f);
    const DoubleLanes d = __builtin_convertvector(f, DoubleLanes);
    acc += d * d;
  }
  double a[kLanes];
  std::memcpy(a, &acc, sizeof a);
  for (int j = 0; i + j < n; ++j) a[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int j = 0; j < 4; ++j) a[j] += a[j + 4];
  for (int j = 0; j < 2; ++j) a[j] += a[j + 2];
  return a[0] + a[1];
}

HC_NN_CLONES void scaleLoop(float* x, size_t n, float s) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace

void adamwStep(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
               float eps, float weightDecay, int t) {
  const float biasCorrection1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const float biasCorrection2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
  adamwLoop(params, grads, m, v, n, lr, beta1, beta2, eps, weightDecay, biasCorrection1, biasCorrection2);
}

double globalNormSquared(const float* grads, size_t n) { return sumSquares(grads, n); }

void scale(float* x, size_t n, float s) { scaleLoop(x, n, s); }

}  // namespace hetcomm::kernels::nn
