#include "topology/topo_file.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "topology/json_reader.h"
#include "topology/node_json.h"

namespace hetcomm::topo {
namespace {

using nlohmann::json;

constexpr int kTopoFileVersion = 1;
constexpr int kMaxGpuCount = 4096;  // a "count" above this is a typo, not a machine

// "version" is optional; when given it must be one this build reads.
void readVersion(JsonObjectReader& r) {
  int version = kTopoFileVersion;
  if (r.i32("version", version) && version != kTopoFileVersion)
    r.fail("version", "version " + std::to_string(version) + " is not supported (this build reads " +
                          std::to_string(kTopoFileVersion) + ")");
}

Result<NicOverride> nicOverrideFromJson(const json& v, const std::string& path) {
  JsonObjectReader r(v, path);
  NicOverride o;
  std::string kind, state, fabric;
  uint64_t rate = 0;
  r.str("name", o.name, /*required=*/true);
  if (r.str("kind", kind)) {
    o.kind = parseNicKind(kind);
    if (!o.kind) r.fail("kind", "expected one of ib, roce, eth, got \"" + kind + "\"");
  }
  if (r.u64("rateMbps", rate)) o.rateMbps = rate;
  if (r.str("fabric", fabric)) o.fabric = fabric;
  if (r.str("state", state)) {
    o.state = parseNicState(state);
    if (!o.state) r.fail("state", "expected up or down, got \"" + state + "\"");
  }
  HC_TRY(r.finish());
  if (o.name.empty()) return invalidArgument("%s.name: empty", path.c_str());
  return o;
}

Result<HostOverride> hostOverrideFromJson(const json& v, const std::string& path) {
  JsonObjectReader r(v, path);
  HostOverride h;
  std::string id, name;
  if (r.str("hostId", id)) {
    if (id.empty()) r.fail("hostId", "empty (use \"*\" for any host)");
    h.hostId = id;
  }
  if (r.str("hostName", name)) {
    if (name.empty()) r.fail("hostName", "empty (use \"*\" for any host)");
    h.hostName = name;
  }
  r.array("nics", [&](const json& e, const std::string& p) -> Status {
    HC_ASSIGN_OR_RETURN(NicOverride o, nicOverrideFromJson(e, p));
    for (const NicOverride& prev : h.nics) {
      if (prev.name == o.name) return invalidArgument("%s.name: NIC \"%s\" given twice", p.c_str(), o.name.c_str());
    }
    h.nics.push_back(std::move(o));
    return okStatus();
  });
  r.array("gpus", [&](const json& e, const std::string& p) -> Status {
    HC_ASSIGN_OR_RETURN(GpuOverride o, gpuOverrideFromJson(e, p));
    h.gpus.push_back(std::move(o));
    return okStatus();
  });
  HC_TRY(r.finish());
  if (!h.hostId && !h.hostName) return invalidArgument("%s: needs \"hostId\" or \"hostName\"", path.c_str());
  return h;
}

// Adds "<what> <source>: " in front of a reader's message (which already names the JSON path).
Status inFile(const char* what, const std::string& source, const Status& st) {
  return Status(st.code(), std::string(what) + " " + source + ": " + std::string(st.message()));
}

json linksToJson(const LinkMatrix& m) {
  json classes = json::array(), alpha = json::array(), bw = json::array(), measured = json::array();
  for (int i = 0; i < m.size(); ++i) {
    json c = json::array(), a = json::array(), b = json::array(), me = json::array();
    for (int j = 0; j < m.size(); ++j) {
      const Link& l = m.at(i, j);
      c.push_back(linkClassLabel(l.cls));
      a.push_back(l.alphaUs);
      b.push_back(l.bwGBps);
      me.push_back(l.measured);
    }
    classes.push_back(c);
    alpha.push_back(a);
    bw.push_back(b);
    measured.push_back(me);
  }
  return {{"classes", classes}, {"alphaUs", alpha}, {"bandwidthGBps", bw}, {"measured", measured}};
}

}  // namespace

Result<GpuOverride> gpuOverrideFromJson(const json& v, const std::string& path) {
  JsonObjectReader r(v, path);
  GpuOverride o;
  std::string model;
  double peak = 0;
  uint64_t memory = 0;
  if (r.str("model", model)) o.model = model;
  if (r.number("peakTflops", peak)) o.peakTflops = peak;
  if (r.bytes("memoryBytes", memory)) o.memoryBytes = memory;
  if (r.i32("count", o.count) && (o.count < 1 || o.count > kMaxGpuCount))
    r.fail("count", "expected 1 to " + std::to_string(kMaxGpuCount) + ", got " + std::to_string(o.count));
  HC_TRY(r.finish());
  return o;
}

bool HostOverride::matches(const NodeDescription& node) const {
  auto ok = [](const std::optional<std::string>& want, const std::string& have) {
    return !want || *want == "*" || *want == have;
  };
  return ok(hostId, node.hostId) && ok(hostName, node.hostName);
}

Result<TopoFile> TopoFile::load(const std::string& path) {
  auto text = readTextFile(path);  // its message names the path
  if (!text) return Status(text.error().code(), "topo file: " + std::string(text.error().message()));
  return parse(*text, path);
}

Result<TopoFile> TopoFile::parse(std::string_view text, const std::string& source) {
  auto doc = parseJson(text, "topo file " + source);
  if (!doc) return doc.error();
  TopoFile file;
  file.source_ = source;
  JsonObjectReader r(*doc, "$");
  readVersion(r);
  r.skip("description");
  r.array(
      "hosts",
      [&](const json& e, const std::string& p) -> Status {
        HC_ASSIGN_OR_RETURN(HostOverride h, hostOverrideFromJson(e, p));
        file.hosts_.push_back(std::move(h));
        return okStatus();
      },
      /*required=*/true);
  if (Status st = r.finish(); !st.ok()) return inFile("topo file", source, st);
  HC_TRACE(Topo, "topo file %s: %zu host entries", source.c_str(), file.hosts_.size());
  return file;
}

int TopoFile::apply(NodeDescription& node) const {
  int matched = 0;
  for (const HostOverride& h : hosts_) {
    if (!h.matches(node)) continue;
    ++matched;
    for (const NicOverride& o : h.nics) {
      auto it = std::find_if(node.nics.begin(), node.nics.end(), [&](const Nic& n) { return n.name == o.name; });
      if (it == node.nics.end()) {
        // Declared but not discovered (an RDMA port a container hides, an emulated interface).
        node.nics.emplace_back();
        it = node.nics.end() - 1;
        it->name = o.name;
      }
      if (o.kind) it->kind = *o.kind;
      if (o.rateMbps) it->rateMbps = *o.rateMbps;
      if (o.fabric) it->fabric = *o.fabric;
      if (o.state) it->state = *o.state;
      it->fromTopoFile = true;
    }
    size_t g = 0;
    for (const GpuOverride& o : h.gpus) {
      for (int c = 0; c < o.count; ++c, ++g) {
        if (g == node.gpus.size()) node.gpus.emplace_back();
        Gpu& gpu = node.gpus[g];
        if (o.model) gpu.model = *o.model;
        if (o.peakTflops) gpu.peakTflops = *o.peakTflops;
        if (o.memoryBytes) gpu.memoryBytes = *o.memoryBytes;
        gpu.fromTopoFile = true;
      }
    }
  }
  if (matched > 0) {
    std::sort(node.nics.begin(), node.nics.end(), [](const Nic& a, const Nic& b) { return a.name < b.name; });
    node.topoFile = source_;
  }
  return matched;
}

std::string dumpClusterJson(const ClusterView& view, const LinkMatrix* links) {
  json ranks = json::array(), fabrics = json::array(), islands = json::array();
  for (int r = 0; r < view.nranks(); ++r) ranks.push_back(nodeToJson(view.node(r)));
  for (const Fabric& f : view.fabrics()) {
    json members = json::array();
    for (NicRef ref : f.nics) members.push_back({{"host", view.hosts()[ref.host].name}, {"nic", view.nic(ref).name}});
    fabrics.push_back({{"name", f.name}, {"kind", nicKindName(f.kind)}, {"named", f.named}, {"nics", members}});
  }
  for (const Island& island : view.islands()) {
    json hosts = json::array(), via = json::array();
    for (int h : island.hosts) hosts.push_back(view.hosts()[h].name);
    for (int f : island.fabrics) via.push_back(view.fabrics()[f].name);
    islands.push_back(
        {{"kind", islandKindName(island.kind)}, {"hosts", hosts}, {"ranks", island.ranks}, {"fabrics", via}});
  }
  json derived = {{"fabrics", fabrics}, {"islands", islands}};
  if (links != nullptr) derived["links"] = linksToJson(*links);
  json doc = {{"version", kTopoFileVersion}, {"ranks", ranks}, {"derived", derived}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<std::vector<NodeDescription>> parseClusterDump(std::string_view text, const std::string& source) {
  auto doc = parseJson(text, "cluster file " + source);
  if (!doc) return doc.error();
  std::vector<NodeDescription> nodes;
  JsonObjectReader r(*doc, "$");
  readVersion(r);
  r.skip("description");
  r.skip("derived");
  r.array(
      "ranks",
      [&](const json& e, const std::string& p) -> Status {
        HC_ASSIGN_OR_RETURN(NodeDescription n, nodeFromJson(e, p));
        nodes.push_back(std::move(n));
        return okStatus();
      },
      /*required=*/true);
  if (Status st = r.finish(); !st.ok()) return inFile("cluster file", source, st);
  if (nodes.empty()) return invalidArgument("cluster file %s: $.ranks: empty", source.c_str());
  return nodes;
}

Result<std::vector<NodeDescription>> loadClusterDump(const std::string& path) {
  auto text = readTextFile(path);
  if (!text) return Status(text.error().code(), "cluster file: " + std::string(text.error().message()));
  return parseClusterDump(*text, path);
}

}  // namespace hetcomm::topo
