// emulated_stage.h: a pipeline stage that does not compute, for planning runs with more ranks than cores
// (hetcomm-train --emulate-compute).
//
// Where the real stage (Gpt) runs a block's math, this one waits the time that math takes on the emulated
// device: the block's FLOPs / (relative speed x reference FLOP/s). Everything that leaves the rank is real:
// the tensor-parallel reductions have the sizes and the places Gpt's have (the embedding's sum, one sum after
// each of a block's two projections in forward, one per input gradient of qkv and fc in backward, the
// vocabulary-parallel softmax's max and sums), each gradient group is reported done when Gpt would report it,
// and the activations handed across stage boundaries are as large as the real ones. So communication, the
// pipeline's bubbles and the overlap of gradient reduction with backward are measured; losses are not (the
// stage returns 0, and the gradients stay as they were).
#pragma once

#include "trainer/model.h"

namespace hetcomm::trainer {

class EmulatedStage final : public StageModel {
 public:
  // flopsPerSecond: the emulated device's rate (relative speed x reference). tp: as Gpt's; not owned.
  EmulatedStage(const ModelConfig& cfg, const Shard& shard, int maxBatch, int slots, TpGroup* tp,
                double flopsPerSecond);

  Result<double> forwardStage(int slot, const float* params, const int32_t* tokens, const float* input,
                              const int32_t* targets, int B, float* output) override;
  Result<void> backwardStage(int slot, const float* params, float* grads, float lossScale, const float* dout,
                             float* dinput, const std::function<void(int group)>& groupDone) override;

  // FLOPs of one token's forward through one block's two halves (attention: qkv, QK^T, att V, projection; MLP:
  // fc and its projection) and through the head, on one TP rank. Backward costs twice each.
  double attentionFlops() const;
  double mlpFlops() const;
  double headFlops() const;
  // Seconds waited since construction (what the device would have computed).
  double waitedSeconds() const { return waited_; }

 private:
  void wait(double flops);  // flops for the current micro-batch's tokens
  Result<void> sum(size_t n);

  ModelConfig cfg_;
  Shard shard_;
  TpGroup* tp_;
  double rate_, waited_ = 0;
  double overslept_ = 0;        // seconds slept beyond the waits so far (negative: owed)
  size_t tokens_ = 0;           // of the micro-batch being run
  std::vector<int> batch_;      // sequences per slot
  std::vector<float> scratch_;  // what the TP reductions carry: the right size, contents unused
};

}  // namespace hetcomm::trainer
