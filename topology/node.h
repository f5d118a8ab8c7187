// node.h: what one rank sees of its host, and how it finds out.
//
// A NodeDescription is plain data: host identity, CPU packages, NUMA nodes, cores, the PCI devices that matter
// for communication (NICs, HCAs, GPUs), the NICs with their kind, rate and addresses, the GPUs, and the rank's
// own pid and local rank. Every rank publishes its description at communicator init (node_json.h turns it into
// bytes) and every rank builds the same ClusterView from all of them (cluster.h).
//
// discoverLocalNode() fills one in from hwloc (packages, NUMA, cores, PCI devices, GPUs) and sysfs (NIC kind,
// rate, state: hwloc does not know them), then applies HETCOMM_TOPO_FILE (topo_file.h) for what discovery cannot
// see. It never moves data and never opens a connection.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hetcomm::topo {

// Kinds in order of preference: when two hosts share several fabrics, the first kind wins (link_matrix.h).
enum class NicKind : uint8_t { kIb, kRoce, kEth };
enum class NicState : uint8_t { kDown, kUp };

const char* nicKindName(NicKind kind);  // "ib", "roce", "eth"
std::optional<NicKind> parseNicKind(std::string_view text);
const char* nicStateName(NicState state);  // "up", "down"
std::optional<NicState> parseNicState(std::string_view text);

struct Package {
  int index = 0;  // OS index (physical package id)
  int cores = 0;
  int pus = 0;  // hardware threads

  bool operator==(const Package&) const = default;
};

struct NumaNode {
  int index = 0;  // OS index, as in numactl and /sys/devices/system/node/nodeN
  uint64_t memoryBytes = 0;
  int cores = 0;

  bool operator==(const NumaNode&) const = default;
};

// A PCI device that matters for communication: a NIC, an HCA, a GPU or another accelerator.
struct PciDevice {
  std::string busId;  // "0000:81:00.0"
  uint16_t vendorId = 0;
  uint16_t deviceId = 0;
  uint16_t classId = 0;                // 0x0200 Ethernet, 0x0207 InfiniBand, 0x0302 3D controller, ...
  std::string name;                    // from pci.ids when hwloc has it, else empty
  int numaNode = -1;                   // -1: unknown, or attached above several NUMA nodes
  std::vector<std::string> osDevices;  // "eth0", "mlx5_0", "cuda0": what the OS calls it

  bool operator==(const PciDevice&) const = default;
};

struct Nic {
  // The netdev ("ib0", "eth1", "veth3"); "<rdma device>:<port>" ("mlx5_0:1") for an RDMA port with no netdev.
  std::string name;
  NicKind kind = NicKind::kEth;
  uint64_t rateMbps = 0;  // link rate in Mbit/s; 0 = unknown (a veth, a down link, a driver that does not say)
  NicState state = NicState::kUp;
  // Fabric name when one is known (topology file): NICs with the same name reach each other. Empty: the cluster
  // view infers fabrics from kind plus IP subnet.
  std::string fabric;
  // Interface addresses with prefix length ("10.1.0.3/24"), sorted. Link-local ones are left out: every link has
  // one, so they say nothing about reachability.
  std::vector<std::string> addresses;
  int numaNode = -1;          // -1: unknown
  std::string pciBusId;       // empty for virtual interfaces
  std::string rdmaDevice;     // "mlx5_0" when the NIC is an RDMA port (ib, roce); empty otherwise
  int rdmaPort = 0;           // 1-based port of rdmaDevice
  bool isVirtual = false;     // no device behind it: veth, bridge, tun, dummy, loopback
  bool loopback = false;      // "lo": never part of a fabric
  bool fromTopoFile = false;  // some field came from HETCOMM_TOPO_FILE (emulated or hand-written)

  bool operator==(const Nic&) const = default;
};

struct Gpu {
  std::string model;         // "NVIDIA H100 80GB HBM3", or "pci 10de:2330" when nothing better is known
  uint64_t memoryBytes = 0;  // 0 = unknown
  double peakTflops = 0;     // dense peak at the training precision; 0 = unknown (only a topology file says)
  std::string pciBusId;      // empty when declared by a topology file
  int numaNode = -1;
  bool fromTopoFile = false;

  bool operator==(const Gpu&) const = default;
};

struct NodeDescription {
  std::string hostId;    // host_identity.h: equal ids share memory
  std::string hostName;  // for tables and logs
  std::vector<Package> packages;
  std::vector<NumaNode> numaNodes;
  int cores = 0;  // physical cores on the host
  int pus = 0;    // hardware threads
  std::vector<PciDevice> pciDevices;
  std::vector<Nic> nics;  // sorted by name
  std::vector<Gpu> gpus;  // in PCI order, then topology-file order
  std::string topoFile;   // the HETCOMM_TOPO_FILE applied, empty if none (outputs say so: emulation)
  // The rank itself.
  int pid = 0;
  int localRank = -1;  // -1 until the launcher or the cluster view says

  bool operator==(const NodeDescription&) const = default;
};

struct DiscoveryOptions {
  // Where sysfs is; tests point it at a fake tree. Only the NIC scan reads it (class/net, class/infiniband).
  std::string sysfsRoot = "/sys";
  // false: skip hwloc (packages, NUMA, cores, PCI devices, GPUs), e.g. to test the NIC scan alone.
  bool useHwloc = true;
  // An hwloc XML export (lstopo --of xml) to read instead of this machine; empty: this machine.
  std::string hwlocXml;
  // Interface addresses by netdev name; nullopt: ask the kernel (getifaddrs). Tests of fake trees set it.
  std::optional<std::map<std::string, std::vector<std::string>>> addresses;
  // A topology file to apply (topo_file.h); empty: none.
  std::string topoFile;
  // Empty: hostIdentity() and hostName() (host_identity.h).
  std::string hostId, hostName;
  int localRank = -1;

  // Defaults plus HETCOMM_TOPO_FILE.
  static DiscoveryOptions fromEnvironment();
};

// Discovers this host. Blocks for the few milliseconds hwloc and sysfs take; call once per process, not per
// communicator. Fails only when hwloc cannot load a topology or the topology file is bad; a NIC whose details
// sysfs does not give is recorded with unknowns (rate 0) and an INFO line.
Result<NodeDescription> discoverLocalNode(const DiscoveryOptions& options);

// "100 Gb/s", "2.5 Gb/s", "100 Mb/s"; "rate unknown" for 0.
std::string formatRateMbps(uint64_t mbps);

// A compact, lstopo-like text: one line per package / NUMA node, NIC and GPU. For hetcomm-topo and INFO logs.
std::string formatNode(const NodeDescription& node);

}  // namespace hetcomm::topo
