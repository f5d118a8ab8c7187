// case_runner.h: one collective call run on n simulated ranks (tests/support/sim_transport.h) by the real planners
// and executor, checked bit for bit against a serial reference. Inputs are small integers, so results are exact in
// any reduction order (nccl-tests' trick).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "kernels/reduce.h"
#include "tests/support/sim_transport.h"

namespace hetcomm::coll::test {

using kernels::DataType;
using kernels::RedOp;

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
                                  DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kFloat32,
                                  DataType::kFloat64, DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

inline void setElem(std::byte* base, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kInt8: reinterpret_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: reinterpret_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: reinterpret_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DataType::kUint32: reinterpret_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: reinterpret_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint64: reinterpret_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case DataType::kFloat16: reinterpret_cast<uint16_t*>(base)[i] = kernels::floatToHalf(static_cast<float>(v)); break;
    case DataType::kFloat32: reinterpret_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: reinterpret_cast<double*>(base)[i] = v; break;
    case DataType::kBfloat16:
      reinterpret_cast<uint16_t*>(base)[i] = kernels::floatToBfloat16(static_cast<float>(v));
      break;
  }
}

// Small values keep every result exact: sums of [-2, 2] (or [0, 4]) and products of 1s and 2s.
inline double inputValue(int rank, size_t i, DataType t, RedOp op) {
  bool isUnsigned = t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
  if (op == RedOp::kProd) return ((rank + 3 * i) % 5 == 0) ? 2 : 1;
  int v = static_cast<int>((rank * 7 + i * 13) % 5);
  return isUnsigned ? v : v - 2;
}

using Buffer = std::vector<std::byte>;

struct Case {
  CollKind kind;
  int n;
  size_t count;
  DataType dtype;
  RedOp op;
  int root;
  bool inPlace;
};

inline std::string describe(const Case& c) {
  return format("%s n=%d count=%zu %s %s root=%d %s", name(c.kind), c.n, c.count, kernels::name(c.dtype),
                kernels::name(c.op), c.root, c.inPlace ? "in-place" : "out-of-place");
}

// Folds the ranks' inputs in rank order (exact inputs make the order irrelevant).
inline Buffer reduceAll(const std::vector<Buffer>& in, size_t offsetElems, size_t count, const Case& c) {
  size_t esz = kernels::sizeOf(c.dtype);
  Buffer acc(in[0].begin() + offsetElems * esz, in[0].begin() + (offsetElems + count) * esz);
  for (int r = 1; r < c.n; ++r)
    if (count) kernels::reduce(acc.data(), acc.data(), in[r].data() + offsetElems * esz, count, c.dtype, c.op);
  if (c.op == RedOp::kAvg && count) kernels::divideBy(acc.data(), count, c.dtype, c.n);
  return acc;
}

inline void runCase(const Case& c, size_t chunkBytes, bool lateReceiveFree = false, const std::string& algo = "",
             const testing::SimTopology& topo = {}) {
  SCOPED_TRACE(describe(c));
  const int n = c.n;
  const size_t esz = kernels::sizeOf(c.dtype);
  Args a;
  a.kind = c.kind;
  a.count = c.count;
  a.dtype = c.dtype;
  a.op = c.op;
  a.root = c.root;
  const size_t sendElems = a.sendBytes(n) / esz, recvElems = a.recvBytes(n) / esz;
  std::vector<Buffer> inputs(n), send(n), recv(n);
  std::vector<Args> args(n, a);
  std::vector<std::vector<std::byte*>> bufs(n);
  for (int r = 0; r < n; ++r) {
    inputs[r].resize(sendElems * esz);
    for (size_t i = 0; i < sendElems; ++i) setElem(inputs[r].data(), i, c.dtype, inputValue(r, i, c.dtype, c.op));
    recv[r].assign(recvElems * esz + 1, std::byte{0x5a});
    send[r] = inputs[r];
    std::byte* sb = send[r].data();
    std::byte* rb = recv[r].data();
    if (c.inPlace) {
      // The in-place layouts of nccl.h: allgather reads from recv + rank*count, reduce-scatter writes to
      // send + rank*count, the others share one buffer.
      size_t need = std::max(sendElems, recvElems) * esz;
      recv[r].assign(need + 1, std::byte{0x5a});
      rb = recv[r].data();
      if (c.kind == CollKind::kAllGather) {
        std::memcpy(rb + r * c.count * esz, inputs[r].data(), inputs[r].size());
        sb = rb + r * c.count * esz;
      } else if (c.kind == CollKind::kReduceScatter) {
        std::memcpy(rb, inputs[r].data(), inputs[r].size());
        sb = rb;
        rb = rb + r * c.count * esz;
      } else {
        std::memcpy(rb, inputs[r].data(), inputs[r].size());
        sb = rb;
      }
      args[r].inPlace = true;
    }
    bufs[r] = {sb, rb};
  }
  Status st = testing::runSimulated(n, args, bufs, chunkBytes, algo, nullptr, lateReceiveFree, topo);
  ASSERT_TRUE(st.ok()) << st.toString();

  for (int r = 0; r < n; ++r) {
    const std::byte* out = bufs[r][1];
    Buffer expect;
    switch (c.kind) {
      case CollKind::kAllReduce: expect = reduceAll(inputs, 0, c.count, c); break;
      case CollKind::kReduceScatter: expect = reduceAll(inputs, r * c.count, c.count, c); break;
      case CollKind::kReduce:
        if (r != c.root) continue;
        expect = reduceAll(inputs, 0, c.count, c);
        break;
      case CollKind::kBroadcast: expect = inputs[c.root]; break;
      case CollKind::kAllGather:
        for (int p = 0; p < n; ++p) expect.insert(expect.end(), inputs[p].begin(), inputs[p].end());
        break;
      case CollKind::kAlltoAll:
        for (int p = 0; p < n; ++p)
          expect.insert(expect.end(), inputs[p].begin() + r * c.count * esz, inputs[p].begin() + (r + 1) * c.count * esz);
        break;
      default: FAIL();
    }
    ASSERT_EQ(0, std::memcmp(out, expect.data(), expect.size())) << "rank " << r << " has a wrong result";
    if (!c.inPlace) {
      EXPECT_EQ(recv[r][recvElems * esz], std::byte{0x5a}) << "rank " << r << " wrote past the end";
    }
  }
}

}  // namespace hetcomm::coll::test
