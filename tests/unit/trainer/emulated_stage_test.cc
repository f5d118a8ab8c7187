// EmulatedStage (--emulate-compute) stands in for the real stage: the same tensor-parallel reductions in the
// same order with the same sizes, the same gradient groups reported done in the same order, and waits that
// add up to the whole model's FLOPs at the emulated rate. Also: the model's memory estimates (--memory-limits)
// are what the model allocates.
#include "trainer/emulated_stage.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "trainer/model.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {
namespace {

// Records every reduction (kind and size) and leaves the data alone: one rank's view of its TP group's traffic.
class RecordingTp final : public TpGroup {
 public:
  Result<void> sum(float*, size_t n) override {
    calls.push_back("sum " + std::to_string(n));
    return {};
  }
  Result<void> max(float*, size_t n) override {
    calls.push_back("max " + std::to_string(n));
    return {};
  }
  std::vector<std::string> calls;
};

const ModelConfig kModel{.nLayer = 3, .nHead = 4, .dModel = 16, .seqLen = 8, .vocabSize = 256};

struct Trace {
  std::vector<std::string> forward, backward;
  std::vector<int> groups;
};

Trace traceOf(StageModel& m, RecordingTp& tp, const ParamLayout& layout, int B) {
  const size_t act = size_t(B) * kModel.seqLen * kModel.dModel;
  std::vector<float> params(layout.totalFloats(), 0.01f), grads(layout.totalFloats(), 0.0f), in(act, 0.1f),
      out(act), dout(act, 0.01f), din(act);
  std::vector<int32_t> tokens(size_t(B) * kModel.seqLen, 7), targets(size_t(B) * kModel.seqLen, 9);
  const Shard& sh = layout.shard();
  Trace t;
  EXPECT_TRUE(m.forwardStage(0, params.data(), tokens.data(), in.data(), targets.data(), B, out.data()));
  t.forward = std::move(tp.calls);
  tp.calls.clear();
  EXPECT_TRUE(m.backwardStage(0, params.data(), grads.data(), 1e-3f, sh.head ? nullptr : dout.data(),
                              sh.embedding ? nullptr : din.data(), [&](int g) { t.groups.push_back(g); }));
  t.backward = std::move(tp.calls);
  return t;
}

struct Case {
  Shard shard;
  const char* what;
};

const Case kCases[] = {
    {Shard{.firstLayer = 0, .layers = 3, .embedding = true, .head = true, .tp = 2, .tpRank = 1}, "whole model, TP 2"},
    {Shard{.firstLayer = 0, .layers = 1, .embedding = true, .head = false, .tp = 4, .tpRank = 0}, "first stage, TP 4"},
    {Shard{.firstLayer = 1, .layers = 2, .embedding = false, .head = true, .tp = 2, .tpRank = 0}, "last stage, TP 2"},
    {Shard{.firstLayer = 1, .layers = 1, .embedding = false, .head = false, .tp = 2, .tpRank = 1}, "middle, TP 2"},
};

TEST(EmulatedStage, SendsWhatTheRealStageSendsAndReportsTheSameGroups) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    const ParamLayout layout(kModel, c.shard, 1 << 20, 1);
    RecordingTp realTp, emuTp;
    Gpt real(kModel, layout, 2, 1, &realTp);
    EmulatedStage emu(kModel, layout.shard(), 2, 1, &emuTp, 1e12);
    const Trace want = traceOf(real, realTp, layout, 2), got = traceOf(emu, emuTp, layout, 2);
    EXPECT_FALSE(want.forward.empty());
    EXPECT_EQ(got.forward, want.forward);
    EXPECT_EQ(got.backward, want.backward);
    EXPECT_EQ(got.groups, want.groups);
  }
}

TEST(EmulatedStage, WaitsTheWholeModelsFlopsAtTheDeviceRate) {
  // Two stages that cover the model between them wait exactly the whole model's flopsPerToken x tokens / rate.
  const double rate = 2e9;  // FLOP/s: under a millisecond for this model's 2 x 8 tokens
  const Shard parts[] = {{.firstLayer = 0, .layers = 1, .embedding = true, .head = false},
                         {.firstLayer = 1, .layers = 2, .embedding = false, .head = true}};
  double waited = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Shard& sh : parts) {
    const ParamLayout layout(kModel, sh, 1 << 20, 1);
    EmulatedStage emu(kModel, layout.shard(), 2, 1, nullptr, rate);
    RecordingTp unused;
    traceOf(emu, unused, layout, 2);
    waited += emu.waitedSeconds();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double want = Gpt::flopsPerToken(kModel) * 2 * kModel.seqLen / rate;
  EXPECT_NEAR(waited, want, want * 1e-12);
  EXPECT_GE(wall, want);  // it really waits
  // Under TP each rank waits 1/tp of its stage's FLOPs.
  const ParamLayout whole(kModel, Shard{.tp = 2, .tpRank = 0}, 1 << 20, 1);
  RecordingTp tp;
  EmulatedStage half(kModel, whole.shard(), 2, 1, &tp, rate);
  traceOf(half, tp, whole, 2);
  EXPECT_NEAR(half.waitedSeconds(), want / 2, want * 1e-12);
}

TEST(MemoryEstimate, IsWhatTheModelAllocates) {
  for (const Case& c : kCases)
    for (int slots : {1, 3})
      for (int B : {1, 4}) {
        SCOPED_TRACE(std::string(c.what) + ", slots " + std::to_string(slots) + ", B " + std::to_string(B));
        const ParamLayout layout(kModel, c.shard, 1 << 20, 1);
        RecordingTp tp;
        const Gpt m(kModel, layout, B, slots, &tp);
        EXPECT_EQ(m.allocatedBytes(),
                  slots * Gpt::slotBytes(kModel, c.shard, B) + Gpt::scratchBytes(kModel, c.shard, B));
      }
  const ParamLayout whole(kModel, 1 << 20, 1);
  const Gpt m(kModel, whole, 2);
  EXPECT_EQ(m.allocatedBytes(), Gpt::slotBytes(kModel, Shard{}, 2) + Gpt::scratchBytes(kModel, Shard{}, 2));
}

}  // namespace
}  // namespace hetcomm::trainer
