// embedding.cc: the encoder, token embedding plus position embedding, and its backward.
//
// Token ids come from data, so both directions check every id before touching memory and return an IdCheck
// (nn.h); on failure nothing has been written. The check is one pass over B*T ints, small next to the B*T*C
// floats moved.
#include <cstddef>
#include <cstdint>

#include "kernels/nn/nn.h"
#include "kernels/nn/vector_math.h"

namespace hetcomm::kernels::nn {
namespace {

IdCheck checkIds(const char* what, const int32_t* ids, size_t n, int limit) {
  IdCheck check{.what = what, .limit = limit};
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= limit) {
      check.position = static_cast<int64_t>(i);
      check.value = ids[i];
      return check;
    }
  }
  return check;
}

// out[i] = a[i] + b[i], and acc[i] += x[i]: the two row operations of the encoder, vectorised per clone.
HC_NN_CLONES void addRows(float* __restrict out, const float* __restrict a, const float* __restrict b, int C) {
  for (int i = 0; i < C; ++i) out[i] = a[i] + b[i];
}
HC_NN_CLONES void accumulateRow(float* __restrict acc, const float* __restrict x, int C) {
  for (int i = 0; i < C; ++i) acc[i] += x[i];
}

}  // namespace

IdCheck encoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       int V) {
  const size_t BT = static_cast<size_t>(B) * T;
  IdCheck check = checkIds("token", tokens, BT, V);
  if (!check.ok()) return check;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      addRows(out + bt * C, wte + static_cast<size_t>(tokens[bt]) * C, wpe + static_cast<size_t>(t) * C, C);
    }
  }
  return check;
}

IdCheck encoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                        int V) {
  const size_t BT = static_cast<size_t>(B) * T;
  IdCheck check = checkIds("token", tokens, BT, V);
  if (!check.ok()) return check;
  // Sequential over (b, t): a token that occurs twice gets its two rows added in a fixed order.
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      const float* d = dout + bt * C;
      accumulateRow(dwte + static_cast<size_t>(tokens[bt]) * C, d, C);
      accumulateRow(dwpe + static_cast<size_t>(t) * C, d, C);
    }
  }
  return check;
}

}  // namespace hetcomm::kernels::nn
