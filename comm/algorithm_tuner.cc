// algorithm_tuner.cc: which calls are tuned, the order of their trials, and the choice from the agreed times.
#include "comm/algorithm_tuner.h"

#include <algorithm>
#include <cmath>

namespace hetcomm::comm {

size_t CallShapeHash::operator()(const CallShape& k) const noexcept {
  uint64_t h = k.count * 0x9e3779b97f4a7c15ull;
  h ^= (uint64_t{k.kind} << 40) ^ (uint64_t{k.dtype} << 32) ^ (uint64_t{k.op} << 24) ^ (uint64_t{k.inPlace} << 20) ^
       static_cast<uint32_t>(k.root);
  return static_cast<size_t>(h ^ (h >> 29));
}

CallShape shapeOf(const coll::Args& a) {
  return CallShape{a.count, static_cast<uint8_t>(a.kind), static_cast<uint8_t>(a.dtype), static_cast<uint8_t>(a.op),
                   a.inPlace, a.root};
}

bool AlgorithmTuner::track(const CallShape& shape, std::vector<coll::Selection> contenders) {
  if (!settings_.enabled || settings_.trials < 1 || contenders.size() < 2 ||
      !(contenders[0].predictedUs <= settings_.maxPredictedUs))
    return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (shapes_.size() >= settings_.maxShapes || shapes_.count(shape)) return false;
  Shape& s = shapes_[shape];
  for (const coll::Selection& c : contenders) s.contenders.push_back({c, nullptr, {}});
  ++undecided_;
  return true;
}

AlgorithmTuner::Shape* AlgorithmTuner::find(const CallShape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = shapes_.find(shape);
  return it == shapes_.end() ? nullptr : &it->second;
}

std::optional<coll::Selection> AlgorithmTuner::decision(const CallShape& shape) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = shapes_.find(shape);
  if (it == shapes_.end() || it->second.decided < 0) return std::nullopt;
  return it->second.contenders[static_cast<size_t>(it->second.decided)].selection;
}

int AlgorithmTuner::nextTrial(Shape& s) const {
  const int n = static_cast<int>(s.contenders.size());
  return s.started < n * settings_.trials ? s.started % n : -1;
}

std::vector<double> AlgorithmTuner::medians(const Shape& s) {
  std::vector<double> out;
  for (const Contender& c : s.contenders) {
    std::vector<double> t = c.timesUs;
    if (t.empty()) {
      out.push_back(HUGE_VAL);
      continue;
    }
    std::sort(t.begin(), t.end());
    const size_t m = t.size() / 2;
    out.push_back(t.size() % 2 ? t[m] : (t[m - 1] + t[m]) / 2);
  }
  return out;
}

int AlgorithmTuner::decide(Shape& s, std::span<const double> agreedUs) {
  int best = 0;
  for (size_t i = 1; i < s.contenders.size() && i < agreedUs.size(); ++i)
    if (agreedUs[i] < agreedUs[static_cast<size_t>(best)]) best = static_cast<int>(i);
  std::lock_guard<std::mutex> lock(mu_);
  if (s.decided < 0) --undecided_;
  s.decided = best;
  return best;
}

}  // namespace hetcomm::comm
