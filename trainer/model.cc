#include "trainer/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

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
    do u1 = uniform(); while (u1 <= 0);
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

}  // namespace

Gpt::Gpt(const ModelConfig& cfg, const ParamLayout& layout, int maxBatch)
    : cfg_(cfg), layout_(layout), maxBatch_(maxBatch) {
  const size_t BT = size_t(maxBatch) * cfg.seqLen, C = cfg.dModel, V = cfg.vocabSize, NH = cfg.nHead,
               T = cfg.seqLen;
  tokens_.resize(BT);
  targets_.resize(BT);
  encoded_.resize(BT * C);
  layers_.resize(cfg.nLayer);
  for (Layer& l : layers_) {
    for (auto* v : {&l.ln1, &l.atty, &l.attnProj, &l.res2, &l.ln2, &l.fcProj, &l.res3}) v->resize(BT * C);
    for (auto* v : {&l.ln1Mean, &l.ln1Rstd, &l.ln2Mean, &l.ln2Rstd}) v->resize(BT);
    l.qkv.resize(BT * 3 * C);
    l.att.resize(size_t(maxBatch) * NH * T * T);
    l.fch.resize(BT * 4 * C);
    l.fchGelu.resize(BT * 4 * C);
  }
  lnf_.resize(BT * C);
  lnfMean_.resize(BT);
  lnfRstd_.resize(BT);
  probs_.resize(BT * V);
  losses_.resize(BT);
  for (auto* v : {&dresidual_, &dlnf_, &dln_, &datty_}) v->resize(BT * C);
  dlogits_.resize(BT * V);
  dqkv_.resize(BT * 3 * C);
  datt_.resize(T * T);
  dfch_.resize(BT * 4 * C);
  dfchGelu_.resize(BT * 4 * C);
  groupBase_.assign(layout.groups(), 0);
  for (size_t i = layout.tensors().size(); i-- > 0;) groupBase_[layout.tensors()[i].group] = i;
}

const float* Gpt::tensor(const float* params, int group, int index) const {
  return params + layout_.tensors()[groupBase_[group] + index].offset;
}
float* Gpt::tensor(float* grads, int group, int index) const {
  return grads + layout_.tensors()[groupBase_[group] + index].offset;
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

Result<double> Gpt::forward(const float* params, const int32_t* tokens, const int32_t* targets, int B) {
  const int T = cfg_.seqLen, C = cfg_.dModel, V = cfg_.vocabSize, NH = cfg_.nHead, BT = B * T;
  batch_ = B;
  std::copy(tokens, tokens + BT, tokens_.begin());
  std::copy(targets, targets + BT, targets_.begin());
  const float* wte = tensor(params, 0, 0);
  const float* wpe = tensor(params, 0, 1);
  if (auto check = nn::encoderForward(encoded_.data(), tokens, wte, wpe, B, T, C, V); !check.ok())
    return idError(check);
  const float* residual = encoded_.data();  // [BT, C]
  for (int l = 0; l < cfg_.nLayer; ++l) {
    Layer& a = layers_[l];
    auto w = [&](int index) { return tensor(params, 1 + l, index); };
    nn::layernormForward(a.ln1.data(), a.ln1Mean.data(), a.ln1Rstd.data(), residual, w(kLn1W), w(kLn1B), BT, C);
    nn::linearForward(a.qkv.data(), a.ln1.data(), w(kQkvW), w(kQkvB), BT, C, 3 * C);       // [BT, 3C]
    nn::attentionForward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);          // [BT, C]
    nn::linearForward(a.attnProj.data(), a.atty.data(), w(kAttnProjW), w(kAttnProjB), BT, C, C);
    nn::residualForward(a.res2.data(), residual, a.attnProj.data(), size_t(BT) * C);
    nn::layernormForward(a.ln2.data(), a.ln2Mean.data(), a.ln2Rstd.data(), a.res2.data(), w(kLn2W), w(kLn2B), BT, C);
    nn::linearForward(a.fch.data(), a.ln2.data(), w(kFcW), w(kFcB), BT, C, 4 * C);         // [BT, 4C]
    nn::geluForward(a.fchGelu.data(), a.fch.data(), size_t(BT) * 4 * C);
    nn::linearForward(a.fcProj.data(), a.fchGelu.data(), w(kFcProjW), w(kFcProjB), BT, 4 * C, C);
    nn::residualForward(a.res3.data(), a.res2.data(), a.fcProj.data(), size_t(BT) * C);
    residual = a.res3.data();
  }
  const int last = cfg_.nLayer + 1;
  nn::layernormForward(lnf_.data(), lnfMean_.data(), lnfRstd_.data(), residual, tensor(params, last, 0),
                       tensor(params, last, 1), BT, C);
  nn::linearForward(probs_.data(), lnf_.data(), wte, nullptr, BT, C, V);  // logits [BT, V], tied head
  if (auto check = nn::crossEntropyForward(losses_.data(), probs_.data(), probs_.data(), targets, BT, V); !check.ok())
    return idError(check);
  double sum = 0;
  for (int i = 0; i < BT; ++i) sum += losses_[i];
  return sum / BT;
}

void Gpt::backward(const float* params, float* grads, float lossScale, const std::function<void(int)>& groupDone) {
  const int B = batch_, T = cfg_.seqLen, C = cfg_.dModel, V = cfg_.vocabSize, NH = cfg_.nHead, BT = B * T;
  const int last = cfg_.nLayer + 1;
  const float* wte = tensor(params, 0, 0);
  float* dwte = tensor(grads, 0, 0);

  // Head: dlogits = (probs - onehot) * lossScale; logits = lnf wte^T.
  (void)nn::crossEntropyBackward(dlogits_.data(), probs_.data(), targets_.data(), lossScale, BT, V);
  zero(dlnf_, size_t(BT) * C);
  nn::linearBackward(dlnf_.data(), dwte, nullptr, dlogits_.data(), lnf_.data(), wte, BT, C, V);
  // dresidual: the gradient of the residual stream, accumulated through every block (x + f(x) passes it on).
  zero(dresidual_, size_t(BT) * C);
  const float* lastResidual = cfg_.nLayer ? layers_.back().res3.data() : encoded_.data();
  nn::layernormBackward(dresidual_.data(), tensor(grads, last, 0), tensor(grads, last, 1), dlnf_.data(),
                        lastResidual, tensor(params, last, 0), lnfMean_.data(), lnfRstd_.data(), BT, C);
  if (groupDone) groupDone(last);

  for (int l = cfg_.nLayer - 1; l >= 0; --l) {
    Layer& a = layers_[l];
    auto w = [&](int index) { return tensor(params, 1 + l, index); };
    auto g = [&](int index) { return tensor(grads, 1 + l, index); };
    const float* input = l == 0 ? encoded_.data() : layers_[l - 1].res3.data();
    // MLP branch: res3 = res2 + proj(gelu(fc(ln_2(res2)))).
    zero(dfchGelu_, size_t(BT) * 4 * C);
    nn::linearBackward(dfchGelu_.data(), g(kFcProjW), g(kFcProjB), dresidual_.data(), a.fchGelu.data(), w(kFcProjW),
                       BT, 4 * C, C);
    zero(dfch_, size_t(BT) * 4 * C);
    nn::geluBackward(dfch_.data(), a.fch.data(), dfchGelu_.data(), size_t(BT) * 4 * C);
    zero(dln_, size_t(BT) * C);
    nn::linearBackward(dln_.data(), g(kFcW), g(kFcB), dfch_.data(), a.ln2.data(), w(kFcW), BT, C, 4 * C);
    nn::layernormBackward(dresidual_.data(), g(kLn2W), g(kLn2B), dln_.data(), a.res2.data(), w(kLn2W),
                          a.ln2Mean.data(), a.ln2Rstd.data(), BT, C);
    // Attention branch: res2 = input + proj(attn(ln_1(input))).
    zero(datty_, size_t(BT) * C);
    nn::linearBackward(datty_.data(), g(kAttnProjW), g(kAttnProjB), dresidual_.data(), a.atty.data(), w(kAttnProjW),
                       BT, C, C);
    zero(dqkv_, size_t(BT) * 3 * C);
    nn::attentionBackward(dqkv_.data(), datt_.data(), datty_.data(), a.qkv.data(), a.att.data(), B, T, C, NH);
    zero(dln_, size_t(BT) * C);
    nn::linearBackward(dln_.data(), g(kQkvW), g(kQkvB), dqkv_.data(), a.ln1.data(), w(kQkvW), BT, C, 3 * C);
    nn::layernormBackward(dresidual_.data(), g(kLn1W), g(kLn1B), dln_.data(), input, w(kLn1W), a.ln1Mean.data(),
                          a.ln1Rstd.data(), BT, C);
    if (groupDone) groupDone(1 + l);
  }
  // Tokens were checked by forward.
  (void)nn::encoderBackward(dwte, tensor(grads, 0, 1), dresidual_.data(), tokens_.data(), B, T, C, V);
  if (groupDone) groupDone(0);
}

double Gpt::flopsPerToken() const {
  // 2 FLOPs per multiply-add; backward costs twice the forward. Matrix products: every weight once per token
  // (the tied head included); attention: QK^T and att V, each T x C per token (the causal half counted whole,
  // as PaLM's MFU does).
  const double C = cfg_.dModel, T = cfg_.seqLen, L = cfg_.nLayer, V = cfg_.vocabSize;
  const double matmulParams = L * (3 * C * C + C * C + 8 * C * C) + V * C;
  return 6 * matmulParams + 6 * L * 2 * T * C;
}

}  // namespace hetcomm::trainer
