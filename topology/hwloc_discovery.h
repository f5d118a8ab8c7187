// hwloc_discovery.h: the hardware half of local discovery, through hwloc: CPU packages, NUMA nodes with their
// memory, cores, the PCI devices that matter for communication (network, InfiniBand, GPUs, accelerators) and the
// GPUs. NIC kind, rate and state are not here: hwloc does not know them (nic_discovery.h reads sysfs).
#pragma once

#include <string>

#include "common/status.h"
#include "topology/node.h"

namespace hetcomm::topo {

// Fills node.packages, numaNodes, cores, pus, pciDevices and gpus. hwlocXml empty: this machine; otherwise an
// hwloc XML export (lstopo --of xml), which is how tests describe a machine with GPUs. Fails only when hwloc
// cannot build a topology.
Status discoverHardware(const std::string& hwlocXml, NodeDescription& node);

}  // namespace hetcomm::topo
