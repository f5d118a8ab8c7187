// reduce_bench.cc: Google Benchmark of kernels::reduce() for the datatypes and ops collectives use most, at
// sizes from L1-resident (4 KiB per buffer) to DRAM-bound (64 MiB per buffer). Out of place (dst, a, b
// distinct), the shape of a reduce-on-receive. bytes_per_second counts 3 buffers' bytes per element (2 reads,
// 1 write), so at large sizes it compares directly with the machine's memory bandwidth.
//
//   build/bin/kernels_bench --benchmark_filter='float/sum' --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/reduce.h"

namespace {

using hetcomm::kernels::DataType;
using hetcomm::kernels::RedOp;
using hetcomm::kernels::sizeOf;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

Buffer allocate(size_t bytes) {
  // 64-byte aligned, as a transport's registered buffers are; rounded up because aligned_alloc requires it.
  size_t rounded = (bytes + 63) / 64 * 64;
  return Buffer(static_cast<std::byte*>(std::aligned_alloc(64, rounded)));
}

// Ordinary values: no NaN, inf or subnormal inputs (which are slow on some CPUs and would measure that
// instead), and sums that stay in range.
void fill(std::byte* buf, size_t count, DataType type, int seed) {
  for (size_t i = 0; i < count; ++i) {
    float v = 1.0f + static_cast<float>((i * 7 + seed) % 64) / 64.0f;
    switch (type) {
      case DataType::kFloat16:
        reinterpret_cast<uint16_t*>(buf)[i] = hetcomm::kernels::floatToHalf(v);
        break;
      case DataType::kBfloat16:
        reinterpret_cast<uint16_t*>(buf)[i] = hetcomm::kernels::floatToBfloat16(v);
        break;
      case DataType::kFloat32:
        reinterpret_cast<float*>(buf)[i] = v;
        break;
      case DataType::kFloat64:
        reinterpret_cast<double*>(buf)[i] = v;
        break;
      case DataType::kInt32:
        reinterpret_cast<int32_t*>(buf)[i] = static_cast<int32_t>(i * 7 + seed);
        break;
      default:
        std::memset(buf + i * sizeOf(type), seed, sizeOf(type));
        break;
    }
  }
}

// state.range(0) is the size of each buffer in bytes.
void benchReduce(benchmark::State& state, DataType type, RedOp op) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / sizeOf(type);
  Buffer a = allocate(bytes), b = allocate(bytes), dst = allocate(bytes);
  fill(a.get(), count, type, 1);
  fill(b.get(), count, type, 2);
  std::memset(dst.get(), 0, bytes);  // fault the pages in before timing
  for (auto _ : state) {
    hetcomm::kernels::reduce(dst.get(), a.get(), b.get(), count, type, op);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(count * sizeOf(type) * 3));
}

void registerAll() {
  struct Case {
    DataType type;
    RedOp op;
  };
  const Case cases[] = {
      {DataType::kFloat32, RedOp::kSum}, {DataType::kFloat16, RedOp::kSum}, {DataType::kBfloat16, RedOp::kSum},
      {DataType::kInt32, RedOp::kSum},   {DataType::kFloat64, RedOp::kSum}, {DataType::kFloat32, RedOp::kMax},
  };
  for (const Case& c : cases) {
    std::string name = std::string("reduce/") + hetcomm::kernels::name(c.type) + "/" + hetcomm::kernels::name(c.op);
    benchmark::RegisterBenchmark(name.c_str(), benchReduce, c.type, c.op)
        ->Arg(4 << 10)
        ->Arg(256 << 10)
        ->Arg(4 << 20)
        ->Arg(64 << 20);
  }
}

}  // namespace

int main(int argc, char** argv) {
  registerAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
