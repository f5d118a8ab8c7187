// reduce_cuda.h: reduce.h's kernels on device memory (kernels/cuda/reduce.cu, in libhetcomm-cuda.so where CUDA is
// found). Asynchronous on stream (a cudaStream_t; NULL is the legacy default stream). Return a cudaError_t: 0 when
// the kernel was queued. type and op are kernels::DataType and kernels::RedOp codes.
#pragma once

#include <cstddef>

extern "C" {
int hetcommCudaReduce(void* dst, const void* a, const void* b, size_t count, int type, int op, void* stream);
int hetcommCudaDivideBy(void* dst, size_t count, int type, int n, void* stream);
}
