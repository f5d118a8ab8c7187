// algorithm_tuner.h: where the cost model cannot tell algorithms apart, the first calls of a shape measure them.
//
// The model prices links and memory; what it does not see (cache residency, the scheduler's wake-ups, a virtual
// machine's timer) is of the size of a small call's whole time, and moves the crossover between two algorithms
// from one machine to the next. On one 2-vCPU host, 2-rank tcp allreduces of 128 KiB ran rd 1.1-1.4x faster than
// the ring in four runs out of four, with the model's estimates 3 % apart the other way (docs/results.md). So a call
// predicted under maxPredictedUs whose contenders (coll::contenders: estimates within `within` of the automatic
// choice's) are more than one is tuned: its shape's first `trials` calls per contender run them in turn,
// interleaved, so that a machine's drift falls on all of them alike; each rank keeps its median time per
// contender; before the next call of the shape the ranks agree on the fastest through an allreduce (max) of those
// medians, and every later call of the shape runs it.
//
// Every rank plans the same calls of the same shapes in the same order and reads the same agreed times: every
// rank runs the same algorithm for every call. Larger calls are left to the model: their time is the links' rates,
// which it prices within 15 % on the clusters measured, and a trial there costs milliseconds to seconds.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "collectives/algorithm.h"

namespace hetcomm::comm {

// What a collective call's choice and schedule depend on: its arguments but the buffers.
struct CallShape {
  size_t count = 0;
  uint8_t kind = 0, dtype = 0, op = 0;
  bool inPlace = false;
  int root = 0;
  bool operator==(const CallShape&) const = default;
};
struct CallShapeHash {
  size_t operator()(const CallShape& k) const noexcept;
};
CallShape shapeOf(const coll::Args& a);

struct TunerSettings {
  bool enabled = true;           // HETCOMM_TUNE
  double within = 1.5;           // HETCOMM_TUNE_WITHIN: contenders' estimates within this of the choice's
  int trials = 3;                // calls per contender
  double maxPredictedUs = 1000;  // calls predicted longer are left to the model
  size_t maxShapes = 256;        // shapes tuned per communicator; later ones are left to the model
};

class AlgorithmTuner {
 public:
  struct Contender {
    coll::Selection selection;
    std::shared_ptr<const coll::Schedule> plan;  // built at its first trial
    std::vector<double> timesUs;                 // this rank's, one per trial
  };
  struct Shape {
    std::vector<Contender> contenders;
    int started = 0;   // trials started
    int decided = -1;  // the contender the ranks agreed on
  };

  explicit AlgorithmTuner(TunerSettings settings = {}) : settings_(settings) {}
  const TunerSettings& settings() const { return settings_; }

  // At a shape's first planning: whether its calls are tuned (then it is tracked from now on). `contenders` is
  // coll::contenders' list for the call, the model's choice first.
  bool track(const CallShape& shape, std::vector<coll::Selection> contenders);
  // A tracked shape, or nullptr. The pointer stays valid while the tuner lives.
  Shape* find(const CallShape& shape);
  // The agreed choice of a tracked shape, once made (any thread).
  std::optional<coll::Selection> decision(const CallShape& shape) const;
  // Whether a tracked shape waits for its trials or its agreement: no lookup per call once all are decided.
  bool pending() const { return undecided_.load(std::memory_order_relaxed) > 0; }

  // The contender the next call of an undecided shape tries, or -1 when every trial has run: the ranks agree first.
  int nextTrial(Shape& s) const;
  // This rank's median time per contender: what it brings to the agreement.
  static std::vector<double> medians(const Shape& s);
  // The agreement's result (per contender, the slowest rank's median): the fastest is chosen, the model's order
  // breaking ties; returns its index.
  int decide(Shape& s, std::span<const double> agreedUs);

 private:
  TunerSettings settings_;
  mutable std::mutex mu_;  // shapes_ and every Shape's `decided` (decision() reads them from API threads)
  std::unordered_map<CallShape, Shape, CallShapeHash> shapes_;
  std::atomic<int> undecided_{0};
};

}  // namespace hetcomm::comm
