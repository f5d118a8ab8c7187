// profile.h: how long the model's parts take on a device, per micro-batch: the planner's compute profile.
//
// Two sources:
//   FLOPs     each part's FLOPs (trainer::Gpt::forwardFlopsPerToken; a backward twice its forward) at a given
//             FLOP/s: exactly what hetcomm-train --emulate-compute waits, and a device's peak for planning a
//             cluster not at hand;
//   measured  the trainer's real kernels on this host (trainer::Gpt, the BLAS threads a rank will have), per
//             micro-batch size: a block's forward and backward from models of 1 and 3 blocks, the rest (the
//             embedding, the final LayerNorm, the head and the loss) from the 1-block model. Cached in a file per
//             model, sizes, threads and CPU, so planning again is instant.
// Both are for a device of relative speed 1 without tensor parallelism; a device of speed v takes 1/v of each
// time, and a TP group of t ranks 1/t (each rank holds 1/t of every matrix).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"

namespace hetcomm::planner {

// One micro-batch on a device of speed 1, TP degree 1.
struct PartTimes {
  double blockForwardS = 0, blockBackwardS = 0;  // one transformer block
  double headForwardS = 0, headBackwardS = 0;    // embedding lookup, final LayerNorm, LM head and loss
};

class ComputeProfile {
 public:
  // From FLOPs at flopsPerS (a speed-1 device).
  static ComputeProfile fromFlops(double flopsPerS);
  // From measured times by micro-batch size (at least one); `source` says where they came from.
  static ComputeProfile fromMeasured(std::map<int, PartTimes> bySize, std::string source);

  // The times at microBatch sequences of model: FLOPs, or the measured size nearest in tokens scaled to it.
  PartTimes at(const trainer::ModelConfig& model, int microBatch) const;
  const std::string& source() const { return source_; }
  double flopsPerS() const { return flopsPerS_; }  // 0 when measured
  const std::map<int, PartTimes>& measured() const { return measured_; }

 private:
  double flopsPerS_ = 0;
  std::map<int, PartTimes> measured_;
  std::string source_;
};

// Measures the model's parts with the trainer's kernels at each micro-batch size, with `threads` BLAS threads
// (the threads a rank will train with), or reads them from cacheDir ("" = no cache) where an earlier run left
// them for the same model, sizes, threads and CPU. *cached says which. A cache that cannot be written is not an
// error (the next run measures again). Errors: a size < 1, an invalid model.
trainer::Result<ComputeProfile> measureProfile(const trainer::ModelConfig& model, const std::vector<int>& sizes,
                                               int threads, const std::string& cacheDir, bool* cached = nullptr);

// The profile cache's directory: HETCOMM_PROFILE_CACHE, else $XDG_CACHE_HOME/hetcomm, else ~/.cache/hetcomm;
// "" when HETCOMM_PROFILE_CACHE is "off" or no home is known.
std::string profileCacheDir();

}  // namespace hetcomm::planner
