#include "topology/link_graph.h"

#include <algorithm>
#include <map>

#include "common/strings.h"
#include "topology/cluster.h"
#include "topology/cluster_spec.h"
#include "topology/link_matrix.h"

namespace hetcomm::topo {
namespace {

uint64_t assumedMbps(NicKind kind) {
  return kind == NicKind::kIb ? kAssumedIbMbps : kind == NicKind::kRoce ? kAssumedRoceMbps : kAssumedEthMbps;
}

// What the probe found on each fabric against the nominal rates: measured over nominal bandwidth, the median
// over the measured rank pairs whose link runs over it. TCP's headers, a shaper's real rate or a slow driver then
// scale every port of that fabric alike. The probe measures each pair's best link only, so a second rail (the
// Ethernet beside an InfiniBand) is often not measured at all: it takes the median of the measured fabrics, not
// its nominal rate, which no transport reaches. At its nominal rate beside a measured rail, the rails' shares
// came out wrong: on mixed-2x2 (IB measured at 0.87 of nominal, Ethernet taken at 1.0) the Ethernet was given
// 0.224 of every synthesised allgather instead of 0.2, ran full while the IB idled, and the call took 11 % longer.
// With nothing measured at all, every fabric stays at its nominal rate.
std::vector<double> fabricEfficiency(const ClusterView& view, const LinkMatrix& links, const LinkMatrix& nominal) {
  std::vector<std::vector<double>> ratios(view.fabrics().size());
  for (int i = 0; i < links.size(); ++i)
    for (int j = 0; j < links.size(); ++j) {
      const Link& l = links.at(i, j);
      if (!l.measured || l.fabric < 0 || nominal.at(i, j).bwGBps <= 0) continue;
      ratios[l.fabric].push_back(l.bwGBps / nominal.at(i, j).bwGBps);
    }
  auto median = [](std::vector<double>& r) {
    std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
    return r[r.size() / 2];
  };
  std::vector<double> eff(ratios.size(), 0.0), measured;
  for (size_t f = 0; f < ratios.size(); ++f)
    if (!ratios[f].empty()) measured.push_back(eff[f] = median(ratios[f]));
  const double unmeasured = measured.empty() ? 1.0 : std::min(1.0, median(measured));
  for (size_t f = 0; f < ratios.size(); ++f)
    if (ratios[f].empty()) eff[f] = unmeasured;
  return eff;
}

}  // namespace

const std::vector<LinkGraph::Rail>& LinkGraph::route(int a, int b) const {
  static const std::vector<Rail> kNone;
  const auto& w = waysOf(a, b);
  return w.empty() ? kNone : w.front().rails;
}

bool LinkGraph::connected() const {
  const int h = nhosts();
  if (h <= 1) return true;
  std::vector<char> seen(h, 0);
  std::vector<int> stack{0};
  seen[0] = 1;
  while (!stack.empty()) {
    const int a = stack.back();
    stack.pop_back();
    for (int b = 0; b < h; ++b)
      if (!seen[b] && !route(a, b).empty()) {
        seen[b] = 1;
        stack.push_back(b);
      }
  }
  return std::all_of(seen.begin(), seen.end(), [](char c) { return c != 0; });
}

double LinkGraph::hostEgressGBps(int host) const {
  double sum = 0;
  for (const Port& p : ports)
    if (p.host == host) sum += p.gbps;
  return sum;
}

std::string LinkGraph::describe() const {
  std::string out;
  for (int h = 0; h < nhosts(); ++h) {
    out += format("%s (island %d, %zu ranks, memory %.3g GB/s):", hosts[h].name.c_str(), hosts[h].island,
                  hosts[h].ranks.size(), hosts[h].memGBps);
    for (const Port& p : ports)
      if (p.host == h) out += format(" %s on %s %.4g GB/s", p.name.c_str(), fabrics[p.fabric].c_str(), p.gbps);
    out += "\n";
  }
  return out;
}

LinkGraph buildLinkGraph(const ClusterView& view, const LinkMatrix& links, bool multiRail,
                         const std::function<bool(int, int)>& choosesPath) {
  LinkGraph g;
  const int nh = view.nhosts();
  const LinkMatrix nominal = LinkMatrix::nominal(view, multiRail);
  const std::vector<double> eff = fabricEfficiency(view, links, nominal);
  for (const Fabric& f : view.fabrics()) g.fabrics.push_back(f.name);
  const int n = view.nranks();
  for (int r = 0; r < n; ++r) g.hostOfRank.push_back(view.hostOf(r));
  g.alphaUs.resize(static_cast<size_t>(n) * n);
  g.bwGBps.resize(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      g.alphaUs[static_cast<size_t>(i) * n + j] = links.at(i, j).alphaUs;
      g.bwGBps[static_cast<size_t>(i) * n + j] = links.at(i, j).bwGBps > 0 ? links.at(i, j).bwGBps : kNoneBwGBps;
    }
  for (int h = 0; h < nh; ++h) {
    const Host& host = view.hosts()[h];
    LinkGraph::HostNode node;
    node.name = host.name;
    node.ranks = host.ranks;
    node.island = view.islandOfHost(h);
    node.cores = host.node.cores;
    node.memGBps = kShmBwGBps;
    if (host.ranks.size() > 1) node.memGBps = links.at(host.ranks[0], host.ranks[1]).bwGBps;
    g.hosts.push_back(std::move(node));
  }
  // One port per (host, fabric): a host's fastest NIC there (ClusterView::rateOnFabric).
  std::map<std::pair<int, int>, int> portOf;
  for (int f = 0; f < static_cast<int>(view.fabrics().size()); ++f) {
    const Fabric& fab = view.fabrics()[f];
    for (int h : fab.hosts) {
      uint64_t mbps = view.rateOnFabric(f, h);
      if (mbps == 0) mbps = assumedMbps(fab.kind);
      std::string name;
      for (const NicRef& ref : fab.nics)
        if (ref.host == h && view.nic(ref).rateMbps == view.rateOnFabric(f, h)) name = view.nic(ref).name;
      portOf[{h, f}] = static_cast<int>(g.ports.size());
      g.ports.push_back({h, f, static_cast<double>(mbps) / 8000.0 * eff[f], name});
    }
  }
  g.ways.assign(static_cast<size_t>(nh) * nh, {});
  for (int a = 0; a < nh; ++a)
    for (int b = 0; b < nh; ++b) {
      if (a == b) continue;
      const ClusterView::PairPaths paths = view.pathFabrics(a, b, multiRail);
      if (paths.fabrics.empty()) continue;
      auto railOf = [&](int f) { return LinkGraph::Rail{portOf[{a, f}], portOf[{b, f}], 1.0}; };
      auto& ways = g.ways[static_cast<size_t>(a) * nh + b];
      // The default: striped over the rails by rate (the slower end of each).
      LinkGraph::Way striped;
      double total = 0;
      for (size_t i = 0; i < paths.rails; ++i) {
        LinkGraph::Rail r = railOf(paths.fabrics[i]);
        r.share = std::max(1e-9, std::min(g.ports[r.from].gbps, g.ports[r.to].gbps));
        total += r.share;
        striped.rails.push_back(r);
      }
      for (auto& r : striped.rails) r.share /= total;
      ways.push_back(std::move(striped));
      if (choosesPath && !choosesPath(a, b)) continue;
      for (size_t i = 0; i < paths.fabrics.size(); ++i)
        if (paths.fabrics.size() > 1) ways.push_back({static_cast<int>(i), {railOf(paths.fabrics[i])}});
    }
  return g;
}

Result<LinkGraph> clusterFileGraph(const std::string& path) {
  auto spec = loadClusterSpec(path);
  if (!spec) return spec.error();
  auto view = ClusterView::build(spec->nodes());
  if (!view)
    return Status(view.error().code(), format("%s: %s", path.c_str(), std::string(view.error().message()).c_str()));
  return buildLinkGraph(*view, LinkMatrix::nominal(*view), true);
}

}  // namespace hetcomm::topo
