#include "collectives/args.h"

#include <algorithm>

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

double GroupView::ringBwGBps() const {
  double worst = nranks > 1 ? bwGBps(0, 1 % nranks) : kNominalBwGBps;
  for (int i = 0; i < nranks; ++i) worst = std::min(worst, bwGBps(i, (i + 1) % nranks));
  return worst > 0 ? worst : kNominalBwGBps;
}

double GroupView::ringAlphaUs() const {
  double worst = 0;
  for (int i = 0; i < nranks; ++i) worst = std::max(worst, alphaUs(i, (i + 1) % nranks));
  return nranks > 1 ? worst : 0;
}

}  // namespace hetcomm::coll
