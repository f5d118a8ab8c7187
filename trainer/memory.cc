#include "trainer/memory.h"

#include "trainer/model.h"
#include "trainer/pipeline.h"

namespace hetcomm::trainer {

MemoryNeed memoryNeed(const TrainConfig& cfg, const Shard& shard, const ParamLayout& layout, size_t ownedFloats,
                      int microBatches, int stage, int stages) {
  MemoryNeed m;
  m.params = m.grads = double(layout.totalFloats()) * sizeof(float);
  m.optimizer = 2.0 * double(ownedFloats) * sizeof(float);
  const int slots = Pipeline::slotsFor(stage, stages, microBatches);
  m.activations = double(slots) * Gpt::slotBytes(cfg.model, shard, cfg.microBatch) +
                  Gpt::scratchBytes(cfg.model, shard, cfg.microBatch);
  m.buffers = Pipeline::bufferBytes(cfg.model, cfg.microBatch, microBatches, stage, stages);
  return m;
}

}  // namespace hetcomm::trainer
