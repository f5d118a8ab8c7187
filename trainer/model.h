// model.h: a GPT-2-style decoder on the CPU, forward and backward, over the flat parameter buffer of a
// ParamLayout (llm.c's structure: activations in buffers kept for the backward pass, shapes in comments).
//
//   tokens [B,T] -> wte + wpe -> L x { x += proj(attn(ln_1(x))); x += mlp(ln_2(x)) } -> ln_f -> logits = x wte^T
//
// Pre-LayerNorm blocks, causal multi-head self-attention, a 4x GELU MLP, and an LM head tied to the token
// embedding. fp32; the math is kernels/nn (OpenBLAS for the matrix products).
//
// The same class runs one pipeline stage at one tensor-parallel rank when the layout is a Shard's (param_layout.h):
// a stage that is not the first takes the residual stream [B,T,C] from the previous stage instead of tokens,
// one that is not the last hands its residual stream on instead of computing the loss, and backward the same in
// reverse. Under tensor parallelism (Megatron-LM) every rank holds the residual stream whole; attention heads and
// MLP columns are split, so each block sums its two projections' partial outputs over the TP group in forward and
// the partial input gradients of qkv and fc in backward; the embedding and the LM head are split by vocabulary
// rows (a token's row lives on one rank; the softmax takes its max and its sum over the group).
//
// Micro-batches in flight: a pipeline stage runs the forwards of several micro-batches before their backwards,
// so activations live in `slots`, one per micro-batch in flight.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {

// The collectives a tensor-parallel group gives the model (in place, over every rank of the group).
class TpGroup {
 public:
  virtual ~TpGroup() = default;
  virtual Result<void> sum(float* x, size_t n) = 0;
  virtual Result<void> max(float* x, size_t n) = 0;
};

// What a pipeline stage runs over one micro-batch: the real model (Gpt), or EmulatedStage (emulated_stage.h),
// which takes the time the math would take and sends the same messages. Semantics as Gpt's below.
class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual Result<double> forwardStage(int slot, const float* params, const int32_t* tokens, const float* input,
                                      const int32_t* targets, int B, float* output) = 0;
  virtual Result<void> backwardStage(int slot, const float* params, float* grads, float lossScale, const float* dout,
                                     float* dinput, const std::function<void(int group)>& groupDone) = 0;
};

class Gpt final : public StageModel {
 public:
  // Buffers for micro-batches of up to maxBatch sequences of cfg.seqLen tokens, `slots` of them in flight. tp:
  // the layout's tensor-parallel group (null when the layout's shard has tp 1); not owned.
  Gpt(const ModelConfig& cfg, const ParamLayout& layout, int maxBatch, int slots = 1, TpGroup* tp = nullptr);

  // GPT-2's initialisation, the same for a seed on every machine: weights N(0, 0.02), the two projections that
  // write into the residual stream N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm scales 1. Padding stays 0.
  // Only for the whole model's layout; a shard takes its part of the whole model's (sliceFromFull).
  void initParams(float* params, uint64_t seed) const;

  // One micro-batch of B <= maxBatch sequences: tokens and targets are [B, T]. Returns the mean loss over the
  // B*T positions, or an error naming a token or target outside the vocabulary. Keeps what backward needs.
  // The whole model (first and last stage), slot 0.
  Result<double> forward(const float* params, const int32_t* tokens, const int32_t* targets, int B) {
    return forwardStage(0, params, tokens, nullptr, targets, B, nullptr);
  }
  // Forward only, for evaluation: the mean loss.
  Result<double> evaluate(const float* params, const int32_t* tokens, const int32_t* targets, int B) {
    return forward(params, tokens, targets, B);
  }
  // One stage: the first takes tokens [B,T], the others input [B,T,C]; the last returns the mean loss over
  // targets [B,T], the others write output [B,T,C] and return 0. Activations go to `slot`.
  Result<double> forwardStage(int slot, const float* params, const int32_t* tokens, const float* input,
                              const int32_t* targets, int B, float* output) override;

  // Backward of the last forward. Adds d(sum over positions of loss * lossScale) / d(params) into grads: with
  // lossScale = 1 / (tokens in the global batch) over every micro-batch of every rank, the sum of all ranks'
  // grads is the gradient of the global mean loss. groupDone(g) runs as soon as group g's gradients of this
  // backward are final (ParamLayout's groups: the final LayerNorm's first, the embeddings' last).
  // The whole model without tensor parallelism (which cannot fail), slot 0.
  void backward(const float* params, float* grads, float lossScale, const std::function<void(int group)>& groupDone);
  // Backward of the forward in `slot`: the last stage starts from its loss (times lossScale), the others from
  // dout [B,T,C], the gradient of the output they handed on; a stage that is not the first writes the gradient
  // of its input to dinput [B,T,C].
  Result<void> backwardStage(int slot, const float* params, float* grads, float lossScale, const float* dout,
                             float* dinput, const std::function<void(int group)>& groupDone) override;

  // Floating-point operations per token of one forward through a block's attention half (qkv, QK^T, att V,
  // projection), its MLP half (fc and its projection) and the LM head, without tensor parallelism; a backward
  // costs twice its forward. And of one forward + backward of the whole model, for MFU.
  struct ForwardFlops {
    double attention, mlp, head;
  };
  static ForwardFlops forwardFlopsPerToken(const ModelConfig& cfg);
  // BLAS threads of this process's model math (every Gpt's), and how many it has now.
  static void setThreads(int n);
  static int threads();
  static double flopsPerToken(const ModelConfig& cfg);
  double flopsPerToken() const { return flopsPerToken(cfg_); }

  // Memory, before building one (for --memory-limits): bytes of activations one slot keeps, and of the gradient
  // scratch shared by the slots, for a shard and micro-batches of up to maxBatch sequences. allocatedBytes():
  // what this model holds (the same sums over its buffers).
  static size_t slotBytes(const ModelConfig& cfg, const Shard& shard, int maxBatch);
  static size_t scratchBytes(const ModelConfig& cfg, const Shard& shard, int maxBatch);
  size_t allocatedBytes() const;

 private:
  struct Layer {  // activations of one block, [B,T,...]; heads and MLP columns of this TP rank
    std::vector<float> ln1, ln1Mean, ln1Rstd, qkv, atty, att, attnProj, res2, ln2, ln2Mean, ln2Rstd, fch, fchGelu,
        fcProj, res3;
  };
  struct Slot {  // one micro-batch in flight
    int batch = 0;
    std::vector<int32_t> tokens, targets;
    std::vector<float> encoded;  // the stage's input: the embeddings, or the previous stage's output
    std::vector<Layer> layers;
    std::vector<float> lnf, lnfMean, lnfRstd, probs, losses;
  };
  // The buffers in the order Dims (model.cc) gives their sizes, of a Layer, a Slot or the Gpt, const or not.
  template <class L>
  static auto layerFields(L& l) {
    return std::array{&l.ln1, &l.ln1Mean, &l.ln1Rstd, &l.qkv, &l.atty,    &l.att,    &l.attnProj, &l.res2,
                      &l.ln2, &l.ln2Mean, &l.ln2Rstd, &l.fch, &l.fchGelu, &l.fcProj, &l.res3};
  }
  template <class S>
  static auto slotFields(S& s) {
    return std::array{&s.encoded, &s.lnf, &s.lnfMean, &s.lnfRstd, &s.probs, &s.losses};
  }
  template <class G>
  static auto scratchFields(G& g) {
    return std::array{&g.dresidual_, &g.dlnf_, &g.dlogits_, &g.dln_,      &g.dqkv_,
                      &g.datty_,     &g.datt_, &g.dfch_,    &g.dfchGelu_, &g.stats_};
  }
  const float* tensor(const float* params, int group, int index) const;
  float* tensor(float* grads, int group, int index) const;
  const float* headWeight(const float* params) const;  // wte, or the head's copy of it
  float* headWeight(float* grads) const;
  Result<void> embed(Slot& s, const float* params, int B);
  Result<double> headForward(Slot& s, const float* params, const float* residual, int B);
  Result<void> linearSum(float* out, const float* bias, size_t BT);  // TP: sum partial outputs, then add bias
  struct Dims;                                                       // the size of every buffer (model.cc)

  ModelConfig cfg_;
  const ParamLayout& layout_;
  Shard shard_;
  TpGroup* tp_;
  int maxBatch_;
  int C_, Cl_, NHl_, Vl_;  // channels; this TP rank's channels of attention, heads, vocabulary rows
  int vBegin_;             // first vocabulary row of this TP rank
  std::vector<Slot> slots_;
  // Gradient scratch, reused layer after layer.
  std::vector<float> dresidual_, dlnf_, dlogits_, dln_, dqkv_, datty_, datt_, dfch_, dfchGelu_, stats_;
  std::vector<size_t> groupBase_;  // index into layout_.tensors() of each group's first tensor
};

}  // namespace hetcomm::trainer
