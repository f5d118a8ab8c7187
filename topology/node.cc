#include "topology/node.h"

#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "topology/host_identity.h"
#include "topology/hwloc_discovery.h"
#include "topology/nic_discovery.h"
#include "topology/topo_file.h"

namespace hetcomm::topo {

HC_PARAM_STR(topoFileParam, "TOPO_FILE", "")

const char* nicKindName(NicKind kind) {
  switch (kind) {
    case NicKind::kIb:
      return "ib";
    case NicKind::kRoce:
      return "roce";
    case NicKind::kEth:
      return "eth";
  }
  return "?";
}

std::optional<NicKind> parseNicKind(std::string_view text) {
  if (text == "ib") return NicKind::kIb;
  if (text == "roce") return NicKind::kRoce;
  if (text == "eth") return NicKind::kEth;
  return std::nullopt;
}

const char* nicStateName(NicState state) { return state == NicState::kUp ? "up" : "down"; }

std::optional<NicState> parseNicState(std::string_view text) {
  if (text == "up") return NicState::kUp;
  if (text == "down") return NicState::kDown;
  return std::nullopt;
}

std::string formatRateMbps(uint64_t mbps) {
  if (mbps == 0) return "rate unknown";
  if (mbps < 1000) return format("%llu Mb/s", static_cast<unsigned long long>(mbps));
  return format("%g Gb/s", static_cast<double>(mbps) / 1000.0);
}

DiscoveryOptions DiscoveryOptions::fromEnvironment() {
  DiscoveryOptions o;
  o.topoFile = topoFileParam();
  return o;
}

Result<NodeDescription> discoverLocalNode(const DiscoveryOptions& options) {
  NodeDescription node;
  node.hostId = options.hostId.empty() ? hostIdentity() : options.hostId;
  node.hostName = options.hostName.empty() ? hostName() : options.hostName;
  node.pid = static_cast<int>(getpid());
  node.localRank = options.localRank;

  if (options.useHwloc) HC_TRY(discoverHardware(options.hwlocXml, node));

  node.nics = scanSysfsNics(options.sysfsRoot);
  std::map<std::string, std::vector<std::string>> live;
  if (!options.addresses) {
    HC_ASSIGN_OR_RETURN(live, interfaceAddresses());
  }
  const auto& addresses = options.addresses ? *options.addresses : live;
  for (Nic& nic : node.nics) {
    if (auto it = addresses.find(nic.name); it != addresses.end()) nic.addresses = it->second;
    // sysfs says -1 on single-node machines; hwloc may still place the device.
    if (nic.numaNode < 0 && !nic.pciBusId.empty()) {
      for (const PciDevice& dev : node.pciDevices) {
        if (dev.busId == nic.pciBusId) nic.numaNode = dev.numaNode;
      }
    }
  }

  if (!options.topoFile.empty()) {
    HC_ASSIGN_OR_RETURN(TopoFile file, TopoFile::load(options.topoFile));
    int matched = file.apply(node);
    HC_INFO(Topo, "topo file %s: %d entries match host %s (%s)", options.topoFile.c_str(), matched,
            node.hostName.c_str(), node.hostId.c_str());
  }
  HC_TRACE(Topo, "%s", formatNode(node).c_str());
  return node;
}

std::string formatNode(const NodeDescription& node) {
  std::string out = format("host %s (id %s): %d cores, %d PUs, pid %d, local rank %d\n", node.hostName.c_str(),
                           node.hostId.c_str(), node.cores, node.pus, node.pid, node.localRank);
  for (const Package& p : node.packages) out += format("  package %d: %d cores, %d PUs\n", p.index, p.cores, p.pus);
  for (const NumaNode& n : node.numaNodes)
    out += format("  numa %d: %s, %d cores\n", n.index, humanBytes(n.memoryBytes).c_str(), n.cores);
  for (const PciDevice& d : node.pciDevices) {
    std::string os;
    for (const std::string& name : d.osDevices) os += " " + name;
    out += format("  pci %s [%04x:%04x] class %04x%s%s, numa %d:%s\n", d.busId.c_str(), d.vendorId, d.deviceId,
                  d.classId, d.name.empty() ? "" : " ", d.name.c_str(), d.numaNode, os.c_str());
  }
  for (const Nic& n : node.nics) {
    std::string extra;
    for (const std::string& a : n.addresses) extra += (extra.empty() ? ", " : " ") + a;
    if (!n.fabric.empty()) extra += " fabric " + n.fabric;
    if (!n.rdmaDevice.empty()) extra += format(" rdma %s port %d", n.rdmaDevice.c_str(), n.rdmaPort);
    if (!n.pciBusId.empty()) extra += format(" pci %s numa %d", n.pciBusId.c_str(), n.numaNode);
    if (n.loopback)
      extra += " (loopback)";
    else if (n.isVirtual)
      extra += " (virtual)";
    if (n.fromTopoFile) extra += " *";
    out += format("  nic %s: %s, %s, %s%s\n", n.name.c_str(), nicKindName(n.kind), formatRateMbps(n.rateMbps).c_str(),
                  nicStateName(n.state), extra.c_str());
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const Gpu& g = node.gpus[i];
    out += format("  gpu %zu: %s, %s, %s%s%s\n", i, g.model.c_str(),
                  g.memoryBytes ? humanBytes(g.memoryBytes).c_str() : "memory unknown",
                  g.peakTflops > 0 ? format("%g TFLOP/s", g.peakTflops).c_str() : "peak unknown",
                  g.pciBusId.empty() ? "" : (", pci " + g.pciBusId).c_str(), g.fromTopoFile ? " *" : "");
  }
  if (!node.topoFile.empty())
    out += format("  * from topology file %s (emulated or hand-written, not discovered)\n", node.topoFile.c_str());
  return out;
}

}  // namespace hetcomm::topo
