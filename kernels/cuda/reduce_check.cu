// reduce_check.cu: a GPU test. Every datatype x op of the device kernels (reduce_cuda.h) against the host kernels
// (reduce.h), bit for bit, on values that exercise wrap-around, negative numbers, rounding of 16-bit floats and NaN;
// then Avg's last step (divideBy). Prints one line per failure and a total; exit 0 when all agree.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/reduce_cuda.h"
#include "kernels/reduce.h"

using hetcomm::kernels::DataType;
using hetcomm::kernels::RedOp;

namespace {

size_t sizeOf(int t) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return s[t];
}

// Random bytes, except that floats get ordinary values (and a few NaNs) rather than random bit patterns.
void fill(std::vector<unsigned char>& b, int t, size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> val(-1000, 1000);
  for (size_t i = 0; i < n; ++i) {
    double v = (i % 97 == 5) ? NAN : val(rng);
    switch (t) {
      case 6: { uint16_t h = hetcomm::kernels::floatToHalf(static_cast<float>(v)); std::memcpy(&b[i * 2], &h, 2); break; }
      case 7: { float f = static_cast<float>(v); std::memcpy(&b[i * 4], &f, 4); break; }
      case 8: std::memcpy(&b[i * 8], &v, 8); break;
      case 9: { uint16_t h = hetcomm::kernels::floatToBfloat16(static_cast<float>(v)); std::memcpy(&b[i * 2], &h, 2); break; }
      default:
        for (size_t k = 0; k < sizeOf(t); ++k) b[i * sizeOf(t) + k] = static_cast<unsigned char>(rng());
    }
  }
}

#define CK(call)                                                              \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));        \
      return 2;                                                               \
    }                                                                         \
  } while (0)

}  // namespace

int main() {
  const char* types[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bf16"};
  const char* ops[] = {"sum", "prod", "max", "min", "avg"};
  const size_t n = 1000003;
  std::mt19937_64 rng(42);
  int passed = 0, failed = 0;
  void *da, *db, *dd;
  CK(cudaMalloc(&da, n * 8));
  CK(cudaMalloc(&db, n * 8));
  CK(cudaMalloc(&dd, n * 8));
  for (int t = 0; t < 10; ++t) {
    const size_t bytes = n * sizeOf(t);
    std::vector<unsigned char> a(bytes), b(bytes), want(bytes), got(bytes);
    fill(a, t, n, rng);
    fill(b, t, n, rng);
    CK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
    for (int op = 0; op < 5; ++op) {
      hetcomm::kernels::reduce(want.data(), a.data(), b.data(), n, static_cast<DataType>(t), static_cast<RedOp>(op));
      CK(static_cast<cudaError_t>(hetcommCudaReduce(dd, da, db, n, t, op, nullptr)));
      if (op == 4) {  // Avg's last step, as over 3 ranks
        hetcomm::kernels::divideBy(want.data(), n, static_cast<DataType>(t), 3);
        CK(static_cast<cudaError_t>(hetcommCudaDivideBy(dd, n, t, 3, nullptr)));
      }
      CK(cudaMemcpy(got.data(), dd, bytes, cudaMemcpyDeviceToHost));
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < n; ++i)
        if (std::memcmp(&got[i * sizeOf(t)], &want[i * sizeOf(t)], sizeOf(t)) != 0 && bad++ == 0) first = i;
      if (bad) {
        ++failed;
        std::printf("FAILED %s %s: %zu of %zu elements differ from the host kernel (first at %zu)\n", types[t], ops[op],
                    bad, n, first);
      } else {
        ++passed;
      }
    }
  }
  std::printf("cuda_reduce_check: %d passed, %d failed (datatype x op, %zu elements each)\n", passed, failed, n);
  return failed == 0 ? 0 : 1;
}
