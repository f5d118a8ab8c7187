#include "topology/hwloc_discovery.h"

#include <hwloc.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::topo {
namespace {

constexpr uint16_t kVendorNvidia = 0x10de;
constexpr uint16_t kVendorAmd = 0x1002;
constexpr uint16_t kClass3dController = 0x0302;

// Destroys the topology on every return path.
class TopologyOwner {
 public:
  TopologyOwner() = default;
  ~TopologyOwner() {
    if (topo_ != nullptr) hwloc_topology_destroy(topo_);
  }
  TopologyOwner(const TopologyOwner&) = delete;
  TopologyOwner& operator=(const TopologyOwner&) = delete;
  hwloc_topology_t* out() { return &topo_; }
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

int osIndexOr(hwloc_obj_t obj) {
  return obj->os_index == HWLOC_UNKNOWN_INDEX ? static_cast<int>(obj->logical_index) : static_cast<int>(obj->os_index);
}

int countInside(hwloc_topology_t topo, hwloc_obj_t obj, hwloc_obj_type_t type) {
  return hwloc_get_nbobjs_inside_cpuset_by_type(topo, obj->cpuset, type);
}

// The NUMA node an I/O object is attached to, or -1 when it hangs above several (or hwloc does not know).
int numaOf(hwloc_topology_t topo, hwloc_obj_t io) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, io);
  if (anc == nullptr || anc->nodeset == nullptr || hwloc_bitmap_weight(anc->nodeset) != 1) return -1;
  return hwloc_bitmap_first(anc->nodeset);  // nodesets hold OS indexes
}

// DRM nodes ("card0", "renderD128") exist for every display adapter, a server's BMC VGA included: they do not
// make a compute GPU. CUDA, NVML, OpenCL, ROCm SMI and Level Zero devices do.
bool isComputeOsDevice(hwloc_obj_t os) {
  auto type = os->attr->osdev.type;
  if (type == HWLOC_OBJ_OSDEV_COPROC) return true;
  if (type != HWLOC_OBJ_OSDEV_GPU || os->name == nullptr) return false;
  std::string_view name(os->name);
  return !(name.starts_with("card") || name.starts_with("renderD") || name.starts_with("controlD") ||
           name.starts_with(":"));
}

bool isInterestingClass(uint16_t classId) {
  uint8_t base = classId >> 8;
  return base == 0x02 /* network */ || base == 0x03 /* display */ || base == 0x12 /* accelerator */ ||
         classId == 0x0b40 /* co-processor */;
}

// Memory sizes hwloc's GPU backends report, in KiB.
uint64_t gpuMemoryBytes(hwloc_obj_t os) {
  for (const char* key : {"CUDAGlobalMemorySize", "OpenCLGlobalMemorySize"}) {
    if (const char* v = hwloc_obj_get_info_by_name(os, key)) return std::strtoull(v, nullptr, 10) * 1024;
  }
  return 0;
}

void addPciDevice(hwloc_topology_t topo, hwloc_obj_t pci, NodeDescription& node) {
  const auto& a = pci->attr->pcidev;
  bool interesting = isInterestingClass(a.class_id);
  bool compute = false;
  Gpu gpu;
  PciDevice dev;
  for (hwloc_obj_t os = pci->io_first_child; os != nullptr; os = os->next_sibling) {
    if (os->type != HWLOC_OBJ_OS_DEVICE) continue;
    if (os->name) dev.osDevices.push_back(os->name);
    auto t = os->attr->osdev.type;
    if (t == HWLOC_OBJ_OSDEV_NETWORK || t == HWLOC_OBJ_OSDEV_OPENFABRICS) interesting = true;
    if (isComputeOsDevice(os)) {
      interesting = compute = true;
      if (const char* model = hwloc_obj_get_info_by_name(os, "GPUModel"); model && gpu.model.empty()) gpu.model = model;
      if (gpu.memoryBytes == 0) gpu.memoryBytes = gpuMemoryBytes(os);
    }
  }
  if (!interesting) return;

  dev.busId = format("%04x:%02x:%02x.%x", a.domain, a.bus, a.dev, a.func);
  dev.vendorId = a.vendor_id;
  dev.deviceId = a.device_id;
  dev.classId = a.class_id;
  if (const char* name = hwloc_obj_get_info_by_name(pci, "PCIDevice")) dev.name = name;
  dev.numaNode = numaOf(topo, pci);

  // Without a CUDA or ROCm plugin (Debian's hwloc has neither) a GPU is still a 3D controller, or an NVIDIA or
  // AMD display controller, on the PCI bus.
  bool gpuClass = a.class_id == kClass3dController ||
                  ((a.class_id >> 8) == 0x03 && (a.vendor_id == kVendorNvidia || a.vendor_id == kVendorAmd));
  if (compute || gpuClass) {
    if (gpu.model.empty()) gpu.model = !dev.name.empty() ? dev.name : format("pci %04x:%04x", a.vendor_id, a.device_id);
    gpu.pciBusId = dev.busId;
    gpu.numaNode = dev.numaNode;
    node.gpus.push_back(std::move(gpu));
  }
  node.pciDevices.push_back(std::move(dev));
}

// This machine's topology (hwlocXml empty) or an XML export's, with the I/O devices ioFilter keeps.
Status loadTopology(TopologyOwner& owner, const std::string& hwlocXml, hwloc_type_filter_e ioFilter) {
  if (hwloc_topology_init(owner.out()) != 0) return errnoStatus(errno, "hwloc_topology_init");
  hwloc_topology_t topo = owner.get();
  // Distances, memory attributes and CPU kinds are unused; skipping them keeps init short when 8 ranks on 2
  // cores discover at once.
  hwloc_topology_set_flags(
      topo, HWLOC_TOPOLOGY_FLAG_NO_DISTANCES | HWLOC_TOPOLOGY_FLAG_NO_MEMATTRS | HWLOC_TOPOLOGY_FLAG_NO_CPUKINDS);
  hwloc_topology_set_io_types_filter(topo, ioFilter);
  if (!hwlocXml.empty() && hwloc_topology_set_xml(topo, hwlocXml.c_str()) != 0)
    return errnoStatus(errno, "hwloc: cannot use XML topology %s", hwlocXml.c_str());
  if (hwloc_topology_load(topo) != 0)
    return errnoStatus(errno, "hwloc: cannot load the topology%s%s", hwlocXml.empty() ? "" : " from ",
                       hwlocXml.c_str());
  return okStatus();
}

}  // namespace

Status discoverHardware(const std::string& hwlocXml, NodeDescription& node) {
  TopologyOwner owner;
  // KEEP_IMPORTANT: PCI devices and OS devices (NICs, HCAs, GPUs), without the bridges and misc devices between.
  HC_TRY(loadTopology(owner, hwlocXml, HWLOC_TYPE_FILTER_KEEP_IMPORTANT));
  hwloc_topology_t topo = owner.get();

  int npackages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < npackages; ++i) {
    hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, i);
    node.packages.push_back(
        {osIndexOr(pkg), countInside(topo, pkg, HWLOC_OBJ_CORE), countInside(topo, pkg, HWLOC_OBJ_PU)});
  }
  int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nnuma; ++i) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    node.numaNodes.push_back(
        {osIndexOr(numa), numa->attr->numanode.local_memory, countInside(topo, numa, HWLOC_OBJ_CORE)});
  }
  node.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  node.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  if (node.cores <= 0) node.cores = node.pus;  // some platforms expose PUs only

  for (hwloc_obj_t pci = hwloc_get_next_pcidev(topo, nullptr); pci != nullptr; pci = hwloc_get_next_pcidev(topo, pci))
    addPciDevice(topo, pci, node);

  HC_TRACE(Topo, "hwloc: %zu packages, %zu NUMA nodes, %d cores, %d PUs, %zu PCI devices of interest, %zu GPUs",
           node.packages.size(), node.numaNodes.size(), node.cores, node.pus, node.pciDevices.size(), node.gpus.size());
  return okStatus();
}

Result<std::vector<std::vector<int>>> allowedCores(const std::string& hwlocXml) {
  TopologyOwner owner;
  HC_TRY(loadTopology(owner, hwlocXml, HWLOC_TYPE_FILTER_KEEP_NONE));
  hwloc_topology_t topo = owner.get();
  // hwloc leaves out what the cgroup forbids; the affinity mask (taskset, a launcher's binding) it does not.
  using Bitmap = std::unique_ptr<hwloc_bitmap_s, void (*)(hwloc_bitmap_t)>;
  Bitmap allowed(hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo)), hwloc_bitmap_free);
  if (hwlocXml.empty()) {
    Bitmap bound(hwloc_bitmap_alloc(), hwloc_bitmap_free);
    if (hwloc_get_cpubind(topo, bound.get(), HWLOC_CPUBIND_PROCESS) == 0)
      hwloc_bitmap_and(allowed.get(), allowed.get(), bound.get());
  }
  std::vector<std::vector<int>> cores;
  const int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, i);
    std::vector<int> threads;
    unsigned cpu;
    hwloc_bitmap_foreach_begin(cpu, core->cpuset) {
      if (hwloc_bitmap_isset(allowed.get(), cpu)) threads.push_back(static_cast<int>(cpu));
    }
    hwloc_bitmap_foreach_end();
    if (!threads.empty()) cores.push_back(std::move(threads));
  }
  if (cores.empty())
    return systemError("hwloc: no core this process may run on%s%s", hwlocXml.empty() ? "" : " in ", hwlocXml.c_str());
  return cores;
}

}  // namespace hetcomm::topo
