// emulated_cluster.h: what hetcomm-run --cluster needs to know about a cluster scripts/emulate-cluster.sh built:
// each host's network namespace and the address of the launcher's store as seen from that host, and the
// topology file that tells hetcomm what the veth links stand for. Read from the state file `up` writes
// (/run/hetcomm-emulate/NAME.json), never from the live system, so the launcher needs no iproute2.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace hetcomm::comm {

struct EmulatedHost {
  std::string name;       // "h0": also the host id its ranks get (HETCOMM_HOSTID)
  std::string netns;      // "hc-9bd77-h0": a name under /run/netns
  std::string storeAddr;  // the root namespace's address on one of the host's fabrics
  struct Nic {
    std::string fabric;  // "eth"
    std::string addr;    // the host's address on it
  };
  std::vector<Nic> nics;  // in the cluster file's order
  int ranks = 1;          // the host's own rank count (the cluster file's "ranks", else ranksPerHost)
};

struct EmulatedCluster {
  std::string name;
  int ranksPerHost = 1;  // the file's default
  std::string topoFile;
  std::vector<EmulatedHost> hosts;
};

// clusterFile is the cluster description given to emulate-cluster.sh; its "name" finds the state file in
// stateDir. Fails with a message that says how to bring the cluster up when it is not.
Result<EmulatedCluster> loadEmulatedCluster(const std::string& clusterFile,
                                            const std::string& stateDir = "/run/hetcomm-emulate");

}  // namespace hetcomm::comm
