#include "trainer/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "kernels/nn/nn.h"

namespace hetcomm::trainer {

namespace nn = hetcomm::kernels::nn;

namespace {

void zero(std::vector<float>& v, size_t n) { std::memset(v.data(), 0, n * sizeof(float)); }

// Standard normal draws from mt19937_64 by Box-Muller, spelled out so every standard library gives the same
// numbers (std::normal_distribution's algorithm is the library's choice).
class Normal {
 public:
  explicit Normal(uint64_t seed) : gen_(seed) {}
  double next() {
    if (haveSpare_) {
      haveSpare_ = false;
      return spare_;
    }
    double u1, u2;
    do u1 = uniform();
    while (u1 <= 0);
    u2 = uniform();
    const double r = std::sqrt(-2 * std::log(u1)), th = 2 * M_PI * u2;
    spare_ = r * std::sin(th);
    haveSpare_ = true;
    return r * std::cos(th);
  }

 private:
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  std::mt19937_64 gen_;
  double spare_ = 0;
  bool haveSpare_ = false;
};

Error idError(const nn::IdCheck& check) { return Error{.source = "batch", .detail = check.message()}; }

// The first id outside [0, limit), as the kernels report it (for the TP paths that do not call them).
nn::IdCheck checkIds(const char* what, const int32_t* ids, size_t n, int limit) {
  for (size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= limit)
      return nn::IdCheck{.what = what, .position = static_cast<int64_t>(i), .value = ids[i], .limit = limit};
  return nn::IdCheck{.what = what};
}

}  // namespace

// The floats of every buffer, in the order of layerFields, slotFields and scratchFields: what the constructor
// allocates and what the memory estimates count.
struct Gpt::Dims {
  size_t B, T, BT, C, Cl, NHl, Vl;
  bool head;
  Dims(const ModelConfig& cfg, const Shard& shard, int maxBatch)
      : B(maxBatch),
        T(cfg.seqLen),
        BT(B * T),
        C(cfg.dModel),
        Cl(C / shard.tp),
        NHl(cfg.nHead / shard.tp),
        Vl(cfg.vocabSize / shard.tp),
        head(shard.head) {}
  std::array<size_t, 15> layer() const {
    return {BT * C, BT, BT, BT * 3 * Cl, BT * Cl,     B * NHl * T * T, BT * C, BT * C,
            BT * C, BT, BT, BT * 4 * Cl, BT * 4 * Cl, BT * C,          BT * C};
  }
  std::array<size_t, 6> slot() const {
    const size_t h = head ? 1 : 0;
    return {BT * C, h * BT * C, h * BT, h * BT, h * BT * Vl, h * BT};
  }
  std::array<size_t, 10> scratch() const {
    return {BT * C, BT * C, head ? BT * Vl : 0, BT * C, BT * 3 * Cl, BT * Cl, T * T, BT * 4 * Cl, BT * 4 * Cl, 3 * BT};
  }
};

namespace {
template <class A>
size_t sum(const A& a) {
  size_t n = 0;
  for (size_t v : a) n += v;
  return n;
}
}  // namespace

size_t Gpt::slotBytes(const ModelConfig& cfg, const Shard& shard, int maxBatch) {
  const Dims d(cfg, shard, maxBatch);
  const int layers = shard.layers < 0 ? cfg.nLayer : shard.layers;
  return (sum(d.slot()) + layers * sum(d.layer())) * sizeof(float) + 2 * d.BT * sizeof(int32_t);
}

size_t Gpt::scratchBytes(const ModelConfig& cfg, const Shard& shard, int maxBatch) {
  return sum(Dims(cfg, shard, maxBatch).scratch()) * sizeof(float);
}

size_t Gpt::allocatedBytes() const {
  size_t bytes = 0;
  for (const Slot& s : slots_) {
    bytes += (s.tokens.size() + s.targets.size()) * sizeof(int32_t);
    for (const auto* v : slotFields(s)) bytes += v->size() * sizeof(float);
    for (const Layer& l : s.layers)
      for (const auto* v : layerFields(l)) bytes += v->size() * sizeof(float);
  }
  for (const auto* v : scratchFields(*this)) bytes += v->size() * sizeof(float);
  return bytes;
}

Gpt::Gpt(const ModelConfig& cfg, const ParamLayout& layout, int maxBatch, int slots, TpGroup* tp)
    : cfg_(cfg), layout_(layout), shard_(layout.shard()), tp_(tp), maxBatch_(maxBatch) {
  const int t = shard_.tp;
  if (t > 1 && tp == nullptr) throw std::invalid_argument("Gpt: a tensor-parallel shard needs its TP group");
  if (t == 1) tp_ = nullptr;
  C_ = cfg.dModel, Cl_ = C_ / t, NHl_ = cfg.nHead / t, Vl_ = cfg.vocabSize / t, vBegin_ = shard_.tpRank * Vl_;
  const Dims d(cfg, shard_, maxBatch);
  auto allocate = [](auto fields, const auto& sizes) {
    for (size_t i = 0; i < sizes.size(); ++i) fields[i]->resize(sizes[i]);
  };
  slots_.resize(std::max(1, slots));
  for (Slot& s : slots_) {
    s.tokens.resize(d.BT);
    s.targets.resize(d.BT);
    allocate(slotFields(s), d.slot());
    s.layers.resize(shard_.layers);
    for (Layer& l : s.layers) allocate(layerFields(l), d.layer());
  }
  allocate(scratchFields(*this), d.scratch());
  groupBase_.assign(layout.groups(), 0);
  for (size_t i = layout.tensors().size(); i-- > 0;) groupBase_[layout.tensors()[i].group] = i;
}

const float* Gpt::tensor(const float* params, int group, int index) const {
  return params + layout_.tensors()[groupBase_[group] + index].offset;
}
float* Gpt::tensor(float* grads, int group, int index) const {
  return grads + layout_.tensors()[groupBase_[group] + index].offset;
}
const float* Gpt::headWeight(const float* params) const {
  return shard_.tiedCopy() ? tensor(params, cfg_.nLayer + 1, 2) : tensor(params, 0, 0);
}
float* Gpt::headWeight(float* grads) const {
  return shard_.tiedCopy() ? tensor(grads, cfg_.nLayer + 1, 2) : tensor(grads, 0, 0);
}

void Gpt::initParams(float* params, uint64_t seed) const {
  std::memset(params, 0, layout_.totalFloats() * sizeof(float));
  Normal normal(seed);
  const double projStd = 0.02 / std::sqrt(2.0 * cfg_.nLayer);
  for (const ParamTensor& t : layout_.tensors()) {
    float* p = params + t.offset;
    switch (t.init) {
      case ParamTensor::Init::kNormal:
        for (size_t i = 0; i < t.numel; ++i) p[i] = static_cast<float>(0.02 * normal.next());
        break;
      case ParamTensor::Init::kResidualProj:
        for (size_t i = 0; i < t.numel; ++i) p[i] = static_cast<float>(projStd * normal.next());
        break;
      case ParamTensor::Init::kOne:
        std::fill(p, p + t.numel, 1.0f);
        break;
      case ParamTensor::Init::kZero:
        break;
    }
  }
}

Result<void> Gpt::linearSum(float* out, const float* bias, size_t BT) {
  if (auto r = tp_->sum(out, BT * C_); !r) return r;
  for (size_t i = 0; i < BT; ++i)
    for (int c = 0; c < C_; ++c) out[i * C_ + c] += bias[c];
  return {};
}

// Tokens -> wte rows + wpe rows into s.encoded. Under TP each rank adds the rows it holds (zero for the others'),
// the group sums, and the position embedding (whole on every rank) comes after, so the sum is exact.
Result<void> Gpt::embed(Slot& s, const float* params, int B) {
  const int T = cfg_.seqLen, C = C_, BT = B * T;
  const float* wte = tensor(params, 0, 0);
  const float* wpe = tensor(params, 0, 1);
  if (!tp_) {
    if (auto check = nn::encoderForward(s.encoded.data(), s.tokens.data(), wte, wpe, B, T, C, cfg_.vocabSize);
        !check.ok())
      return idError(check);
    return {};
  }
  if (auto check = checkIds("token", s.tokens.data(), BT, cfg_.vocabSize); !check.ok()) return idError(check);
  for (int i = 0; i < BT; ++i) {
    float* out = s.encoded.data() + size_t(i) * C;
    const int row = s.tokens[i] - vBegin_;
    if (row >= 0 && row < Vl_)
      std::copy(wte + size_t(row) * C, wte + size_t(row + 1) * C, out);
    else
      std::fill(out, out + C, 0.0f);
  }
  if (auto r = tp_->sum(s.encoded.data(), size_t(BT) * C); !r) return r;
  for (int i = 0; i < BT; ++i)
    for (int c = 0; c < C; ++c) s.encoded[size_t(i) * C + c] += wpe[size_t(i % T) * C + c];
  return {};
}

// ln_f, logits against this rank's vocabulary rows, and the softmax cross-entropy. Under TP the softmax's max
// and its sum (with the target's logit, which one rank holds) are reduced over the group.
Result<double> Gpt::headForward(Slot& s, const float* params, const float* residual, int B) {
  const int T = cfg_.seqLen, C = C_, BT = B * T, last = cfg_.nLayer + 1;
  nn::layernormForward(s.lnf.data(), s.lnfMean.data(), s.lnfRstd.data(), residual, tensor(params, last, 0),
                       tensor(params, last, 1), BT, C);
  nn::linearForward(s.probs.data(), s.lnf.data(), headWeight(params), nullptr, BT, C, Vl_);  // logits [BT, Vl]
  if (!tp_) {
    if (auto check = nn::crossEntropyForward(s.losses.data(), s.probs.data(), s.probs.data(), s.targets.data(), BT,
                                             cfg_.vocabSize);
        !check.ok())
      return idError(check);
  } else {
    if (auto check = checkIds("target", s.targets.data(), BT, cfg_.vocabSize); !check.ok()) return idError(check);
    float* mx = stats_.data();  // [BT] row max, then [2 BT]: sum of exp, target logit - max
    float* se = stats_.data() + BT;
    for (int i = 0; i < BT; ++i) {
      const float* row = s.probs.data() + size_t(i) * Vl_;
      mx[i] = *std::max_element(row, row + Vl_);
    }
    if (auto r = tp_->max(mx, BT); !r) return r.error();
    for (int i = 0; i < BT; ++i) {
      float* row = s.probs.data() + size_t(i) * Vl_;
      const int t = s.targets[i] - vBegin_;
      se[BT + i] = t >= 0 && t < Vl_ ? row[t] - mx[i] : 0.0f;
      double sum = 0;
      for (int j = 0; j < Vl_; ++j) sum += row[j] = std::exp(row[j] - mx[i]);
      se[i] = static_cast<float>(sum);
    }
    if (auto r = tp_->sum(se, 2 * size_t(BT)); !r) return r.error();
    for (int i = 0; i < BT; ++i) {
      float* row = s.probs.data() + size_t(i) * Vl_;
      const float inv = 1.0f / se[i];
      for (int j = 0; j < Vl_; ++j) row[j] *= inv;
      s.losses[i] = std::log(se[i]) - se[BT + i];
    }
  }
  double sum = 0;
  for (int i = 0; i < BT; ++i) sum += s.losses[i];
  return sum / BT;
}

Result<double> Gpt::forwardStage(int slot, const float* params, const int32_t* tokens, const float* input,
                                 const int32_t* targets, int B, float* output) {
  const int T = cfg_.seqLen, C = C_, Cl = Cl_, BT = B * T;
  Slot& s = slots_[slot];
  s.batch = B;
  if (shard_.embedding) {
    std::copy(tokens, tokens + BT, s.tokens.begin());
    if (auto r = embed(s, params, B); !r) return r.error();
  } else {
    std::copy(input, input + size_t(BT) * C, s.encoded.begin());
  }
  const float* residual = s.encoded.data();  // [BT, C]
  for (int i = 0; i < shard_.layers; ++i) {
    Layer& a = s.layers[i];
    const int l = shard_.firstLayer + i;
    auto w = [&](int index) { return tensor(params, 1 + l, index); };
    nn::layernormForward(a.ln1.data(), a.ln1Mean.data(), a.ln1Rstd.data(), residual, w(kLn1W), w(kLn1B), BT, C);
    nn::linearForward(a.qkv.data(), a.ln1.data(), w(kQkvW), w(kQkvB), BT, C, 3 * Cl);  // [BT, 3Cl]
    nn::attentionForward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, Cl, NHl_);   // [BT, Cl]
    if (!tp_) {
      nn::linearForward(a.attnProj.data(), a.atty.data(), w(kAttnProjW), w(kAttnProjB), BT, C, C);
    } else {  // row-parallel: partial sums over this rank's heads
      nn::linearForward(a.attnProj.data(), a.atty.data(), w(kAttnProjW), nullptr, BT, Cl, C);
      if (auto r = linearSum(a.attnProj.data(), w(kAttnProjB), BT); !r) return r.error();
    }
    nn::residualForward(a.res2.data(), residual, a.attnProj.data(), size_t(BT) * C);
    nn::layernormForward(a.ln2.data(), a.ln2Mean.data(), a.ln2Rstd.data(), a.res2.data(), w(kLn2W), w(kLn2B), BT, C);
    nn::linearForward(a.fch.data(), a.ln2.data(), w(kFcW), w(kFcB), BT, C, 4 * Cl);  // [BT, 4Cl]
    nn::geluForward(a.fchGelu.data(), a.fch.data(), size_t(BT) * 4 * Cl);
    if (!tp_) {
      nn::linearForward(a.fcProj.data(), a.fchGelu.data(), w(kFcProjW), w(kFcProjB), BT, 4 * C, C);
    } else {
      nn::linearForward(a.fcProj.data(), a.fchGelu.data(), w(kFcProjW), nullptr, BT, 4 * Cl, C);
      if (auto r = linearSum(a.fcProj.data(), w(kFcProjB), BT); !r) return r.error();
    }
    nn::residualForward(a.res3.data(), a.res2.data(), a.fcProj.data(), size_t(BT) * C);
    residual = a.res3.data();
  }
  if (!shard_.head) {
    std::copy(residual, residual + size_t(BT) * C, output);
    return 0.0;
  }
  std::copy(targets, targets + BT, s.targets.begin());
  return headForward(s, params, residual, B);
}

void Gpt::backward(const float* params, float* grads, float lossScale, const std::function<void(int)>& groupDone) {
  (void)backwardStage(0, params, grads, lossScale, nullptr, nullptr, groupDone);  // no TP: nothing can fail
}

Result<void> Gpt::backwardStage(int slot, const float* params, float* grads, float lossScale, const float* dout,
                                float* dinput, const std::function<void(int)>& groupDone) {
  Slot& s = slots_[slot];
  const int B = s.batch, T = cfg_.seqLen, C = C_, Cl = Cl_, BT = B * T, last = cfg_.nLayer + 1;
  auto sumOverTp = [&](std::vector<float>& v) { return tp_ ? tp_->sum(v.data(), size_t(BT) * C) : Result<void>{}; };

  if (shard_.head) {
    // dlogits = (probs - onehot) * lossScale; logits = lnf wte^T (this rank's rows).
    if (!tp_) {
      (void)nn::crossEntropyBackward(dlogits_.data(), s.probs.data(), s.targets.data(), lossScale, BT, Vl_);
    } else {
      for (size_t i = 0; i < size_t(BT) * Vl_; ++i) dlogits_[i] = s.probs[i] * lossScale;
      for (int i = 0; i < BT; ++i)
        if (const int t = s.targets[i] - vBegin_; t >= 0 && t < Vl_) dlogits_[size_t(i) * Vl_ + t] -= lossScale;
    }
    zero(dlnf_, size_t(BT) * C);
    nn::linearBackward(dlnf_.data(), headWeight(grads), nullptr, dlogits_.data(), s.lnf.data(), headWeight(params), BT,
                       C, Vl_);
    if (auto r = sumOverTp(dlnf_); !r) return r;
    // dresidual: the gradient of the residual stream, accumulated through every block (x + f(x) passes it on).
    zero(dresidual_, size_t(BT) * C);
    const float* lastResidual = shard_.layers ? s.layers.back().res3.data() : s.encoded.data();
    nn::layernormBackward(dresidual_.data(), tensor(grads, last, 0), tensor(grads, last, 1), dlnf_.data(), lastResidual,
                          tensor(params, last, 0), s.lnfMean.data(), s.lnfRstd.data(), BT, C);
    if (groupDone) groupDone(last);
  } else {
    std::copy(dout, dout + size_t(BT) * C, dresidual_.begin());
  }

  for (int i = shard_.layers - 1; i >= 0; --i) {
    Layer& a = s.layers[i];
    const int l = shard_.firstLayer + i;
    auto w = [&](int index) { return tensor(params, 1 + l, index); };
    auto g = [&](int index) { return tensor(grads, 1 + l, index); };
    const float* input = i == 0 ? s.encoded.data() : s.layers[i - 1].res3.data();
    // MLP branch: res3 = res2 + proj(gelu(fc(ln_2(res2)))).
    zero(dfchGelu_, size_t(BT) * 4 * Cl);
    nn::linearBackward(dfchGelu_.data(), g(kFcProjW), g(kFcProjB), dresidual_.data(), a.fchGelu.data(), w(kFcProjW), BT,
                       4 * Cl, C);
    zero(dfch_, size_t(BT) * 4 * Cl);
    nn::geluBackward(dfch_.data(), a.fch.data(), dfchGelu_.data(), size_t(BT) * 4 * Cl);
    zero(dln_, size_t(BT) * C);
    nn::linearBackward(dln_.data(), g(kFcW), g(kFcB), dfch_.data(), a.ln2.data(), w(kFcW), BT, C, 4 * Cl);
    if (auto r = sumOverTp(dln_); !r) return r;
    nn::layernormBackward(dresidual_.data(), g(kLn2W), g(kLn2B), dln_.data(), a.res2.data(), w(kLn2W), a.ln2Mean.data(),
                          a.ln2Rstd.data(), BT, C);
    // Attention branch: res2 = input + proj(attn(ln_1(input))).
    zero(datty_, size_t(BT) * Cl);
    nn::linearBackward(datty_.data(), g(kAttnProjW), g(kAttnProjB), dresidual_.data(), a.atty.data(), w(kAttnProjW), BT,
                       Cl, C);
    zero(dqkv_, size_t(BT) * 3 * Cl);
    nn::attentionBackward(dqkv_.data(), datt_.data(), datty_.data(), a.qkv.data(), a.att.data(), B, T, Cl, NHl_);
    zero(dln_, size_t(BT) * C);
    nn::linearBackward(dln_.data(), g(kQkvW), g(kQkvB), dqkv_.data(), a.ln1.data(), w(kQkvW), BT, C, 3 * Cl);
    if (auto r = sumOverTp(dln_); !r) return r;
    nn::layernormBackward(dresidual_.data(), g(kLn1W), g(kLn1B), dln_.data(), input, w(kLn1W), a.ln1Mean.data(),
                          a.ln1Rstd.data(), BT, C);
    if (groupDone) groupDone(1 + l);
  }
  if (!shard_.embedding) {
    std::copy(dresidual_.begin(), dresidual_.begin() + size_t(BT) * C, dinput);
    return {};
  }
  float* dwte = tensor(grads, 0, 0);
  float* dwpe = tensor(grads, 0, 1);
  if (!tp_) {
    (void)nn::encoderBackward(dwte, dwpe, dresidual_.data(), s.tokens.data(), B, T, C, cfg_.vocabSize);  // checked
  } else {
    for (int i = 0; i < BT; ++i) {
      const float* d = dresidual_.data() + size_t(i) * C;
      if (const int row = s.tokens[i] - vBegin_; row >= 0 && row < Vl_)
        for (int c = 0; c < C; ++c) dwte[size_t(row) * C + c] += d[c];
      for (int c = 0; c < C; ++c) dwpe[size_t(i % T) * C + c] += d[c];
    }
  }
  if (groupDone) groupDone(0);
  return {};
}

Gpt::ForwardFlops Gpt::forwardFlopsPerToken(const ModelConfig& cfg) {
  // 2 FLOPs per multiply-add. Matrix products: every weight once per token (the tied head included); attention:
  // QK^T and att V, each T x C per token (the causal half counted whole, as PaLM's MFU does).
  const double C = cfg.dModel, T = cfg.seqLen, V = cfg.vocabSize;
  return {.attention = 2 * (3 * C * C + C * C) + 2 * 2 * T * C, .mlp = 2 * 8 * C * C, .head = 2 * V * C};
}

double Gpt::flopsPerToken(const ModelConfig& cfg) {
  const ForwardFlops f = forwardFlopsPerToken(cfg);
  return 3 * (cfg.nLayer * (f.attention + f.mlp) + f.head);  // forward, and backward at twice the forward
}

void Gpt::setThreads(int n) { nn::setBlasThreads(n); }
int Gpt::threads() { return nn::blasThreads(); }

}  // namespace hetcomm::trainer
