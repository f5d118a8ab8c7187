// deadline.h: every wait in hetcomm is bounded (HETCOMM_TIMEOUT); a Deadline is the point it gives up.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>

namespace hetcomm {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline never() { return Deadline(Clock::time_point::max()); }
  static Deadline afterMs(int64_t ms) { return Deadline(Clock::now() + std::chrono::milliseconds(ms)); }
  static Deadline afterSec(double s, Clock::time_point from = Clock::now()) {
    return Deadline(from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
  }

  bool expired() const { return at_ != Clock::time_point::max() && Clock::now() >= at_; }
  bool isNever() const { return at_ == Clock::time_point::max(); }
  Clock::time_point at() const { return at_; }
  // Milliseconds left, rounded up, clamped to [0, INT_MAX]; -1 for never (epoll's "wait forever").
  int msLeft() const {
    if (isNever()) return -1;
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(at_ - Clock::now()).count();
    if (left <= 0) return 0;
    int64_t ms = (left + 999) / 1000;
    return ms > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max() : static_cast<int>(ms);
  }
  static const Deadline& earlier(const Deadline& a, const Deadline& b) { return a.at_ <= b.at_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

// Seconds since an arbitrary epoch, for timing.
inline double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace hetcomm
