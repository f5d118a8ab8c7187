#include "topology/node_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "topology/ip_prefix.h"
#include "topology/json_reader.h"

namespace hetcomm::topo {
namespace {

using nlohmann::json;

json nicToJson(const Nic& n) {
  return {{"name", n.name},
          {"kind", nicKindName(n.kind)},
          {"rateMbps", n.rateMbps},
          {"state", nicStateName(n.state)},
          {"fabric", n.fabric},
          {"addresses", n.addresses},
          {"numaNode", n.numaNode},
          {"pciBusId", n.pciBusId},
          {"rdmaDevice", n.rdmaDevice},
          {"rdmaPort", n.rdmaPort},
          {"virtual", n.isVirtual},
          {"loopback", n.loopback},
          {"fromTopoFile", n.fromTopoFile}};
}

json gpuToJson(const Gpu& g) {
  return {{"model", g.model},       {"memoryBytes", g.memoryBytes}, {"peakTflops", g.peakTflops},
          {"pciBusId", g.pciBusId}, {"numaNode", g.numaNode},       {"fromTopoFile", g.fromTopoFile}};
}

// An address must carry its prefix length: without it the subnet, and so the fabric, is unknown.
void readAddresses(JsonObjectReader& r, std::vector<std::string>& out) {
  r.array("addresses", [&](const json& v, const std::string& path) -> Status {
    auto p = v.is_string() ? IpPrefix::parse(v.get<std::string>()) : std::nullopt;
    if (!p)
      return invalidArgument("%s: expected an address with prefix length like \"10.0.0.1/24\", got %s", path.c_str(),
                             jsonSnippet(v).c_str());
    out.push_back(p->toString());
    return okStatus();
  });
  std::sort(out.begin(), out.end());
}

Result<Nic> nicFromJson(const json& v, const std::string& path) {
  JsonObjectReader r(v, path);
  Nic n;
  std::string kind, state;
  r.str("name", n.name, /*required=*/true);
  if (r.str("kind", kind, /*required=*/true) && !parseNicKind(kind))
    r.fail("kind", "expected one of ib, roce, eth, got \"" + kind + "\"");
  if (r.str("state", state) && !parseNicState(state)) r.fail("state", "expected up or down, got \"" + state + "\"");
  r.u64("rateMbps", n.rateMbps);
  r.str("fabric", n.fabric);
  readAddresses(r, n.addresses);
  r.i32("numaNode", n.numaNode);
  r.str("pciBusId", n.pciBusId);
  r.str("rdmaDevice", n.rdmaDevice);
  r.i32("rdmaPort", n.rdmaPort);
  r.boolean("virtual", n.isVirtual);
  r.boolean("loopback", n.loopback);
  r.boolean("fromTopoFile", n.fromTopoFile);
  HC_TRY(r.finish());
  if (n.name.empty()) return invalidArgument("%s.name: empty", path.c_str());
  n.kind = *parseNicKind(kind);
  if (!state.empty()) n.state = *parseNicState(state);
  return n;
}

Result<Gpu> gpuFromJson(const json& v, const std::string& path) {
  JsonObjectReader r(v, path);
  Gpu g;
  r.str("model", g.model);
  r.bytes("memoryBytes", g.memoryBytes);
  r.number("peakTflops", g.peakTflops);
  r.str("pciBusId", g.pciBusId);
  r.i32("numaNode", g.numaNode);
  r.boolean("fromTopoFile", g.fromTopoFile);
  HC_TRY(r.finish());
  return g;
}

Result<PciDevice> pciFromJson(const json& v, const std::string& path) {
  JsonObjectReader r(v, path);
  PciDevice d;
  uint64_t vendor = 0, device = 0, cls = 0;
  r.str("busId", d.busId, /*required=*/true);
  r.u64("vendorId", vendor);
  r.u64("deviceId", device);
  r.u64("classId", cls);
  for (auto [key, id] : {std::pair{"vendorId", vendor}, {"deviceId", device}, {"classId", cls}}) {
    if (id > 0xffff) r.fail(key, "PCI ids are 16-bit");
  }
  r.str("name", d.name);
  r.i32("numaNode", d.numaNode);
  r.array("osDevices", [&](const json& e, const std::string& p) -> Status {
    if (!e.is_string()) return invalidArgument("%s: expected a string, got %s", p.c_str(), jsonSnippet(e).c_str());
    d.osDevices.push_back(e.get<std::string>());
    return okStatus();
  });
  HC_TRY(r.finish());
  d.vendorId = static_cast<uint16_t>(vendor);
  d.deviceId = static_cast<uint16_t>(device);
  d.classId = static_cast<uint16_t>(cls);
  return d;
}

// Element readers for JsonObjectReader::array that append to a vector.
template <class T, class Fn>
JsonObjectReader::ElementFn appendTo(std::vector<T>& out, Fn fromJson) {
  return [&out, fromJson](const json& v, const std::string& path) -> Status {
    HC_ASSIGN_OR_RETURN(T item, fromJson(v, path));
    out.push_back(std::move(item));
    return okStatus();
  };
}

}  // namespace

json nodeToJson(const NodeDescription& node) {
  json packages = json::array(), numa = json::array(), pci = json::array(), nics = json::array(), gpus = json::array();
  for (const Package& p : node.packages) packages.push_back({{"index", p.index}, {"cores", p.cores}, {"pus", p.pus}});
  for (const NumaNode& n : node.numaNodes)
    numa.push_back({{"index", n.index}, {"memoryBytes", n.memoryBytes}, {"cores", n.cores}});
  for (const PciDevice& d : node.pciDevices) {
    pci.push_back({{"busId", d.busId},
                   {"vendorId", d.vendorId},
                   {"deviceId", d.deviceId},
                   {"classId", d.classId},
                   {"name", d.name},
                   {"numaNode", d.numaNode},
                   {"osDevices", d.osDevices}});
  }
  for (const Nic& n : node.nics) nics.push_back(nicToJson(n));
  for (const Gpu& g : node.gpus) gpus.push_back(gpuToJson(g));
  return {{"hostId", node.hostId},     {"hostName", node.hostName}, {"pid", node.pid}, {"localRank", node.localRank},
          {"topoFile", node.topoFile}, {"cores", node.cores},       {"pus", node.pus}, {"packages", packages},
          {"numaNodes", numa},         {"pciDevices", pci},         {"nics", nics},    {"gpus", gpus}};
}

Result<NodeDescription> nodeFromJson(const json& value, const std::string& path) {
  JsonObjectReader r(value, path);
  NodeDescription node;
  r.str("hostId", node.hostId, /*required=*/true);
  r.str("hostName", node.hostName, /*required=*/true);
  r.i32("pid", node.pid);
  r.i32("localRank", node.localRank);
  r.str("topoFile", node.topoFile);
  r.i32("cores", node.cores);
  r.i32("pus", node.pus);
  r.array("packages", [&](const json& v, const std::string& p) -> Status {
    JsonObjectReader e(v, p);
    Package pkg;
    e.i32("index", pkg.index);
    e.i32("cores", pkg.cores);
    e.i32("pus", pkg.pus);
    node.packages.push_back(pkg);
    return e.finish();
  });
  r.array("numaNodes", [&](const json& v, const std::string& p) -> Status {
    JsonObjectReader e(v, p);
    NumaNode n;
    e.i32("index", n.index);
    e.bytes("memoryBytes", n.memoryBytes);
    e.i32("cores", n.cores);
    node.numaNodes.push_back(n);
    return e.finish();
  });
  r.array("pciDevices", appendTo(node.pciDevices, pciFromJson));
  r.array("nics", appendTo(node.nics, nicFromJson));
  r.array("gpus", appendTo(node.gpus, gpuFromJson));
  HC_TRY(r.finish());

  if (node.hostId.empty()) return invalidArgument("%s.hostId: empty", path.c_str());
  std::sort(node.nics.begin(), node.nics.end(), [](const Nic& a, const Nic& b) { return a.name < b.name; });
  for (size_t i = 1; i < node.nics.size(); ++i) {
    if (node.nics[i].name == node.nics[i - 1].name)
      return invalidArgument("%s.nics: two NICs named \"%s\"", path.c_str(), node.nics[i].name.c_str());
  }
  return node;
}

std::vector<std::byte> serializeNode(const NodeDescription& node) {
  json doc = {{"version", kNodeFormatVersion}, {"node", nodeToJson(node)}};
  std::string text = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  auto* p = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(p, p + text.size());
}

Result<NodeDescription> deserializeNode(std::span<const std::byte> bytes) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  HC_ASSIGN_OR_RETURN(json doc, parseJson(text, "node description"));
  JsonObjectReader r(doc, "$");
  int version = 0;
  if (r.i32("version", version, /*required=*/true) && version != kNodeFormatVersion)
    r.fail("version", "format " + std::to_string(version) + ", this build reads " + std::to_string(kNodeFormatVersion) +
                          " (ranks run different hetcomm builds?)");
  r.skip("node");
  Status st = r.finish();
  if (st.ok() && !doc.contains("node")) st = invalidArgument("$.node: missing");
  if (!st.ok()) return invalidArgument("node description: %s", std::string(st.message()).c_str());
  auto node = nodeFromJson(doc["node"], "$.node");
  if (!node) return invalidArgument("node description: %s", std::string(node.error().message()).c_str());
  return node;
}

}  // namespace hetcomm::topo
