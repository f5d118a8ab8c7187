// perf_data.h: verifiable data for the perf tests, host side (nccl-tests' "verifiable" idea): a deterministic
// input generator, the expected output computed in O(1) per element, and the element-wise check.
//
// It is not a reference implementation of the collectives: expected values come from closed forms over the
// generator, never from running a reduction, so a check costs O(1) per element whatever the number of ranks.
//
// Why results are exact in any reduction order (the generator's contract):
//   * every input is a small integer (|v| <= 24 for reductions) that every datatype represents exactly;
//   * sum / avg: rank r holds ((r + h(i)) mod 5) - c, with c = 1 for signed and float types (-1..3) and 0 for
//     unsigned ones (0..4), and one rank per element adds a bonus in [0, 7]. Any partial sum over any subset of
//     n ranks lies in [-ceil(n/5), 6 ceil(n/5) + 7] (signed), so it is an integer that half (n <= 1700) and
//     bfloat16 (n <= 200) represent exactly: no partial sum ever rounds, whatever the order. Integer types may
//     wrap: two's complement addition is associative modulo 2^bits, so the expected value is the int64 total
//     truncated to the type, whatever the order. The total over all ranks has a closed form (whole cycles of 5
//     ranks add 10 - 5c), so the check costs O(1) per element;
//   * prod: values in {1, 2} (times -1 on up to 3 ranks for signed and float types); at most 6 ranks hold a 2, so
//     every partial product is +-2^k with k <= 6: exact in every type, no wrap even in int8;
//   * min / max: one rank holds the extreme e(i) in [-8, 8] ([4, 20] unsigned), the others e(i) -+ 1..4;
//   * avg: the library sums, then divides once. Integers truncate the (wrapped) sum toward zero; float types are
//     compared with a tolerance (see countWrong) because sum / n is rounded.
// Data-movement collectives (broadcast, allgather, alltoall, sendrecv) use a wider hashed value per (rank, index),
// still exactly representable, so misplaced blocks are caught.
#pragma once

#include <hetcomm/hetcomm.h>

#include <cstddef>
#include <cstdint>

namespace hetcomm::perf {

// ---- datatypes and ops ----
size_t typeSize(hetcommDataType_t type);
// nccl-tests' names: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16.
const char* typeName(hetcommDataType_t type);
// sum prod max min avg.
const char* opName(hetcommRedOp_t op);

// IEEE binary16 and bfloat16 <-> float32, round to nearest even; NaN stays NaN. Local to perf on purpose: perf
// uses only the public API, never the library's kernels.
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBfloat16(float f);
float bfloat16ToFloat(uint16_t b);

// ---- generator ----
// Everything that decides the values of one checked run. All ranks must use the same spec (seed included).
struct DataSpec {
  hetcommDataType_t type;
  hetcommRedOp_t op;  // ignored unless reduces
  bool reduces;       // reduction collective (reduction generator) or data movement (hashed generator)
  int nranks;
  uint64_t seed;
};

// The value rank `rank` puts at element `index` of its send buffer, as an exact integer.
int64_t inputValue(const DataSpec& spec, int rank, size_t index);

// The reduction over all ranks of send element `index`, before rounding to the type: the int64 total for sum and
// avg (avg divides later, per type), the exact result for prod, min and max.
int64_t reducedValue(const DataSpec& spec, size_t index);

// Where element k of a rank's receive buffer comes from: rank `rank`'s send element `index`, or with
// rank == kAllRanks the reduction over all ranks of send element `index`.
inline constexpr int kAllRanks = -1;
struct Source {
  int rank;
  size_t index;
};

// What a descriptor needs to say where an element comes from.
struct Layout {
  int rank;  // this rank
  int nranks;
  int root;      // rooted collectives; -1 otherwise
  size_t count;  // the count argument of the call (per-rank count for allgather, reduce-scatter, alltoall)
};
using SourceFn = Source (*)(size_t k, const Layout& layout);

// Writes inputValue(spec, rank, i) for i < count into buf (count elements of spec.type).
void fillInput(const DataSpec& spec, int rank, void* buf, size_t count);

// Fills count elements with a byte pattern that is never an expected value of a reduction (0xA5 bytes: not an
// integer for float types) so that elements a collective forgot to write are counted wrong.
void fillGarbage(hetcommDataType_t type, void* buf, size_t count);

// Counts the elements of buf (count elements of spec.type) that differ from what source(k, layout) says they
// should hold. Integer types compare bits; float types compare values; avg on float types allows
// max(2 ulp, 1e-2 relative for half/bfloat16), with a floor of n eps (1 eps for 16-bit types) for sums near zero.
int64_t countWrong(const DataSpec& spec, const void* buf, size_t count, SourceFn source, const Layout& layout);

}  // namespace hetcomm::perf
