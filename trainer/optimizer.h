// optimizer.h: AdamW over the ranges of the flat parameter buffer this rank owns (all of it, or its ZeRO-1
// slices), with decoupled weight decay on matrices only (not on biases and LayerNorm parameters).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "trainer/config.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {

class AdamW {
 public:
  // owned: (offset, length) ranges of the flat buffer, in the order the moments are stored.
  AdamW(const TrainConfig& cfg, const ParamLayout& layout, std::vector<std::pair<size_t, size_t>> owned);

  // One update of the owned ranges with learning rate lr; gradScale multiplies the gradients first (clipping).
  // Advances the step count (bias correction uses it).
  void step(float* params, float* grads, float lr, float gradScale);
  // Squared L2 norm of the owned ranges of grads (tensors with inNorm only: each parameter counted once).
  double normSquared(const float* grads) const;

  int64_t steps() const { return t_; }
  void setSteps(int64_t t) { t_ = t; }
  // Moments of the owned ranges, concatenated in range order.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<std::pair<size_t, size_t>>& owned() const { return owned_; }

 private:
  struct Run {                     // a piece of one tensor inside one owned range
    size_t offset, length, state;  // flat offset, floats, index into m_/v_
    bool decay;
    bool inNorm;  // ParamTensor::inNorm
  };
  TrainConfig cfg_;
  std::vector<std::pair<size_t, size_t>> owned_;
  std::vector<Run> runs_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace hetcomm::trainer
