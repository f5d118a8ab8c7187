#include "collectives/args.h"

#include "common/strings.h"

namespace hetcomm::coll {

const char* name(CollKind kind) {
  switch (kind) {
    case CollKind::kAllReduce:
      return "allreduce";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kReduce:
      return "reduce";
    case CollKind::kAllGather:
      return "allgather";
    case CollKind::kReduceScatter:
      return "reducescatter";
    case CollKind::kAlltoAll:
      return "alltoall";
    case CollKind::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

size_t Args::sendBytes(int n) const {
  size_t e = kernels::sizeOf(dtype);
  switch (kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAlltoAll:
      return count * n * e;
    default:
      return count * e;
  }
}

size_t Args::recvBytes(int n) const {
  size_t e = kernels::sizeOf(dtype);
  switch (kind) {
    case CollKind::kAllGather:
    case CollKind::kAlltoAll:
      return count * n * e;
    default:
      return count * e;
  }
}

std::string Args::describe() const {
  switch (kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduceScatter:
      return format("%s(count %zu, %s, %s)", name(kind), count, kernels::name(dtype), kernels::name(op));
    case CollKind::kReduce:
      return format("reduce(count %zu, %s, %s, root %d)", count, kernels::name(dtype), kernels::name(op), root);
    case CollKind::kBroadcast:
      return format("broadcast(count %zu, %s, root %d)", count, kernels::name(dtype), root);
    case CollKind::kAllGather:
    case CollKind::kAlltoAll:
      return format("%s(count %zu, %s)", name(kind), count, kernels::name(dtype));
    case CollKind::kSendRecv:
      return format("send/recv group of %zu operations", p2p.size());
  }
  return "?";
}

}  // namespace hetcomm::coll
