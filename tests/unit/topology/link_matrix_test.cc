// LinkMatrix: the class of every rank pair in the reference cluster, nominal alpha and bandwidth from NIC rates,
// assumed rates and missing fabrics, measured replacements, and the printed tables.
#include "topology/link_matrix.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/unit/topology/cluster_fixtures.h"

namespace hetcomm::topo {
namespace {

using testing::makeNic;
using testing::makeNode;

LinkMatrix referenceLinks() {
  auto view = ClusterView::build(testing::referenceCluster());
  EXPECT_TRUE(view.has_value());
  return LinkMatrix::nominal(*view);
}

TEST(LinkMatrix, ClassesOfTheReferenceCluster) {
  LinkMatrix m = referenceLinks();
  ASSERT_EQ(m.size(), 8);
  // Host h holds ranks 2h, 2h+1. ib: hosts 0-1, roce: hosts 2-3, eth: between the two halves.
  const char* expected[8] = {"X SHM IB IB ETH ETH ETH ETH",     "SHM X IB IB ETH ETH ETH ETH",
                             "IB IB X SHM ETH ETH ETH ETH",     "IB IB SHM X ETH ETH ETH ETH",
                             "ETH ETH ETH ETH X SHM ROCE ROCE", "ETH ETH ETH ETH SHM X ROCE ROCE",
                             "ETH ETH ETH ETH ROCE ROCE X SHM", "ETH ETH ETH ETH ROCE ROCE SHM X"};
  for (int i = 0; i < 8; ++i) {
    std::string row;
    for (int j = 0; j < 8; ++j) row += std::string(j ? " " : "") + linkClassLabel(m.at(i, j).cls);
    EXPECT_EQ(row, expected[i]) << "row " << i;
  }
}

TEST(LinkMatrix, NominalValuesFromRates) {
  LinkMatrix m = referenceLinks();
  const Link& self = m.at(3, 3);
  EXPECT_EQ(self.alphaUs, 0);
  const Link& shm = m.at(0, 1);
  EXPECT_EQ(shm.alphaUs, 1.0);
  EXPECT_EQ(shm.bwGBps, 25.0);
  EXPECT_EQ(shm.fabric, -1);
  const Link& ib = m.at(0, 3);
  EXPECT_EQ(ib.alphaUs, kIbAlphaUs);
  EXPECT_DOUBLE_EQ(ib.bwGBps, 12.5) << "100 Gb/s";
  EXPECT_EQ(ib.fabric, 0);
  EXPECT_FALSE(ib.measured);
  EXPECT_FALSE(ib.rateAssumed);
  EXPECT_DOUBLE_EQ(m.at(5, 6).bwGBps, 3.125) << "25 Gb/s roce";
  EXPECT_EQ(m.at(5, 6).alphaUs, kRoceAlphaUs);
  EXPECT_DOUBLE_EQ(m.at(0, 7).bwGBps, 1.25) << "10 Gb/s eth";
  EXPECT_EQ(m.at(0, 7).alphaUs, kEthAlphaUs);
  EXPECT_DOUBLE_EQ(ib.betaUsPerByte(), 1.0 / 12.5e3);
}

TEST(LinkMatrix, SlowerSideAssumedRatesAndNone) {
  auto a = makeNode(
      "a", {makeNic("eth0", NicKind::kEth, 40000, {"10.0.0.1/24"}), makeNic("ib0", NicKind::kIb, 0, {"10.1.0.1/24"})});
  auto b = makeNode(
      "b", {makeNic("eth0", NicKind::kEth, 25000, {"10.0.0.2/24"}), makeNic("ib0", NicKind::kIb, 0, {"10.1.0.2/24"})});
  auto c = makeNode("c", {makeNic("eth0", NicKind::kEth, 25000, {"10.0.0.3/24"})});
  auto d = makeNode("d", {makeNic("eth0", NicKind::kEth, 25000, {"192.168.0.4/24"})});
  auto view = ClusterView::build({a, b, c, d});
  ASSERT_TRUE(view.has_value());
  LinkMatrix m = LinkMatrix::nominal(*view);
  // a-b: ib with unknown rate on both sides: the ib assumption, flagged.
  EXPECT_EQ(m.at(0, 1).cls, LinkClass::kIb);
  EXPECT_TRUE(m.at(0, 1).rateAssumed);
  EXPECT_DOUBLE_EQ(m.at(0, 1).bwGBps, kAssumedIbMbps / 8000.0);
  // a-c: eth, the slower side's 25 Gb/s.
  EXPECT_EQ(m.at(0, 2).cls, LinkClass::kEth);
  EXPECT_DOUBLE_EQ(m.at(0, 2).bwGBps, 3.125);
  // d shares nothing.
  EXPECT_EQ(m.at(0, 3).cls, LinkClass::kNone);
  EXPECT_EQ(m.at(3, 0).fabric, -1);
  EXPECT_EQ(m.at(3, 0).alphaUs, kNoneAlphaUs);
  EXPECT_EQ(m.at(3, 0).bwGBps, kNoneBwGBps);
}

TEST(LinkMatrix, MeasuredValuesReplaceOneDirection) {
  LinkMatrix m = referenceLinks();
  ASSERT_TRUE(m.setMeasured(0, 2, 3.5, 11.0).ok());
  EXPECT_TRUE(m.at(0, 2).measured);
  EXPECT_EQ(m.at(0, 2).alphaUs, 3.5);
  EXPECT_EQ(m.at(0, 2).bwGBps, 11.0);
  EXPECT_EQ(m.at(0, 2).cls, LinkClass::kIb);
  EXPECT_FALSE(m.at(2, 0).measured);
  EXPECT_DOUBLE_EQ(m.at(2, 0).bwGBps, 12.5);
}

TEST(LinkMatrix, MeasuredValuesAreChecked) {
  LinkMatrix m = referenceLinks();
  EXPECT_EQ(std::string(m.setMeasured(8, 0, 1, 1).message()), "link matrix: rank pair (8, 0) out of range for 8 ranks");
  EXPECT_EQ(m.setMeasured(0, -1, 1, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(m.setMeasured(0, 1, -1, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(m.setMeasured(0, 1, 1, 0).code(), Code::kInvalidArgument);
  EXPECT_EQ(m.setMeasured(0, 1, NAN, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(m.setMeasured(0, 1, 1, INFINITY).code(), Code::kInvalidArgument);
  EXPECT_FALSE(m.at(0, 1).measured);
}

TEST(LinkMatrix, ClassTableLooksLikeTopoM) {
  auto a = makeNode("hostA", {makeNic("ib0", NicKind::kIb, 100000, {"10.1.0.1/24"})});
  auto b = makeNode("hostB", {makeNic("ib0", NicKind::kIb, 100000, {"10.1.0.2/24"})});
  auto view = ClusterView::build({a, a, b});
  ASSERT_TRUE(view.has_value());
  std::string table = LinkMatrix::nominal(*view).formatClasses();
  std::string head = table.substr(0, table.find("\nLegend"));
  EXPECT_EQ(head,
            "      r0    r1    r2    host\n"
            "r0    X     SHM   IB    hostA\n"
            "r1    SHM   X     IB    hostA\n"
            "r2    IB    IB    X     hostB\n");
  EXPECT_NE(table.find("SHM  = same host (shared memory)"), std::string::npos);
}

TEST(LinkMatrix, ValueTableMarksMeasuredAndAssumed) {
  auto a = makeNode("a", {makeNic("eth0", NicKind::kEth, 0, {"10.0.0.1/24"})});
  auto b = makeNode("b", {makeNic("eth0", NicKind::kEth, 0, {"10.0.0.2/24"})});
  auto view = ClusterView::build({a, b});
  ASSERT_TRUE(view.has_value());
  LinkMatrix m = LinkMatrix::nominal(*view);
  ASSERT_TRUE(m.setMeasured(1, 0, 45, 0.9).ok());
  std::string table = m.formatValues();
  EXPECT_NE(table.find("20/1.25?"), std::string::npos) << table;
  EXPECT_NE(table.find("45/0.9*"), std::string::npos) << table;
  EXPECT_NE(table.find("0/25 "), std::string::npos) << table;
}

// Multi-rail: two hosts with two InfiniBand fabrics (and Ethernet) stripe over both InfiniBand rails, never
// over Ethernet; the nominal bandwidth is then the rails' sum, and without multiRail the best fabric's alone.
TEST(LinkMatrix, MultiRailSumsTheRailsOfTheBestKind) {
  auto node = [](const std::string& id, int last) {
    const std::string l = std::to_string(last);
    return makeNode(id, {makeNic("eth0", NicKind::kEth, 10000, {"10.0.0." + l + "/24"}, "eth"),
                         makeNic("ib0", NicKind::kIb, 100000, {"10.1.0." + l + "/24"}, "ib-a"),
                         makeNic("ib1", NicKind::kIb, 50000, {"10.2.0." + l + "/24"}, "ib-b")});
  };
  auto view = ClusterView::build({node("a", 1), node("b", 2)});
  ASSERT_TRUE(view.has_value());
  std::vector<int> rails = view->railFabrics(0, 1);
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_EQ(view->fabrics()[rails[0]].name, "ib-a") << "best first";
  EXPECT_EQ(view->fabrics()[rails[1]].name, "ib-b");
  EXPECT_EQ(view->sharedFabrics(0, 1).size(), 3u);
  LinkMatrix multi = LinkMatrix::nominal(*view, true), single = LinkMatrix::nominal(*view, false);
  EXPECT_EQ(multi.at(0, 1).rails, 2);
  EXPECT_DOUBLE_EQ(multi.at(0, 1).bwGBps, 12.5 + 6.25);
  EXPECT_EQ(single.at(0, 1).rails, 1);
  EXPECT_DOUBLE_EQ(single.at(0, 1).bwGBps, 12.5);
  EXPECT_EQ(multi.at(1, 0).cls, LinkClass::kIb);
  // One fabric of the best kind: a single rail, Ethernet beside it notwithstanding.
  auto view2 = ClusterView::build(testing::referenceCluster());
  ASSERT_TRUE(view2.has_value());
  EXPECT_EQ(view2->railFabrics(0, 1).size(), 1u);
  EXPECT_EQ(LinkMatrix::nominal(*view2, true).at(0, 3).rails, 1);
}

}  // namespace
}  // namespace hetcomm::topo
