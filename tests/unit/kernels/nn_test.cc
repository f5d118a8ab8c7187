// nn_test.cc: the trainer's tensor math (kernels/nn/) against double-precision reference forwards written here
// with plain loops, and every backward against central finite differences of those references.
//
// How the gradient checks work: for a layer y = f(x, params) and a random G, the scalar loss is
// L = sum(y * G). The kernel's backward gets dout = G and must add dL/dx to its gradient buffers. The reference
// is (L(x + h e_i) - L(x - h e_i)) / 2h with L evaluated by the double forward, for every input and parameter
// element (a random sample of them for the larger shapes).
//
// Why the tolerances are what they are: in double, with h = 1e-5, the finite difference is accurate to about
// 1e-10 (truncation h^2 f''' / 6, rounding 1e-16 |L| / h). The fp32 kernels are accurate to a few float ulps
// times the number of terms summed, about 1e-6 relative at these sizes. We require
// |got - ref| <= 1e-4 |ref| + 1e-4 max|ref|: two orders of margin over fp32 rounding, while every structural
// mistake (a factor of 2, a missing mask, a transposed weight, overwriting instead of accumulating) moves
// gradients by O(|ref|) and fails by three orders. Gradient buffers start from random values, so a backward
// that writes instead of adding fails too; BackwardAccumulates checks the "+=" directly as well.
//
// Shapes: small ones (B=2, T=5, C=8, NH=2, V=11) check every element; wider ones use sizes that are not
// multiples of 16 so the kernels' vector bodies and tails both run, and attention at T = 130 crosses its
// 64-row blocks (the last one partial).
#include "kernels/nn/nn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hetcomm::kernels::nn {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
using Indices = std::vector<size_t>;

constexpr double kFdStep = 1e-5;
constexpr double kRtol = 1e-4;     // relative to each reference element
constexpr double kAtolRel = 1e-4;  // relative to the largest reference element of the tensor

// ---------------------------------------------------------------------------------------------------------
// Helpers: random data, comparison, finite differences.

Vec randomFloats(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> randomIds(size_t n, int limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

DVec toDouble(const Vec& v) { return DVec(v.begin(), v.end()); }

Indices allIndices(size_t n) {
  Indices idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  return idx;
}

Indices sampleIndices(size_t n, size_t k, uint32_t seed) {
  Indices idx = allIndices(n);
  std::shuffle(idx.begin(), idx.end(), std::mt19937(seed));
  idx.resize(std::min(k, n));
  return idx;
}

// Every i in `which`: |got[i] - ref[i]| <= rtol |ref[i]| + atolRel max|ref|. Reports the count and the worst.
void expectClose(const std::string& what, const DVec& got, const DVec& ref, const Indices& which, double rtol = kRtol,
                 double atolRel = kAtolRel) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double maxRef = 0.0;
  for (size_t i : which) maxRef = std::max(maxRef, std::abs(ref[i]));
  size_t failures = 0, worst = which.empty() ? 0 : which[0];
  double worstRatio = 0.0;
  for (size_t i : which) {
    const double tol = rtol * std::abs(ref[i]) + atolRel * maxRef;
    const double err = std::abs(got[i] - ref[i]);
    if (!(err <= tol)) ++failures;  // written so that NaN fails
    const double ratio = tol > 0 ? err / tol : err;
    if (!(ratio <= worstRatio)) {
      worstRatio = ratio;
      worst = i;
    }
  }
  EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << which.size() << " elements out of tolerance; worst ["
                          << worst << "] got " << got[worst] << ", want " << ref[worst] << " (max |want| " << maxRef
                          << ")";
}

void expectClose(const std::string& what, const Vec& got, const DVec& ref, double rtol = kRtol,
                 double atolRel = kAtolRel) {
  expectClose(what, toDouble(got), ref, allIndices(got.size()), rtol, atolRel);
}

// dL/dx[i] for i in `which` by central differences of a double loss; zero elsewhere.
DVec centralDifferences(const Vec& x, const std::function<double(const DVec&)>& loss, const Indices& which) {
  DVec xd = toDouble(x), grad(x.size(), 0.0);
  for (size_t i : which) {
    const double x0 = xd[i];
    xd[i] = x0 + kFdStep;
    const double up = loss(xd);
    xd[i] = x0 - kFdStep;
    const double down = loss(xd);
    xd[i] = x0;
    grad[i] = (up - down) / (2.0 * kFdStep);
  }
  return grad;
}

// What a backward call added to a gradient buffer (after - before), checked against finite differences of
// `loss` with respect to x.
void expectGradient(const std::string& what, const Vec& after, const Vec& before, const Vec& x,
                    const std::function<double(const DVec&)>& loss, const Indices& which) {
  DVec added(after.size());
  for (size_t i = 0; i < after.size(); ++i) added[i] = static_cast<double>(after[i]) - before[i];
  const DVec fd = centralDifferences(x, loss, which);
  double maxFd = 0.0;
  for (size_t i : which) maxFd = std::max(maxFd, std::abs(fd[i]));
  ASSERT_GT(maxFd, 1e-3) << what << ": the check is only meaningful with gradients that are not all ~0";
  expectClose(what, added, fd, which);
}

double dot(const DVec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// Double-precision reference forwards: the definitions, in the plainest loops.

DVec refEncoder(const std::vector<int32_t>& tokens, const DVec& wte, const DVec& wpe, int B, int T, int C) {
  DVec out(static_cast<size_t>(B) * T * C);
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) out[bt * C + c] = wte[tokens[bt] * C + c] + wpe[(bt % T) * C + c];
  return out;
}

// bias empty: none.
DVec refLinear(const DVec& inp, const DVec& weight, const DVec& bias, int N, int C, int OC) {
  DVec out(static_cast<size_t>(N) * OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int c = 0; c < C; ++c) s += inp[n * C + c] * weight[o * C + c];
      out[n * OC + o] = s;
    }
  }
  return out;
}

struct LayernormRef {
  DVec out, mean, rstd;
};
LayernormRef refLayernorm(const DVec& inp, const DVec& weight, const DVec& bias, int N, int C) {
  LayernormRef r{DVec(inp.size()), DVec(N), DVec(N)};
  for (int n = 0; n < N; ++n) {
    double m = 0.0, var = 0.0;
    for (int c = 0; c < C; ++c) m += inp[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) var += (inp[n * C + c] - m) * (inp[n * C + c] - m);
    var /= C;
    const double s = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) r.out[n * C + c] = (inp[n * C + c] - m) * s * weight[c] + bias[c];
    r.mean[n] = m;
    r.rstd[n] = s;
  }
  return r;
}

struct AttentionRef {
  DVec out, att;
};
AttentionRef refAttention(const DVec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  AttentionRef r{DVec(static_cast<size_t>(B) * T * C), DVec(static_cast<size_t>(B) * NH * T * T, 0.0)};
  auto at = [&](int b, int t, int part, int h, int i) { return qkv[(b * T + t) * 3 * C + part * C + h * hs + i]; };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        DVec p(t + 1);
        double maxScore = -1e300, sum = 0.0;
        for (int s = 0; s <= t; ++s) {
          double d = 0.0;
          for (int i = 0; i < hs; ++i) d += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          p[s] = d * scale;
          maxScore = std::max(maxScore, p[s]);
        }
        for (int s = 0; s <= t; ++s) sum += p[s] = std::exp(p[s] - maxScore);
        for (int s = 0; s <= t; ++s) r.att[((b * NH + h) * T + t) * T + s] = p[s] /= sum;
        for (int i = 0; i < hs; ++i) {
          double o = 0.0;
          for (int s = 0; s <= t; ++s) o += p[s] * at(b, s, 2, h, i);
          r.out[(b * T + t) * C + h * hs + i] = o;
        }
      }
    }
  }
  return r;
}

double refGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

struct CrossEntropyRef {
  DVec losses, probs;
};
CrossEntropyRef refCrossEntropy(const DVec& logits, const std::vector<int32_t>& targets, int N, int V) {
  CrossEntropyRef r{DVec(N), DVec(logits.size())};
  for (int n = 0; n < N; ++n) {
    const double m = *std::max_element(logits.begin() + n * V, logits.begin() + (n + 1) * V);
    double sum = 0.0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - m);
    for (int v = 0; v < V; ++v) r.probs[n * V + v] = std::exp(logits[n * V + v] - m) / sum;
    r.losses[n] = -std::log(r.probs[n * V + targets[n]]);  // the definition: -log softmax(target)
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Encoder

void checkEncoder(int B, int T, int C, int V, int maxT, uint32_t seed) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " V=" + std::to_string(V));
  std::vector<int32_t> tokens = randomIds(static_cast<size_t>(B) * T, V, seed);
  tokens.back() = tokens.front();  // a repeated token: its gradient rows must add up
  Vec wte = randomFloats(static_cast<size_t>(V) * C, seed + 1),
      wpe = randomFloats(static_cast<size_t>(maxT) * C, seed + 2);
  Vec out(static_cast<size_t>(B) * T * C);
  ASSERT_TRUE(encoderForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V).ok());
  expectClose("encoder out", out, refEncoder(tokens, toDouble(wte), toDouble(wpe), B, T, C), 1e-6, 0.0);

  const Vec G = randomFloats(out.size(), seed + 3);
  const Vec dwte0 = randomFloats(wte.size(), seed + 4), dwpe0 = randomFloats(wpe.size(), seed + 5);
  Vec dwte = dwte0, dwpe = dwpe0;
  ASSERT_TRUE(encoderBackward(dwte.data(), dwpe.data(), G.data(), tokens.data(), B, T, C, V).ok());
  const DVec wteD = toDouble(wte), wpeD = toDouble(wpe);
  expectGradient(
      "dwte", dwte, dwte0, wte, [&](const DVec& x) { return dot(refEncoder(tokens, x, wpeD, B, T, C), G); },
      allIndices(wte.size()));
  // wpe has maxT > T rows: the unused ones must get nothing (their finite difference is 0).
  expectGradient(
      "dwpe", dwpe, dwpe0, wpe, [&](const DVec& x) { return dot(refEncoder(tokens, wteD, x, B, T, C), G); },
      allIndices(wpe.size()));
}

TEST(NnEncoder, ForwardAndGradients) {
  checkEncoder(2, 5, 8, 11, 7, 10);
  checkEncoder(3, 9, 37, 13, 9, 20);
}

// ---------------------------------------------------------------------------------------------------------
// Linear

void checkLinear(int N, int C, int OC, bool withBias, uint32_t seed) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
               (withBias ? " with bias" : " no bias"));
  const Vec inp = randomFloats(static_cast<size_t>(N) * C, seed),
            weight = randomFloats(static_cast<size_t>(OC) * C, seed + 1);
  const Vec bias = withBias ? randomFloats(OC, seed + 2) : Vec();
  const DVec inpD = toDouble(inp), weightD = toDouble(weight), biasD = toDouble(bias);
  Vec out(static_cast<size_t>(N) * OC, 7.0f);  // garbage the forward must overwrite, bias or not
  linearForward(out.data(), inp.data(), weight.data(), withBias ? bias.data() : nullptr, N, C, OC);
  expectClose("linear out", out, refLinear(inpD, weightD, biasD, N, C, OC), 1e-5, 1e-5);

  const Vec G = randomFloats(out.size(), seed + 3);
  const Vec dinp0 = randomFloats(inp.size(), seed + 4), dweight0 = randomFloats(weight.size(), seed + 5),
            dbias0 = randomFloats(OC, seed + 6);
  Vec dinp = dinp0, dweight = dweight0, dbias = dbias0;
  linearBackward(dinp.data(), dweight.data(), withBias ? dbias.data() : nullptr, G.data(), inp.data(), weight.data(), N,
                 C, OC);
  expectGradient(
      "dinp", dinp, dinp0, inp, [&](const DVec& x) { return dot(refLinear(x, weightD, biasD, N, C, OC), G); },
      allIndices(inp.size()));
  expectGradient(
      "dweight", dweight, dweight0, weight, [&](const DVec& x) { return dot(refLinear(inpD, x, biasD, N, C, OC), G); },
      allIndices(weight.size()));
  if (withBias) {
    expectGradient(
        "dbias", dbias, dbias0, bias, [&](const DVec& x) { return dot(refLinear(inpD, weightD, x, N, C, OC), G); },
        allIndices(OC));
  } else {
    EXPECT_EQ(dbias, dbias0) << "dbias == nullptr: nothing to write";
  }
}

TEST(NnLinear, ForwardAndGradients) {
  checkLinear(10, 8, 24, true, 30);
  checkLinear(10, 8, 24, false, 40);
  checkLinear(7, 37, 19, true, 50);  // non-square, odd sizes: a transposed weight cannot fit by accident
}

// ---------------------------------------------------------------------------------------------------------
// LayerNorm

void checkLayernorm(int N, int C, uint32_t seed) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
  // An offset mean and a non-unit spread, so that mean and rstd matter.
  Vec inp = randomFloats(static_cast<size_t>(N) * C, seed, 2.0f);
  for (float& x : inp) x += 3.0f;
  const Vec weight = randomFloats(C, seed + 1), bias = randomFloats(C, seed + 2);
  const DVec inpD = toDouble(inp), weightD = toDouble(weight), biasD = toDouble(bias);
  Vec out(inp.size()), mean(N), rstd(N);
  layernormForward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  const LayernormRef ref = refLayernorm(inpD, weightD, biasD, N, C);
  expectClose("layernorm out", out, ref.out, 1e-5, 1e-5);
  expectClose("layernorm mean", mean, ref.mean, 1e-6, 0.0);
  expectClose("layernorm rstd", rstd, ref.rstd, 1e-5, 0.0);

  const Vec G = randomFloats(out.size(), seed + 3);
  const Vec dinp0 = randomFloats(inp.size(), seed + 4), dweight0 = randomFloats(C, seed + 5),
            dbias0 = randomFloats(C, seed + 6);
  Vec dinp = dinp0, dweight = dweight0, dbias = dbias0;
  layernormBackward(dinp.data(), dweight.data(), dbias.data(), G.data(), inp.data(), weight.data(), mean.data(),
                    rstd.data(), N, C);
  expectGradient(
      "dinp", dinp, dinp0, inp, [&](const DVec& x) { return dot(refLayernorm(x, weightD, biasD, N, C).out, G); },
      allIndices(inp.size()));
  expectGradient(
      "dweight", dweight, dweight0, weight,
      [&](const DVec& x) { return dot(refLayernorm(inpD, x, biasD, N, C).out, G); }, allIndices(C));
  expectGradient(
      "dbias", dbias, dbias0, bias, [&](const DVec& x) { return dot(refLayernorm(inpD, weightD, x, N, C).out, G); },
      allIndices(C));
}

TEST(NnLayernorm, ForwardAndGradients) {
  checkLayernorm(10, 8, 60);
  checkLayernorm(3, 53, 70);  // three 16-lane bodies and a tail of 5
}

// ---------------------------------------------------------------------------------------------------------
// Attention

void checkAttention(int B, int T, int C, int NH, size_t fdSamples, uint32_t seed) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " NH=" + std::to_string(NH));
  const Vec qkv = randomFloats(static_cast<size_t>(B) * T * 3 * C, seed);
  Vec out(static_cast<size_t>(B) * T * C), att(static_cast<size_t>(B) * NH * T * T, 7.0f);
  attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const AttentionRef ref = refAttention(toDouble(qkv), B, T, C, NH);
  expectClose("attention out", out, ref.out, 1e-5, 1e-5);
  expectClose("attention probabilities", att, ref.att, 1e-5, 1e-6);
  for (int row = 0; row < B * NH * T; ++row) {  // exactly causal: nothing above the diagonal
    const int t = row % T;
    for (int s = t + 1; s < T; ++s)
      ASSERT_EQ(att[static_cast<size_t>(row) * T + s], 0.0f) << "row " << row << " s " << s;
  }

  const Vec G = randomFloats(out.size(), seed + 1);
  const Vec dqkv0 = randomFloats(qkv.size(), seed + 2);
  Vec dqkv = dqkv0, datt(static_cast<size_t>(T) * T, 7.0f);
  attentionBackward(dqkv.data(), datt.data(), G.data(), qkv.data(), att.data(), B, T, C, NH);
  const Indices which = fdSamples == 0 ? allIndices(qkv.size()) : sampleIndices(qkv.size(), fdSamples, seed + 3);
  expectGradient(
      "dqkv", dqkv, dqkv0, qkv, [&](const DVec& x) { return dot(refAttention(x, B, T, C, NH).out, G); }, which);
}

TEST(NnAttention, ForwardAndGradients) { checkAttention(2, 5, 8, 2, 0, 80); }

TEST(NnAttention, ForwardAndGradientsAcrossRowBlocks) {
  checkAttention(1, 130, 32, 2, 160, 90);  // row blocks of 64, 64 and 2; head size 16
}

TEST(NnAttention, Deterministic) {
  const int B = 2, T = 70, C = 24, NH = 3;
  const Vec qkv = randomFloats(static_cast<size_t>(B) * T * 3 * C, 100),
            G = randomFloats(static_cast<size_t>(B) * T * C, 101);
  auto run = [&](Vec& out, Vec& dqkv) {
    Vec att(static_cast<size_t>(B) * NH * T * T), datt(static_cast<size_t>(T) * T);
    out.assign(static_cast<size_t>(B) * T * C, 0.0f);
    dqkv.assign(qkv.size(), 0.0f);
    attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attentionBackward(dqkv.data(), datt.data(), G.data(), qkv.data(), att.data(), B, T, C, NH);
  };
  Vec out1, out2, dqkv1, dqkv2;
  run(out1, dqkv1);
  run(out2, dqkv2);
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(dqkv1, dqkv2);
}

// ---------------------------------------------------------------------------------------------------------
// GELU and residual

TEST(NnGelu, ForwardMatchesReferenceOverItsRange) {
  // A dense grid through the tanh approximation's interesting range and its clamped tails.
  Vec x;
  for (int i = -12000; i <= 12000; ++i) x.push_back(static_cast<float>(i) * 1e-3f);
  Vec out(x.size());
  geluForward(out.data(), x.data(), x.size());
  DVec ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = refGelu(x[i]);
  // atol 1e-6: the approximate tanh has ~1e-7 absolute error, and gelu multiplies it by 0.5 |x| <= 6.
  expectClose("gelu out", out, ref, 1e-5, 1e-6 / 12.0);

  Vec inPlace = x;
  geluForward(inPlace.data(), inPlace.data(), inPlace.size());
  EXPECT_EQ(inPlace, out) << "in place must give the same bits";
}

TEST(NnGelu, Gradients) {
  const size_t n = 1003;
  const Vec x = randomFloats(n, 110, 2.0f), G = randomFloats(n, 111), dinp0 = randomFloats(n, 112);
  Vec dinp = dinp0;
  geluBackward(dinp.data(), x.data(), G.data(), n);
  expectGradient(
      "gelu dinp", dinp, dinp0, x,
      [&](const DVec& xd) {
        double s = 0.0;
        for (size_t i = 0; i < n; ++i) s += refGelu(xd[i]) * G[i];
        return s;
      },
      allIndices(n));
}

TEST(NnResidual, ForwardInAndOutOfPlace) {
  const size_t n = 37;
  const Vec a = randomFloats(n, 120), b = randomFloats(n, 121);
  Vec sum(n);
  for (size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  Vec out(n);
  residualForward(out.data(), a.data(), b.data(), n);
  EXPECT_EQ(out, sum);
  Vec intoA = a;
  residualForward(intoA.data(), intoA.data(), b.data(), n);
  EXPECT_EQ(intoA, sum);
  Vec intoB = b;
  residualForward(intoB.data(), a.data(), intoB.data(), n);
  EXPECT_EQ(intoB, sum);
  Vec twice = a;
  residualForward(twice.data(), twice.data(), twice.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(twice[i], a[i] + a[i]);
}

TEST(NnResidual, Gradients) {
  const size_t n = 37;
  const Vec a = randomFloats(n, 130), b = randomFloats(n, 131), G = randomFloats(n, 132);
  const Vec da0 = randomFloats(n, 133), db0 = randomFloats(n, 134);
  Vec da = da0, db = db0;
  residualBackward(da.data(), db.data(), G.data(), n);
  const DVec bD = toDouble(b), aD = toDouble(a);
  auto loss = [&](const DVec& x, const DVec& y) {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += (x[i] + y[i]) * G[i];
    return s;
  };
  expectGradient(
      "da", da, da0, a, [&](const DVec& x) { return loss(x, bD); }, allIndices(n));
  expectGradient(
      "db", db, db0, b, [&](const DVec& y) { return loss(aD, y); }, allIndices(n));
}

// ---------------------------------------------------------------------------------------------------------
// Cross-entropy

void checkCrossEntropy(int N, int V, float logitScale, uint32_t seed) {
  SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V));
  const Vec logits = randomFloats(static_cast<size_t>(N) * V, seed, logitScale);
  const std::vector<int32_t> targets = randomIds(N, V, seed + 1);
  Vec losses(N), probs(logits.size());
  ASSERT_TRUE(crossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V).ok());
  const CrossEntropyRef ref = refCrossEntropy(toDouble(logits), targets, N, V);
  expectClose("losses", losses, ref.losses, 1e-5, 1e-6);
  expectClose("probs", probs, ref.probs, 1e-5, 1e-6);

  Vec inPlace = logits, inPlaceLosses(N);
  ASSERT_TRUE(crossEntropyForward(inPlaceLosses.data(), inPlace.data(), inPlace.data(), targets.data(), N, V).ok());
  EXPECT_EQ(inPlace, probs) << "softmax in place must give the same bits";
  EXPECT_EQ(inPlaceLosses, losses);

  // The mean loss over N positions: dlossScale = 1/N. The backward writes, so no prefill to subtract.
  const float dlossScale = 1.0f / static_cast<float>(N);
  Vec dlogits(logits.size(), 7.0f);
  ASSERT_TRUE(crossEntropyBackward(dlogits.data(), probs.data(), targets.data(), dlossScale, N, V).ok());
  expectGradient(
      "dlogits", dlogits, Vec(logits.size(), 0.0f), logits,
      [&](const DVec& x) {
        const DVec l = refCrossEntropy(x, targets, N, V).losses;
        return std::accumulate(l.begin(), l.end(), 0.0) / N;
      },
      allIndices(logits.size()));

  Vec dInPlace = probs;
  ASSERT_TRUE(crossEntropyBackward(dInPlace.data(), dInPlace.data(), targets.data(), dlossScale, N, V).ok());
  EXPECT_EQ(dInPlace, dlogits) << "backward in place must give the same bits";
}

TEST(NnCrossEntropy, LossProbsAndGradients) {
  checkCrossEntropy(10, 11, 1.0f, 140);
  checkCrossEntropy(3, 67, 3.0f, 150);  // four 16-lane bodies and a tail of 3; peaked distributions
}

TEST(NnCrossEntropy, StableForLargeLogits) {
  // Logits around +-1000 overflow a naive exp; the target's probability (e^-100) is far below what the
  // softmax keeps, yet the loss must come out as 100 - log(1 + ...) rather than inf.
  const int N = 2, V = 5;
  const Vec logits = {1000.0f, 999.0f, 998.0f, 900.0f, 1000.0f, -1000.0f, -1001.0f, -1100.0f, -1000.5f, -999.0f};
  const std::vector<int32_t> targets = {3, 2};
  Vec losses(N), probs(logits.size());
  ASSERT_TRUE(crossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V).ok());
  const CrossEntropyRef ref = refCrossEntropy(toDouble(logits), targets, N, V);
  for (int n = 0; n < N; ++n) {
    EXPECT_TRUE(std::isfinite(losses[n]));
    EXPECT_NEAR(losses[n], ref.losses[n], 1e-4 * ref.losses[n]) << "row " << n;
  }
  EXPECT_GT(losses[0], 99.0f);
}

// ---------------------------------------------------------------------------------------------------------
// Accumulation: every backward adds into its gradient buffers, so two calls give twice one call.

TEST(NnBackward, Accumulates) {
  auto expectDoubled = [](const Vec& once, const Vec& twice, const char* what) {
    DVec want(once.size());
    for (size_t i = 0; i < once.size(); ++i) want[i] = 2.0 * once[i];
    expectClose(std::string(what) + " after two calls", twice, want, 1e-6, 1e-6);
  };
  // Runs `backward` on zeroed buffers once and twice, and checks each buffer doubled.
  auto check = [&](std::vector<Vec*> grads, const std::function<void()>& backward, const char* what) {
    for (Vec* g : grads) std::fill(g->begin(), g->end(), 0.0f);
    backward();
    std::vector<Vec> once;
    for (Vec* g : grads) once.push_back(*g);
    for (Vec* g : grads) std::fill(g->begin(), g->end(), 0.0f);
    backward();
    backward();
    for (size_t k = 0; k < grads.size(); ++k) expectDoubled(once[k], *grads[k], what);
  };

  const int B = 2, T = 5, C = 8, NH = 2, V = 11, N = B * T, OC = 12;
  const std::vector<int32_t> tokens = randomIds(N, V, 160);
  const Vec dout = randomFloats(static_cast<size_t>(N) * C, 161),
            doutOC = randomFloats(static_cast<size_t>(N) * OC, 162);
  const Vec inp = randomFloats(static_cast<size_t>(N) * C, 163),
            weightOC = randomFloats(static_cast<size_t>(OC) * C, 164);
  const Vec w = randomFloats(C, 165), bias = randomFloats(C, 166);

  Vec dwte(static_cast<size_t>(V) * C), dwpe(static_cast<size_t>(T) * C);
  check(
      {&dwte, &dwpe},
      [&] { ASSERT_TRUE(encoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V).ok()); },
      "encoder");

  Vec dinp(inp.size()), dweight(weightOC.size()), dbias(OC);
  check(
      {&dinp, &dweight, &dbias},
      [&] {
        linearBackward(dinp.data(), dweight.data(), dbias.data(), doutOC.data(), inp.data(), weightOC.data(), N, C, OC);
      },
      "linear");

  Vec out(inp.size()), mean(N), rstd(N), dw(C), db(C);
  layernormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), bias.data(), N, C);
  check(
      {&dinp, &dw, &db},
      [&] {
        layernormBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
      },
      "layernorm");

  const Vec qkv = randomFloats(static_cast<size_t>(N) * 3 * C, 167);
  Vec att(static_cast<size_t>(B) * NH * T * T), datt(static_cast<size_t>(T) * T), dqkv(qkv.size());
  attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  check(
      {&dqkv}, [&] { attentionBackward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH); },
      "attention");

  check(
      {&dinp}, [&] { geluBackward(dinp.data(), inp.data(), dout.data(), inp.size()); }, "gelu");

  Vec da(inp.size()), db2(inp.size());
  check(
      {&da, &db2}, [&] { residualBackward(da.data(), db2.data(), dout.data(), inp.size()); }, "residual");
}

// ---------------------------------------------------------------------------------------------------------
// AdamW and clipping helpers

TEST(NnAdamw, MatchesScalarReference) {
  const size_t n = 37;
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  for (float weightDecay : {0.0f, 0.1f}) {
    SCOPED_TRACE("weight decay " + std::to_string(weightDecay));
    Vec params = randomFloats(n, 170), m(n, 0.0f), v(n, 0.0f);
    DVec p = toDouble(params), mRef(n, 0.0), vRef(n, 0.0);
    for (int t = 1; t <= 5; ++t) {
      const Vec grads = randomFloats(n, 171 + t);
      adamwStep(params.data(), grads.data(), m.data(), v.data(), n, lr, beta1, beta2, eps, weightDecay, t);
      for (size_t i = 0; i < n; ++i) {
        mRef[i] = beta1 * mRef[i] + (1.0 - beta1) * grads[i];
        vRef[i] = beta2 * vRef[i] + (1.0 - beta2) * static_cast<double>(grads[i]) * grads[i];
        const double mhat = mRef[i] / (1.0 - std::pow(static_cast<double>(beta1), t));
        const double vhat = vRef[i] / (1.0 - std::pow(static_cast<double>(beta2), t));
        p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weightDecay * p[i]);
      }
      expectClose("m at step " + std::to_string(t), m, mRef, 1e-5, 1e-6);
      expectClose("v at step " + std::to_string(t), v, vRef, 1e-5, 1e-6);
      // Float rounding of the parameters is ~1e-7 per step, while any mistake in the update formula moves a
      // parameter by O(lr) = 1e-2: an absolute tolerance of 1e-6 max|param| separates the two.
      expectClose("params at step " + std::to_string(t), params, p, 0.0, 1e-6);
    }
  }
}

TEST(NnAdamw, FirstStepMovesEachParameterByLrTimesSign) {
  // At t = 1 bias correction makes mhat = g and vhat = g^2, so the step is lr * (sign(g) + wd * param), up to
  // eps. Without bias correction m / sqrt(v) would be 0.1 g / sqrt(0.001 g^2), a step of about 3.2 lr.
  const Vec grads = {0.5f, -2.0f, 1e-3f};
  Vec params = {1.0f, 1.0f, -1.0f}, m(3, 0.0f), v(3, 0.0f);
  const float lr = 0.01f, wd = 0.1f;
  adamwStep(params.data(), grads.data(), m.data(), v.data(), 3, lr, 0.9f, 0.999f, 1e-8f, wd, 1);
  EXPECT_NEAR(params[0], 1.0f - lr * (1.0f + wd * 1.0f), 1e-6f);
  EXPECT_NEAR(params[1], 1.0f - lr * (-1.0f + wd * 1.0f), 1e-6f);
  EXPECT_NEAR(params[2], -1.0f - lr * (1.0f + wd * -1.0f), 1e-5f);
}

TEST(NnClipping, GlobalNormSquaredAndScale) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1003}}) {
    Vec g = randomFloats(n, 180);
    double want = 0.0;
    for (float x : g) want += static_cast<double>(x) * x;  // each square is exact in double
    EXPECT_NEAR(globalNormSquared(g.data(), n), want, 1e-12 * want) << "n " << n;
    const Vec before = g;
    scale(g.data(), n, 0.25f);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(g[i], before[i] * 0.25f);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Bad input: ids out of range are reported with position and value, and nothing is written.

TEST(NnErrors, EncoderRejectsOutOfRangeTokens) {
  const int B = 2, T = 4, C = 3, V = 5;
  const Vec wte = randomFloats(static_cast<size_t>(V) * C, 190), wpe = randomFloats(static_cast<size_t>(T) * C, 191);
  const Vec dout = randomFloats(static_cast<size_t>(B) * T * C, 192);
  struct Case {
    int position;
    int32_t value;
  };
  for (Case bad : {Case{6, V}, Case{3, -2}, Case{0, 1 << 30}}) {
    std::vector<int32_t> tokens(B * T, 1);
    tokens[bad.position] = bad.value;
    Vec out(static_cast<size_t>(B) * T * C, 42.0f);
    const IdCheck check = encoderForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
    EXPECT_FALSE(check.ok());
    EXPECT_STREQ(check.what, "token");
    EXPECT_EQ(check.position, bad.position);
    EXPECT_EQ(check.value, bad.value);
    EXPECT_EQ(check.limit, V);
    EXPECT_EQ(check.message(), "token " + std::to_string(bad.value) + " at position " + std::to_string(bad.position) +
                                   " (row-major over [B,T]) is outside [0, 5)");
    EXPECT_EQ(out, Vec(out.size(), 42.0f)) << "nothing written on failure";

    Vec dwte(wte.size(), 1.0f), dwpe(wpe.size(), 1.0f);
    const IdCheck back = encoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);
    EXPECT_EQ(back.position, bad.position);
    EXPECT_EQ(back.value, bad.value);
    EXPECT_EQ(dwte, Vec(wte.size(), 1.0f));
    EXPECT_EQ(dwpe, Vec(wpe.size(), 1.0f));
  }
  std::vector<int32_t> good(B * T, V - 1);
  Vec out(static_cast<size_t>(B) * T * C);
  const IdCheck ok = encoderForward(out.data(), good.data(), wte.data(), wpe.data(), B, T, C, V);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
}

TEST(NnErrors, CrossEntropyRejectsOutOfRangeTargets) {
  const int N = 4, V = 11;
  const Vec logits = randomFloats(static_cast<size_t>(N) * V, 200);
  std::vector<int32_t> targets = {0, 10, 11, -1};  // the first bad one is at position 2
  Vec losses(N, 42.0f), probs(logits.size(), 42.0f);
  const IdCheck check = crossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  EXPECT_FALSE(check.ok());
  EXPECT_EQ(check.message(), "target 11 at position 2 (row-major over [B,T]) is outside [0, 11)");
  EXPECT_EQ(losses, Vec(N, 42.0f));
  EXPECT_EQ(probs, Vec(logits.size(), 42.0f));

  targets[2] = 3;
  Vec dlogits(logits.size(), 42.0f);
  const IdCheck back = crossEntropyBackward(dlogits.data(), probs.data(), targets.data(), 1.0f, N, V);
  EXPECT_STREQ(back.what, "target");
  EXPECT_EQ(back.position, 3);
  EXPECT_EQ(back.value, -1);
  EXPECT_EQ(dlogits, Vec(logits.size(), 42.0f));
}

}  // namespace
}  // namespace hetcomm::kernels::nn
