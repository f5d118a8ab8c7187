// datatype.cc: printable names of datatypes and reduction operators, spelled as nccl-tests prints them so
// perf tables and log lines read the same as NCCL's.
#include "kernels/datatype.h"

namespace hetcomm::kernels {

const char* name(DataType t) {
  switch (t) {
    case DataType::kInt8:
      return "int8";
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kUint32:
      return "uint32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUint64:
      return "uint64";
    case DataType::kFloat16:
      return "half";
    case DataType::kFloat32:
      return "float";
    case DataType::kFloat64:
      return "double";
    case DataType::kBfloat16:
      return "bfloat16";
  }
  // Not an invariant failure: callers print names while reporting a bad value from the user.
  return "unknown";
}

const char* name(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return "sum";
    case RedOp::kProd:
      return "prod";
    case RedOp::kMax:
      return "max";
    case RedOp::kMin:
      return "min";
    case RedOp::kAvg:
      return "avg";
  }
  return "unknown";
}

}  // namespace hetcomm::kernels
