// cluster_fixtures.h: NodeDescriptions built in code for cluster, link-matrix and dump tests.
#pragma once

#include <string>
#include <vector>

#include "topology/node.h"

namespace hetcomm::topo::testing {

inline Nic makeNic(const std::string& name, NicKind kind, uint64_t rateMbps, std::vector<std::string> addresses,
                   std::string fabric = "") {
  Nic n;
  n.name = name;
  n.kind = kind;
  n.rateMbps = rateMbps;
  n.addresses = std::move(addresses);
  n.fabric = std::move(fabric);
  return n;
}

inline NodeDescription makeNode(const std::string& hostId, std::vector<Nic> nics, int pid = 100) {
  NodeDescription n;
  n.hostId = hostId;
  n.hostName = hostId;
  n.cores = 2;
  n.pus = 2;
  n.pid = pid;
  n.nics = std::move(nics);
  return n;
}

// The reference cluster: 4 hosts x 2 ranks (ranks 2h and 2h+1 on host h). Hosts 0-1 share an InfiniBand fabric
// (10.1.0.0/24, 100 Gb/s), hosts 2-3 a RoCE fabric (10.2.0.0/24, 25 Gb/s), all four an Ethernet fabric
// (10.0.0.0/24, 10 Gb/s).
inline NodeDescription referenceHost(int h, int pid) {
  std::string id = "h" + std::to_string(h);
  std::string last = std::to_string(h + 1);
  std::vector<Nic> nics = {makeNic("eth0", NicKind::kEth, 10000, {"10.0.0." + last + "/24"})};
  if (h < 2) nics.push_back(makeNic("ib0", NicKind::kIb, 100000, {"10.1.0." + last + "/24"}));
  if (h >= 2) nics.push_back(makeNic("roce0", NicKind::kRoce, 25000, {"10.2.0." + last + "/24"}));
  nics.push_back(makeNic("lo", NicKind::kEth, 0, {"127.0.0.1/8"}));
  nics.back().loopback = true;
  return makeNode(id, std::move(nics), pid);
}

inline std::vector<NodeDescription> referenceCluster() {
  std::vector<NodeDescription> nodes;
  for (int r = 0; r < 8; ++r) {
    NodeDescription n = referenceHost(r / 2, 1000 + r);
    n.localRank = r % 2;
    nodes.push_back(std::move(n));
  }
  return nodes;
}

}  // namespace hetcomm::topo::testing
