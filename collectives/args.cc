#include "collectives/args.h"

#include <tuple>

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

std::vector<int> GroupView::nicAwareOrder() const {
  std::vector<int> order(nranks);
  for (int r = 0; r < nranks; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::pair(islandOf(a), hostOf(a)) < std::pair(islandOf(b), hostOf(b));
  });
  return order;
}

std::vector<int> GroupView::nicAwareChain(int root) const {
  std::vector<int> order = nicAwareOrder();
  auto key = [&](int r) {
    return std::tuple(islandOf(r) != islandOf(root), hostOf(r) != hostOf(root), r != root);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  return order;
}

double GroupView::ringBwGBps(const std::vector<int>& order) const {
  const int n = static_cast<int>(order.size());
  double worst = n > 1 ? bwGBps(order[0], order[1 % n]) : kNominalBwGBps;
  for (int i = 0; i < n; ++i) worst = std::min(worst, bwGBps(order[i], order[(i + 1) % n]));
  return worst > 0 ? worst : kNominalBwGBps;
}

double GroupView::ringAlphaUs(const std::vector<int>& order) const {
  const int n = static_cast<int>(order.size());
  double worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, alphaUs(order[i], order[(i + 1) % n]));
  return n > 1 ? worst : 0;
}

static std::vector<int> identityOrder(int n) {
  std::vector<int> order(n);
  for (int r = 0; r < n; ++r) order[r] = r;
  return order;
}

double GroupView::ringBwGBps() const { return ringBwGBps(identityOrder(nranks)); }
double GroupView::ringAlphaUs() const { return ringAlphaUs(identityOrder(nranks)); }

}  // namespace hetcomm::coll
