// lr_schedule.cc: see the formula in lr_schedule.h.
#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hetcomm::trainer {

double LrSchedule::lrAt(int64_t step) const {
  step = std::max<int64_t>(step, 0);
  if (step < warmupSteps_) return maxLr_ * double(step + 1) / double(warmupSteps_);
  if (step >= totalSteps_) return minLr_;
  // Here warmupSteps_ <= step < totalSteps_, so the denominator is at least 1.
  const double progress = double(step - warmupSteps_ + 1) / double(totalSteps_ - warmupSteps_);
  return minLr_ + (maxLr_ - minLr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace hetcomm::trainer
