// datatype.h: element types and reduction operators as the lower layers see them. Numeric values equal
// hetcommDataType_t / hetcommRedOp_t so the C boundary converts with a range check and a cast.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hetcomm::kernels {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};
constexpr int kNumDataTypes = 10;

enum class RedOp : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
constexpr int kNumRedOps = 5;

constexpr bool isValid(DataType t) { return static_cast<int>(t) < kNumDataTypes; }
constexpr bool isValid(RedOp op) { return static_cast<int>(op) < kNumRedOps; }
constexpr bool isFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kBfloat16;
}

constexpr size_t sizeOf(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

// nccl-tests' names: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16.
const char* name(DataType t);
// sum prod max min avg.
const char* name(RedOp op);

}  // namespace hetcomm::kernels
