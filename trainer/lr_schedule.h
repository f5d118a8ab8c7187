// lr_schedule.h: the learning rate per optimizer step: linear warmup to the peak, then cosine decay to the
// minimum (GPT-2 / nanoGPT / llm.c). A pure function of the step, so a resumed run gets the same rates.
#pragma once

#include <cstdint>

#include "trainer/config.h"

namespace hetcomm::trainer {

// Steps are 0-based; a run has totalSteps of them (0 .. totalSteps-1). With W = warmupSteps:
//   step < W:               maxLr * (step+1) / W          (the first step already learns: no zero-rate step)
//   W <= step < totalSteps:  minLr + (maxLr-minLr) * (1 + cos(pi * p)) / 2,   p = (step - W + 1) / (totalSteps - W)
//   step >= totalSteps:      minLr
// So the rate reaches maxLr exactly at step W-1, decays from there, and reaches minLr exactly at the last
// step (p = 1), where llm.c's formula stops one step short of it. Step W-1 is where both pieces give maxLr,
// so the curve is continuous. Negative steps count as step 0.
class LrSchedule {
 public:
  // No checks here: validate(TrainConfig) already bounds these (0 <= minLr <= maxLr, 0 <= W <= totalSteps);
  // other values still give a finite rate, never a division by zero.
  LrSchedule(double maxLr, double minLr, int64_t warmupSteps, int64_t totalSteps)
      : maxLr_(maxLr), minLr_(minLr), warmupSteps_(warmupSteps), totalSteps_(totalSteps) {}
  explicit LrSchedule(const TrainConfig& c) : LrSchedule(c.lr, c.minLr, c.warmupSteps, c.steps) {}

  double lrAt(int64_t step) const;

 private:
  double maxLr_, minLr_;
  int64_t warmupSteps_, totalSteps_;
};

}  // namespace hetcomm::trainer
