#include "trainer/emulated_stage.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace hetcomm::trainer {

EmulatedStage::EmulatedStage(const ModelConfig& cfg, const Shard& shard, int maxBatch, int slots, TpGroup* tp,
                             double flopsPerSecond)
    : cfg_(cfg), shard_(shard), tp_(shard.tp > 1 ? tp : nullptr), rate_(flopsPerSecond), batch_(std::max(1, slots), 0) {
  if (shard.tp > 1 && tp == nullptr)
    throw std::invalid_argument("EmulatedStage: a tensor-parallel shard needs its TP group");
  if (!(flopsPerSecond > 0)) throw std::invalid_argument("EmulatedStage: the device rate must be positive");
  if (shard_.layers < 0) shard_.layers = cfg.nLayer;
  // The largest reduction: the residual stream [B,T,C]; the softmax's sums are [2 B T].
  scratch_.resize(size_t(maxBatch) * cfg.seqLen * std::max(cfg.dModel, 2));
}

// Per token on one TP rank: the whole model's count (Gpt::forwardFlopsPerToken) split over the group.
double EmulatedStage::attentionFlops() const { return Gpt::forwardFlopsPerToken(cfg_).attention / shard_.tp; }
double EmulatedStage::mlpFlops() const { return Gpt::forwardFlopsPerToken(cfg_).mlp / shard_.tp; }
double EmulatedStage::headFlops() const { return Gpt::forwardFlopsPerToken(cfg_).head / shard_.tp; }

// A sleep overshoots by tens of microseconds, more on busy cores; the overshoot is paid back from the next
// waits, so the total stays within one overshoot of what the device would take (waits shorter than the debt
// are skipped altogether, as happens at GPU-like rates).
void EmulatedStage::wait(double flops) {
  using Clock = std::chrono::steady_clock;
  const double seconds = flops * double(tokens_) / rate_;
  const double sleep = seconds - overslept_;
  double slept = 0;
  if (sleep > 0) {
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
    slept = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  overslept_ += slept - seconds;
  waited_ += seconds;
}

Result<void> EmulatedStage::sum(size_t n) { return tp_ ? tp_->sum(scratch_.data(), n) : Result<void>{}; }

Result<double> EmulatedStage::forwardStage(int slot, const float*, const int32_t*, const float*, const int32_t*, int B,
                                           float*) {
  batch_[slot] = B;
  tokens_ = size_t(B) * cfg_.seqLen;
  const size_t stream = tokens_ * cfg_.dModel;
  if (shard_.embedding)
    if (auto r = sum(stream); !r) return r.error();
  for (int i = 0; i < shard_.layers; ++i) {
    wait(attentionFlops());
    if (auto r = sum(stream); !r) return r.error();
    wait(mlpFlops());
    if (auto r = sum(stream); !r) return r.error();
  }
  if (!shard_.head) return 0.0;
  wait(headFlops());
  if (tp_) {
    if (auto r = tp_->max(scratch_.data(), tokens_); !r) return r.error();
    if (auto r = sum(2 * tokens_); !r) return r.error();
  }
  return 0.0;
}

Result<void> EmulatedStage::backwardStage(int slot, const float*, float*, float, const float*, float*,
                                          const std::function<void(int)>& groupDone) {
  tokens_ = size_t(batch_[slot]) * cfg_.seqLen;
  const size_t stream = tokens_ * cfg_.dModel;
  if (shard_.head) {
    wait(2 * headFlops());
    if (auto r = sum(stream); !r) return r;
    if (groupDone) groupDone(cfg_.nLayer + 1);
  }
  for (int i = shard_.layers - 1; i >= 0; --i) {
    wait(2 * mlpFlops());
    if (auto r = sum(stream); !r) return r;
    wait(2 * attentionFlops());
    if (auto r = sum(stream); !r) return r;
    if (groupDone) groupDone(1 + shard_.firstLayer + i);
  }
  if (shard_.embedding && groupDone) groupDone(0);
  return {};
}

}  // namespace hetcomm::trainer
