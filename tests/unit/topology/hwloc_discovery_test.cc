// hwloc discovery: on this machine (only what is certain anywhere: a core and a host identity), and on an hwloc
// XML export of a two-socket GPU node, where packages, NUMA memory, PCI devices of interest, GPUs and NIC NUMA
// placement have exact expected values.
#include "topology/hwloc_discovery.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>

#include "tests/unit/topology/fake_sysfs.h"
#include "topology/host_identity.h"
#include "topology/node.h"

namespace hetcomm::topo {
namespace {

// A two-socket GPU node: package 0 (NUMA 0, 64 GiB) holds an H100 with a CUDA OS device and a BMC VGA adapter (a
// display device, not a GPU); package 1 (NUMA 1, 32 GiB) holds a ConnectX HCA, an AMD accelerator with only its PCI
// class to go by, and an NVMe disk (not of interest). The file has no XML comment: hwloc's own minimal parser,
// which it falls back to without libxml2 (libhwloc-plugins), refuses one.
const std::string kGpuNodeXml = std::string(HETCOMM_TOPOLOGY_FIXTURES) + "/gpu-node.xml";

TEST(HwlocDiscovery, ThisMachine) {
  auto node = discoverLocalNode(DiscoveryOptions{});
  ASSERT_TRUE(node.has_value()) << node.error().toString();
  EXPECT_GE(node->cores, 1);
  EXPECT_GE(node->pus, node->cores);
  EXPECT_FALSE(node->hostId.empty());
  EXPECT_EQ(node->hostId, hostIdentity());
  EXPECT_FALSE(node->packages.empty() && node->numaNodes.empty()) << formatNode(*node);
  // Every Linux network namespace has a loopback interface.
  if (std::filesystem::exists("/sys/class/net/lo")) {
    bool sawLoopback = false;
    for (const Nic& nic : node->nics) sawLoopback |= nic.loopback;
    EXPECT_TRUE(sawLoopback) << formatNode(*node);
  }
}

class GpuNodeXml : public ::testing::Test {
 protected:
  void SetUp() override {
    Status st = discoverHardware(kGpuNodeXml, node_);
    ASSERT_TRUE(st.ok()) << st.toString();
  }
  const PciDevice* pci(const std::string& busId) const {
    for (const PciDevice& d : node_.pciDevices)
      if (d.busId == busId) return &d;
    return nullptr;
  }
  NodeDescription node_;
};

TEST_F(GpuNodeXml, PackagesNumaAndCores) {
  EXPECT_EQ(node_.cores, 4);
  EXPECT_EQ(node_.pus, 4);
  ASSERT_EQ(node_.packages.size(), 2u);
  EXPECT_EQ(node_.packages[1].index, 1);
  EXPECT_EQ(node_.packages[1].cores, 2);
  ASSERT_EQ(node_.numaNodes.size(), 2u);
  EXPECT_EQ(node_.numaNodes[0].memoryBytes, 64ull << 30);
  EXPECT_EQ(node_.numaNodes[1].memoryBytes, 32ull << 30);
  EXPECT_EQ(node_.numaNodes[1].cores, 2);
}

TEST_F(GpuNodeXml, PciDevicesOfInterest) {
  const PciDevice* hca = pci("0000:81:00.0");
  ASSERT_NE(hca, nullptr) << formatNode(node_);
  EXPECT_EQ(hca->classId, 0x0207);
  EXPECT_EQ(hca->vendorId, 0x15b3);
  EXPECT_EQ(hca->numaNode, 1);
  EXPECT_EQ(hca->osDevices, (std::vector<std::string>{"ib0", "mlx5_0"}));
  EXPECT_NE(pci("0000:1b:00.0"), nullptr);
  EXPECT_NE(pci("0000:03:00.0"), nullptr) << "a display adapter is listed";
  EXPECT_EQ(pci("0000:c2:00.0"), nullptr) << "an NVMe disk is not of interest";
}

TEST_F(GpuNodeXml, GpusFromCudaAndFromPciClass) {
  ASSERT_EQ(node_.gpus.size(), 2u) << formatNode(node_);
  const Gpu& h100 = node_.gpus[0];
  EXPECT_EQ(h100.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.memoryBytes, 83517440ull * 1024);
  EXPECT_EQ(h100.pciBusId, "0000:1b:00.0");
  EXPECT_EQ(h100.numaNode, 0);
  EXPECT_EQ(h100.peakTflops, 0) << "only a topology file gives the peak";
  // No CUDA/ROCm plugin for the AMD one: its PCI class and vendor make it a GPU, memory unknown.
  const Gpu& amd = node_.gpus[1];
  EXPECT_EQ(amd.model, "pci 1002:740c");
  EXPECT_EQ(amd.memoryBytes, 0u);
  EXPECT_EQ(amd.numaNode, 1);
}

TEST(HwlocDiscovery, MissingXmlIsAnError) {
  NodeDescription node;
  Status st = discoverHardware("/nonexistent/topology.xml", node);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/topology.xml"), std::string_view::npos) << st.toString();
}

// What hetcomm-run --bind-to core binds to: every core with its hardware threads, in order; on this machine only
// CPUs this process may run on.
TEST_F(GpuNodeXml, AllowedCoresListEachCoreWithItsThreads) {
  auto cores = allowedCores(kGpuNodeXml);
  ASSERT_TRUE(cores.has_value()) << cores.error().toString();
  EXPECT_EQ(*cores, (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));
}

TEST(HwlocDiscovery, AllowedCoresOnThisMachineAreInTheAffinityMask) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  auto cores = allowedCores("");
  ASSERT_TRUE(cores.has_value()) << cores.error().toString();
  ASSERT_FALSE(cores->empty());
  int cpus = 0;
  for (const auto& core : *cores) {
    EXPECT_FALSE(core.empty());
    for (int cpu : core) {
      EXPECT_TRUE(CPU_ISSET(cpu, &mask)) << "CPU " << cpu;
      ++cpus;
    }
  }
  EXPECT_EQ(cpus, CPU_COUNT(&mask));
  auto missing = allowedCores("/nonexistent/topology.xml");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message().find("/nonexistent/topology.xml"), std::string_view::npos);
}

// NIC NUMA placement: sysfs says -1, hwloc knows the HCA hangs off package 1.
TEST(HwlocDiscovery, NicNumaFilledFromHwloc) {
  testing::FakeSysfs fs;
  fs.pciDevice("0000:81:00.0", -1);
  fs.netdev("ib0", {.type = 32, .device = "devices/pci0000:00/0000:81:00.0"});
  DiscoveryOptions o;
  o.hwlocXml = kGpuNodeXml;
  o.sysfsRoot = fs.root();
  o.addresses.emplace();
  auto node = discoverLocalNode(o);
  ASSERT_TRUE(node.has_value()) << node.error().toString();
  ASSERT_EQ(node->nics.size(), 1u);
  EXPECT_EQ(node->nics[0].pciBusId, "0000:81:00.0");
  EXPECT_EQ(node->nics[0].numaNode, 1);
  EXPECT_EQ(node->gpus.size(), 2u);
}

}  // namespace
}  // namespace hetcomm::topo
