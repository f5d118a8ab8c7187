// A rank's memory need and the check of every rank's need against its limit (--memory-limits).
#include "trainer/memory.h"

#include "trainer/model.h"
#include "trainer/pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hetcomm::trainer {
namespace {

TEST(Memory, ZeroOneShardsTheOptimizerStateOnly) {
  TrainConfig cfg;
  cfg.model = {.nLayer = 2, .nHead = 2, .dModel = 32, .seqLen = 16, .vocabSize = 256};
  const Shard whole;
  const ParamLayout layout(cfg.model, whole, 1 << 20, 2);
  const MemoryNeed all = memoryNeed(cfg, whole, layout, layout.totalFloats(), {0, 1, 1, 1});
  const MemoryNeed half = memoryNeed(cfg, whole, layout, layout.totalFloats() / 2, {0, 1, 1, 1});
  EXPECT_DOUBLE_EQ(all.params, double(layout.totalFloats()) * 4);
  EXPECT_DOUBLE_EQ(all.grads, all.params);
  EXPECT_DOUBLE_EQ(all.optimizer, 2 * all.params);  // AdamW's two moments
  EXPECT_DOUBLE_EQ(half.optimizer, all.optimizer / 2);
  EXPECT_DOUBLE_EQ(half.activations, all.activations);
  EXPECT_GT(all.activations, 0);
}

// The pipeline's depth: stage s of S warms up with min(depth (S - s - 1), M) forwards and holds one more in flight;
// the boundary buffers are those and one more, at least depth + 1, at most M.
TEST(Memory, PipelineDepthHoldsMoreMicroBatchesOnTheEarlyStages) {
  EXPECT_EQ((StageShape{0, 2, 16, 1}.warmup()), 1);
  EXPECT_EQ((StageShape{0, 2, 16, 2}.warmup()), 2);
  EXPECT_EQ((StageShape{1, 4, 16, 3}.warmup()), 6);
  EXPECT_EQ((StageShape{0, 4, 5, 2}.warmup()), 5);  // capped by the micro-batches
  EXPECT_EQ((StageShape{3, 4, 16, 3}.warmup()), 0);
  EXPECT_EQ((StageShape{0, 2, 16, 2}.slots()), 3);
  EXPECT_EQ((StageShape{0, 4, 5, 2}.slots()), 5);
  EXPECT_EQ((StageShape{1, 2, 16, 2}.slots()), 1);
  EXPECT_EQ((StageShape{1, 2, 16, 1}.boundaryBuffers()), 2);
  EXPECT_EQ((StageShape{1, 2, 16, 3}.boundaryBuffers()), 4);  // the last stage: depth + 1
  EXPECT_EQ((StageShape{0, 2, 16, 2}.boundaryBuffers()), 4);
  EXPECT_EQ((StageShape{0, 2, 2, 2}.boundaryBuffers()), 2);

  TrainConfig cfg;
  cfg.model = {.nLayer = 2, .nHead = 2, .dModel = 32, .seqLen = 16, .vocabSize = 256};
  cfg.microBatch = 2;
  const Shard whole;
  const ParamLayout layout(cfg.model, whole, 1 << 20, 1);
  const MemoryNeed plain = memoryNeed(cfg, whole, layout, layout.totalFloats(), {0, 2, 8, 1});
  const MemoryNeed deep = memoryNeed(cfg, whole, layout, layout.totalFloats(), {0, 2, 8, 2});
  // One more micro-batch of activations (slots 2 -> 3) and one more boundary buffer (3 -> 4).
  const double slot = Gpt::slotBytes(cfg.model, whole, cfg.microBatch);
  EXPECT_DOUBLE_EQ(deep.activations - plain.activations, slot);
  EXPECT_DOUBLE_EQ(deep.buffers - plain.buffers, 2.0 * 16 * 32 * sizeof(float));
  EXPECT_DOUBLE_EQ(deep.params, plain.params);
}

TEST(Memory, FitNamesTheFullestRankOrEveryRankThatDoesNotFit) {
  RoleTable roles;
  roles.of = {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}};
  const std::vector<MemoryNeed> needs = {{100, 100, 200, 50, 0}, {400, 400, 800, 0, 0}, {10, 10, 20, 5, 5}};
  auto fits = fitMemory(needs, {1000, 2000, 100}, roles);
  ASSERT_TRUE(fits.has_value()) << fits.error().message();
  EXPECT_EQ(*fits, "memory: every rank fits its limit; fullest rank 1 needs 2 KiB of 2 KiB\n");
  auto refused = fitMemory(needs, {1000, 1500, 40}, roles);
  ASSERT_FALSE(refused.has_value());
  const std::string d = refused.error().detail;
  EXPECT_NE(d.find("rank 1 (replica 0, stage 1, tp rank 0) needs 2 KiB > its limit 1 KiB: parameters 0 KiB"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("rank 2 (replica 1, stage 0, tp rank 0)"), std::string::npos) << d;
  EXPECT_EQ(d.find("rank 0 "), std::string::npos) << d;  // it fits
}

TEST(Memory, BytesText) {
  EXPECT_EQ(bytesText(3.0 * (1 << 30)), "3.00 GiB");
  EXPECT_EQ(bytesText(12.5 * (1 << 20)), "12.5 MiB");
  EXPECT_EQ(bytesText(4096), "4 KiB");
}

}  // namespace
}  // namespace hetcomm::trainer
