#include "trainer/param_layout.h"

#include <algorithm>
#include <stdexcept>

namespace hetcomm::trainer {

namespace {

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  bool decay;
  ParamTensor::Init init;
  // Where it lies in the full tensor (ParamTensor's fields of the same names); fullName empty = name.
  std::string fullName = {};
  ParamTensor::Cut cut = ParamTensor::Cut::kWhole;
  std::vector<std::pair<int64_t, int64_t>> rows = {};
  std::pair<int64_t, int64_t> cols = {0, 0};
  bool replicated = false;  // whole on every TP rank
};

size_t numelOf(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// One group's tensors of the shard, in layout order (the whole model: Shard{}). The model reads them by index:
// BlockTensor for blocks; wte, wpe for group 0; ln_f.weight, ln_f.bias (then lm_head.weight) for the last.
std::vector<Spec> groupSpecs(const ModelConfig& m, int group, const Shard& sh) {
  using I = ParamTensor::Init;
  using Cut = ParamTensor::Cut;
  const int64_t C = m.dModel, V = m.vocabSize, T = m.seqLen, t = sh.tp, k = sh.tpRank;
  // Rows [k n/t, (k+1) n/t) of each of `parts` stacked blocks of n rows (qkv: q, k and v).
  auto rowsOf = [&](int64_t n, int parts) {
    std::vector<std::pair<int64_t, int64_t>> r;
    for (int j = 0; j < parts; ++j) r.push_back({j * n + k * n / t, j * n + (k + 1) * n / t});
    return r;
  };
  auto whole = [](Spec s) {
    s.replicated = true;
    return s;
  };
  if (group == 0)
    return {{"wte", {V / t, C}, true, I::kNormal, "", Cut::kRows, rowsOf(V, 1)},
            whole({"wpe", {T, C}, true, I::kNormal})};
  if (group == m.nLayer + 1) {
    std::vector<Spec> s{whole({"ln_f.weight", {C}, false, I::kOne}), whole({"ln_f.bias", {C}, false, I::kZero})};
    if (sh.tiedCopy()) s.push_back({"lm_head.weight", {V / t, C}, true, I::kNormal, "wte", Cut::kRows, rowsOf(V, 1)});
    return s;
  }
  const std::string p = "h." + std::to_string(group - 1) + ".";
  // Order must match BlockTensor.
  return {
      whole({p + "ln_1.weight", {C}, false, I::kOne}),
      whole({p + "ln_1.bias", {C}, false, I::kZero}),
      {p + "attn.qkv.weight", {3 * C / t, C}, true, I::kNormal, "", Cut::kRows, rowsOf(C, 3)},
      {p + "attn.qkv.bias", {3 * C / t}, false, I::kZero, "", Cut::kRows, rowsOf(C, 3)},
      {p + "attn.proj.weight", {C, C / t}, true, I::kResidualProj, "", Cut::kCols, {}, {k * C / t, (k + 1) * C / t}},
      whole({p + "attn.proj.bias", {C}, false, I::kZero}),
      whole({p + "ln_2.weight", {C}, false, I::kOne}),
      whole({p + "ln_2.bias", {C}, false, I::kZero}),
      {p + "mlp.fc.weight", {4 * C / t, C}, true, I::kNormal, "", Cut::kRows, rowsOf(4 * C, 1)},
      {p + "mlp.fc.bias", {4 * C / t}, false, I::kZero, "", Cut::kRows, rowsOf(4 * C, 1)},
      {p + "mlp.proj.weight",
       {C, 4 * C / t},
       true,
       I::kResidualProj,
       "",
       Cut::kCols,
       {},
       {k * 4 * C / t, (k + 1) * 4 * C / t}},
      whole({p + "mlp.proj.bias", {C}, false, I::kZero}),
  };
}

// Copies between a shard tensor and its place in the full tensor, in either direction (toShard) or adding
// into the full one (!toShard).
void mapTensor(const ParamTensor& st, float* shardBuf, const ParamTensor& ft, float* fullBuf, bool toShard) {
  auto move = [&](float* s, float* f, size_t n) {
    if (toShard)
      std::copy(f, f + n, s);
    else
      for (size_t i = 0; i < n; ++i) f[i] += s[i];
  };
  float* s = shardBuf + st.offset;
  float* f = fullBuf + ft.offset;
  const size_t rowSize = ft.shape.size() > 1 ? ft.numel / static_cast<size_t>(ft.shape[0]) : 1;
  switch (st.cut) {
    case ParamTensor::Cut::kWhole:
      move(s, f, st.numel);
      break;
    case ParamTensor::Cut::kRows:
      for (auto [b, e] : st.rows) {
        const size_t n = static_cast<size_t>(e - b) * rowSize;
        move(s, f + static_cast<size_t>(b) * rowSize, n);
        s += n;
      }
      break;
    case ParamTensor::Cut::kCols: {
      const size_t width = static_cast<size_t>(st.cols.second - st.cols.first);
      for (size_t r = 0; r < static_cast<size_t>(ft.shape[0]); ++r, s += width)
        move(s, f + r * rowSize + static_cast<size_t>(st.cols.first), width);
      break;
    }
  }
}

}  // namespace

ParamLayout::ParamLayout(const ModelConfig& model, size_t bucketBytes, int align)
    : ParamLayout(model, Shard{}, bucketBytes, align) {}

ParamLayout::ParamLayout(const ModelConfig& model, const Shard& shard, size_t bucketBytes, int align) : shard_(shard) {
  if (shard_.layers < 0)
    shard_ = Shard{.firstLayer = 0,
                   .layers = model.nLayer,
                   .embedding = true,
                   .head = true,
                   .tp = shard.tp,
                   .tpRank = shard.tpRank};
  groups_ = model.nLayer + 2;
  const size_t a = static_cast<size_t>(align < 1 ? 1 : align);
  // The groups this shard holds: [lo, hi].
  const int lo = shard_.embedding ? 0 : 1 + shard_.firstLayer;
  const int hi = shard_.head ? groups_ - 1 : shard_.firstLayer + shard_.layers;
  // Group sizes first, to cut buckets from the end.
  std::vector<size_t> groupFloats(groups_);
  for (int g = lo; g <= hi; ++g)
    for (const Spec& s : groupSpecs(model, g, shard_)) groupFloats[g] += numelOf(s.shape);
  // Buckets from the last group backwards: [firstGroup, lastGroup] with at least bucketBytes.
  std::vector<std::pair<int, int>> ranges;
  for (int last = hi; last >= lo;) {
    int first = last;
    size_t bytes = groupFloats[first] * sizeof(float);
    while (first > lo && bytes < bucketBytes) bytes += groupFloats[--first] * sizeof(float);
    ranges.push_back({first, last});
    last = first - 1;
  }
  // Lay the groups out in forward order, padding each bucket at its end.
  bucketOfGroup_.assign(groups_, -1);
  buckets_.resize(ranges.size());
  size_t offset = 0;
  for (int b = static_cast<int>(ranges.size()) - 1; b >= 0; --b) {
    Bucket& bucket = buckets_[b];
    bucket.firstGroup = ranges[b].first;
    bucket.lastGroup = ranges[b].second;
    bucket.offset = offset;
    for (int g = bucket.firstGroup; g <= bucket.lastGroup; ++g) {
      bucketOfGroup_[g] = b;
      for (const Spec& s : groupSpecs(model, g, shard_)) {
        ParamTensor t;
        t.name = s.name;
        t.fullName = s.fullName.empty() ? s.name : s.fullName;
        t.cut = s.cut;
        t.rows = s.rows;
        t.cols = s.cols;
        t.inNorm = !(s.replicated && shard_.tpRank > 0) && t.name != "lm_head.weight";
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

void sliceFromFull(const ParamLayout& full, const float* fullBuf, const ParamLayout& shard, float* shardBuf) {
  std::fill(shardBuf, shardBuf + shard.totalFloats(), 0.0f);
  for (const ParamTensor& t : shard.tensors())
    mapTensor(t, shardBuf, full.find(t.fullName), const_cast<float*>(fullBuf), /*toShard=*/true);
}

void addToFull(const ParamLayout& shard, const float* shardBuf, const ParamLayout& full, float* fullBuf) {
  for (const ParamTensor& t : shard.tensors())
    if (t.inNorm) mapTensor(t, const_cast<float*>(shardBuf), full.find(t.fullName), fullBuf, /*toShard=*/false);
}

}  // namespace hetcomm::trainer
