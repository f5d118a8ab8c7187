// cluster_spec.h: cluster files (clusters/*.json), the description scripts/emulate-cluster.sh builds an emulated
// cluster from, read here so that a cluster can be studied without running it: its bounds (hetcomm-topo --bound
// --cluster FILE), schedule synthesis on shapes larger than this machine can emulate (perf's synthesis bench, the
// collectives tests).
//
//   {"name": "mixed-4x2", "description": "...", "ranksPerHost": 2,
//    "hosts": [{"name": "h0", "ranks": 4,                     ranks: this host's own count (default ranksPerHost)
//               "nics": [{"name": "ib0", "kind": "ib", "rateMbps": 1600, "fabric": "ib-a"}, ...]}, ...]}
//
// Ranks are numbered host by host in file order. Errors name the file, the JSON path and the problem.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/node.h"

namespace hetcomm::topo {

struct ClusterSpec {
  struct NicSpec {
    std::string name;
    NicKind kind = NicKind::kEth;
    uint64_t rateMbps = 0;
    std::string fabric;
  };
  struct HostSpec {
    std::string name;
    int ranks = 1;
    std::vector<NicSpec> nics;
  };
  std::string name, description;
  std::vector<HostSpec> hosts;

  int nranks() const;
  // One description per rank, as each rank would publish it on that host: host id and name the host's, its NICs
  // with kind, rate and fabric as a topology file would set them, one core per rank.
  std::vector<NodeDescription> nodes() const;
};

Result<ClusterSpec> parseClusterSpec(std::string_view text, const std::string& source);
Result<ClusterSpec> loadClusterSpec(const std::string& path);

}  // namespace hetcomm::topo
