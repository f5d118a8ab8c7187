#include "topology/cluster_spec.h"

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "common/strings.h"
#include "topology/json_reader.h"
#include "topology/topo_file.h"

namespace hetcomm::topo {
namespace {

using nlohmann::json;

constexpr int kMaxRanksPerHost = 1024;
constexpr uint64_t kMaxRateMbps = 400000;  // what emulate-cluster.sh accepts

Result<ClusterSpec::NicSpec> nicFromJson(const json& v, const std::string& path) {
  JsonObjectReader r(v, path);
  ClusterSpec::NicSpec nic;
  std::string kind;
  r.str("name", nic.name, true);
  if (r.str("kind", kind, true)) {
    auto k = parseNicKind(kind);
    if (!k) r.fail("kind", "expected one of ib, roce, eth, got \"" + kind + "\"");
    nic.kind = k.value_or(NicKind::kEth);
  }
  if (r.u64("rateMbps", nic.rateMbps, true) && (nic.rateMbps < 1 || nic.rateMbps > kMaxRateMbps))
    r.fail("rateMbps",
           format("expected 1 to %llu, got %llu", (unsigned long long)kMaxRateMbps, (unsigned long long)nic.rateMbps));
  r.str("fabric", nic.fabric, true);
  HC_TRY(r.finish());
  if (nic.name.empty()) return invalidArgument("%s.name: empty", path.c_str());
  if (nic.fabric.empty()) return invalidArgument("%s.fabric: empty", path.c_str());
  return nic;
}

Result<ClusterSpec> parseSpec(const json& doc);

}  // namespace

int ClusterSpec::nranks() const {
  int n = 0;
  for (const HostSpec& h : hosts) n += h.ranks;
  return n;
}

std::vector<NodeDescription> ClusterSpec::nodes() const {
  std::vector<NodeDescription> out;
  for (const HostSpec& h : hosts) {
    NodeDescription node;
    node.hostId = h.name;
    node.hostName = h.name;
    node.cores = node.pus = h.ranks;
    node.topoFile = "cluster file " + name;
    for (const NicSpec& spec : h.nics) {
      Nic nic;
      nic.name = spec.name;
      nic.kind = spec.kind;
      nic.rateMbps = spec.rateMbps;
      nic.fabric = spec.fabric;
      nic.isVirtual = true;
      nic.fromTopoFile = true;
      node.nics.push_back(std::move(nic));
    }
    node.gpus = h.gpus;
    for (int k = 0; k < h.ranks; ++k) {
      node.localRank = k;
      out.push_back(node);
    }
  }
  return out;
}

Result<ClusterSpec> parseClusterSpec(std::string_view text, const std::string& source) {
  HC_ASSIGN_OR_RETURN(json doc, parseJson(text, "cluster file " + source));
  auto spec = parseSpec(doc);
  if (!spec) return Status(spec.error().code(), "cluster file " + source + ": " + std::string(spec.error().message()));
  return spec;
}

namespace {

Result<ClusterSpec> parseSpec(const json& doc) {
  ClusterSpec spec;
  JsonObjectReader r(doc, "$");
  int ranksPerHost = 1;
  r.str("name", spec.name, true);
  r.str("description", spec.description);
  if (r.i32("ranksPerHost", ranksPerHost) && (ranksPerHost < 1 || ranksPerHost > kMaxRanksPerHost))
    r.fail("ranksPerHost", format("expected 1 to %d, got %d", kMaxRanksPerHost, ranksPerHost));
  std::set<std::string> names;
  std::map<std::string, NicKind> fabricKind;
  r.array(
      "hosts",
      [&](const json& hv, const std::string& path) -> Status {
        JsonObjectReader hr(hv, path);
        ClusterSpec::HostSpec host;
        host.ranks = ranksPerHost;
        hr.str("name", host.name, true);
        if (hr.i32("ranks", host.ranks) && (host.ranks < 1 || host.ranks > kMaxRanksPerHost))
          hr.fail("ranks", format("expected 1 to %d, got %d", kMaxRanksPerHost, host.ranks));
        std::set<std::string> nicNames;
        hr.array(
            "nics",
            [&](const json& nv, const std::string& npath) -> Status {
              HC_ASSIGN_OR_RETURN(ClusterSpec::NicSpec nic, nicFromJson(nv, npath));
              if (!nicNames.insert(nic.name).second)
                return invalidArgument("%s.name: \"%s\" appears twice on host %s", npath.c_str(), nic.name.c_str(),
                                       host.name.c_str());
              auto [it, fresh] = fabricKind.emplace(nic.fabric, nic.kind);
              if (!fresh && it->second != nic.kind)
                return invalidArgument("%s.kind: fabric %s has NICs of kinds %s and %s", npath.c_str(),
                                       nic.fabric.c_str(), nicKindName(it->second), nicKindName(nic.kind));
              host.nics.push_back(std::move(nic));
              return okStatus();
            },
            true);
        hr.array("gpus", [&](const json& gv, const std::string& gpath) -> Status {
          HC_ASSIGN_OR_RETURN(GpuOverride o, gpuOverrideFromJson(gv, gpath));
          Gpu gpu;
          gpu.model = o.model.value_or("");
          gpu.peakTflops = o.peakTflops.value_or(0);
          gpu.memoryBytes = o.memoryBytes.value_or(0);
          gpu.fromTopoFile = true;
          host.gpus.insert(host.gpus.end(), static_cast<size_t>(o.count), gpu);
          return okStatus();
        });
        HC_TRY(hr.finish());
        if (host.name.empty()) return invalidArgument("%s.name: empty", path.c_str());
        if (!names.insert(host.name).second)
          return invalidArgument("%s.name: \"%s\" appears twice", path.c_str(), host.name.c_str());
        if (host.nics.empty()) return invalidArgument("%s.nics: a host needs at least one NIC", path.c_str());
        spec.hosts.push_back(std::move(host));
        return okStatus();
      },
      true);
  HC_TRY(r.finish());
  if (spec.name.empty()) return invalidArgument("$.name: empty");
  if (spec.hosts.empty()) return invalidArgument("$.hosts: no hosts");
  return spec;
}

}  // namespace

std::string clusterSpecJson(const ClusterSpec& spec) {
  json hosts = json::array();
  for (const auto& h : spec.hosts) {
    json nics = json::array();
    for (const auto& n : h.nics)
      nics.push_back({{"name", n.name}, {"kind", nicKindName(n.kind)}, {"rateMbps", n.rateMbps}, {"fabric", n.fabric}});
    json host = {{"name", h.name}, {"ranks", h.ranks}, {"nics", nics}};
    // Runs of equal GPUs as one entry with a count.
    json gpus = json::array();
    for (size_t g = 0; g < h.gpus.size();) {
      size_t e = g;
      while (e < h.gpus.size() && h.gpus[e] == h.gpus[g]) ++e;
      json entry = {{"peakTflops", h.gpus[g].peakTflops}, {"memoryBytes", h.gpus[g].memoryBytes}, {"count", e - g}};
      if (!h.gpus[g].model.empty()) entry["model"] = h.gpus[g].model;
      gpus.push_back(std::move(entry));
      g = e;
    }
    if (!gpus.empty()) host["gpus"] = std::move(gpus);
    hosts.push_back(std::move(host));
  }
  json doc = {{"name", spec.name}, {"hosts", hosts}};
  if (!spec.description.empty()) doc["description"] = spec.description;
  return doc.dump(1) + "\n";
}

ClusterSpec randomClusterSpec(uint64_t seed, const RandomClusterLimits& lim) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(std::max<int64_t>(1, hi - lo + 1)));
  };
  ClusterSpec spec;
  spec.name = format("random-%llu", static_cast<unsigned long long>(seed));
  const int nh = std::max(2, static_cast<int>(uniform(lim.minHosts, lim.maxHosts)));  // a fabric joins two hosts
  for (int h = 0; h < nh; ++h)
    spec.hosts.push_back({format("h%d", h), static_cast<int>(uniform(lim.minRanksPerHost, lim.maxRanksPerHost)), {}});
  // Fabric 0 joins every host (a site network: every pair of hosts reaches each other, as the communicator needs);
  // the others join random subsets of two hosts or more.
  const NicKind kinds[] = {NicKind::kIb, NicKind::kRoce, NicKind::kEth};
  const int fabrics = static_cast<int>(uniform(lim.minFabrics, lim.maxFabrics));
  for (int f = 0; f < fabrics; ++f) {
    const NicKind kind = f == 0 ? NicKind::kEth : kinds[uniform(0, 2)];
    std::vector<int> members;
    for (int h = 0; h < nh; ++h)
      if (f == 0 || uniform(0, 1)) members.push_back(h);
    while (members.size() < 2) {
      const int h = static_cast<int>(uniform(0, nh - 1));
      if (std::find(members.begin(), members.end(), h) == members.end()) members.push_back(h);
    }
    std::sort(members.begin(), members.end());
    const std::string fabric = format("%s%d", nicKindName(kind), f);
    for (int h : members) {
      const uint64_t rate = static_cast<uint64_t>(uniform(static_cast<int64_t>(lim.minRateMbps / 10),
                                                          static_cast<int64_t>(lim.maxRateMbps / 10))) *
                            10;
      spec.hosts[h].nics.push_back({format("n%d", f), kind, rate, fabric});
    }
  }
  spec.description = format("drawn by randomClusterSpec from seed %llu", static_cast<unsigned long long>(seed));
  return spec;
}

Result<ClusterSpec> loadClusterSpec(const std::string& path) {
  HC_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  return parseClusterSpec(text, path);
}

}  // namespace hetcomm::topo
