#include "topology/cluster.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "common/log.h"
#include "common/strings.h"
#include "topology/ip_prefix.h"

namespace hetcomm::topo {
namespace {

// Union-find over NICs, flattened to one index per (host, nic).
class DisjointSets {
 public:
  explicit DisjointSets(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  size_t find(size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  // The smaller index becomes the root, so the result does not depend on the order of unions.
  void unite(size_t a, size_t b) {
    a = find(a);
    b = find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }

 private:
  std::vector<size_t> parent_;
};

std::vector<int> sortedUnique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

const char* islandKindName(IslandKind kind) {
  switch (kind) {
    case IslandKind::kHost:
      return "host";
    case IslandKind::kIb:
      return "ib";
    case IslandKind::kRoce:
      return "roce";
    case IslandKind::kEth:
      return "eth";
  }
  return "?";
}

std::string formatRankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(ranks[i]) : format("%d-%d", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

Result<ClusterView> ClusterView::build(std::vector<NodeDescription> nodes) {
  if (nodes.empty()) return invalidArgument("cluster view: no node descriptions");
  ClusterView v;
  // Canonical order first: nothing below may depend on the order a rank listed its NICs or addresses in.
  for (size_t r = 0; r < nodes.size(); ++r) {
    NodeDescription& n = nodes[r];
    if (n.hostId.empty()) return invalidArgument("cluster view: rank %zu has an empty host id", r);
    for (Nic& nic : n.nics) std::sort(nic.addresses.begin(), nic.addresses.end());
    std::sort(n.nics.begin(), n.nics.end(), [](const Nic& a, const Nic& b) { return a.name < b.name; });
    for (size_t i = 1; i < n.nics.size(); ++i) {
      if (n.nics[i].name == n.nics[i - 1].name)
        return invalidArgument("cluster view: rank %zu lists two NICs named \"%s\"", r, n.nics[i].name.c_str());
    }
  }
  v.nodes_ = std::move(nodes);

  std::map<std::string, int> hostIndex;
  v.hostOfRank_.resize(v.nodes_.size());
  v.localRank_.resize(v.nodes_.size());
  for (int r = 0; r < v.nranks(); ++r) {
    const NodeDescription& n = v.nodes_[r];
    auto [it, inserted] = hostIndex.emplace(n.hostId, v.nhosts());
    if (inserted) v.hosts_.push_back(Host{n.hostId, n.hostName, {}, n});
    Host& host = v.hosts_[it->second];
    v.hostOfRank_[r] = it->second;
    v.localRank_[r] = static_cast<int>(host.ranks.size());
    host.ranks.push_back(r);
  }
  HC_TRY(v.buildFabrics());
  v.buildIslands();
  return v;
}

Status ClusterView::buildFabrics() {
  std::vector<size_t> offset(hosts_.size() + 1, 0);
  for (size_t h = 0; h < hosts_.size(); ++h) offset[h + 1] = offset[h] + hosts_[h].node.nics.size();
  auto flat = [&](NicRef ref) { return offset[ref.host] + ref.nic; };

  // Keys that join NICs: a fabric name, or "<kind>:<network>" for each usable address.
  struct Member {
    NicRef ref;
    std::string address;  // without prefix length; empty for named fabrics
  };
  std::map<std::string, std::vector<Member>> byName, bySubnet;
  for (int h = 0; h < nhosts(); ++h) {
    const auto& nics = hosts_[h].node.nics;
    for (int i = 0; i < static_cast<int>(nics.size()); ++i) {
      const Nic& nic = nics[i];
      if (nic.state != NicState::kUp || nic.loopback) continue;
      if (!nic.fabric.empty()) {
        byName[nic.fabric].push_back({{h, i}, ""});
        continue;
      }
      for (const std::string& text : nic.addresses) {
        auto p = IpPrefix::parse(text);
        if (!p || p->isLinkLocal() || p->isLoopback()) continue;
        bySubnet[std::string(nicKindName(nic.kind)) + ":" + p->network().toString()].push_back(
            {{h, i}, p->addressString()});
      }
    }
  }

  DisjointSets sets(offset.back());
  std::vector<std::string> label(offset.back());  // the key that put a NIC in a fabric; empty: in none
  auto join = [&](const std::string& key, const std::vector<Member>& members) {
    for (const Member& m : members) {
      sets.unite(flat(members[0].ref), flat(m.ref));
      std::string& l = label[flat(m.ref)];
      if (l.empty() || key < l) l = key;
    }
  };
  for (const auto& [name, members] : byName) {
    for (const Member& m : members) {
      const Nic& a = nic(members[0].ref);
      const Nic& b = nic(m.ref);
      if (a.kind != b.kind)
        return invalidArgument("cluster view: fabric \"%s\" has NICs of kinds %s (host %s, %s) and %s (host %s, %s)",
                               name.c_str(), nicKindName(a.kind), hosts_[members[0].ref.host].name.c_str(),
                               a.name.c_str(), nicKindName(b.kind), hosts_[m.ref.host].name.c_str(), b.name.c_str());
    }
    join(name, members);
  }
  for (const auto& [key, members] : bySubnet) {
    // One address on two hosts means each host has its own private network behind that prefix (docker0 is
    // 172.17.0.1/16 everywhere): such a prefix joins nothing.
    std::map<std::string, int> hostOfAddress;
    bool privateNetworks = false;
    for (const Member& m : members) {
      auto [it, inserted] = hostOfAddress.emplace(m.address, m.ref.host);
      if (!inserted && it->second != m.ref.host) privateNetworks = true;
    }
    if (privateNetworks) {
      HC_INFO(Topo, "%s: the same address on several hosts; treated as host-private networks, not a fabric",
              key.c_str());
      continue;
    }
    join(key, members);
  }

  // One fabric per set of NICs that some key joined.
  std::map<size_t, Fabric> byRoot;
  for (int h = 0; h < nhosts(); ++h) {
    for (int i = 0; i < static_cast<int>(hosts_[h].node.nics.size()); ++i) {
      size_t id = flat({h, i});
      if (label[id].empty()) continue;
      Fabric& f = byRoot[sets.find(id)];
      const Nic& n = nic({h, i});
      f.kind = n.kind;
      f.named = !n.fabric.empty();
      if (f.name.empty() || label[id] < f.name) f.name = label[id];
      f.nics.push_back({h, i});
      f.hosts.push_back(h);
    }
  }
  fabrics_.clear();
  for (auto& [root, f] : byRoot) {
    std::sort(f.nics.begin(), f.nics.end());
    f.hosts = sortedUnique(std::move(f.hosts));
    fabrics_.push_back(std::move(f));
  }
  std::sort(fabrics_.begin(), fabrics_.end(),
            [](const Fabric& a, const Fabric& b) { return std::tie(a.kind, a.name) < std::tie(b.kind, b.name); });
  return okStatus();
}

void ClusterView::buildIslands() {
  // Connected components of the hosts over the RDMA fabrics (union-find, the lowest host as each root).
  std::vector<int> parent(nhosts());
  for (int h = 0; h < nhosts(); ++h) parent[h] = h;
  auto root = [&](int h) {
    while (parent[h] != h) h = parent[h] = parent[parent[h]];
    return h;
  };
  for (const Fabric& f : fabrics_)
    if (f.kind != NicKind::kEth)
      for (int h : f.hosts) {
        const int a = root(h), b = root(f.hosts.front());
        parent[std::max(a, b)] = std::min(a, b);
      }
  islands_.clear();
  islandOfHost_.assign(nhosts(), -1);
  for (int h = 0; h < nhosts(); ++h) {
    const int r = root(h);
    if (islandOfHost_[r] < 0) {
      islandOfHost_[r] = static_cast<int>(islands_.size());
      islands_.push_back(Island{});
    }
    islandOfHost_[h] = islandOfHost_[r];
    Island& island = islands_[islandOfHost_[h]];
    island.hosts.push_back(h);
    island.ranks.insert(island.ranks.end(), hosts_[h].ranks.begin(), hosts_[h].ranks.end());
  }
  for (int f = 0; f < static_cast<int>(fabrics_.size()); ++f) {
    const Fabric& fab = fabrics_[f];
    if (fab.kind == NicKind::kEth || fab.hosts.size() < 2) continue;
    Island& island = islands_[islandOfHost_[fab.hosts.front()]];
    island.fabrics.push_back(f);
    const IslandKind kind = fab.kind == NicKind::kIb ? IslandKind::kIb : IslandKind::kRoce;
    if (island.kind == IslandKind::kHost || kind < island.kind) island.kind = kind;
  }
  for (Island& island : islands_) island.ranks = sortedUnique(std::move(island.ranks));
}

uint64_t ClusterView::rateOnFabric(int fabric, int host) const {
  uint64_t best = 0;
  for (NicRef ref : fabrics_[fabric].nics) {
    if (ref.host == host) best = std::max(best, nic(ref).rateMbps);
  }
  return best;
}

uint64_t ClusterView::pairRateMbps(int fabric, int hostA, int hostB) const {
  uint64_t a = rateOnFabric(fabric, hostA), b = rateOnFabric(fabric, hostB);
  if (a == 0 || b == 0) return std::max(a, b);
  return std::min(a, b);
}

std::vector<int> ClusterView::sharedFabrics(int hostA, int hostB) const {
  std::vector<int> shared;
  for (int f = 0; f < static_cast<int>(fabrics_.size()); ++f) {
    const auto& hs = fabrics_[f].hosts;
    if (std::binary_search(hs.begin(), hs.end(), hostA) && std::binary_search(hs.begin(), hs.end(), hostB))
      shared.push_back(f);
  }
  // fabrics_ is already in (kind, name) order; a stable sort keeps it among equals.
  std::stable_sort(shared.begin(), shared.end(), [&](int x, int y) {
    if (fabrics_[x].kind != fabrics_[y].kind) return fabrics_[x].kind < fabrics_[y].kind;
    return pairRateMbps(x, hostA, hostB) > pairRateMbps(y, hostA, hostB);
  });
  return shared;
}

std::vector<int> ClusterView::railFabrics(int hostA, int hostB) const {
  std::vector<int> rails = sharedFabrics(hostA, hostB);
  if (!rails.empty())
    std::erase_if(rails, [&](int f) { return fabrics_[f].kind != fabrics_[rails.front()].kind; });
  return rails;
}

ClusterView::PairPaths ClusterView::pathFabrics(int hostA, int hostB, bool multiRail) const {
  PairPaths p;
  const std::vector<int> shared = sharedFabrics(hostA, hostB);
  if (shared.empty()) return p;
  p.fabrics = multiRail ? railFabrics(hostA, hostB) : std::vector<int>{shared.front()};
  p.rails = p.fabrics.size();
  for (int f : shared)
    if (std::find(p.fabrics.begin(), p.fabrics.end(), f) == p.fabrics.end()) p.fabrics.push_back(f);
  return p;
}

const Gpu* ClusterView::gpuOf(int rank) const {
  const auto& gpus = hosts_[hostOf(rank)].node.gpus;
  if (gpus.empty()) return nullptr;
  return &gpus[localRank(rank) % gpus.size()];
}

std::string ClusterView::format() const {
  std::string out =
      hetcomm::format("cluster: %d ranks on %d hosts, %zu fabrics\n", nranks(), nhosts(), fabrics_.size());
  std::set<std::string> topoFiles;
  for (int h = 0; h < nhosts(); ++h) {
    const Host& host = hosts_[h];
    const NodeDescription& n = host.node;
    if (!n.topoFile.empty()) topoFiles.insert(n.topoFile);
    out += hetcomm::format("host %d %s (id %s): ranks %s, %d cores, %zu NUMA nodes\n", h, host.name.c_str(),
                           host.id.c_str(), formatRankList(host.ranks).c_str(), n.cores, n.numaNodes.size());
    for (const Nic& nic : n.nics) {
      if (nic.loopback) continue;
      std::string addrs;
      for (const std::string& a : nic.addresses) addrs += " " + a;
      out += hetcomm::format("  nic %-10s %-4s %-13s %-4s%s%s%s%s\n", nic.name.c_str(), nicKindName(nic.kind),
                             formatRateMbps(nic.rateMbps).c_str(), nicStateName(nic.state),
                             nic.fabric.empty() ? "" : (" fabric " + nic.fabric).c_str(), addrs.c_str(),
                             nic.isVirtual ? " (virtual)" : "", nic.fromTopoFile ? " *" : "");
    }
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      const Gpu& gpu = n.gpus[g];
      out +=
          hetcomm::format("  gpu %zu %s, %s, %s%s\n", g, gpu.model.c_str(),
                          gpu.memoryBytes ? humanBytes(gpu.memoryBytes).c_str() : "memory unknown",
                          gpu.peakTflops > 0 ? hetcomm::format("%g TFLOP/s", gpu.peakTflops).c_str() : "peak unknown",
                          gpu.fromTopoFile ? " *" : "");
    }
  }
  for (const Fabric& f : fabrics_) {
    std::string members;
    for (NicRef ref : f.nics) members += " " + hosts_[ref.host].name + "/" + nic(ref).name;
    out += hetcomm::format("fabric %s (%s%s):%s\n", f.name.c_str(), nicKindName(f.kind),
                           f.named ? ", named" : ", by subnet", members.c_str());
  }
  for (const Island& island : islands_) {
    std::string via;
    for (int f : island.fabrics) via += (via.empty() ? " via " : ", ") + fabrics_[f].name;
    std::string hostNames;
    for (int h : island.hosts) hostNames += (hostNames.empty() ? "" : " ") + hosts_[h].name;
    out += hetcomm::format("island %-4s on %s: ranks %s%s\n", islandKindName(island.kind), hostNames.c_str(),
                           formatRankList(island.ranks).c_str(), via.c_str());
  }
  for (const std::string& file : topoFiles)
    out += hetcomm::format("* from topology file %s (emulated or hand-written, not discovered)\n", file.c_str());
  return out;
}

}  // namespace hetcomm::topo
