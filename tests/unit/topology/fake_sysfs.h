// fake_sysfs.h: builds a sysfs-shaped tree in a temporary directory, with just the files the NIC scan reads
// (nic_discovery.h), so tests describe IB, RoCE, Ethernet and virtual NICs that this machine does not have.
// Links are absolute, as canonical() resolves them the same way relative ones are resolved in the real /sys.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hetcomm::topo::testing {

class FakeSysfs {
 public:
  FakeSysfs() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hc-fake-sysfs-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    root_ = tmpl;
  }
  ~FakeSysfs() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  const std::string& root() const { return root_; }
  std::filesystem::path path(const std::string& rel) const { return std::filesystem::path(root_) / rel; }

  void write(const std::string& rel, const std::string& content) {
    std::filesystem::create_directories(path(rel).parent_path());
    std::ofstream(path(rel)) << content << "\n";
  }
  void link(const std::string& rel, const std::filesystem::path& target) {
    std::filesystem::create_directories(path(rel).parent_path());
    std::filesystem::create_directory_symlink(target, path(rel));
  }

  // devices/pci0000:00/<busId>, with numa_node.
  std::filesystem::path pciDevice(const std::string& busId, int numaNode) {
    std::string rel = "devices/pci0000:00/" + busId;
    write(rel + "/numa_node", std::to_string(numaNode));
    return path(rel);
  }

  struct Netdev {
    int type = 1;  // ARPHRD: 1 Ethernet, 32 InfiniBand, 772 loopback
    std::string operstate = "up";
    std::string speed;  // empty: no speed file (the kernel answers EINVAL for down links)
    int carrier = 1;
    int devPort = -1;    // -1: no dev_port file
    std::string device;  // the device link's target below the root ("devices/pci0000:00/..."); empty: virtual
  };
  void netdev(const std::string& name, const Netdev& d) {
    std::string dir = "class/net/" + name;
    write(dir + "/type", std::to_string(d.type));
    write(dir + "/operstate", d.operstate);
    write(dir + "/carrier", std::to_string(d.carrier));
    if (!d.speed.empty()) write(dir + "/speed", d.speed);
    if (d.devPort >= 0) write(dir + "/dev_port", std::to_string(d.devPort));
    if (!d.device.empty()) link(dir + "/device", path(d.device));
  }

  struct RdmaPort {
    std::string rate = "100 Gb/sec (4X EDR)";
    std::string linkLayer = "InfiniBand";
    std::string state = "4: ACTIVE";
    std::string ndev;  // gid_attrs/ndevs/0; empty: no such file (older kernels)
  };
  void rdmaPort(const std::string& dev, const std::string& pciRel, int port, const RdmaPort& p) {
    std::string dir = "class/infiniband/" + dev;
    if (!std::filesystem::exists(path(dir + "/device"))) link(dir + "/device", path(pciRel));
    std::string portDir = dir + "/ports/" + std::to_string(port);
    write(portDir + "/rate", p.rate);
    write(portDir + "/link_layer", p.linkLayer);
    write(portDir + "/state", p.state);
    if (!p.ndev.empty()) write(portDir + "/gid_attrs/ndevs/0", p.ndev);
  }

 private:
  std::string root_;
};

}  // namespace hetcomm::topo::testing
