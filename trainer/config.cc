// config.cc: JSON <-> TrainConfig, and the checks. Parsing checks only types (and that an integer fits its
// field); validate() checks ranges, so a config built in code (tests, command-line overrides) gets the same
// checks as one read from a file.
#include "trainer/config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include "trainer/json_input.h"

namespace hetcomm::trainer {
namespace {

using nlohmann::json;

// Shortest round-tripping text of a number for messages ("0.1", not "0.100000").
std::string num(double v) { return json(v).dump(); }

// Reads the keys of one JSON object into fields, remembering the first error. Every key must be read by one of
// the typed readers, or finish() reports it as unknown with the list of known keys: a typo ("n_layers") must not
// silently train the default model.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string prefix, const std::string& source)
      : object_(object), prefix_(std::move(prefix)), source_(source) {}

  template <class Int>
  void integer(const char* key, Int& out) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_number_integer()) return fail(key, "must be an integer, got " + describeJson(*v));
    if constexpr (std::is_unsigned_v<Int>) {
      if (!v->is_number_unsigned()) return fail(key, "must be a non-negative integer, got " + v->dump());
      uint64_t x = v->get<uint64_t>();
      if (x > std::numeric_limits<Int>::max()) return fail(key, v->dump() + " is too large");
      out = static_cast<Int>(x);
    } else {
      // A value above INT64_MAX parses as unsigned and would wrap in get<int64_t>().
      if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        return fail(key, v->dump() + " is too large");
      int64_t x = v->get<int64_t>();
      if (x < std::numeric_limits<Int>::min() || x > std::numeric_limits<Int>::max())
        return fail(key, v->dump() + " does not fit in " + std::to_string(sizeof(Int) * 8) + " bits");
      out = static_cast<Int>(x);
    }
  }

  void real(const char* key, double& out) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_number()) return fail(key, "must be a number, got " + describeJson(*v));
    out = v->get<double>();
  }

  void string(const char* key, std::string& out) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_string()) return fail(key, "must be a string, got " + describeJson(*v));
    out = v->get<std::string>();
  }

  void strings(const char* key, std::vector<std::string>& out) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array()) return fail(key, "must be an array of strings, got " + describeJson(*v));
    std::vector<std::string> items;
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        return fail(key, "element " + std::to_string(i) + " must be a string, got " + describeJson((*v)[i]));
      items.push_back((*v)[i].get<std::string>());
    }
    out = std::move(items);
  }

  // A nested object: returns it for a nested reader, or nullptr when absent or on a type error.
  const json* object(const char* key) {
    const json* v = find(key);
    if (v && !v->is_object()) {
      fail(key, "must be an object, got " + describeJson(*v));
      return nullptr;
    }
    return v;
  }

  // Unknown keys first: a misspelt key explains a later surprise better than a range error does.
  Result<void> finish() {
    for (const auto& [key, value] : object_.items()) {
      bool known = false;
      for (const std::string& k : known_) known = known || k == key;
      if (known) continue;
      std::string list;
      for (const std::string& k : known_) list += (list.empty() ? "" : ", ") + k;
      return keyError(source_, prefix_ + key, "unknown key (known keys here: " + list + ")");
    }
    if (error_) return *error_;
    return {};
  }

 private:
  const json* find(const char* key) {
    known_.emplace_back(key);
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  void fail(const char* key, std::string detail) {
    if (!error_) error_ = keyError(source_, prefix_ + key, std::move(detail));
  }
  const json& object_;
  std::string prefix_;
  const std::string& source_;
  std::vector<std::string> known_;
  std::optional<Error> error_;
};

}  // namespace

int64_t parameterCount(const ModelConfig& m) {
  const int64_t C = m.dModel, V = m.vocabSize, T = m.seqLen, L = m.nLayer;
  const int64_t perBlock = 4 * C                // ln_1, ln_2: weight + bias each
                           + 3 * C * C + 3 * C  // qkv
                           + C * C + C          // attention output projection
                           + 4 * C * C + 4 * C  // fc
                           + 4 * C * C + C;     // fc projection
  return V * C + T * C + L * perBlock + 2 * C;  // + final LayerNorm; LM head tied to wte
}

Result<void> validate(const ModelConfig& m, const std::string& source) {
  auto positive = [&](const char* key, int64_t v) -> std::optional<Error> {
    if (v > 0) return std::nullopt;
    return keyError(source, std::string("model.") + key, "must be positive, got " + std::to_string(v));
  };
  for (auto [key, v] : {std::pair<const char*, int64_t>{"n_layer", m.nLayer},
                        {"n_head", m.nHead},
                        {"d_model", m.dModel},
                        {"seq_len", m.seqLen},
                        {"vocab_size", m.vocabSize}}) {
    if (auto e = positive(key, v)) return *e;
  }
  if (m.dModel % m.nHead != 0)
    return keyError(source, "model.d_model",
                    "d_model " + std::to_string(m.dModel) + " is not a multiple of n_head " + std::to_string(m.nHead));
  if (m.vocabSize < 256)
    return keyError(source, "model.vocab_size",
                    "must be at least 256 (tokens are bytes), got " + std::to_string(m.vocabSize));
  return {};
}

Result<void> validate(const TrainConfig& c, int dpSize, const std::string& source) {
  if (auto r = validate(c.model, source); !r) return r;
  auto bad = [&](const char* key, std::string detail) { return keyError(source, key, std::move(detail)); };
  if (c.microBatch <= 0) return bad("micro_batch", "must be positive, got " + std::to_string(c.microBatch));
  if (c.globalBatch <= 0) return bad("global_batch", "must be positive, got " + std::to_string(c.globalBatch));
  if (dpSize <= 0)
    return Error{.source = source, .detail = "data-parallel size must be positive, got " + std::to_string(dpSize)};
  const int64_t perStep = int64_t(c.microBatch) * dpSize;
  if (c.globalBatch % perStep != 0) {
    return bad("global_batch", "global_batch " + std::to_string(c.globalBatch) + " is not a multiple of micro_batch " +
                                   std::to_string(c.microBatch) + " x data-parallel size " + std::to_string(dpSize) +
                                   " = " + std::to_string(perStep));
  }
  if (c.steps <= 0) return bad("steps", "must be positive, got " + std::to_string(c.steps));
  if (!(c.lr > 0)) return bad("lr", "must be positive, got " + num(c.lr));
  if (!(c.minLr >= 0 && c.minLr <= c.lr))
    return bad("min_lr",
               "must be in [0, lr = " + num(c.lr) + "] (it is absolute, not a fraction), got " + num(c.minLr));
  if (c.warmupSteps < 0 || c.warmupSteps > c.steps)
    return bad("warmup_steps",
               "must be in [0, steps = " + std::to_string(c.steps) + "], got " + std::to_string(c.warmupSteps));
  if (!(c.weightDecay >= 0)) return bad("weight_decay", "must be >= 0, got " + num(c.weightDecay));
  if (!(c.beta1 >= 0 && c.beta1 < 1)) return bad("beta1", "must be in [0,1), got " + num(c.beta1));
  if (!(c.beta2 >= 0 && c.beta2 < 1)) return bad("beta2", "must be in [0,1), got " + num(c.beta2));
  if (!(c.eps > 0)) return bad("eps", "must be positive, got " + num(c.eps));
  if (!(c.gradClip >= 0)) return bad("grad_clip", "must be >= 0 (0 = no clipping), got " + num(c.gradClip));
  if (c.evalEvery < 0) return bad("eval_every", "must be >= 0 (0 = never), got " + std::to_string(c.evalEvery));
  if (c.evalBatches <= 0) return bad("eval_batches", "must be positive, got " + std::to_string(c.evalBatches));
  if (!(c.valFraction > 0 && c.valFraction < 1))
    return bad("val_fraction", "must be in (0,1), got " + num(c.valFraction));
  if (c.logEvery <= 0) return bad("log_every", "must be positive, got " + std::to_string(c.logEvery));
  for (size_t i = 0; i < c.dataFiles.size(); ++i)
    if (c.dataFiles[i].empty()) return bad("data_files", "element " + std::to_string(i) + " is an empty path");
  if (c.checkpointEvery < 0)
    return bad("checkpoint_every",
               "must be >= 0 (0 = after the last step only), got " + std::to_string(c.checkpointEvery));
  return {};
}

int gradAccumSteps(const TrainConfig& c, int dpSize) {
  if (c.microBatch <= 0 || dpSize <= 0) return 0;  // invalid config: no division by zero, validate() says why
  return c.globalBatch / (c.microBatch * dpSize);
}

Result<TrainConfig> configFromJson(const json& j, const std::string& source) {
  if (!j.is_object())
    return Error{.source = source, .detail = std::string("must be a JSON object, got ") + j.type_name()};
  TrainConfig c;
  ObjectReader top(j, "", source);
  if (const json* m = top.object("model")) {
    ObjectReader model(*m, "model.", source);
    model.integer("n_layer", c.model.nLayer);
    model.integer("n_head", c.model.nHead);
    model.integer("d_model", c.model.dModel);
    model.integer("seq_len", c.model.seqLen);
    model.integer("vocab_size", c.model.vocabSize);
    if (auto r = model.finish(); !r) return r.error();
  }
  top.integer("micro_batch", c.microBatch);
  top.integer("global_batch", c.globalBatch);
  top.integer("steps", c.steps);
  top.real("lr", c.lr);
  top.real("min_lr", c.minLr);
  top.integer("warmup_steps", c.warmupSteps);
  top.real("weight_decay", c.weightDecay);
  top.real("beta1", c.beta1);
  top.real("beta2", c.beta2);
  top.real("eps", c.eps);
  top.real("grad_clip", c.gradClip);
  top.integer("seed", c.seed);
  top.integer("eval_every", c.evalEvery);
  top.integer("eval_batches", c.evalBatches);
  top.real("val_fraction", c.valFraction);
  top.integer("log_every", c.logEvery);
  top.strings("data_files", c.dataFiles);
  top.string("checkpoint_dir", c.checkpointDir);
  top.integer("checkpoint_every", c.checkpointEvery);
  if (auto r = top.finish(); !r) return r.error();
  if (auto r = validate(c, 1, source); !r) return r.error();
  return c;
}

Result<TrainConfig> parseConfig(const std::string& text, const std::string& source) {
  auto j = parseJsonText(text, source);
  if (!j) return j.error();
  return configFromJson(*j, source);
}

Result<TrainConfig> loadConfig(const std::string& path) {
  const std::string source = "config " + path;
  auto text = readTextFile(path, source);
  if (!text) return text.error();
  return parseConfig(*text, source);
}

json toJson(const ModelConfig& m) {
  return json{{"n_layer", m.nLayer},
              {"n_head", m.nHead},
              {"d_model", m.dModel},
              {"seq_len", m.seqLen},
              {"vocab_size", m.vocabSize}};
}

json toJson(const TrainConfig& c) {
  return json{{"model", toJson(c.model)},
              {"micro_batch", c.microBatch},
              {"global_batch", c.globalBatch},
              {"steps", c.steps},
              {"lr", c.lr},
              {"min_lr", c.minLr},
              {"warmup_steps", c.warmupSteps},
              {"weight_decay", c.weightDecay},
              {"beta1", c.beta1},
              {"beta2", c.beta2},
              {"eps", c.eps},
              {"grad_clip", c.gradClip},
              {"seed", c.seed},
              {"eval_every", c.evalEvery},
              {"eval_batches", c.evalBatches},
              {"val_fraction", c.valFraction},
              {"log_every", c.logEvery},
              {"data_files", c.dataFiles},
              {"checkpoint_dir", c.checkpointDir},
              {"checkpoint_every", c.checkpointEvery}};
}

}  // namespace hetcomm::trainer
