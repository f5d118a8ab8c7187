// cluster_spec.h: cluster files (clusters/*.json), the description scripts/emulate-cluster.sh builds an emulated
// cluster from, read here so that a cluster can be studied without running it: its bounds (hetcomm-topo --bound
// --cluster FILE), schedule synthesis on shapes larger than this machine can emulate (perf's synthesis bench, the
// collectives tests).
//
//   {"name": "mixed-4x2", "description": "...", "ranksPerHost": 2,
//    "hosts": [{"name": "h0", "ranks": 4,                     ranks: this host's own count (default ranksPerHost)
//               "nics": [{"name": "ib0", "kind": "ib", "rateMbps": 1600, "fabric": "ib-a"}, ...],
//               "gpus": [{"model": "A100", "peakTflops": 312, "memoryBytes": "40G", "count": 4}]}, ...]}
//                                                           gpus optional, as in a topology file (topo_file.h):
//                                                           local rank k drives GPU k (mod their number)
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
    std::vector<Gpu> gpus{};  // "gpus" with each entry's count expanded
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
// Pretty-printed JSON that parseClusterSpec reads back.
std::string clusterSpecJson(const ClusterSpec& spec);

// A random valid cluster from a seed (the same on every machine): hosts, ranks per host, fabrics and rates drawn
// uniformly within the limits. The first fabric is an Ethernet joining every host, so that every pair of hosts
// reaches each other as a communicator needs; each other fabric has a random kind (ib, roce or eth) and joins a
// random subset of two hosts or more. Each NIC gets its own rate.
struct RandomClusterLimits {
  int minHosts = 2, maxHosts = 8;
  int minRanksPerHost = 1, maxRanksPerHost = 4;
  int minFabrics = 1, maxFabrics = 3;
  uint64_t minRateMbps = 100, maxRateMbps = 2000;
};
ClusterSpec randomClusterSpec(uint64_t seed, const RandomClusterLimits& limits = {});

}  // namespace hetcomm::topo
