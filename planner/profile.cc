#include "planner/profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trainer/model.h"
#include "trainer/param_layout.h"

namespace hetcomm::planner {
namespace {

using nlohmann::json;
using trainer::Error;
using trainer::Result;

constexpr int kProfileVersion = 3;  // 3: blocks from paired 1- and 3-block passes
constexpr int kRepetitions = 5;  // timed forward + backward passes per model and size; the median counts

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A TP group whose sums and maxima do nothing: one rank's compute alone (the numbers it gives are not a model's).
class NoSums final : public trainer::TpGroup {
 public:
  trainer::Result<void> sum(float*, size_t) override { return {}; }
  trainer::Result<void> max(float*, size_t) override { return {}; }
};

// One TP rank's shard of the whole model (one stage) at B sequences, built once and timed pass by pass.
class TimedModel {
 public:
  TimedModel(const trainer::ModelConfig& model, int B, int tp)
      : layout_(model, shard(model, tp), size_t(1) << 20, 1),
        gpt_(model, layout_, B, 1, tp > 1 ? &noSums_ : nullptr),
        params_(layout_.totalFloats()),
        grads_(layout_.totalFloats(), 0.0f),
        tokens_(size_t(B) * model.seqLen),
        targets_(tokens_.size()),
        b_(B) {
    gpt_.initParams(params_.data(), 1);
    for (size_t i = 0; i < tokens_.size(); ++i) tokens_[i] = int32_t(i * 7 % 256), targets_[i] = int32_t(i * 13 % 256);
  }
  // Seconds of one forward and one backward pass.
  std::pair<double, double> pass() {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    (void)gpt_.forwardStage(0, params_.data(), tokens_.data(), nullptr, targets_.data(), b_, nullptr);
    const auto t1 = Clock::now();
    (void)gpt_.backwardStage(0, params_.data(), grads_.data(), 1.0f, nullptr, nullptr, [](int) {});
    const auto t2 = Clock::now();
    return {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count()};
  }

 private:
  static trainer::Shard shard(const trainer::ModelConfig& model, int tp) {
    return {.firstLayer = 0, .layers = model.nLayer, .embedding = true, .head = true, .tp = tp, .tpRank = 0};
  }
  NoSums noSums_;
  trainer::ParamLayout layout_;
  trainer::Gpt gpt_;
  std::vector<float> params_, grads_;
  std::vector<int32_t> tokens_, targets_;
  int b_;
};

// Median forward and backward seconds of the whole model (one stage) at B sequences.
std::pair<double, double> timeModel(const trainer::ModelConfig& model, int B, int tp) {
  TimedModel m(model, B, tp);
  (void)m.pass();  // warms caches and allocators
  std::vector<double> forward, backward;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const auto [f, b] = m.pass();
    forward.push_back(f);
    backward.push_back(b);
  }
  return {median(forward), median(backward)};
}

PartTimes measureAt(const trainer::ModelConfig& model, int B, int tp) {
  // A block's time from models of 1 and 3 blocks (the difference over 2), the rest from the 1-block model. The two
  // are timed in turn and the block taken from each pair's difference: a machine that gets busier or quieter while
  // this runs moves both of a pair alike, where two medians taken one after the other could differ by more than
  // two blocks (a block's backward 20 % off, the head's clamped to 0, were seen that way).
  trainer::ModelConfig one = model, three = model;
  one.nLayer = 1, three.nLayer = 3;
  TimedModel m1(one, B, tp), m3(three, B, tp);
  (void)m1.pass(), (void)m3.pass();  // warm-up
  std::vector<double> f1, b1, blockF, blockB;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const auto [fa, ba] = m1.pass();
    const auto [fc, bc] = m3.pass();
    f1.push_back(fa), b1.push_back(ba);
    blockF.push_back((fc - fa) / 2), blockB.push_back((bc - ba) / 2);
  }
  PartTimes t;
  t.blockForwardS = std::max(0.0, median(blockF));
  t.blockBackwardS = std::max(0.0, median(blockB));
  t.headForwardS = std::max(0.0, median(f1) - t.blockForwardS);
  t.headBackwardS = std::max(0.0, median(b1) - t.blockBackwardS);
  return t;
}

// How far a cached profile is from this machine now: the 1-block model at `size` sequences, TP 1, timed again
// against the cached figure for the same (its block and the rest, forward and backward); a ratio >= 1 either way.
double cacheDrift(const trainer::ModelConfig& model, int size, const std::map<std::pair<int, int>, PartTimes>& cached) {
  const auto it = cached.find({size, 1});
  if (it == cached.end()) return std::numeric_limits<double>::infinity();  // not the sizes it claims: measure again
  const PartTimes& c = it->second;
  const double then = c.blockForwardS + c.headForwardS + c.blockBackwardS + c.headBackwardS;
  trainer::ModelConfig one = model;
  one.nLayer = 1;
  const auto [f, b] = timeModel(one, size, 1);
  const double now = f + b;
  if (!(then > 0) || !(now > 0)) return then == now ? 1.0 : std::numeric_limits<double>::infinity();
  return std::max(now / then, then / now);
}

json toJson(const PartTimes& t) {
  return {{"block_forward_s", t.blockForwardS},
          {"block_backward_s", t.blockBackwardS},
          {"head_forward_s", t.headForwardS},
          {"head_backward_s", t.headBackwardS}};
}

}  // namespace

ComputeProfile ComputeProfile::fromFlops(double flopsPerS) {
  ComputeProfile p;
  p.flopsPerS_ = flopsPerS;
  char b[64];
  std::snprintf(b, sizeof b, "FLOPs at %.1f GFLOP/s", flopsPerS / 1e9);
  p.source_ = b;
  return p;
}

ComputeProfile ComputeProfile::fromMeasured(std::map<std::pair<int, int>, PartTimes> measured, std::string source) {
  ComputeProfile p;
  p.measured_ = std::move(measured);
  p.source_ = std::move(source);
  return p;
}

PartTimes ComputeProfile::at(const trainer::ModelConfig& model, int microBatch, int tp) const {
  tp = std::max(1, tp);
  if (measured_.empty()) {
    const trainer::Gpt::ForwardFlops f = trainer::Gpt::forwardFlopsPerToken(model);
    const double tokens = double(microBatch) * model.seqLen, rate = (flopsPerS_ > 0 ? flopsPerS_ : 1) * tp;
    return {(f.attention + f.mlp) * tokens / rate, 2 * (f.attention + f.mlp) * tokens / rate, f.head * tokens / rate,
            2 * f.head * tokens / rate};
  }
  // The nearest size measured at this degree (by ratio), else at degree 1 (over tp), scaled by the tokens.
  const int degree =
      std::any_of(measured_.begin(), measured_.end(), [&](const auto& e) { return e.first.second == tp; }) ? tp : 1;
  auto nearest = measured_.end();
  for (auto it = measured_.begin(); it != measured_.end(); ++it)
    if (it->first.second == degree &&
        (nearest == measured_.end() || std::abs(std::log(double(it->first.first) / microBatch)) <
                                           std::abs(std::log(double(nearest->first.first) / microBatch))))
      nearest = it;
  if (nearest == measured_.end()) return {};  // fromMeasured's contract: degree 1 is there
  const double scale = double(microBatch) / nearest->first.first / (degree == tp ? 1 : tp);
  const PartTimes& t = nearest->second;
  return {t.blockForwardS * scale, t.blockBackwardS * scale, t.headForwardS * scale, t.headBackwardS * scale};
}

std::string profileCacheDir() {
  if (const char* dir = std::getenv("HETCOMM_PROFILE_CACHE"); dir && *dir)
    return std::string(dir) == "off" ? "" : std::string(dir);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/hetcomm";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/hetcomm";
  return "";
}

Result<ComputeProfile> measureProfile(const trainer::ModelConfig& model, const std::vector<int>& sizes,
                                      const std::vector<int>& tpDegrees, int threads, const std::string& cacheDir,
                                      bool* cached, CacheCheck check) {
  if (cached) *cached = false;
  if (auto ok = trainer::validate(model, "profile"); !ok) return ok.error();
  if (sizes.empty()) return Error{.source = "profile", .field = "sizes", .detail = "no micro-batch size to measure"};
  for (int s : sizes)
    if (s < 1)
      return Error{.source = "profile", .field = "sizes", .detail = "micro-batch size " + std::to_string(s) + " < 1"};
  std::vector<int> tps{1};
  for (int t : tpDegrees) {
    if (t < 1 || model.nHead % t || model.dModel % t || model.vocabSize % t)
      return Error{.source = "profile",
                   .field = "tp",
                   .detail = "TP degree " + std::to_string(t) +
                             " does not split the model's heads, channels and "
                             "vocabulary"};
    if (std::find(tps.begin(), tps.end(), t) == tps.end()) tps.push_back(t);
  }
  std::sort(tps.begin(), tps.end());
  threads = std::max(1, threads);
  const std::string cpu = cpuModel();
  const json key = {{"version", kProfileVersion},
                    {"model", trainer::toJson(model)},
                    {"sizes", sizes},
                    {"tp", tps},
                    {"threads", threads},
                    {"cpu", cpu}};
  char name[64];
  std::snprintf(name, sizeof name, "profile-%016zx.json", std::hash<std::string>{}(key.dump()));
  const std::string path = cacheDir.empty() ? "" : cacheDir + "/" + name;
  std::string source =
      "measured on " + cpu + ", " + std::to_string(threads) + " BLAS thread" + (threads > 1 ? "s" : "");
  trainer::Gpt::setThreads(threads);
  if (!path.empty()) {
    std::ifstream in(path);
    if (in) {
      try {
        const json doc = json::parse(in);
        if (doc.at("key") == key) {
          std::map<std::pair<int, int>, PartTimes> measured;
          for (const json& e : doc.at("sizes"))
            measured[{e.at("micro_batch").get<int>(), e.at("tp").get<int>()}] = {
                e.at("block_forward_s").get<double>(), e.at("block_backward_s").get<double>(),
                e.at("head_forward_s").get<double>(), e.at("head_backward_s").get<double>()};
          const double off =
              check.recheck ? cacheDrift(model, *std::min_element(sizes.begin(), sizes.end()), measured) : 1.0;
          if (off <= 1 + check.tolerance) {
            if (cached) *cached = true;
            return ComputeProfile::fromMeasured(std::move(measured), source + " (cached " + path + ")");
          }
          char why[128];
          std::snprintf(why, sizeof why, " (the cache was %.2fx off a check now: measured again)", off);
          source += why;
        }
      } catch (const json::exception&) {
        // A damaged or foreign cache file: measure again and overwrite it.
      }
    }
  }
  std::map<std::pair<int, int>, PartTimes> measured;
  json entries = json::array();
  for (int t : tps)
    for (int s : sizes) {
      const PartTimes& times = measured[{s, t}] = measureAt(model, s, t);
      json e = toJson(times);
      e["micro_batch"] = s;
      e["tp"] = t;
      entries.push_back(std::move(e));
    }
  if (!path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cacheDir, ec);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      if (out) out << json{{"key", key}, {"sizes", entries}}.dump(1) << "\n";
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) std::filesystem::remove(tmp, ec);
  }
  return ComputeProfile::fromMeasured(std::move(measured), source);
}

}  // namespace hetcomm::planner
