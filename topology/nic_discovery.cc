#include "topology/nic_discovery.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "common/log.h"
#include "topology/ip_prefix.h"

namespace hetcomm::topo {
namespace {

namespace fs = std::filesystem;

constexpr int kArphrdInfiniband = 32;  // linux/if_arp.h ARPHRD_INFINIBAND
constexpr int kArphrdLoopback = 772;   // ARPHRD_LOOPBACK

// First line of a sysfs attribute without trailing whitespace; nullopt when it cannot be read (a down link's
// speed answers EINVAL, which is the same as absent for us).
std::optional<std::string> readLine(const fs::path& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::optional<long long> readInt(const fs::path& path) {
  auto line = readLine(path);
  if (!line || line->empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(line->c_str(), &end, 0);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

// "0000:81:00.0": domain, bus, device, function in hex.
bool isPciBusId(const std::string& s) {
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11})
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// The PCI device behind a sysfs `device` link, or empty. The link may end below the PCI device (virtio NICs
// point at .../0000:00:03.0/virtio2), so walk up to the last component that is a PCI bus id.
fs::path pciDirOf(const fs::path& deviceLink) {
  std::error_code ec;
  fs::path real = fs::canonical(deviceLink, ec);
  if (ec) return {};
  for (fs::path p = real; !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (isPciBusId(p.filename().string())) return p;
  }
  return {};
}

std::vector<std::string> sortedEntries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

void setPciLocation(Nic& nic, const fs::path& pciDir) {
  if (pciDir.empty()) return;
  nic.pciBusId = pciDir.filename().string();
  // numa_node is -1 on single-node machines and where the firmware does not say.
  if (auto numa = readInt(pciDir / "numa_node"); numa && *numa >= 0) nic.numaNode = static_cast<int>(*numa);
}

// A netdev as class/net describes it: Ethernet-kind unless its link type is InfiniBand.
Nic scanNetdev(const fs::path& dir, const std::string& name) {
  Nic nic;
  nic.name = name;
  int type = static_cast<int>(readInt(dir / "type").value_or(1));
  nic.kind = type == kArphrdInfiniband ? NicKind::kIb : NicKind::kEth;
  nic.loopback = type == kArphrdLoopback;

  // operstate "unknown" is what lo, tun and some virtual drivers report while working; carrier decides then.
  std::string oper = readLine(dir / "operstate").value_or("unknown");
  bool up = oper == "up" || (oper == "unknown" && readInt(dir / "carrier").value_or(0) == 1);
  nic.state = up ? NicState::kUp : NicState::kDown;

  // Mbit/s. Down links answer EINVAL; veth answers -1 (or a made-up 10000 on newer kernels, which we keep: it is
  // what the kernel says, and a topology file can correct it).
  auto speed = readInt(dir / "speed");
  if (speed && *speed > 0) {
    nic.rateMbps = static_cast<uint64_t>(*speed);
  } else if (up && !nic.loopback) {
    HC_INFO(Topo, "%s: link rate unknown (sysfs speed %s), recorded as 0", name.c_str(),
            speed ? std::to_string(*speed).c_str() : "unreadable");
  }

  std::error_code ec;
  nic.isVirtual = !fs::exists(dir / "device", ec);
  if (!nic.isVirtual) setPciLocation(nic, pciDirOf(dir / "device"));
  return nic;
}

// One RDMA port: its kind, rate and state, and the netdev it backs if we can tell which.
struct RdmaPort {
  std::string device;
  int port = 0;
  NicKind kind = NicKind::kIb;
  uint64_t rateMbps = 0;
  NicState state = NicState::kDown;
  fs::path pciDir;
  std::string netdev;  // from gid_attrs/ndevs/0, else empty
};

std::vector<RdmaPort> scanRdmaPorts(const fs::path& ibClass) {
  std::vector<RdmaPort> ports;
  for (const std::string& dev : sortedEntries(ibClass)) {
    fs::path devDir = ibClass / dev;
    fs::path pciDir = pciDirOf(devDir / "device");
    std::vector<std::string> portNames = sortedEntries(devDir / "ports");
    // Numeric order: port 10 after port 9.
    std::sort(portNames.begin(), portNames.end(),
              [](const std::string& a, const std::string& b) { return std::atoi(a.c_str()) < std::atoi(b.c_str()); });
    for (const std::string& p : portNames) {
      fs::path portDir = devDir / "ports" / p;
      RdmaPort port;
      port.device = dev;
      port.port = std::atoi(p.c_str());
      port.pciDir = pciDir;
      std::string linkLayer = readLine(portDir / "link_layer").value_or("InfiniBand");
      port.kind = linkLayer == "Ethernet" ? NicKind::kRoce : NicKind::kIb;
      std::string rate = readLine(portDir / "rate").value_or("");
      port.rateMbps = parseIbRateMbps(rate);
      // "4: ACTIVE"; INIT and ARMED mean the subnet manager has not finished: not usable yet.
      port.state = readLine(portDir / "state").value_or("").find("ACTIVE") != std::string::npos ? NicState::kUp
                                                                                                : NicState::kDown;
      port.netdev = readLine(portDir / "gid_attrs" / "ndevs" / "0").value_or("");
      if (port.rateMbps == 0 && port.state == NicState::kUp)
        HC_INFO(Topo, "%s port %d: rate \"%s\" not understood, recorded as 0", dev.c_str(), port.port, rate.c_str());
      ports.push_back(std::move(port));
    }
  }
  return ports;
}

// The netdev an RDMA port backs: the one the kernel names in gid_attrs, else the netdev on the same PCI function
// (dev_port is 0-based where the port is 1-based; with one candidate, that one).
Nic* netdevOfPort(const RdmaPort& port, std::vector<Nic>& nics, const fs::path& netClass) {
  if (!port.netdev.empty()) {
    for (Nic& nic : nics)
      if (nic.name == port.netdev) return &nic;
  }
  if (port.pciDir.empty()) return nullptr;
  std::vector<Nic*> samePci;
  for (Nic& nic : nics) {
    if (!nic.isVirtual && nic.rdmaDevice.empty() && pciDirOf(netClass / nic.name / "device") == port.pciDir)
      samePci.push_back(&nic);
  }
  for (Nic* nic : samePci) {
    if (readInt(netClass / nic->name / "dev_port").value_or(-1) + 1 == port.port) return nic;
  }
  return samePci.size() == 1 ? samePci[0] : nullptr;
}

}  // namespace

uint64_t parseIbRateMbps(const std::string& text) {
  char* end = nullptr;
  double gbps = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || gbps <= 0 || std::string_view(end).find("Gb/sec") == std::string_view::npos) return 0;
  return static_cast<uint64_t>(gbps * 1000 + 0.5);
}

std::vector<Nic> scanSysfsNics(const std::string& sysfsRoot) {
  fs::path netClass = fs::path(sysfsRoot) / "class" / "net";
  std::vector<Nic> nics;
  for (const std::string& name : sortedEntries(netClass)) nics.push_back(scanNetdev(netClass / name, name));
  if (nics.empty()) HC_INFO(Topo, "no network interfaces under %s", netClass.c_str());

  // An RDMA port knows better than the netdev what it is: an Ethernet netdev over a RoCE port is roce, and the
  // port's rate and state are the ones the RDMA transports will see.
  for (const RdmaPort& port : scanRdmaPorts(fs::path(sysfsRoot) / "class" / "infiniband")) {
    Nic* nic = netdevOfPort(port, nics, netClass);
    if (nic == nullptr) {
      nics.emplace_back();
      nic = &nics.back();
      nic->name = port.device + ":" + std::to_string(port.port);
      setPciLocation(*nic, port.pciDir);
    }
    nic->kind = port.kind;
    nic->rdmaDevice = port.device;
    nic->rdmaPort = port.port;
    nic->state = port.state;
    if (port.rateMbps > 0) nic->rateMbps = port.rateMbps;
  }
  std::sort(nics.begin(), nics.end(), [](const Nic& a, const Nic& b) { return a.name < b.name; });
  return nics;
}

Result<std::map<std::string, std::vector<std::string>>> interfaceAddresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoStatus(errno, "getifaddrs");
  std::map<std::string, std::vector<std::string>> out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_netmask == nullptr) continue;
    int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    IpPrefix p;
    p.family = family;
    const uint8_t* mask;
    size_t n;
    if (family == AF_INET) {
      std::memcpy(p.addr.data(), &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
      mask = reinterpret_cast<const uint8_t*>(&reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr);
      n = 4;
    } else {
      std::memcpy(p.addr.data(), &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
      mask = reinterpret_cast<const uint8_t*>(&reinterpret_cast<sockaddr_in6*>(a->ifa_netmask)->sin6_addr);
      n = 16;
    }
    for (size_t i = 0; i < n; ++i) p.length += __builtin_popcount(mask[i]);
    if (p.isLinkLocal()) continue;
    out[a->ifa_name].push_back(p.toString());
  }
  freeifaddrs(list);
  for (auto& [name, addrs] : out) std::sort(addrs.begin(), addrs.end());
  return out;
}

}  // namespace hetcomm::topo
