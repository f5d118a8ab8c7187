// model.h: a GPT-2-style decoder on the CPU, forward and backward, over the flat parameter buffer of a
// ParamLayout (llm.c's structure: activations in buffers kept for the backward pass, shapes in comments).
//
//   tokens [B,T] -> wte + wpe -> L x { x += proj(attn(ln_1(x))); x += mlp(ln_2(x)) } -> ln_f -> logits = x wte^T
//
// Pre-LayerNorm blocks, causal multi-head self-attention, a 4x GELU MLP, and an LM head tied to the token
// embedding. fp32; the math is kernels/nn (OpenBLAS for the matrix products).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {

class Gpt {
 public:
  // Buffers for micro-batches of up to maxBatch sequences of cfg.seqLen tokens.
  Gpt(const ModelConfig& cfg, const ParamLayout& layout, int maxBatch);

  // GPT-2's initialisation, the same for a seed on every machine: weights N(0, 0.02), the two projections that
  // write into the residual stream N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm scales 1. Padding stays 0.
  void initParams(float* params, uint64_t seed) const;

  // One micro-batch of B <= maxBatch sequences: tokens and targets are [B, T]. Returns the mean loss over the
  // B*T positions, or an error naming a token or target outside the vocabulary. Keeps what backward needs.
  Result<double> forward(const float* params, const int32_t* tokens, const int32_t* targets, int B);
  // Forward only, for evaluation: the mean loss.
  Result<double> evaluate(const float* params, const int32_t* tokens, const int32_t* targets, int B) {
    return forward(params, tokens, targets, B);
  }

  // Backward of the last forward. Adds d(sum over positions of loss * lossScale) / d(params) into grads: with
  // lossScale = 1 / (tokens in the global batch) over every micro-batch of every rank, the sum of all ranks'
  // grads is the gradient of the global mean loss. groupDone(g) runs as soon as group g's gradients of this
  // backward are final (ParamLayout's groups: the final LayerNorm's first, the embeddings' last).
  void backward(const float* params, float* grads, float lossScale, const std::function<void(int group)>& groupDone);

  // Floating-point operations of one forward + backward per token (matrix products and attention), for MFU.
  double flopsPerToken() const;

 private:
  struct Layer {  // activations of one block, [B,T,...]
    std::vector<float> ln1, ln1Mean, ln1Rstd, qkv, atty, att, attnProj, res2, ln2, ln2Mean, ln2Rstd, fch, fchGelu,
        fcProj, res3;
  };
  const float* tensor(const float* params, int group, int index) const;
  float* tensor(float* grads, int group, int index) const;

  ModelConfig cfg_;
  const ParamLayout& layout_;
  int maxBatch_;
  int batch_ = 0;  // B of the last forward
  std::vector<int32_t> tokens_, targets_;
  std::vector<float> encoded_;
  std::vector<Layer> layers_;
  std::vector<float> lnf_, lnfMean_, lnfRstd_, probs_, losses_;
  // Gradient scratch, reused layer after layer.
  std::vector<float> dresidual_, dlnf_, dlogits_, dln_, dqkv_, datty_, datt_, dfch_, dfchGelu_;
  std::vector<size_t> groupBase_;  // index into layout_.tensors() of each group's first tensor
};

}  // namespace hetcomm::trainer
