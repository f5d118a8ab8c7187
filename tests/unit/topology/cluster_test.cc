// ClusterView from fixed inputs: hosts and local ranks, fabrics by subnet and by name, islands of the reference
// cluster (4 hosts x 2 ranks: ib between hosts 0-1, roce between 2-3, eth among all), which NICs take part, and
// determinism under shuffled NIC and address order.
#include "topology/cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tests/unit/topology/cluster_fixtures.h"
#include "topology/node_json.h"

namespace hetcomm::topo {
namespace {

using testing::makeNic;
using testing::makeNode;
using testing::referenceCluster;

ClusterView buildOk(std::vector<NodeDescription> nodes) {
  auto v = ClusterView::build(std::move(nodes));
  EXPECT_TRUE(v.has_value()) << v.error().toString();
  if (!v.has_value()) std::abort();  // nothing below makes sense without a view
  return std::move(v).value();
}

std::vector<std::string> fabricNames(const ClusterView& v) {
  std::vector<std::string> names;
  for (const Fabric& f : v.fabrics()) names.push_back(f.name);
  return names;
}

TEST(ClusterView, HostsAndLocalRanks) {
  // Ranks interleaved over hosts: host order follows each host's lowest rank.
  std::vector<NodeDescription> nodes;
  for (int r = 0; r < 6; ++r) nodes.push_back(makeNode(r % 3 == 0 ? "b" : r % 3 == 1 ? "a" : "c", {}));
  ClusterView v = buildOk(nodes);
  ASSERT_EQ(v.nhosts(), 3);
  EXPECT_EQ(v.hosts()[0].id, "b");
  EXPECT_EQ(v.hosts()[1].id, "a");
  EXPECT_EQ(v.hosts()[0].ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(v.hosts()[2].ranks, (std::vector<int>{2, 5}));
  EXPECT_EQ(v.hostOf(4), 1);
  EXPECT_EQ(v.localRank(4), 1);
  EXPECT_EQ(v.localRank(1), 0);
}

TEST(ClusterView, ReferenceClusterFabrics) {
  ClusterView v = buildOk(referenceCluster());
  EXPECT_EQ(v.nranks(), 8);
  EXPECT_EQ(v.nhosts(), 4);
  // Sorted by kind, then name; loopback is in none.
  EXPECT_EQ(fabricNames(v), (std::vector<std::string>{"ib:10.1.0.0/24", "roce:10.2.0.0/24", "eth:10.0.0.0/24"}));
  EXPECT_EQ(v.fabrics()[0].hosts, (std::vector<int>{0, 1}));
  EXPECT_EQ(v.fabrics()[1].hosts, (std::vector<int>{2, 3}));
  EXPECT_EQ(v.fabrics()[2].hosts, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(v.fabrics()[0].named);
  ASSERT_EQ(v.fabrics()[0].nics.size(), 2u);
  EXPECT_EQ(v.nic(v.fabrics()[0].nics[1]).name, "ib0");
  EXPECT_EQ(v.fabrics()[0].nics[1].host, 1);
}

TEST(ClusterView, ReferenceClusterIslands) {
  // Islands are the hosts joined by RDMA fabrics: the ib pair and the roce pair. The Ethernet every host has joins
  // no island: it is the slow path between them.
  ClusterView v = buildOk(referenceCluster());
  const auto& islands = v.islands();
  ASSERT_EQ(islands.size(), 2u);
  EXPECT_EQ(islands[0].kind, IslandKind::kIb);
  EXPECT_EQ(islands[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(islands[0].hosts, (std::vector<int>{0, 1}));
  EXPECT_EQ(islands[0].fabrics, (std::vector<int>{0}));
  EXPECT_EQ(islands[1].kind, IslandKind::kRoce);
  EXPECT_EQ(islands[1].ranks, (std::vector<int>{4, 5, 6, 7}));
  for (int h = 0; h < 4; ++h) EXPECT_EQ(v.islandOfHost(h), h / 2);
}

TEST(ClusterView, IslandsAreConnectedComponentsOverRdmaFabrics) {
  // a-b on one ib fabric, b-c on a roce fabric: one island of three hosts (ib, its best kind). d has only
  // Ethernet: an island of its own.
  auto a = makeNode("a", {makeNic("ib0", NicKind::kIb, 0, {"10.1.0.1/24"}), makeNic("e", NicKind::kEth, 0, {"10.0.0.1/24"})});
  auto b = makeNode("b", {makeNic("ib0", NicKind::kIb, 0, {"10.1.0.2/24"}), makeNic("ro", NicKind::kRoce, 0, {"10.2.0.2/24"}),
                          makeNic("e", NicKind::kEth, 0, {"10.0.0.2/24"})});
  auto c = makeNode("c", {makeNic("ro", NicKind::kRoce, 0, {"10.2.0.3/24"}), makeNic("e", NicKind::kEth, 0, {"10.0.0.3/24"})});
  auto d = makeNode("d", {makeNic("e", NicKind::kEth, 0, {"10.0.0.4/24"})});
  ClusterView v = buildOk({a, b, c, d});
  ASSERT_EQ(v.islands().size(), 2u);
  EXPECT_EQ(v.islands()[0].hosts, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.islands()[0].kind, IslandKind::kIb);
  EXPECT_EQ(v.islands()[1].hosts, (std::vector<int>{3}));
  EXPECT_EQ(v.islands()[1].kind, IslandKind::kHost);
  EXPECT_EQ(v.islandOfHost(2), 0);
  EXPECT_EQ(v.islandOfHost(3), 1);
}

TEST(ClusterView, SharedFabricsPreferKindThenRate) {
  // Hosts a and b share a 100 Gb/s eth fabric and a 25 Gb/s ib one: ib still comes first. Two eth fabrics: the
  // faster first.
  auto a = makeNode("a", {makeNic("eth0", NicKind::kEth, 100000, {"10.0.0.1/24"}),
                          makeNic("eth1", NicKind::kEth, 1000, {"10.3.0.1/24"}),
                          makeNic("ib0", NicKind::kIb, 25000, {"10.1.0.1/24"})});
  auto b = makeNode("b", {makeNic("eth0", NicKind::kEth, 100000, {"10.0.0.2/24"}),
                          makeNic("eth1", NicKind::kEth, 1000, {"10.3.0.2/24"}),
                          makeNic("ib0", NicKind::kIb, 25000, {"10.1.0.2/24"})});
  ClusterView v = buildOk({a, b});
  std::vector<std::string> order;
  for (int f : v.sharedFabrics(0, 1)) order.push_back(v.fabrics()[f].name);
  EXPECT_EQ(order, (std::vector<std::string>{"ib:10.1.0.0/24", "eth:10.0.0.0/24", "eth:10.3.0.0/24"}));
  EXPECT_EQ(v.rateOnFabric(0, 1), 25000u);
}

TEST(ClusterView, PairRateIsTheSlowerKnownSide) {
  auto a = makeNode("a", {makeNic("eth0", NicKind::kEth, 25000, {"10.0.0.1/24"})});
  auto b = makeNode("b", {makeNic("eth0", NicKind::kEth, 10000, {"10.0.0.2/24"})});
  auto c = makeNode("c", {makeNic("eth0", NicKind::kEth, 0, {"10.0.0.3/24"})});
  ClusterView v = buildOk({a, b, c});
  EXPECT_EQ(v.pairRateMbps(0, 0, 1), 10000u);
  EXPECT_EQ(v.pairRateMbps(0, 0, 2), 25000u) << "an unknown side does not count";
}

TEST(ClusterView, NamedFabricsJoinByNameOnly) {
  // Different subnets, one name: joined. Same subnet, different names: apart.
  auto a = makeNode("a", {makeNic("ib0", NicKind::kIb, 0, {"10.1.0.1/24"}, "rail0"),
                          makeNic("ib1", NicKind::kIb, 0, {"10.9.0.1/24"}, "rail1")});
  auto b = makeNode("b", {makeNic("ib0", NicKind::kIb, 0, {"10.2.0.1/24"}, "rail0"),
                          makeNic("ib1", NicKind::kIb, 0, {"10.9.0.2/24"}, "rail1b")});
  ClusterView v = buildOk({a, b});
  EXPECT_EQ(fabricNames(v), (std::vector<std::string>{"rail0", "rail1", "rail1b"}));
  EXPECT_TRUE(v.fabrics()[0].named);
  EXPECT_EQ(v.fabrics()[0].hosts, (std::vector<int>{0, 1}));
  EXPECT_EQ(v.fabrics()[1].hosts, (std::vector<int>{0}));
}

TEST(ClusterView, RailsOverTheSameHostsMakeOneIsland) {
  auto host = [](const std::string& id, int last) {
    std::string x = std::to_string(last);
    return makeNode(id, {makeNic("ib0", NicKind::kIb, 0, {"10.1.0." + x + "/24"}),
                         makeNic("ib1", NicKind::kIb, 0, {"10.2.0." + x + "/24"})});
  };
  ClusterView v = buildOk({host("a", 1), host("b", 2)});
  ASSERT_EQ(v.fabrics().size(), 2u);
  ASSERT_EQ(v.islands().size(), 1u);
  EXPECT_EQ(v.islands()[0].kind, IslandKind::kIb);
  EXPECT_EQ(v.islands()[0].fabrics, (std::vector<int>{0, 1}));
}

TEST(ClusterView, OnlyUsableNicsAndAddressesTakePart) {
  Nic down = makeNic("eth1", NicKind::kEth, 0, {"10.5.0.1/24"});
  down.state = NicState::kDown;
  auto a = makeNode("a", {makeNic("eth0", NicKind::kEth, 0, {"fe80::1/64", "169.254.0.1/16"}), down,
                          makeNic("ib0", NicKind::kIb, 0, {"10.1.0.1/24"})});
  auto b = makeNode(
      "b", {makeNic("eth0", NicKind::kEth, 0, {"fe80::2/64", "169.254.0.2/16"}),
            makeNic("eth1", NicKind::kEth, 0, {"10.5.0.2/24"}), makeNic("eth2", NicKind::kEth, 0, {"10.1.0.2/24"})});
  ClusterView v = buildOk({a, b});
  // No link-local fabric, no fabric through a's down eth1, and ib0 / eth2 share a subnet but not a kind.
  EXPECT_EQ(fabricNames(v), (std::vector<std::string>{"ib:10.1.0.0/24", "eth:10.1.0.0/24", "eth:10.5.0.0/24"}));
  for (const Fabric& f : v.fabrics()) EXPECT_EQ(f.hosts.size(), 1u) << f.name;
  EXPECT_TRUE(v.sharedFabrics(0, 1).empty());
  EXPECT_EQ(v.islands().size(), 2u) << "single-host fabrics join nothing: each host is an island alone";
  EXPECT_EQ(v.islands()[1].kind, IslandKind::kHost);
}

TEST(ClusterView, SameAddressOnTwoHostsIsNotAFabric) {
  // docker0 is 172.17.0.1/16 on every host: each host's own network, not one they share.
  auto a = makeNode("a", {makeNic("docker0", NicKind::kEth, 0, {"172.17.0.1/16"})});
  auto b = makeNode("b", {makeNic("docker0", NicKind::kEth, 0, {"172.17.0.1/16"})});
  ClusterView v = buildOk({a, b});
  EXPECT_TRUE(v.fabrics().empty());
}

TEST(ClusterView, Gpus) {
  auto a = makeNode("a", {});
  a.gpus = {{"A100", 0, 312, "", -1, true}, {"A100b", 0, 312, "", -1, true}};
  std::vector<NodeDescription> nodes = {a, a, a, makeNode("b", {})};
  ClusterView v = buildOk(nodes);
  EXPECT_EQ(v.gpuOf(0)->model, "A100");
  EXPECT_EQ(v.gpuOf(1)->model, "A100b");
  EXPECT_EQ(v.gpuOf(2)->model, "A100") << "more ranks than GPUs wrap around";
  EXPECT_EQ(v.gpuOf(3), nullptr);
}

TEST(ClusterView, BadInputs) {
  EXPECT_EQ(std::string(ClusterView::build({}).error().message()), "cluster view: no node descriptions");
  auto nameless = makeNode("", {});
  EXPECT_EQ(std::string(ClusterView::build({makeNode("a", {}), nameless}).error().message()),
            "cluster view: rank 1 has an empty host id");
  auto twice = makeNode("a", {makeNic("eth0", NicKind::kEth, 0, {}), makeNic("eth0", NicKind::kEth, 0, {})});
  EXPECT_EQ(std::string(ClusterView::build({twice}).error().message()),
            "cluster view: rank 0 lists two NICs named \"eth0\"");
  auto ib = makeNode("a", {makeNic("ib0", NicKind::kIb, 0, {}, "f")});
  auto eth = makeNode("b", {makeNic("eth0", NicKind::kEth, 0, {}, "f")});
  EXPECT_EQ(std::string(ClusterView::build({ib, eth}).error().message()),
            "cluster view: fabric \"f\" has NICs of kinds ib (host a, ib0) and eth (host b, eth0)");
}

// Every rank must build the same view: NIC and address order in the input must not matter.
TEST(ClusterView, DeterministicUnderShuffledNics) {
  auto reference = referenceCluster();
  // Extra structure worth shuffling: an IPv6 address and a second eth rail on every host.
  for (size_t r = 0; r < reference.size(); ++r) {
    int h = static_cast<int>(r / 2);
    reference[r].nics.push_back(makeNic("eth1", NicKind::kEth, 1000, {"fd00::" + std::to_string(h + 1) + "/64"}));
    reference[r].nics[0].addresses.push_back("10.7.0." + std::to_string(h + 1) + "/24");
  }
  ClusterView expected = buildOk(reference);
  std::string expectedText = expected.format();
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 20; ++trial) {
    auto shuffled = reference;
    for (NodeDescription& n : shuffled) {
      std::shuffle(n.nics.begin(), n.nics.end(), rng);
      for (Nic& nic : n.nics) std::shuffle(nic.addresses.begin(), nic.addresses.end(), rng);
    }
    ClusterView v = buildOk(shuffled);
    EXPECT_EQ(v.format(), expectedText) << "trial " << trial;
    ASSERT_EQ(v.fabrics().size(), expected.fabrics().size());
    for (size_t f = 0; f < v.fabrics().size(); ++f) {
      EXPECT_EQ(v.fabrics()[f].name, expected.fabrics()[f].name);
      EXPECT_EQ(v.fabrics()[f].nics, expected.fabrics()[f].nics);
    }
    for (int r = 0; r < v.nranks(); ++r) EXPECT_EQ(v.node(r), expected.node(r));
  }
}

// What every rank receives is bytes: a view built from deserialized descriptions equals the original.
TEST(ClusterView, SameViewFromSerializedDescriptions) {
  auto nodes = referenceCluster();
  std::vector<NodeDescription> received;
  for (const NodeDescription& n : nodes) {
    auto back = deserializeNode(serializeNode(n));
    ASSERT_TRUE(back.has_value());
    received.push_back(*back);
  }
  EXPECT_EQ(buildOk(received).format(), buildOk(nodes).format());
}

TEST(ClusterView, FormatMarksTopoFileValues) {
  auto nodes = referenceCluster();
  nodes[0].nics[1].fromTopoFile = true;
  nodes[0].topoFile = "/etc/emu.json";
  std::string text = buildOk(nodes).format();
  EXPECT_NE(text.find("cluster: 8 ranks on 4 hosts, 3 fabrics"), std::string::npos) << text;
  EXPECT_NE(text.find("island ib   on h0 h1: ranks 0-3 via ib:10.1.0.0/24"), std::string::npos) << text;
  EXPECT_NE(text.find("* from topology file /etc/emu.json"), std::string::npos) << text;
  EXPECT_EQ(formatRankList({0, 1, 2, 4, 6, 7}), "0-2,4,6-7");
  EXPECT_EQ(formatRankList({}), "");
}

}  // namespace
}  // namespace hetcomm::topo
