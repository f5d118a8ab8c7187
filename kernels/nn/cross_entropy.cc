// cross_entropy.cc: softmax over the vocabulary fused with the cross-entropy loss, and its backward.
//
// Forward per row x of V logits: m = max(x); p = exp(x - m) / sum; loss = log(sum) - (x[target] - m).
// Subtracting m keeps exp in range whatever the logits; taking the loss from the log-sum rather than from
// -log(p[target]) keeps it finite when p[target] underflows to 0.
// Backward: d loss / d x = p - onehot(target), times the caller's dlossScale.
//
// Targets come from data and are checked (IdCheck, nn.h) before anything is written. probs may be logits
// (softmax in place) and dlogits may be probs: each has its own in-place loop, because a loop over possibly
// overlapping pointers would be versioned on an overlap check that exact aliasing fails, and run scalar.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/nn/nn.h"
#include "kernels/nn/vector_math.h"

namespace hetcomm::kernels::nn {
namespace {

IdCheck checkTargets(const int32_t* targets, int N, int V) {
  IdCheck check{.what = "target", .limit = V};
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0 || targets[n] >= V) {
      check.position = n;
      check.value = targets[n];
      break;
    }
  }
  return check;
}

HC_NN_INLINE void expShifted(float* __restrict p, const float* __restrict x, float m, int V) {
  for (int i = 0; i < V; ++i) p[i] = detail::expFast(x[i] - m);
}
HC_NN_INLINE void expShiftedInPlace(float* x, float m, int V) {
  for (int i = 0; i < V; ++i) x[i] = detail::expFast(x[i] - m);
}

HC_NN_INLINE void scaled(float* __restrict d, const float* __restrict p, float s, int V) {
  for (int i = 0; i < V; ++i) d[i] = p[i] * s;
}
HC_NN_INLINE void scaledInPlace(float* d, float s, int V) {
  for (int i = 0; i < V; ++i) d[i] *= s;
}

HC_NN_CLONES void softmaxCrossEntropyRows(float* losses, float* probs, const float* logits, const int32_t* targets,
                                          int N, int V) {
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<size_t>(n) * V;
    float* p = probs + static_cast<size_t>(n) * V;
    const float m = detail::laneMax(x, V);
    const float target = x[targets[n]];  // read before an in-place softmax overwrites it
    if (p == x) {
      expShiftedInPlace(p, m, V);
    } else {
      expShifted(p, x, m, V);
    }
    const float sum = detail::laneSum(p, V);
    const float inv = 1.0f / sum;
    for (int i = 0; i < V; ++i) p[i] *= inv;
    losses[n] = std::log(sum) - (target - m);
  }
}

HC_NN_CLONES void crossEntropyBackwardRows(float* dlogits, const float* probs, const int32_t* targets, float dlossScale,
                                           int N, int V) {
  for (int n = 0; n < N; ++n) {
    float* d = dlogits + static_cast<size_t>(n) * V;
    const float* p = probs + static_cast<size_t>(n) * V;
    const float pTarget = p[targets[n]];  // read before an in-place pass overwrites it
    if (d == p) {
      scaledInPlace(d, dlossScale, V);
    } else {
      scaled(d, p, dlossScale, V);
    }
    d[targets[n]] = (pTarget - 1.0f) * dlossScale;
  }
}

}  // namespace

IdCheck crossEntropyForward(float* losses, float* probs, const float* logits, const int32_t* targets, int N, int V) {
  IdCheck check = checkTargets(targets, N, V);
  if (check.ok()) softmaxCrossEntropyRows(losses, probs, logits, targets, N, V);
  return check;
}

IdCheck crossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, float dlossScale, int N,
                             int V) {
  IdCheck check = checkTargets(targets, N, V);
  if (check.ok()) crossEntropyBackwardRows(dlogits, probs, targets, dlossScale, N, V);
  return check;
}

}  // namespace hetcomm::kernels::nn
