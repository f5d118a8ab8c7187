// The GPT over its flat parameter buffer: the layout (every tensor once, buckets that tile the buffer, padded to
// the data-parallel size), the whole model's gradient against central differences of its loss, determinism,
// the order in which backward reports finished groups (what bucketed data parallelism relies on), a bad token,
// and AdamW split over ZeRO-1 ranges giving the same update as AdamW over everything.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {
namespace {

ModelConfig small() { return ModelConfig{.nLayer = 2, .nHead = 2, .dModel = 16, .seqLen = 8, .vocabSize = 32}; }

std::vector<int32_t> randomTokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

TEST(ParamLayout, EveryTensorOnceBucketsTileTheBufferPaddedToTheRankCount) {
  const ModelConfig m{.nLayer = 3, .nHead = 4, .dModel = 32, .seqLen = 16, .vocabSize = 50};
  for (int align : {1, 2, 3, 8}) {
    ParamLayout layout(m, 20000, align);
    EXPECT_EQ(static_cast<int64_t>(layout.parameterCount()), parameterCount(m));
    EXPECT_EQ(layout.groups(), m.nLayer + 2);
    std::set<std::string> names;
    for (const auto& t : layout.tensors()) EXPECT_TRUE(names.insert(t.name).second) << t.name;
    // Buckets are listed in completion order (last groups first) and tile the buffer from its end.
    size_t end = layout.totalFloats();
    int nextLast = layout.groups() - 1;
    for (const Bucket& b : layout.buckets()) {
      EXPECT_EQ(b.offset + b.length, end);
      EXPECT_EQ(b.length % align, 0u) << "align " << align;
      EXPECT_EQ(b.lastGroup, nextLast);
      for (int g = b.firstGroup; g <= b.lastGroup; ++g) EXPECT_EQ(&layout.buckets()[layout.bucketOfGroup(g)], &b);
      end = b.offset;
      nextLast = b.firstGroup - 1;
    }
    EXPECT_EQ(end, 0u);
    EXPECT_EQ(nextLast, -1);
    // Tensors stay inside their group's bucket and never overlap.
    for (size_t i = 1; i < layout.tensors().size(); ++i)
      EXPECT_LE(layout.tensors()[i - 1].offset + layout.tensors()[i - 1].numel, layout.tensors()[i].offset);
  }
  // Decay on matrices and embeddings only.
  ParamLayout layout(m, 1 << 20, 1);
  EXPECT_TRUE(layout.find("wte").decay);
  EXPECT_TRUE(layout.find("h.1.attn.qkv.weight").decay);
  EXPECT_FALSE(layout.find("h.1.attn.qkv.bias").decay);
  EXPECT_FALSE(layout.find("h.0.ln_2.weight").decay);
  EXPECT_FALSE(layout.find("ln_f.bias").decay);
  EXPECT_THROW(layout.find("nope"), std::out_of_range);
}

// The whole model's gradient against central differences of its fp32 loss. Sampled parameters from every
// tensor; the tolerance covers fp32 rounding of a loss near 3.5 at h = 1e-3 (about 3e-4 absolute), far below
// what a mis-wired block, a missing residual path or a dropped tied-head gradient would give.
TEST(GptModel, GradientMatchesFiniteDifferences) {
  const ModelConfig m = small();
  ParamLayout layout(m, 1 << 20, 1);
  const int B = 2;
  Gpt model(m, layout, B);
  std::vector<float> params(layout.totalFloats()), grads(layout.totalFloats(), 0.0f);
  model.initParams(params.data(), 7);
  // Larger weights than GPT-2's 0.02, so every path carries a gradient well above the rounding floor.
  for (auto& p : params) p *= 10;
  for (const auto& t : layout.tensors())
    if (t.init == ParamTensor::Init::kOne)
      for (size_t i = 0; i < t.numel; ++i) params[t.offset + i] = 1.0f + 0.1f * static_cast<float>(i % 5);
  const auto tokens = randomTokens(size_t(B) * m.seqLen, m.vocabSize, 1);
  const auto targets = randomTokens(size_t(B) * m.seqLen, m.vocabSize, 2);
  ASSERT_TRUE(model.forward(params.data(), tokens.data(), targets.data(), B).has_value());
  model.backward(params.data(), grads.data(), 1.0f / (B * m.seqLen), nullptr);
  std::mt19937_64 g(3);
  int checked = 0;
  for (const auto& t : layout.tensors()) {
    for (int k = 0; k < 4; ++k) {
      const size_t i = t.offset + g() % t.numel;
      const float saved = params[i];
      const float h = 1e-3f;
      params[i] = saved + h;
      const double up = *model.forward(params.data(), tokens.data(), targets.data(), B);
      params[i] = saved - h;
      const double down = *model.forward(params.data(), tokens.data(), targets.data(), B);
      params[i] = saved;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grads[i], fd, 1e-3 + 2e-2 * std::abs(fd)) << t.name << " [" << i - t.offset << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(layout.tensors().size()) * 4);
}

TEST(GptModel, DeterministicAndGroupsFinishFromLastToFirst) {
  const ModelConfig m = small();
  ParamLayout layout(m, 1 << 20, 1);
  auto run = [&](std::vector<int>* order) {
    Gpt model(m, layout, 2);
    std::vector<float> params(layout.totalFloats()), grads(layout.totalFloats(), 0.0f);
    model.initParams(params.data(), 42);
    const auto tokens = randomTokens(2 * m.seqLen, m.vocabSize, 5);
    const auto targets = randomTokens(2 * m.seqLen, m.vocabSize, 6);
    double loss = *model.forward(params.data(), tokens.data(), targets.data(), 2);
    model.backward(params.data(), grads.data(), 0.01f, [&](int g) {
      if (order) order->push_back(g);
    });
    grads.push_back(static_cast<float>(loss));
    return grads;
  };
  std::vector<int> order;
  const auto a = run(&order), b = run(nullptr);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "same seed, different results";
  std::vector<int> expected(m.nLayer + 2);
  std::iota(expected.rbegin(), expected.rend(), 0);
  EXPECT_EQ(order, expected);
}

TEST(GptModel, InitialLossIsLogVocab) {
  // GPT-2's small initialisation gives near-uniform predictions: loss ~ ln V.
  const ModelConfig m{.nLayer = 2, .nHead = 2, .dModel = 32, .seqLen = 16, .vocabSize = 256};
  ParamLayout layout(m, 1 << 20, 1);
  Gpt model(m, layout, 4);
  std::vector<float> params(layout.totalFloats());
  model.initParams(params.data(), 1);
  const auto tokens = randomTokens(4 * 16, 256, 8), targets = randomTokens(4 * 16, 256, 9);
  EXPECT_NEAR(*model.forward(params.data(), tokens.data(), targets.data(), 4), std::log(256.0), 0.05);
}

TEST(GptModel, TokenOutsideTheVocabularyIsAnError) {
  const ModelConfig m = small();
  ParamLayout layout(m, 1 << 20, 1);
  Gpt model(m, layout, 1);
  std::vector<float> params(layout.totalFloats());
  model.initParams(params.data(), 1);
  auto tokens = randomTokens(m.seqLen, m.vocabSize, 1), targets = randomTokens(m.seqLen, m.vocabSize, 2);
  tokens[3] = m.vocabSize;
  auto r = model.forward(params.data(), tokens.data(), targets.data(), 1);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("position 3"), std::string::npos) << r.error().message();
  tokens[3] = 0;
  targets[5] = -1;
  r = model.forward(params.data(), tokens.data(), targets.data(), 1);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("-1"), std::string::npos) << r.error().message();
}

TEST(AdamWShards, SlicesUpdateExactlyLikeTheWhole) {
  const ModelConfig m = small();
  TrainConfig cfg;
  cfg.model = m;
  ParamLayout layout(m, 2000, 2);
  std::vector<float> params(layout.totalFloats()), grads(layout.totalFloats());
  std::mt19937_64 g(1);
  for (auto& p : params) p = static_cast<float>(g() % 1000) / 1000 - 0.5f;
  std::vector<std::pair<size_t, size_t>> whole, rank0, rank1;
  for (const Bucket& b : layout.buckets()) {
    whole.push_back({b.offset, b.length});
    rank0.push_back({b.offset, b.length / 2});
    rank1.push_back({b.offset + b.length / 2, b.length / 2});
  }
  AdamW all(cfg, layout, whole), a0(cfg, layout, rank0), a1(cfg, layout, rank1);
  EXPECT_EQ(a0.m().size() + a1.m().size(), all.m().size());
  auto p1 = params, p2 = params;
  for (int step = 0; step < 3; ++step) {
    for (auto& x : grads) x = static_cast<float>(g() % 1000) / 500 - 1;
    auto g1 = grads, g2 = grads;
    all.step(p1.data(), g1.data(), 1e-2f, 0.5f);
    EXPECT_DOUBLE_EQ(a0.normSquared(g2.data()) + a1.normSquared(g2.data()), all.normSquared(grads.data()));
    a0.step(p2.data(), g2.data(), 1e-2f, 0.5f);
    a1.step(p2.data(), g2.data(), 1e-2f, 0.5f);
  }
  EXPECT_EQ(0, std::memcmp(p1.data(), p2.data(), p1.size() * sizeof(float)));
  EXPECT_NE(p1, params);
}

}  // namespace
}  // namespace hetcomm::trainer
