// nic_discovery.h: the NICs of this host from sysfs, and their addresses from the kernel.
//
// hwloc lists network devices but not what discovery most needs: whether a port is InfiniBand, RoCE or plain
// Ethernet, its rate and whether its link is up. Those come from sysfs:
//   class/net/<if>/{type,speed,operstate,carrier,dev_port}   type 32 = InfiniBand (IPoIB), 772 = loopback
//   class/net/<if>/device -> the PCI device (absent for veth, bridges, tun, lo)
//   class/infiniband/<dev>/device -> the PCI device
//   class/infiniband/<dev>/ports/<p>/{rate,link_layer,state}    link_layer InfiniBand -> ib, Ethernet -> roce
//   class/infiniband/<dev>/ports/<p>/gid_attrs/ndevs/0           the netdev of a RoCE port (newer kernels)
// The root is a parameter so tests build fake trees.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/node.h"

namespace hetcomm::topo {

// Every netdev under <sysfsRoot>/class/net, merged with the RDMA ports under class/infiniband (a port backing a
// netdev describes that netdev; a port without one becomes a NIC named "<dev>:<port>"). Sorted by name; no
// addresses (see interfaceAddresses). Missing or unreadable files give unknowns, never an error.
std::vector<Nic> scanSysfsNics(const std::string& sysfsRoot);

// The kernel's interface addresses (getifaddrs) as "addr/len", link-local ones left out, sorted per interface.
Result<std::map<std::string, std::vector<std::string>>> interfaceAddresses();

// "100 Gb/sec (4X EDR)" -> 100000 Mbit/s; 0 when it does not parse.
uint64_t parseIbRateMbps(const std::string& text);

}  // namespace hetcomm::topo
