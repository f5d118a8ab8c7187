// nn_bench.cc: Google Benchmark of the trainer's tensor math (kernels/nn/) at the trainer's benchmark size
// (B=8, T=256, C=256, NH=4: N = B*T = 2048 rows), forward and backward separately and together, plus raw
// cblas_sgemm GFLOP/s at square and at the linear layers' shapes, the ceiling the layers are built on.
//
//   OPENBLAS_NUM_THREADS=1 build/bin/nn_bench --benchmark_min_time=0.5
//
// Counters: "FLOP/s" for sgemm and linear layers counts 2*M*N*K per product. For attention,
// "denseFLOP/s" counts the full T x T products (forward 4*B*NH*T*T*hs, backward 8*B*NH*T*T*hs), the work a
// non-causal implementation such as PyTorch's q @ k^T then masked_fill does; attention.cc skips most of the
// masked triangle, so this is a speed figure to compare, not the FLOPs actually performed.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/nn/nn.h"

namespace {

namespace nn = hetcomm::kernels::nn;

constexpr int kB = 8, kT = 256, kC = 256, kNH = 4, kN = kB * kT;

std::vector<float> randomVector(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void setFlops(benchmark::State& state, const char* name, double flopsPerIteration) {
  state.counters[name] =
      benchmark::Counter(flopsPerIteration, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// ---------------------------------------------------------------------------------------------------------
// sgemm: C (M,N) = A (M,K) @ B (K,N), row-major, no transposes.
void BM_Sgemm(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  std::vector<float> a = randomVector(static_cast<size_t>(M) * K, 1.0f, 1);
  std::vector<float> b = randomVector(static_cast<size_t>(K) * N, 1.0f, 2);
  std::vector<float> c(static_cast<size_t>(M) * N);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    benchmark::ClobberMemory();
  }
  setFlops(state, "FLOP/s", 2.0 * M * N * K);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K"})
    ->Args({256, 256, 256})
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->Args({kN, 3 * kC, kC})    // qkv projection
    ->Args({kN, 4 * kC, kC})    // MLP up
    ->Args({kN, kC, 4 * kC})    // MLP down
    ->Args({kT, kT, kC / kNH})  // one head's q k^T, unmasked
    ->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------------------------
// Linear layer (N, C) -> (N, OC); range(2): 0 forward, 1 backward, 2 both.
void BM_Linear(benchmark::State& state) {
  const int C = static_cast<int>(state.range(0)), OC = static_cast<int>(state.range(1));
  const int64_t mode = state.range(2);
  std::vector<float> inp = randomVector(static_cast<size_t>(kN) * C, 1.0f, 1);
  std::vector<float> weight = randomVector(static_cast<size_t>(OC) * C, 0.02f, 2);
  std::vector<float> bias = randomVector(OC, 0.02f, 3);
  std::vector<float> out(static_cast<size_t>(kN) * OC), dout = randomVector(static_cast<size_t>(kN) * OC, 1.0f, 4);
  std::vector<float> dinp(inp.size()), dweight(weight.size()), dbias(bias.size());
  for (auto _ : state) {
    if (mode != 1) nn::linearForward(out.data(), inp.data(), weight.data(), bias.data(), kN, C, OC);
    if (mode != 0)
      nn::linearBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), kN, C, OC);
    benchmark::ClobberMemory();
  }
  const double product = 2.0 * kN * C * OC;
  setFlops(state, "FLOP/s", mode == 0 ? product : (mode == 1 ? 2 * product : 3 * product));
}
BENCHMARK(BM_Linear)
    ->ArgNames({"C", "OC", "fwd0_bwd1_both2"})
    ->ArgsProduct({{kC}, {3 * kC, kC, 4 * kC}, {0, 1, 2}})
    ->Args({4 * kC, kC, 0})
    ->Args({4 * kC, kC, 1})
    ->Args({4 * kC, kC, 2})
    ->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------------------------
// Attention at (B, T, C, NH) = (8, 256, 256, 4); range(0): 0 forward, 1 backward, 2 both.
void BM_Attention(benchmark::State& state) {
  const int64_t mode = state.range(0);
  const size_t qkvSize = static_cast<size_t>(kN) * 3 * kC, outSize = static_cast<size_t>(kN) * kC;
  std::vector<float> qkv = randomVector(qkvSize, 1.0f, 1), dout = randomVector(outSize, 1.0f, 2);
  std::vector<float> out(outSize), att(static_cast<size_t>(kB) * kNH * kT * kT), dqkv(qkvSize);
  std::vector<float> datt(static_cast<size_t>(kT) * kT);
  nn::attentionForward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH);  // att for backward-only runs
  for (auto _ : state) {
    if (mode != 1) nn::attentionForward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH);
    if (mode != 0)
      nn::attentionBackward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), kB, kT, kC, kNH);
    benchmark::ClobberMemory();
  }
  const double forward = 4.0 * kB * kNH * kT * kT * (kC / kNH);
  setFlops(state, "denseFLOP/s", mode == 0 ? forward : (mode == 1 ? 2 * forward : 3 * forward));
}
BENCHMARK(BM_Attention)->ArgName("fwd0_bwd1_both2")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------------------------
// The memory-bound layers, forward + backward, at the sizes one GPT block sees.
void BM_LayernormForwardBackward(benchmark::State& state) {
  const size_t n = static_cast<size_t>(kN) * kC;
  std::vector<float> inp = randomVector(n, 1.0f, 1), dout = randomVector(n, 1.0f, 2);
  std::vector<float> weight = randomVector(kC, 1.0f, 3), bias = randomVector(kC, 0.1f, 4);
  std::vector<float> out(n), dinp(n), dweight(kC), dbias(kC), mean(kN), rstd(kN);
  for (auto _ : state) {
    nn::layernormForward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), kN, kC);
    nn::layernormBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                          mean.data(), rstd.data(), kN, kC);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_LayernormForwardBackward)->Unit(benchmark::kMicrosecond);

void BM_GeluForwardBackward(benchmark::State& state) {
  const size_t n = static_cast<size_t>(kN) * 4 * kC;
  std::vector<float> inp = randomVector(n, 1.0f, 1), dout = randomVector(n, 1.0f, 2), out(n), dinp(n);
  for (auto _ : state) {
    nn::geluForward(out.data(), inp.data(), n);
    nn::geluBackward(dinp.data(), inp.data(), dout.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_GeluForwardBackward)->Unit(benchmark::kMicrosecond);

// Softmax + cross-entropy over GPT-2's vocabulary for 256 rows (a 51 MB logits tensor; the full 2048 rows
// would take 412 MB, and the time scales with rows).
void BM_CrossEntropyForwardBackward(benchmark::State& state) {
  const int N = 256, V = 50257;
  const size_t n = static_cast<size_t>(N) * V;
  std::vector<float> logits = randomVector(n, 2.0f, 1), probs(n), losses(N);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 7919) % V;
  for (auto _ : state) {
    if (!nn::crossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V).ok() ||
        !nn::crossEntropyBackward(probs.data(), probs.data(), targets.data(), 1.0f / N, N, V).ok())
      throw std::logic_error("targets out of range");
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_CrossEntropyForwardBackward)->Unit(benchmark::kMicrosecond);

// AdamW over 4M parameters, about the size of a small GPT's parameter shard.
void BM_Adamw(benchmark::State& state) {
  const size_t n = size_t{1} << 22;
  std::vector<float> params = randomVector(n, 0.02f, 1), grads = randomVector(n, 1e-3f, 2), m(n), v(n);
  int t = 0;
  for (auto _ : state) {
    nn::adamwStep(params.data(), grads.data(), m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_Adamw)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
