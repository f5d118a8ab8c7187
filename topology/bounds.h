// bounds.h: lower bounds on the time of each collective over a LinkGraph, from the link rates alone: no schedule
// can beat them (shared/reference/collective-bounds.md derives them).
//
// The graph: one vertex per host and per fabric (a switch), a pair of directed edges per NIC (host -> fabric
// and back, each at the NIC's rate), and each rank hanging off its host at the host's memory rate.
//   allgather       a cut S must take in every block held outside it: T >= max_S |C(S')| * block / B-(S); the
//                   largest rate x with B-(S) >= x |C(S')| for every S is tested by max-flows from a source that
//                   feeds every rank at x (ForestColl's condition), bisected on x
//   reduce-scatter  the same with the edges reversed
//   broadcast       T >= size / min over ranks v of maxflow(root -> v) (Edmonds)
//   reduce          the same reversed
//   allreduce       the larger of the cut bound (every cut carries the whole buffer each way: T >= size / min cut)
//                   and the aggregate bound (each element needs H-1 reduction and H-1 result transfers between the
//                   H hosts, all through the hosts' NICs: T >= 2(H-1) size / sum of egress); the same two over the
//                   ranks of a host at its memory rate
// Sizes are nccl-tests' sizes: the whole buffer (allgather: the output, reduce-scatter: the input).
#pragma once

#include <string>
#include <vector>

#include "topology/link_graph.h"

namespace hetcomm::topo {

enum class BoundKind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce };
const char* boundKindName(BoundKind kind);  // "allreduce", "allgather", "reducescatter", "broadcast", "reduce"

struct CollectiveBound {
  double usPerByte = 0;  // time >= size * usPerByte; infinite where some rank cannot be reached
  std::string binding;   // which bound binds: "cut {h2,h3}: 0.050 GB/s each way", "aggregate over 4 hosts", ...
  // allreduce: the two families, each on its own (the larger binds).
  double cutUsPerByte = 0, aggregateUsPerByte = 0;
  // nccl-tests' bus bandwidth at the bound, GB/s: size / time * busFactor.
  double busGBps(int nranks) const;
  BoundKind kind = BoundKind::kAllReduce;
};

CollectiveBound collectiveBound(const LinkGraph& g, BoundKind kind, int root = 0);

// nccl-tests' bus bandwidth factor for n ranks: 2(n-1)/n allreduce, (n-1)/n allgather and reduce-scatter, 1 the
// rooted ones.
double busFactor(BoundKind kind, int nranks);

}  // namespace hetcomm::topo
