// hwloc_discovery.h: the hardware half of local discovery, through hwloc: CPU packages, NUMA nodes with their
// memory, cores, the PCI devices that matter for communication (network, InfiniBand, GPUs, accelerators) and the
// GPUs. NIC kind, rate and state are not here: hwloc does not know them (nic_discovery.h reads sysfs).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "topology/node.h"

namespace hetcomm::topo {

// Fills node.packages, numaNodes, cores, pus, pciDevices and gpus. hwlocXml empty: this machine; otherwise an
// hwloc XML export (lstopo --of xml), which is how tests describe a machine with GPUs. Fails only when hwloc
// cannot build a topology.
Status discoverHardware(const std::string& hwlocXml, NodeDescription& node);

// The cores this process may run on (its affinity mask), each as the OS numbers of its hardware threads, in
// hwloc's order (cores of a package, packages in turn): what a launcher binds ranks to (hetcomm-run --bind-to
// core). hwlocXml as above; a core none of whose threads is allowed is left out. Fails when hwloc cannot build a
// topology or no allowed core is found.
Result<std::vector<std::vector<int>>> allowedCores(const std::string& hwlocXml);

}  // namespace hetcomm::topo
