// memory.h: what one rank holds while training (for --memory-limits, and for the planner's plans): its
// parameters and gradients, AdamW's two moments for the ranges it updates, the activations of the micro-batches
// in flight with the backward's scratch, and the pipeline's boundary buffers. Not counted: the communication
// library's staging buffers, and the whole-model buffers of the moments outside training: initialisation at
// start (one), a resume (three: parameters and both AdamW moments), a checkpoint (one at a time; three on rank 0,
// which writes them).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"
#include "trainer/param_layout.h"
#include "trainer/pipeline.h"
#include "trainer/plan.h"

namespace hetcomm::trainer {

struct MemoryNeed {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;  // bytes
  double total() const { return params + grads + optimizer + activations + buffers; }
};

// ownedFloats: the floats this rank updates (DataParallel::ownedFloats: every float of the layout, or its ZeRO-1
// slice of each bucket); shape: its stage, with its replica's micro-batches per step and the plan's depth (which
// decide the micro-batches in flight, StageShape::slots).
MemoryNeed memoryNeed(const TrainConfig& cfg, const Shard& shard, const ParamLayout& layout, size_t ownedFloats,
                      const StageShape& shape);

// Every rank's need against its limit (both per global rank; roles names them): the start-up report's line,
// "memory: every rank fits its limit; fullest rank R needs X of Y", or an error whose detail lists every rank
// that does not fit, one per line, with its role and its numbers.
Result<std::string> fitMemory(const std::vector<MemoryNeed>& needs, const std::vector<double>& limits,
                              const RoleTable& roles);

// "1.50 GiB", "12.3 MiB", "640 KiB".
std::string bytesText(double bytes);

}  // namespace hetcomm::trainer
