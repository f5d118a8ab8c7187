// The model cut into pipeline stages and tensor-parallel shards (param_layout.h's Shard, model.h's stage
// forward/backward) computes what the whole model computes: the same loss and, put back together, the same
// gradient. The TP ranks run as threads whose TpGroup sums and maxes through shared memory at a barrier, so
// these tests pin the math of the cut without any communicator.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "trainer/model.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {
namespace {

// n threads reduce in place: each publishes its buffer, all wait, each reads everyone's, all wait again.
class ThreadTp final : public TpGroup {
 public:
  struct Shared {
    explicit Shared(int n) : bar(n), bufs(n) {}
    std::barrier<> bar;
    std::vector<float*> bufs;
  };
  ThreadTp(Shared& s, int rank) : s_(s), rank_(rank) {}
  Result<void> sum(float* x, size_t n) override {
    return reduce(x, n, [](float a, float b) { return a + b; });
  }
  Result<void> max(float* x, size_t n) override {
    return reduce(x, n, [](float a, float b) { return std::max(a, b); });
  }

 private:
  Result<void> reduce(float* x, size_t n, const std::function<float(float, float)>& op) {
    std::vector<float> mine(x, x + n);
    s_.bufs[rank_] = mine.data();
    s_.bar.arrive_and_wait();
    std::vector<float> out(s_.bufs[0], s_.bufs[0] + n);  // rank order, the same on every rank
    for (size_t r = 1; r < s_.bufs.size(); ++r)
      for (size_t i = 0; i < n; ++i) out[i] = op(out[i], s_.bufs[r][i]);
    s_.bar.arrive_and_wait();
    std::copy(out.begin(), out.end(), x);
    return {};
  }
  Shared& s_;
  int rank_;
};

struct StageSpec {
  int layers, tp;
};

struct Outcome {
  double loss = 0;
  std::vector<float> fullGrad;  // the shards' gradients put back into the whole model's layout (tied copy summed)
};

const ModelConfig kModel{.nLayer = 3, .nHead = 4, .dModel = 16, .seqLen = 8, .vocabSize = 256};
constexpr int kB = 2;

// Runs one micro-batch through the stages in order (each stage's TP ranks as threads), then backward in reverse.
Outcome runStages(const std::vector<StageSpec>& stages, const std::vector<float>& fullParams,
                  const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
  const ParamLayout full(kModel, 1 << 20, 1);
  const size_t act = size_t(kB) * kModel.seqLen * kModel.dModel;
  Outcome out;
  out.fullGrad.assign(full.totalFloats(), 0.0f);
  struct Rank {
    std::unique_ptr<ParamLayout> layout;
    std::unique_ptr<ThreadTp> tp;
    std::unique_ptr<Gpt> model;
    std::vector<float> params, grads;
  };
  std::vector<std::vector<Rank>> ranks(stages.size());
  std::vector<std::unique_ptr<ThreadTp::Shared>> shared;
  int first = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    shared.push_back(std::make_unique<ThreadTp::Shared>(stages[s].tp));
    for (int k = 0; k < stages[s].tp; ++k) {
      Rank r;
      const Shard shard{.firstLayer = first, .layers = stages[s].layers, .embedding = s == 0,
                        .head = s + 1 == stages.size(), .tp = stages[s].tp, .tpRank = k};
      r.layout = std::make_unique<ParamLayout>(kModel, shard, 1 << 20, 1);
      r.tp = std::make_unique<ThreadTp>(*shared.back(), k);
      r.model = std::make_unique<Gpt>(kModel, *r.layout, kB, 1, r.tp.get());
      r.params.resize(r.layout->totalFloats());
      r.grads.assign(r.layout->totalFloats(), 0.0f);
      sliceFromFull(full, fullParams.data(), *r.layout, r.params.data());
      ranks[s].push_back(std::move(r));
    }
    first += stages[s].layers;
  }
  // Forward: every TP rank of a stage gets the same input; rank 0's output goes on.
  std::vector<std::vector<float>> boundary(stages.size() + 1, std::vector<float>(act));
  for (size_t s = 0; s < stages.size(); ++s) {
    std::vector<std::thread> threads;
    std::vector<std::vector<float>> outs(stages[s].tp, std::vector<float>(act));
    std::vector<double> losses(stages[s].tp);
    for (int k = 0; k < stages[s].tp; ++k)
      threads.emplace_back([&, k] {
        auto r = ranks[s][k].model->forwardStage(0, ranks[s][k].params.data(), tokens.data(), boundary[s].data(),
                                                 targets.data(), kB, outs[k].data());
        ASSERT_TRUE(r.has_value()) << r.error().message();
        losses[k] = *r;
      });
    for (auto& t : threads) t.join();
    for (int k = 1; k < stages[s].tp; ++k) {
      EXPECT_EQ(outs[k], outs[0]) << "stage " << s << " TP ranks disagree on the output";
      EXPECT_EQ(losses[k], losses[0]);
    }
    boundary[s + 1] = outs[0];
    out.loss = losses[0];
  }
  // Backward from the last stage.
  std::vector<float> dout(act), dinput(act);
  for (size_t s = stages.size(); s-- > 0;) {
    std::vector<std::thread> threads;
    std::vector<std::vector<float>> dins(stages[s].tp, std::vector<float>(act));
    for (int k = 0; k < stages[s].tp; ++k)
      threads.emplace_back([&, k] {
        Rank& r = ranks[s][k];
        auto res = r.model->backwardStage(0, r.params.data(), r.grads.data(), 1.0f / (kB * kModel.seqLen),
                                          dout.data(), dins[k].data(), nullptr);
        ASSERT_TRUE(res.has_value()) << res.error().message();
      });
    for (auto& t : threads) t.join();
    dout = dins[0];
  }
  for (auto& stage : ranks)
    for (Rank& r : stage) {
      addToFull(*r.layout, r.grads.data(), full, out.fullGrad.data());
      if (r.layout->shard().tiedCopy()) {  // the head's copy of wte: its gradient adds to wte's
        const ParamTensor& copy = r.layout->find("lm_head.weight");
        const ParamTensor& wte = full.find("wte");
        const size_t rowFloats = kModel.dModel;
        size_t at = copy.offset;
        for (auto [b, e] : copy.rows)
          for (size_t i = size_t(b) * rowFloats; i < size_t(e) * rowFloats; ++i)
            out.fullGrad[wte.offset + i] += r.grads[at++];
      }
    }
  return out;
}

class HybridModel : public ::testing::TestWithParam<std::vector<StageSpec>> {};

TEST_P(HybridModel, LossAndGradientMatchTheWholeModel) {
  const ParamLayout full(kModel, 1 << 20, 1);
  Gpt whole(kModel, full, kB);
  std::vector<float> params(full.totalFloats()), grads(full.totalFloats(), 0.0f);
  whole.initParams(params.data(), 7);
  std::mt19937_64 g(3);
  std::vector<int32_t> tokens(kB * kModel.seqLen), targets(kB * kModel.seqLen);
  for (auto& t : tokens) t = static_cast<int32_t>(g() % kModel.vocabSize);
  for (auto& t : targets) t = static_cast<int32_t>(g() % kModel.vocabSize);
  const double loss = *whole.forward(params.data(), tokens.data(), targets.data(), kB);
  whole.backward(params.data(), grads.data(), 1.0f / (kB * kModel.seqLen), nullptr);

  const Outcome got = runStages(GetParam(), params, tokens, targets);
  EXPECT_NEAR(got.loss, loss, 1e-5 * loss);
  double maxGrad = 0;
  for (float x : grads) maxGrad = std::max(maxGrad, double(std::fabs(x)));
  for (const ParamTensor& t : full.tensors())
    for (size_t i = 0; i < t.numel; ++i)
      ASSERT_NEAR(got.fullGrad[t.offset + i], grads[t.offset + i], 1e-4 * maxGrad) << t.name << "[" << i << "]";
}

INSTANTIATE_TEST_SUITE_P(Plans, HybridModel,
                         ::testing::Values(std::vector<StageSpec>{{3, 2}},              // TP2
                                           std::vector<StageSpec>{{3, 4}},              // TP4
                                           std::vector<StageSpec>{{1, 1}, {2, 1}},      // PP2, uneven
                                           std::vector<StageSpec>{{0, 1}, {3, 1}},      // embedding-only stage
                                           std::vector<StageSpec>{{2, 2}, {1, 1}},      // FlashFlex: TP 2 then 1
                                           std::vector<StageSpec>{{1, 1}, {1, 2}, {1, 4}}));

TEST(HybridLayout, ShardsCoverEveryParameterOnceAndFlagTheirCopies) {
  const ParamLayout full(kModel, 1 << 20, 1);
  std::vector<float> ones(full.totalFloats(), 0.0f);
  for (const ParamTensor& t : full.tensors()) std::fill(ones.begin() + t.offset, ones.begin() + t.offset + t.numel, 1);
  // Stage 0 (embedding + 2 blocks) at TP 2, stage 1 (1 block + head) at TP 4: summing every shard's ones
  // (addToFull skips the copies) gives one everywhere.
  std::vector<float> count(full.totalFloats(), 0.0f);
  for (auto [first, layers, emb, head, tp] : {std::tuple{0, 2, true, false, 2}, std::tuple{2, 1, false, true, 4}})
    for (int k = 0; k < tp; ++k) {
      ParamLayout shard(kModel, Shard{first, layers, emb, head, tp, k}, 1 << 20, 2);
      std::vector<float> p(shard.totalFloats());
      sliceFromFull(full, ones.data(), shard, p.data());
      for (const ParamTensor& t : shard.tensors()) {
        for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(p[t.offset + i], 1.0f) << t.name;
        EXPECT_EQ(t.inNorm, t.name != "lm_head.weight" && (k == 0 || t.cut != ParamTensor::Cut::kWhole)) << t.name;
      }
      addToFull(shard, p.data(), full, count.data());
      EXPECT_EQ(shard.hasGroup(0), emb);
      EXPECT_EQ(shard.hasGroup(kModel.nLayer + 1), head);
    }
  for (const ParamTensor& t : full.tensors())
    for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(count[t.offset + i], 1.0f) << t.name << "[" << i << "]";
}

}  // namespace
}  // namespace hetcomm::trainer
