#include "trainer/optimizer.h"

#include <algorithm>

#include "kernels/nn/nn.h"

namespace hetcomm::trainer {

namespace nn = hetcomm::kernels::nn;

AdamW::AdamW(const TrainConfig& cfg, const ParamLayout& layout, std::vector<std::pair<size_t, size_t>> owned)
    : cfg_(cfg), owned_(std::move(owned)) {
  size_t state = 0;
  for (auto [begin, length] : owned_) {
    const size_t end = begin + length;
    // Padding between tensors is skipped: it has no tensor, so no run.
    for (const ParamTensor& t : layout.tensors()) {
      const size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
      if (lo < hi) runs_.push_back(Run{lo, hi - lo, state + (lo - begin), t.decay, t.inNorm});
    }
    state += length;
  }
  m_.assign(state, 0.0f);
  v_.assign(state, 0.0f);
}

void AdamW::step(float* params, float* grads, float lr, float gradScale) {
  ++t_;
  for (const Run& r : runs_) {
    if (gradScale != 1.0f) nn::scale(grads + r.offset, r.length, gradScale);
    nn::adamwStep(params + r.offset, grads + r.offset, m_.data() + r.state, v_.data() + r.state, r.length, lr,
                  static_cast<float>(cfg_.beta1), static_cast<float>(cfg_.beta2), static_cast<float>(cfg_.eps),
                  r.decay ? static_cast<float>(cfg_.weightDecay) : 0.0f, static_cast<int>(t_));
  }
}

double AdamW::normSquared(const float* grads) const {
  double sum = 0;
  for (const Run& r : runs_)
    if (r.inNorm) sum += nn::globalNormSquared(grads + r.offset, r.length);
  return sum;
}

}  // namespace hetcomm::trainer
