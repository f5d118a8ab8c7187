// activation.cc: the element-wise layers, GELU (tanh approximation, as GPT-2) and the residual add.
//
// Where an output may alias an input, the aliased case gets its own loop: a loop over two distinct __restrict
// pointers vectorises unconditionally, while one over possibly-overlapping pointers is versioned by GCC on a
// runtime overlap check that exact aliasing fails, and then runs scalar (reduce.cc found the same).
#include <cmath>
#include <cstddef>

#include "kernels/nn/nn.h"
#include "kernels/nn/vector_math.h"

namespace hetcomm::kernels::nn {
namespace {

// gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

HC_NN_INLINE float gelu(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + detail::tanhFast(u));
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
HC_NN_INLINE float geluGrad(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float th = detail::tanhFast(u);
  const float dudx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dudx;
}

HC_NN_CLONES void geluOutOfPlace(float* __restrict out, const float* __restrict inp, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}
HC_NN_CLONES void geluInPlace(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = gelu(x[i]);
}
HC_NN_CLONES void geluBackwardLoop(float* __restrict dinp, const float* __restrict inp, const float* __restrict dout,
                                   size_t n) {
  for (size_t i = 0; i < n; ++i) dinp[i] += geluGrad(inp[i]) * dout[i];
}

HC_NN_CLONES void add(float* __restrict out, const float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
// dst[i] += src[i]; dst and src distinct.
HC_NN_CLONES void addInto(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void geluForward(float* out, const float* inp, size_t n) {
  if (out == inp) {
    geluInPlace(out, n);
  } else {
    geluOutOfPlace(out, inp, n);
  }
}

void geluBackward(float* dinp, const float* inp, const float* dout, size_t n) { geluBackwardLoop(dinp, inp, dout, n); }

void residualForward(float* out, const float* a, const float* b, size_t n) {
  if (out != a && out != b) {
    add(out, a, b, n);
  } else if (a == b) {
    // out = a + a in place: twice a, exactly, without reading through two aliased restrict pointers.
    scale(out, n, 2.0f);
  } else {
    addInto(out, out == a ? b : a, n);  // a + b == b + a exactly in IEEE arithmetic
  }
}

void residualBackward(float* da, float* db, const float* dout, size_t n) {
  addInto(da, dout, n);
  addInto(db, dout, n);
}

}  // namespace hetcomm::kernels::nn
