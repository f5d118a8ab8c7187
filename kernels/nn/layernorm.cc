// layernorm.cc: LayerNorm over the last dimension and its backward (llm.c's formulation).
//
// Forward, per row x of C values:  mean = sum(x) / C;  var = sum((x - mean)^2) / C (two passes: a one-pass
// E[x^2] - mean^2 cancels badly when |mean| >> std);  rstd = 1 / sqrt(var + eps);
// out = (x - mean) * rstd * weight + bias.
// Backward, with norm = (x - mean) * rstd and dnorm = weight * dout:
//   dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),
//   dweight += norm * dout,  dbias += dout.
// Sums use the lane accumulators of vector_math.h, so every loop over C runs in vector registers.
#include <cmath>
#include <cstddef>

#include "kernels/nn/nn.h"
#include "kernels/nn/vector_math.h"

namespace hetcomm::kernels::nn {
namespace {

constexpr float kEps = 1e-5f;

HC_NN_CLONES void layernormRows(float* __restrict out, float* __restrict mean, float* __restrict rstd,
                                const float* __restrict inp, const float* __restrict weight,
                                const float* __restrict bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    const float m = detail::laneSum(x, C) / static_cast<float>(C);
    for (int i = 0; i < C; ++i) y[i] = x[i] - m;  // the centred row, kept in out for the second pass
    const float var = detail::laneDot(y, y, C) / static_cast<float>(C);
    const float s = 1.0f / std::sqrt(var + kEps);
    for (int i = 0; i < C; ++i) y[i] = y[i] * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

HC_NN_CLONES void layernormBackwardRows(float* __restrict dinp, float* __restrict dweight, float* __restrict dbias,
                                        const float* __restrict dout, const float* __restrict inp,
                                        const float* __restrict weight, const float* __restrict mean,
                                        const float* __restrict rstd, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    const float m = mean[n], s = rstd[n];
    // Both row sums in one pass, in lane accumulators (vector_math.h). Padding lanes load weight = dout = 0,
    // so they add dnorm = 0 to both sums.
    using detail::kLanes, detail::Lanes, detail::loadLanes, detail::loadPartialLanes;
    Lanes accDnorm = {}, accDnormNorm = {};
    int i = 0;
    for (; i + kLanes <= C; i += kLanes) {
      const Lanes norm = (loadLanes(x + i) - m) * s, dnorm = loadLanes(weight + i) * loadLanes(dy + i);
      accDnorm += dnorm;
      accDnormNorm += dnorm * norm;
    }
    if (i < C) {
      const Lanes norm = (loadPartialLanes(x + i, C - i, 0.0f) - m) * s;
      const Lanes dnorm = loadPartialLanes(weight + i, C - i, 0.0f) * loadPartialLanes(dy + i, C - i, 0.0f);
      accDnorm += dnorm;
      accDnormNorm += dnorm * norm;
    }
    const float meanDnorm = detail::sumLanes(accDnorm) / static_cast<float>(C);
    const float meanDnormNorm = detail::sumLanes(accDnormNorm) / static_cast<float>(C);
    for (int k = 0; k < C; ++k) {
      const float norm = (x[k] - m) * s, dnorm = weight[k] * dy[k];
      dbias[k] += dy[k];
      dweight[k] += norm * dy[k];
      dx[k] += s * (dnorm - meanDnorm - norm * meanDnormNorm);
    }
  }
}

}  // namespace

void layernormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                      int N, int C) {
  layernormRows(out, mean, rstd, inp, weight, bias, N, C);
}

void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, const float* mean, const float* rstd, int N, int C) {
  layernormBackwardRows(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace hetcomm::kernels::nn
