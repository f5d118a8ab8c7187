// args.h: what a collective call asks for, as the collectives layer sees it (no pointers: planners are pure).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/datatype.h"

namespace hetcomm::coll {

enum class CollKind : uint8_t { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kSendRecv };
const char* name(CollKind kind);  // "allreduce", ...

// One send or receive of a point-to-point group; seq numbers the messages between this rank and peer in one
// direction, so the n-th send matches the n-th receive.
struct P2pOp {
  bool isSend = true;
  int peer = 0;
  size_t bytes = 0;
  uint32_t seq = 0;
};

struct Args {
  CollKind kind = CollKind::kAllReduce;
  // allreduce, broadcast, reduce: elements; allgather: per-rank send count; reduce-scatter: per-rank receive
  // count; alltoall: elements per peer block.
  size_t count = 0;
  kernels::DataType dtype = kernels::DataType::kFloat32;
  kernels::RedOp op = kernels::RedOp::kSum;
  int root = 0;
  bool inPlace = false;
  std::vector<P2pOp> p2p;  // kSendRecv only

  size_t sendBytes(int nranks) const;  // size of the send buffer the call reads
  size_t recvBytes(int nranks) const;  // size of the receive buffer the call writes
  // "allreduce(count 1024, float, sum)" for messages.
  std::string describe() const;
};

// The group a collective runs on, as a planner sees it.
struct GroupView {
  int rank = 0;
  int nranks = 1;
  size_t chunkBytes = 512 << 10;  // pipelining unit
  // Per rank: whether a chunk-sized message from it waits at the sender until the receive is posted (a late
  // receive is free), from the connections' lateReceiveIsFree. Empty: assume eager (a late receive costs a copy).
  std::vector<uint8_t> lateReceiveFree;
  bool lateReceiveIsFree(int peer) const {
    return peer >= 0 && static_cast<size_t>(peer) < lateReceiveFree.size() && lateReceiveFree[peer];
  }
};

}  // namespace hetcomm::coll
