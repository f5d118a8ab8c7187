// The sysfs half of discovery on fake trees: an InfiniBand HCA with IPoIB, RoCE ports found through gid_attrs
// and through the PCI function, an RDMA port without a netdev, a virtio Ethernet NIC, a veth with speed -1, down
// interfaces and loopback. Then discoverLocalNode on the same tree with injected addresses and a topology file.
#include "topology/nic_discovery.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/unit/topology/fake_sysfs.h"
#include "topology/node.h"

namespace hetcomm::topo {
namespace {

using testing::FakeSysfs;

const Nic* findNic(const std::vector<Nic>& nics, const std::string& name) {
  for (const Nic& n : nics)
    if (n.name == name) return &n;
  return nullptr;
}

// A host with every kind of NIC the scan must tell apart.
class NicScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // InfiniBand HCA on NUMA 1: IPoIB netdev ib0 (type 32) on the same PCI function as mlx5_0.
    fs_.pciDevice("0000:81:00.0", 1);
    fs_.netdev("ib0", {.type = 32, .speed = "", .device = "devices/pci0000:00/0000:81:00.0"});
    fs_.rdmaPort("mlx5_0", "devices/pci0000:00/0000:81:00.0", 1, {});

    // RoCE NIC: the kernel names its netdev in gid_attrs.
    fs_.pciDevice("0000:82:00.0", 0);
    fs_.netdev("ens2f0", {.speed = "25000", .device = "devices/pci0000:00/0000:82:00.0"});
    fs_.rdmaPort("mlx5_1", "devices/pci0000:00/0000:82:00.0", 1,
                 {.rate = "25 Gb/sec (1X EDR)", .linkLayer = "Ethernet", .ndev = "ens2f0"});

    // A two-port RoCE NIC on an older kernel (no gid_attrs): ports match netdevs by dev_port; port 2 is down.
    fs_.pciDevice("0000:83:00.0", 0);
    fs_.netdev("ens3f0", {.speed = "50000", .devPort = 0, .device = "devices/pci0000:00/0000:83:00.0"});
    fs_.netdev("ens3f1", {.operstate = "down", .devPort = 1, .device = "devices/pci0000:00/0000:83:00.0"});
    fs_.rdmaPort("mlx5_2", "devices/pci0000:00/0000:83:00.0", 1,
                 {.rate = "50 Gb/sec (2X HDR)", .linkLayer = "Ethernet"});
    fs_.rdmaPort("mlx5_2", "devices/pci0000:00/0000:83:00.0", 2,
                 {.rate = "2.5 Gb/sec (1X SDR)", .linkLayer = "Ethernet", .state = "1: DOWN"});

    // An IB port with no netdev, still waiting for the subnet manager.
    fs_.pciDevice("0000:84:00.0", 1);
    fs_.rdmaPort("mlx5_3", "devices/pci0000:00/0000:84:00.0", 1, {.rate = "200 Gb/sec (4X HDR)", .state = "2: INIT"});

    // Plain Ethernet behind virtio: the device link ends below the PCI function.
    fs_.pciDevice("0000:00:03.0", -1);
    fs_.write("devices/pci0000:00/0000:00:03.0/virtio2/modalias", "virtio:d00000001v00001AF4");
    fs_.netdev("eth0", {.speed = "25000", .device = "devices/pci0000:00/0000:00:03.0/virtio2"});
    // A down Ethernet port: no readable speed.
    fs_.netdev("eth1", {.operstate = "down", .carrier = 0, .device = "devices/pci0000:00/0000:00:03.0/virtio2"});
    // Virtual interfaces.
    fs_.netdev("veth0", {.speed = "-1"});
    fs_.netdev("br0", {.operstate = "unknown", .carrier = 0});
    fs_.netdev("lo", {.type = 772, .operstate = "unknown"});
    nics_ = scanSysfsNics(fs_.root());
  }

  const Nic& nic(const std::string& name) {
    const Nic* n = findNic(nics_, name);
    if (n == nullptr) {
      ADD_FAILURE() << "no NIC " << name;
      static const Nic kMissing;
      return kMissing;
    }
    return *n;
  }

  FakeSysfs fs_;
  std::vector<Nic> nics_;
};

TEST_F(NicScanTest, FindsEveryInterfaceSortedByName) {
  std::vector<std::string> names;
  for (const Nic& n : nics_) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"br0", "ens2f0", "ens3f0", "ens3f1", "eth0", "eth1", "ib0", "lo",
                                             "mlx5_3:1", "veth0"}));
}

TEST_F(NicScanTest, InfinibandHcaWithIpoib) {
  const Nic& ib = nic("ib0");
  EXPECT_EQ(ib.kind, NicKind::kIb);
  EXPECT_EQ(ib.rateMbps, 100000u);
  EXPECT_EQ(ib.state, NicState::kUp);
  EXPECT_EQ(ib.rdmaDevice, "mlx5_0");
  EXPECT_EQ(ib.rdmaPort, 1);
  EXPECT_EQ(ib.pciBusId, "0000:81:00.0");
  EXPECT_EQ(ib.numaNode, 1);
  EXPECT_FALSE(ib.isVirtual);
}

TEST_F(NicScanTest, RoceThroughGidAttrs) {
  const Nic& roce = nic("ens2f0");
  EXPECT_EQ(roce.kind, NicKind::kRoce);
  EXPECT_EQ(roce.rateMbps, 25000u);
  EXPECT_EQ(roce.rdmaDevice, "mlx5_1");
  EXPECT_EQ(roce.numaNode, 0);
}

TEST_F(NicScanTest, RocePortsMatchNetdevsByDevPort) {
  const Nic& p1 = nic("ens3f0");
  const Nic& p2 = nic("ens3f1");
  EXPECT_EQ(p1.kind, NicKind::kRoce);
  EXPECT_EQ(p1.rdmaPort, 1);
  EXPECT_EQ(p1.rateMbps, 50000u);
  EXPECT_EQ(p1.state, NicState::kUp);
  EXPECT_EQ(p2.kind, NicKind::kRoce);
  EXPECT_EQ(p2.rdmaPort, 2);
  EXPECT_EQ(p2.rateMbps, 2500u);
  EXPECT_EQ(p2.state, NicState::kDown);
}

TEST_F(NicScanTest, RdmaPortWithoutNetdevIsItsOwnNic) {
  const Nic& port = nic("mlx5_3:1");
  EXPECT_EQ(port.kind, NicKind::kIb);
  EXPECT_EQ(port.rateMbps, 200000u);
  EXPECT_EQ(port.state, NicState::kDown) << "INIT is not usable yet";
  EXPECT_EQ(port.pciBusId, "0000:84:00.0");
  EXPECT_EQ(port.numaNode, 1);
}

TEST_F(NicScanTest, EthernetBehindVirtio) {
  const Nic& eth = nic("eth0");
  EXPECT_EQ(eth.kind, NicKind::kEth);
  EXPECT_EQ(eth.rateMbps, 25000u);
  EXPECT_EQ(eth.state, NicState::kUp);
  EXPECT_EQ(eth.pciBusId, "0000:00:03.0");
  EXPECT_EQ(eth.numaNode, -1) << "numa_node -1 stays unknown";
  EXPECT_TRUE(eth.rdmaDevice.empty());
}

TEST_F(NicScanTest, DownInterfaceHasUnknownRate) {
  const Nic& eth = nic("eth1");
  EXPECT_EQ(eth.state, NicState::kDown);
  EXPECT_EQ(eth.rateMbps, 0u);
}

TEST_F(NicScanTest, VirtualInterfaces) {
  const Nic& veth = nic("veth0");
  EXPECT_EQ(veth.kind, NicKind::kEth);
  EXPECT_EQ(veth.rateMbps, 0u) << "speed -1 is recorded as unknown";
  EXPECT_EQ(veth.state, NicState::kUp);
  EXPECT_TRUE(veth.isVirtual);
  EXPECT_TRUE(veth.pciBusId.empty());

  EXPECT_EQ(nic("br0").state, NicState::kDown) << "operstate unknown without carrier";
  const Nic& lo = nic("lo");
  EXPECT_TRUE(lo.loopback);
  EXPECT_TRUE(lo.isVirtual);
  EXPECT_EQ(lo.state, NicState::kUp) << "operstate unknown with carrier";
}

TEST(NicScan, MissingTreeGivesNoNics) { EXPECT_TRUE(scanSysfsNics("/nonexistent/hetcomm-sysfs").empty()); }

TEST(NicScan, VethSpeedFromSysfsIsKept) {
  FakeSysfs fs;
  fs.netdev("veth1", {.speed = "10000"});
  auto nics = scanSysfsNics(fs.root());
  ASSERT_EQ(nics.size(), 1u);
  EXPECT_EQ(nics[0].rateMbps, 10000u);
  EXPECT_TRUE(nics[0].isVirtual);
}

TEST(NicScan, IbRateParsing) {
  EXPECT_EQ(parseIbRateMbps("100 Gb/sec (4X EDR)"), 100000u);
  EXPECT_EQ(parseIbRateMbps("2.5 Gb/sec (1X SDR)"), 2500u);
  EXPECT_EQ(parseIbRateMbps("400 Gb/sec (4X NDR)"), 400000u);
  EXPECT_EQ(parseIbRateMbps(""), 0u);
  EXPECT_EQ(parseIbRateMbps("fast"), 0u);
  EXPECT_EQ(parseIbRateMbps("100 Mb/s"), 0u);
}

TEST(NicScan, UnparsableRdmaRateIsUnknown) {
  FakeSysfs fs;
  fs.pciDevice("0000:05:00.0", 0);
  fs.rdmaPort("qib0", "devices/pci0000:00/0000:05:00.0", 1, {.rate = "weird"});
  auto nics = scanSysfsNics(fs.root());
  ASSERT_EQ(nics.size(), 1u);
  EXPECT_EQ(nics[0].name, "qib0:1");
  EXPECT_EQ(nics[0].rateMbps, 0u);
}

// discoverLocalNode over a fake tree: identity from the options, addresses attached by name, the topology file
// applied last.
TEST(DiscoverLocalNode, FakeTreeWithAddressesAndTopoFile) {
  FakeSysfs fs;
  fs.netdev("veth-ib", {.speed = "-1"});
  fs.netdev("eth0", {.speed = "1000"});
  fs.write("topo.json", R"({"hosts": [{"hostId": "h7", "nics": [{"name": "veth-ib", "kind": "ib",
                            "rateMbps": 100000, "fabric": "ib-a"}]}]})");
  DiscoveryOptions o;
  o.sysfsRoot = fs.root();
  o.useHwloc = false;
  o.hostId = "h7";
  o.hostName = "node7";
  o.localRank = 3;
  o.addresses =
      std::map<std::string, std::vector<std::string>>{{"veth-ib", {"10.1.0.7/24"}}, {"eth0", {"10.0.0.7/24"}}};
  o.topoFile = fs.path("topo.json").string();
  auto node = discoverLocalNode(o);
  ASSERT_TRUE(node.has_value()) << node.error().toString();
  EXPECT_EQ(node->hostId, "h7");
  EXPECT_EQ(node->hostName, "node7");
  EXPECT_EQ(node->localRank, 3);
  EXPECT_GT(node->pid, 0);
  ASSERT_EQ(node->nics.size(), 2u);
  EXPECT_EQ(node->nics[0].name, "eth0");
  EXPECT_EQ(node->nics[0].addresses, std::vector<std::string>{"10.0.0.7/24"});
  EXPECT_EQ(node->nics[0].rateMbps, 1000u);
  EXPECT_FALSE(node->nics[0].fromTopoFile);
  const Nic& ib = node->nics[1];
  EXPECT_EQ(ib.kind, NicKind::kIb);
  EXPECT_EQ(ib.rateMbps, 100000u);
  EXPECT_EQ(ib.fabric, "ib-a");
  EXPECT_TRUE(ib.fromTopoFile);
  EXPECT_EQ(node->topoFile, o.topoFile);
}

TEST(DiscoverLocalNode, BadTopoFileFailsDiscovery) {
  FakeSysfs fs;
  fs.write("topo.json", R"({"hosts": [{"hostId": "*", "nics": [{"name": "eth0", "kind": "fast"}]}]})");
  DiscoveryOptions o;
  o.sysfsRoot = fs.root();
  o.useHwloc = false;
  o.addresses.emplace();
  o.topoFile = fs.path("topo.json").string();
  auto node = discoverLocalNode(o);
  ASSERT_FALSE(node.has_value());
  EXPECT_NE(node.error().message().find(o.topoFile), std::string_view::npos) << node.error().toString();
  EXPECT_NE(node.error().message().find("$.hosts[0].nics[0].kind"), std::string_view::npos) << node.error().toString();
}

}  // namespace
}  // namespace hetcomm::topo
