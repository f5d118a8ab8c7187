// reduce.h: element-wise reduction kernels for every datatype x op on host memory, vectorised
// (function multi-versioning picks AVX-512, AVX2 or baseline at load time).
//
// float16 and bfloat16 are converted to float32, combined, and rounded back (round to nearest even) once per
// call, so a chain of reductions rounds once per step as NCCL does. Integer arithmetic wraps (two's complement),
// for signed types too, so every rank computes the same bits. Avg reduces as Sum; the last step divides.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/datatype.h"

namespace hetcomm::kernels {

// dst[i] = op(a[i], b[i]) for i < count. dst may be the same pointer as a or b (or both); no other overlap.
// Max and Min give NaN when either input is NaN. Stateless and non-blocking: any thread may call it.
// count == 0 touches nothing (the pointers may be null). An invalid type or op is a caller bug (HC_CHECK).
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op);

// dst[i] = dst[i] / n: the final step of Avg. Integers truncate toward zero; n >= 1.
void divideBy(void* dst, size_t count, DataType type, int n);

// IEEE binary16 and bfloat16 conversions (round to nearest even; NaN stays NaN, made quiet with its payload
// kept, as F16C does). reduce() on float16 uses F16C where the CPU has it (HETCOMM_KERNEL_F16C=0: never),
// and these otherwise; both give the same bits.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace hetcomm::kernels
