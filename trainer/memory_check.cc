// memory_check.cc: hetcomm-train's memory check at start, on every rank at once (training_state.h).
#include "trainer/training_state.h"

namespace hetcomm::trainer {

// Every rank's need against its limit, collectively: every rank exits when any rank does not fit (the lead names
// each one with its numbers), so none is left waiting in a collective.
void Training::State::checkMemory() {
  if (o.memoryLimits.empty()) return;
  const MemoryNeed need =
      memoryNeed(cfg, layout->shard(), *layout, dp->ownedFloats(), {role.stage, S, accum, plan.pipelineDepth});
  const uint64_t limit = o.memoryLimits.size() == 1 ? o.memoryLimits[0] : o.memoryLimits[rank];
  constexpr int kFields = 6;
  std::vector<double> all(size_t(world) * kFields, 0.0);
  const double mine[kFields] = {need.params, need.grads, need.optimizer, need.activations, need.buffers, double(limit)};
  std::copy(mine, mine + kFields, all.begin() + size_t(rank) * kFields);
  worldSum(all);
  std::vector<MemoryNeed> needs(world);
  std::vector<double> limits(world);
  for (int r = 0; r < world; ++r) {
    const double* f = all.data() + size_t(r) * kFields;
    needs[r] = MemoryNeed{f[0], f[1], f[2], f[3], f[4]};
    limits[r] = f[5];
  }
  auto line = fitMemory(needs, limits, table);
  if (!line) {
    if (lead)
      std::fprintf(stderr, "hetcomm-train [rank 0]: error: the plan does not fit --memory-limits:%s\n",
                   line.error().detail.c_str());
    // Every rank leaves only once the lead has said why (a launcher stops the others when one exits).
    std::vector<double> said{0.0};
    worldSum(said);
    std::exit(1);
  }
  memoryLine = *line;
}

}  // namespace hetcomm::trainer
