#include "trainer/param_layout.h"

#include <stdexcept>

namespace hetcomm::trainer {

namespace {

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  bool decay;
  ParamTensor::Init init;
};

size_t numelOf(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// One group's tensors, in layout order.
std::vector<Spec> groupSpecs(const ModelConfig& m, int group) {
  using I = ParamTensor::Init;
  const int64_t C = m.dModel, V = m.vocabSize, T = m.seqLen;
  if (group == 0) return {{"wte", {V, C}, true, I::kNormal}, {"wpe", {T, C}, true, I::kNormal}};
  if (group == m.nLayer + 1) return {{"ln_f.weight", {C}, false, I::kOne}, {"ln_f.bias", {C}, false, I::kZero}};
  const std::string p = "h." + std::to_string(group - 1) + ".";
  // Order must match BlockTensor.
  return {
      {p + "ln_1.weight", {C}, false, I::kOne},
      {p + "ln_1.bias", {C}, false, I::kZero},
      {p + "attn.qkv.weight", {3 * C, C}, true, I::kNormal},
      {p + "attn.qkv.bias", {3 * C}, false, I::kZero},
      {p + "attn.proj.weight", {C, C}, true, I::kResidualProj},
      {p + "attn.proj.bias", {C}, false, I::kZero},
      {p + "ln_2.weight", {C}, false, I::kOne},
      {p + "ln_2.bias", {C}, false, I::kZero},
      {p + "mlp.fc.weight", {4 * C, C}, true, I::kNormal},
      {p + "mlp.fc.bias", {4 * C}, false, I::kZero},
      {p + "mlp.proj.weight", {C, 4 * C}, true, I::kResidualProj},
      {p + "mlp.proj.bias", {C}, false, I::kZero},
  };
}

}  // namespace

ParamLayout::ParamLayout(const ModelConfig& model, size_t bucketBytes, int align) {
  groups_ = model.nLayer + 2;
  const size_t a = static_cast<size_t>(align < 1 ? 1 : align);
  // Group sizes first, to cut buckets from the end.
  std::vector<size_t> groupFloats(groups_);
  for (int g = 0; g < groups_; ++g)
    for (const Spec& s : groupSpecs(model, g)) groupFloats[g] += numelOf(s.shape);
  // Buckets from the last group backwards: [firstGroup, lastGroup] with at least bucketBytes.
  std::vector<std::pair<int, int>> ranges;
  for (int last = groups_ - 1; last >= 0;) {
    int first = last;
    size_t bytes = groupFloats[first] * sizeof(float);
    while (first > 0 && bytes < bucketBytes) bytes += groupFloats[--first] * sizeof(float);
    ranges.push_back({first, last});
    last = first - 1;
  }
  // Lay the groups out in forward order, padding each bucket at its end.
  bucketOfGroup_.assign(groups_, 0);
  buckets_.resize(ranges.size());
  size_t offset = 0;
  for (int b = static_cast<int>(ranges.size()) - 1; b >= 0; --b) {
    Bucket& bucket = buckets_[b];
    bucket.firstGroup = ranges[b].first;
    bucket.lastGroup = ranges[b].second;
    bucket.offset = offset;
    for (int g = bucket.firstGroup; g <= bucket.lastGroup; ++g) {
      bucketOfGroup_[g] = b;
      for (const Spec& s : groupSpecs(model, g)) {
        ParamTensor t;
        t.name = s.name;
        t.shape = s.shape;
        t.numel = numelOf(s.shape);
        t.offset = offset;
        t.group = g;
        t.decay = s.decay;
        t.init = s.init;
        offset += t.numel;
        params_ += t.numel;
        tensors_.push_back(std::move(t));
      }
    }
    offset = (offset + a - 1) / a * a;
    bucket.length = offset - bucket.offset;
  }
  total_ = offset;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  throw std::out_of_range("no parameter named '" + name + "'");
}

}  // namespace hetcomm::trainer
