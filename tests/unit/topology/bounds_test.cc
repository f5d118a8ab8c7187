// Collective bounds (bounds.h): the worked examples of shared/reference/collective-bounds.md on the shipped
// cluster files, and every bound against brute force over all cuts of small random clusters.
#include "topology/bounds.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/strings.h"
#include "topology/cluster.h"
#include "topology/cluster_spec.h"
#include "topology/link_matrix.h"

namespace hetcomm::topo {
namespace {

LinkGraph graphOf(const ClusterSpec& spec) {
  auto view = ClusterView::build(spec.nodes());
  EXPECT_TRUE(view.has_value());
  return buildLinkGraph(*view, LinkMatrix::nominal(*view), /*multiRail=*/true);
}

LinkGraph shipped(const std::string& name) {
  auto spec = loadClusterSpec(std::string(HETCOMM_SOURCE_DIR) + "/clusters/" + name + ".json");
  EXPECT_TRUE(spec.has_value()) << spec.error().toString();
  return graphOf(*spec);
}

double busMBps(const LinkGraph& g, BoundKind kind, int root = 0) {
  return collectiveBound(g, kind, root).busGBps(g.nranks()) * 1e3;
}

// The probe measures each pair's best link only: on mixed-2x2 the InfiniBand between the hosts, never the
// Ethernet beside it. Every port, measured or not, takes what the probe found (a fabric not measured, the median
// of those that were), so the rails keep the ratio of their NICs' rates and the synthesised schedules split their
// bytes by it. With nothing measured the ports stay at their nominal rates.
TEST(Bounds, AFabricTheProbeDidNotMeasureIsScaledLikeTheMeasuredOnes) {
  auto spec = loadClusterSpec(std::string(HETCOMM_SOURCE_DIR) + "/clusters/mixed-2x2.json");
  ASSERT_TRUE(spec.has_value()) << spec.error().toString();
  auto view = ClusterView::build(spec->nodes());
  ASSERT_TRUE(view.has_value());
  auto portGBps = [](const LinkGraph& g, int host, const std::string& fabric) {
    for (const LinkGraph::Port& p : g.ports)
      if (p.host == host && g.fabrics[p.fabric] == fabric) return p.gbps;
    ADD_FAILURE() << "no port of host " << host << " on " << fabric;
    return 0.0;
  };
  const LinkMatrix nominal = LinkMatrix::nominal(*view, /*multiRail=*/true);
  const LinkGraph before = buildLinkGraph(*view, nominal, /*multiRail=*/true);
  EXPECT_NEAR(portGBps(before, 0, "ib-a"), 0.2, 1e-12);
  EXPECT_NEAR(portGBps(before, 1, "eth"), 0.05, 1e-12);

  LinkMatrix probed = nominal;
  const int a = view->hosts()[0].ranks[0], b = view->hosts()[1].ranks[0];
  ASSERT_EQ(view->fabrics()[nominal.at(a, b).fabric].name, "ib-a");
  ASSERT_TRUE(probed.setMeasured(a, b, 10, 0.87 * nominal.at(a, b).bwGBps).ok());
  ASSERT_TRUE(probed.setMeasured(b, a, 10, 0.87 * nominal.at(b, a).bwGBps).ok());
  const LinkGraph after = buildLinkGraph(*view, probed, /*multiRail=*/true);
  for (int h = 0; h < 2; ++h) {
    EXPECT_NEAR(portGBps(after, h, "ib-a"), 0.87 * 0.2, 1e-12) << "host " << h;
    EXPECT_NEAR(portGBps(after, h, "eth"), 0.87 * 0.05, 1e-12) << "host " << h << ": the rail nobody measured";
  }
}

TEST(Bounds, WorkedExamplesOfTheReference) {
  // mixed-4x2: the island cut (two 200 Mbit/s Ethernet NICs) binds: busbw <= 1.75 * 50 MB/s.
  LinkGraph mixed = shipped("mixed-4x2");
  CollectiveBound ar = collectiveBound(mixed, BoundKind::kAllReduce);
  EXPECT_NEAR(1.0 / (ar.cutUsPerByte * 1e3) * 1e3, 50.0, 1e-6);
  EXPECT_NEAR(busMBps(mixed, BoundKind::kAllReduce), 87.5, 1e-6);
  EXPECT_NEAR(1.75 / (ar.aggregateUsPerByte * 1e3) * 1e3, 1.75 * 700 / 6, 1e-6);
  EXPECT_NE(ar.binding.find("cut"), std::string::npos) << ar.binding;
  // eth-4x2: four hosts at 25 MB/s on one switch: the aggregate bound binds, 1.75 * 100 / 6 MB/s.
  LinkGraph eth = shipped("eth-4x2");
  CollectiveBound e = collectiveBound(eth, BoundKind::kAllReduce);
  EXPECT_NEAR(busMBps(eth, BoundKind::kAllReduce), 1.75 * 100 / 6, 1e-6);
  EXPECT_NEAR(1.75 / (e.cutUsPerByte * 1e3) * 1e3, 43.75, 1e-6);
  EXPECT_NE(e.binding.find("aggregate"), std::string::npos) << e.binding;
  // Allgather on eth-4x2: a host takes in 6 of 8 blocks at 25 MB/s; busbw = size/T * 7/8 = 25 * 8/6 * 7/8.
  EXPECT_NEAR(busMBps(eth, BoundKind::kAllGather), 25.0 * 8 / 6 * 7 / 8, 1e-6);
  EXPECT_NEAR(busMBps(eth, BoundKind::kReduceScatter), 25.0 * 8 / 6 * 7 / 8, 1e-6);
  // Broadcast from rank 0 on mixed-4x2: the other island is reached through two Ethernet NICs (50 MB/s).
  EXPECT_NEAR(busMBps(mixed, BoundKind::kBroadcast, 0), 50.0, 1e-6);
  EXPECT_NEAR(busMBps(mixed, BoundKind::kReduce, 5), 50.0, 1e-6);
}

TEST(Bounds, LoneHostBesideAnIsland) {
  // Three hosts on a fast fabric, one on Ethernet only: the cut around the lone host binds the allreduce.
  ClusterSpec s;
  s.name = "lone";
  for (int h = 0; h < 4; ++h) {
    ClusterSpec::HostSpec host{format("h%d", h), 1, {}};
    if (h < 3) host.nics.push_back({"ib0", NicKind::kIb, 1600, "ib"});
    host.nics.push_back({"eth0", NicKind::kEth, 200, "eth"});
    s.hosts.push_back(host);
  }
  LinkGraph g = graphOf(s);
  CollectiveBound b = collectiveBound(g, BoundKind::kAllReduce);
  EXPECT_NEAR(b.usPerByte, 1.0 / 25, 1e-12) << "the lone host's 25 MB/s carries the whole buffer each way";
  EXPECT_NE(b.binding.find("cut {h3}"), std::string::npos) << b.binding;
}

// Brute force: every cut, i.e. every subset of hosts and fabrics with some ranks inside and some outside (a host's
// ranks go with it), plus a single rank against its host.
struct Brute {
  const LinkGraph& g;
  int h, f;
  // B-(S) (into) or B+(S): a port whose host and fabric are on different sides carries its rate each way.
  double capInto(unsigned set, bool /*into*/) const {
    double c = 0;
    for (const auto& p : g.ports)
      if ((set >> p.host & 1) != (set >> (h + p.fabric) & 1)) c += p.gbps;
    return c;
  }
  int ranksIn(unsigned set) const {
    int n = 0;
    for (int v = 0; v < h; ++v)
      if (set >> v & 1) n += static_cast<int>(g.hosts[v].ranks.size());
    return n;
  }
};

TEST(Bounds, EqualBruteForceOverAllCuts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    ClusterSpec s;
    s.name = "random";
    const int hosts = 2 + static_cast<int>(rng() % 4), fabrics = 1 + static_cast<int>(rng() % 3);
    for (int v = 0; v < hosts; ++v) {
      ClusterSpec::HostSpec host{format("h%d", v), 1 + static_cast<int>(rng() % 3), {}};
      for (int fab = 0; fab < fabrics; ++fab)
        if (fab == 0 || rng() % 2)
          host.nics.push_back({format("n%d", fab), fab == 0 ? NicKind::kEth : NicKind::kIb,
                               100 + rng() % 1900, format("f%d", fab)});
      s.hosts.push_back(host);
    }
    LinkGraph g = graphOf(s);
    SCOPED_TRACE(g.describe());
    const int h = g.nhosts(), f = static_cast<int>(g.fabrics.size()), n = g.nranks();
    Brute bf{g, h, f};
    double agWorst = 0, rsWorst = 0, cut = 1e30;
    for (unsigned set = 1; set + 1 < (1u << (h + f)); ++set) {
      const int in = bf.ranksIn(set);
      if (in == 0 || in == n) continue;
      agWorst = std::max(agWorst, (n - in) / bf.capInto(set, true));
      rsWorst = std::max(rsWorst, (n - in) / bf.capInto(set, false));
      cut = std::min({cut, bf.capInto(set, true), bf.capInto(set, false)});
    }
    double mem = 1e30;
    for (const auto& host : g.hosts) mem = std::min(mem, host.memGBps);
    agWorst = std::max(agWorst, (n - 1) / mem);
    // Allgather of n blocks: time per byte of the whole output = worst / n, in us (GB/s -> bytes per us: 1e3).
    EXPECT_NEAR(collectiveBound(g, BoundKind::kAllGather).usPerByte * 1e3 * n, agWorst, agWorst * 1e-6);
    EXPECT_NEAR(collectiveBound(g, BoundKind::kReduceScatter).usPerByte * 1e3 * n, std::max(rsWorst, (n - 1) / mem),
                agWorst * 1e-6);
    EXPECT_NEAR(collectiveBound(g, BoundKind::kAllReduce).cutUsPerByte * 1e3, 1 / std::min(cut, mem), 1e-9);
    // Broadcast from each host's first rank: the smallest cut with the root's host inside and another rank out.
    for (int root = 0; root < h; ++root) {
      double worst = mem;
      for (unsigned set = 1; set + 1 < (1u << (h + f)); ++set)
        if ((set >> root & 1) && bf.ranksIn(set) < n) worst = std::min(worst, bf.capInto(set, false));
      const int rootRank = g.hosts[root].ranks[0];
      EXPECT_NEAR(collectiveBound(g, BoundKind::kBroadcast, rootRank).usPerByte * 1e3, 1 / worst, 1e-9);
    }
  }
}

}  // namespace
}  // namespace hetcomm::topo
