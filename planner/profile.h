// profile.h: how long the model's parts take on a device, per micro-batch: the planner's compute profile.
//
// Two sources:
//   FLOPs     each part's FLOPs (trainer::Gpt::forwardFlopsPerToken; a backward twice its forward) at a given
//             FLOP/s: exactly what hetcomm-train --emulate-compute waits, and a device's peak for planning a
//             cluster not at hand;
//   measured  the trainer's real kernels on this host (trainer::Gpt, the BLAS threads a rank will have), per
//             micro-batch size and TP degree (one rank's shard, its all-reduces left out: they are the library's
//             to predict): a block's forward and backward from models of 1 and 3 blocks, the rest (the
//             embedding, the final LayerNorm, the head and the loss) from the 1-block model. Cached in a file per
//             model, sizes, degrees, threads and CPU, so planning again is instant.
// Both are for a device of relative speed 1: a device of speed v takes 1/v of each time. A TP degree not
// measured (and every degree of the FLOP profile) takes 1/t of TP 1's time (each rank holds 1/t of every matrix).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"

namespace hetcomm::planner {

// One micro-batch on one rank of a device of speed 1.
struct PartTimes {
  double blockForwardS = 0, blockBackwardS = 0;  // one transformer block
  double headForwardS = 0, headBackwardS = 0;    // embedding lookup, final LayerNorm, LM head and loss
};

class ComputeProfile {
 public:
  // From FLOPs at flopsPerS (a speed-1 device).
  static ComputeProfile fromFlops(double flopsPerS);
  // From measured times by (micro-batch size, TP degree) (TP degree 1 at one size at least); `source` says where
  // they came from.
  static ComputeProfile fromMeasured(std::map<std::pair<int, int>, PartTimes> measured, std::string source);

  // One rank's times at microBatch sequences of model in a TP group of degree tp: FLOPs; or the measured size
  // nearest in tokens at that degree (else TP 1's over tp), scaled to microBatch.
  PartTimes at(const trainer::ModelConfig& model, int microBatch, int tp = 1) const;
  const std::string& source() const { return source_; }
  double flopsPerS() const { return flopsPerS_; }  // 0 when measured
  const std::map<std::pair<int, int>, PartTimes>& measured() const { return measured_; }

 private:
  double flopsPerS_ = 0;
  std::map<std::pair<int, int>, PartTimes> measured_;  // (micro-batch size, TP degree)
  std::string source_;
};

// Whether a cached profile still holds: before it is used, the 1-block model at the smallest size (TP 1) is timed
// again, and where that differs from the cached figure by more than `tolerance` either way (1.3x for 0.3), the
// machine is not what it was when the cache was written (busier then, or now) and every part is measured again.
// A cache written while a test suite loaded the machine otherwise misled every later plan.
struct CacheCheck {
  bool recheck = true;
  double tolerance = 0.3;
};

// Measures the model's parts with the trainer's kernels at each micro-batch size and TP degree (1 is always
// measured), with `threads` BLAS threads (the threads a rank will train with), or reads them from cacheDir ("" = no
// cache) where an earlier run left them for the same model, sizes, degrees, threads and CPU and `check` finds them
// still right. *cached says which. A cache that cannot be written is not an error (the next run measures again).
// Errors: a size < 1, a degree that does not divide the model's heads, channels and vocabulary, an invalid model.
trainer::Result<ComputeProfile> measureProfile(const trainer::ModelConfig& model, const std::vector<int>& sizes,
                                               const std::vector<int>& tps, int threads, const std::string& cacheDir,
                                               bool* cached = nullptr, CacheCheck check = {});

// The profile cache's directory: HETCOMM_PROFILE_CACHE, else $XDG_CACHE_HOME/hetcomm, else ~/.cache/hetcomm;
// "" when HETCOMM_PROFILE_CACHE is "off" or no home is known.
std::string profileCacheDir();

}  // namespace hetcomm::planner
