#include "trainer/train_state.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>

#include "trainer/checkpoint.h"

namespace hetcomm::trainer {

namespace {

// The state's three whole buffers, each with the prefix of its tensors' names in the file.
template <class State>
auto buffers(State& s) {
  using Buf = std::conditional_t<std::is_const_v<State>, const std::vector<float>, std::vector<float>>;
  return std::array<std::pair<std::string, Buf*>, 3>{{{"", &s.params}, {"optim.m.", &s.m}, {"optim.v.", &s.v}}};
}

Result<int64_t> metaInt(const Checkpoint& ckpt, const std::string& key) {
  auto it = ckpt.metadata.find(key);
  if (it == ckpt.metadata.end())
    return Error{.source = ckpt.source, .field = "metadata '" + key + "'", .detail = "missing"};
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used == it->second.size() && v >= 0) return static_cast<int64_t>(v);
  } catch (const std::exception&) {
  }
  return Error{.source = ckpt.source,
               .field = "metadata '" + key + "'",
               .detail = "'" + it->second + "' is not a non-negative integer"};
}

}  // namespace

Result<void> saveTrainState(const std::string& path, const ParamLayout& layout, const TrainState& state,
                            const TrainConfig& cfg) {
  std::vector<TensorRef> refs;
  for (auto [prefix, buf] : buffers(state)) {
    for (const ParamTensor& t : layout.tensors())
      refs.push_back(TensorRef{prefix + t.name, DType::kF32, t.shape, buf->data() + t.offset});
  }
  std::map<std::string, std::string> meta{
      {"format", "hetcomm-train 1"},
      {"step", std::to_string(state.step)},
      {"adam_steps", std::to_string(state.adamSteps)},
      {"data_epoch", std::to_string(state.data.epoch)},
      {"data_cursor", std::to_string(state.data.cursor)},
      {"config", toJson(cfg).dump()},
  };
  return writeCheckpoint(path, refs, meta);
}

Result<TrainState> loadTrainState(const std::string& path, const ParamLayout& layout, const TrainConfig& cfg) {
  auto ckpt = readCheckpoint(path);
  if (!ckpt) return ckpt.error();
  auto fmt = ckpt->metadata.find("format");
  if (fmt == ckpt->metadata.end() || fmt->second != "hetcomm-train 1")
    return Error{.source = ckpt->source,
                 .field = "metadata 'format'",
                 .detail = "not a hetcomm-train checkpoint (expected 'hetcomm-train 1')"};
  // The model must be the same; the optimizer and schedule settings may change on resume.
  try {
    auto saved = configFromJson(nlohmann::json::parse(ckpt->metadata.at("config")), ckpt->source + ": config");
    if (!saved) return saved.error();
    if (!(saved->model == cfg.model))
      return Error{.source = ckpt->source,
                   .field = "model",
                   .detail = "the checkpoint's model " + toJson(saved->model).dump() + " differs from this run's " +
                             toJson(cfg.model).dump()};
  } catch (const std::exception& e) {
    return Error{.source = ckpt->source, .field = "metadata 'config'", .detail = e.what()};
  }
  TrainState s;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"step", &s.step}, {"adam_steps", &s.adamSteps}}) {
    auto v = metaInt(*ckpt, key);
    if (!v) return v.error();
    *out = *v;
  }
  auto epoch = metaInt(*ckpt, "data_epoch");
  if (!epoch) return epoch.error();
  auto cursor = metaInt(*ckpt, "data_cursor");
  if (!cursor) return cursor.error();
  s.data = DataPosition{static_cast<uint64_t>(*epoch), static_cast<uint64_t>(*cursor)};
  for (auto [prefix, buf] : buffers(s)) {
    buf->assign(layout.totalFloats(), 0.0f);
    for (const ParamTensor& t : layout.tensors()) {
      auto tensor = ckpt->get(prefix + t.name, DType::kF32, t.shape);
      if (!tensor) return tensor.error();
      std::memcpy(buf->data() + t.offset, (*tensor)->data.data(), t.numel * sizeof(float));
    }
  }
  return s;
}

std::string checkpointPath(const std::string& dir, int64_t step) {
  return dir + "/step" + std::to_string(step) + ".safetensors";
}

int64_t newestCheckpointStep(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t newest = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view kHead = "step", kTail = ".safetensors";
    if (name.size() <= kHead.size() + kTail.size() || name.rfind(kHead, 0) != 0 ||
        name.compare(name.size() - kTail.size(), kTail.size(), kTail) != 0)
      continue;
    const std::string digits = name.substr(kHead.size(), name.size() - kHead.size() - kTail.size());
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    newest = std::max<int64_t>(newest, std::stoll(digits));
  }
  return newest;
}

}  // namespace hetcomm::trainer
