#include "trainer/memory.h"

#include <cstdio>

#include "trainer/model.h"
#include "trainer/pipeline.h"

namespace hetcomm::trainer {

MemoryNeed memoryNeed(const TrainConfig& cfg, const Shard& shard, const ParamLayout& layout, size_t ownedFloats,
                      const StageShape& shape) {
  MemoryNeed m;
  m.params = m.grads = double(layout.totalFloats()) * sizeof(float);
  m.optimizer = 2.0 * double(ownedFloats) * sizeof(float);
  m.activations = double(shape.slots()) * Gpt::slotBytes(cfg.model, shard, cfg.microBatch) +
                  Gpt::scratchBytes(cfg.model, shard, cfg.microBatch);
  m.buffers = Pipeline::bufferBytes(cfg.model, cfg.microBatch, shape);
  return m;
}

std::string bytesText(double b) {
  char buf[32];
  if (b >= double(1 << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1 << 30));
  else if (b >= double(1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024);
  return buf;
}

Result<std::string> fitMemory(const std::vector<MemoryNeed>& needs, const std::vector<double>& limits,
                              const RoleTable& roles) {
  std::string refused;
  size_t worst = 0;
  double worstShare = 0;
  for (size_t r = 0; r < needs.size() && r < limits.size(); ++r) {
    const MemoryNeed& n = needs[r];
    if (n.total() / limits[r] > worstShare) worstShare = n.total() / limits[r], worst = r;
    if (n.total() <= limits[r]) continue;
    const Role role = r < roles.of.size() ? roles.of[r] : Role{};
    refused += "\n  rank " + std::to_string(r) + " (replica " + std::to_string(role.replica) + ", stage " +
               std::to_string(role.stage) + ", tp rank " + std::to_string(role.tpRank) + ") needs " +
               bytesText(n.total()) + " > its limit " + bytesText(limits[r]) + ": parameters " + bytesText(n.params) +
               ", gradients " + bytesText(n.grads) + ", AdamW state " + bytesText(n.optimizer) + ", activations " +
               bytesText(n.activations) + ", pipeline buffers " + bytesText(n.buffers);
  }
  if (!refused.empty()) return Error{.source = "--memory-limits", .detail = refused};
  if (needs.empty() || limits.empty()) return std::string("memory: no rank to check\n");
  return "memory: every rank fits its limit; fullest rank " + std::to_string(worst) + " needs " +
         bytesText(needs[worst].total()) + " of " + bytesText(limits[worst]) + "\n";
}

}  // namespace hetcomm::trainer
