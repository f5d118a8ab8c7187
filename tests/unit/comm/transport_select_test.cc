// transport_select: which transport each pair of ranks uses, and why. Everything here is pure: clusters are built
// from hand-made NodeDescriptions (hosts with ib, roce and Ethernet NICs, RDMA ports set or not, named fabrics)
// and Offers written out by hand, as every rank would publish them at init. Covers the automatic choice (shm within
// a host; verbs, else UCX, on a shared RDMA fabric; tcp otherwise, with a reason naming the rank that lacks
// RDMA), symmetry over a random cluster, HETCOMM_TRANSPORT lists (parsing and forcing), and which transports a rank
// must start (mayNeed), including that the choice only ever names a transport both ends started.
#include "comm/transport_select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/strings.h"

namespace hetcomm::transport {
// gtest prints a Kind by its name ("ucx", not "1-byte object <02>").
void PrintTo(Kind kind, std::ostream* os) { *os << kindName(kind); }
}  // namespace hetcomm::transport

namespace hetcomm::comm {
namespace {

using transport::Kind;
using topo::Nic;
using topo::NicKind;
using topo::NodeDescription;

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

// A NIC on a named fabric; rdma "mlx5_0:1" makes it an RDMA port, "" a NIC with no RDMA device behind it.
Nic makeNic(const std::string& name, NicKind kind, uint64_t rateMbps, const std::string& fabric,
            const std::string& rdma = "") {
  Nic n;
  n.name = name;
  n.kind = kind;
  n.rateMbps = rateMbps;
  n.fabric = fabric;
  if (!rdma.empty()) {
    auto colon = rdma.find(':');
    n.rdmaDevice = rdma.substr(0, colon);
    n.rdmaPort = std::stoi(rdma.substr(colon + 1));
  }
  return n;
}

NodeDescription makeNode(const std::string& hostId, std::vector<Nic> nics) {
  NodeDescription n;
  n.hostId = hostId;
  n.hostName = hostId;
  n.cores = 2;
  n.pus = 2;
  n.nics = std::move(nics);
  return n;
}

topo::ClusterView build(std::vector<NodeDescription> nodes) {
  auto v = topo::ClusterView::build(std::move(nodes));
  EXPECT_TRUE(v) << v.error().toString();
  return std::move(*v);
}

Offer offerOf(const std::string& hostId, bool ucx, std::vector<std::string> verbsPorts) {
  Offer o;
  o.hostId = hostId;
  o.ucx = ucx;
  if (!ucx) o.ucxWhy = "UCX not started (no RDMA NIC on " + hostId + ")";
  o.verbsPorts = std::move(verbsPorts);
  if (o.verbsPorts.empty()) o.verbsWhy = "verbs unavailable: no active port on " + hostId;
  return o;
}

std::string kindsOf(const std::vector<Kind>& kinds) {
  std::vector<std::string> names;
  for (Kind k : kinds) names.push_back(transport::kindName(k));
  return join(names, ",");
}

// ---- the reference cluster ----
//
//   rank 0, 1  host "a": ib0 (fabric ib-A, 100 Gb/s, mlx5_0:1), eth0 (fabric eth-A, 10 Gb/s)
//   rank 2     host "b": ib0 (fabric ib-A, 100 Gb/s, mlx5_3:1), eth0 (fabric eth-A, 10 Gb/s)
//   rank 3     host "c": eth0 (fabric eth-A, 10 Gb/s)
//   rank 4     host "d": eth0 (fabric eth-B): shares no fabric with anyone
//   rank 5     host "e": roce0 (fabric roce-A, 25 Gb/s, mlx5_7:1), eth0 (eth-A)
//   rank 6     host "f": roce0 (fabric roce-A, 25 Gb/s, mlx5_8:1), ib0 (fabric ib-A, 100 Gb/s, emulated: no RDMA
//                        device), eth0 (eth-A)
std::vector<NodeDescription> referenceNodes() {
  NodeDescription a = makeNode("a", {makeNic("ib0", NicKind::kIb, 100000, "ib-A", "mlx5_0:1"),
                                     makeNic("eth0", NicKind::kEth, 10000, "eth-A")});
  NodeDescription b = makeNode("b", {makeNic("ib0", NicKind::kIb, 100000, "ib-A", "mlx5_3:1"),
                                     makeNic("eth0", NicKind::kEth, 10000, "eth-A")});
  NodeDescription c = makeNode("c", {makeNic("eth0", NicKind::kEth, 10000, "eth-A")});
  NodeDescription d = makeNode("d", {makeNic("eth0", NicKind::kEth, 10000, "eth-B")});
  NodeDescription e = makeNode("e", {makeNic("roce0", NicKind::kRoce, 25000, "roce-A", "mlx5_7:1"),
                                     makeNic("eth0", NicKind::kEth, 10000, "eth-A")});
  NodeDescription f = makeNode("f", {makeNic("roce0", NicKind::kRoce, 25000, "roce-A", "mlx5_8:1"),
                                     makeNic("ib0", NicKind::kIb, 100000, "ib-A"),
                                     makeNic("eth0", NicKind::kEth, 10000, "eth-A")});
  return {a, a, b, c, d, e, f};
}

// Every rank with RDMA runs verbs on its port and UCX too (the "everything works" case); tests edit copies.
std::vector<Offer> referenceOffers() {
  return {offerOf("a", true, {"mlx5_0:1"}), offerOf("a", true, {"mlx5_0:1"}), offerOf("b", true, {"mlx5_3:1"}),
          offerOf("c", false, {}),          offerOf("d", false, {}),          offerOf("e", true, {"mlx5_7:1"}),
          offerOf("f", true, {"mlx5_8:1"})};
}

class TransportSelectTest : public ::testing::Test {
 protected:
  topo::ClusterView view = build(referenceNodes());
  std::vector<Offer> offers = referenceOffers();

  PairChoice pick(int a, int b, const std::vector<Kind>& forced = {}) {
    PairChoice c = choose(view, offers, forced, a, b);
    PairChoice back = choose(view, offers, forced, b, a);
    EXPECT_EQ(c.kind, back.kind) << "choose(" << a << "," << b << ") differs from choose(" << b << "," << a << ")";
    EXPECT_EQ(c.why, back.why);
    EXPECT_FALSE(c.why.empty()) << "every choice says why";
    return c;
  }
};

// ---- automatic choice ----

TEST_F(TransportSelectTest, SameHostIsShm) {
  PairChoice c = pick(0, 1);
  EXPECT_EQ(c.kind, Kind::kShm);
  EXPECT_EQ(c.why, "same host");
  // Even when both ends could do verbs and UCX.
  offers[0].ucx = offers[1].ucx = true;
  EXPECT_EQ(pick(1, 0).kind, Kind::kShm);
}

TEST_F(TransportSelectTest, SharedIbFabricWithVerbsAtBothEndsIsVerbs) {
  PairChoice c = pick(0, 2);
  EXPECT_EQ(c.kind, Kind::kVerbs) << c.why;
  EXPECT_TRUE(contains(c.why, "fabric ib-A (ib, 100 Gb/s)")) << c.why;
  EXPECT_TRUE(contains(c.why, "verbs")) << c.why;
  // Both ports, in rank order whichever end asks.
  EXPECT_TRUE(contains(c.why, "mlx5_0:1 / mlx5_3:1")) << c.why;
  EXPECT_EQ(pick(1, 2).kind, Kind::kVerbs);
}

TEST_F(TransportSelectTest, SharedRoceFabricWithVerbsAtBothEndsIsVerbs) {
  PairChoice c = pick(5, 6);
  EXPECT_EQ(c.kind, Kind::kVerbs) << c.why;
  EXPECT_TRUE(contains(c.why, "fabric roce-A (roce, 25 Gb/s)")) << c.why;
  EXPECT_TRUE(contains(c.why, "mlx5_7:1 / mlx5_8:1")) << c.why;
}

// NCCL issue #234: a host with InfiniBand and one whose verbs did not start must not wait for each other's verbs.
TEST_F(TransportSelectTest, VerbsAtOneEndOnlyFallsBackToUcxWhenBothRunIt) {
  offers[2].verbsPorts.clear();
  offers[2].verbsWhy = "verbs unavailable: ibv_open_device failed";
  PairChoice c = pick(0, 2);
  EXPECT_EQ(c.kind, Kind::kUcx) << c.why;
  EXPECT_TRUE(contains(c.why, "fabric ib-A")) << c.why;
  EXPECT_TRUE(contains(c.why, "ucx")) << c.why;
  EXPECT_TRUE(contains(c.why, "mlx5_0:1 / mlx5_3:1")) << c.why;
}

TEST_F(TransportSelectTest, VerbsAtOneEndOnlyWithoutUcxIsTcpNamingTheRankThatLacksVerbs) {
  for (int lacking : {0, 2}) {
    SCOPED_TRACE(format("rank %d has no verbs", lacking));
    offers = referenceOffers();
    offers[lacking].verbsPorts.clear();
    offers[lacking].verbsWhy = "verbs unavailable: ibv_open_device failed";
    offers[0].ucx = false;  // the end with verbs did not start UCX (verbs served its ports)
    offers[0].ucxWhy = "UCX not started: verbs serves this host's RDMA ports";
    if (lacking == 0) offers[2].ucx = false;
    PairChoice c = pick(0, 2);
    EXPECT_EQ(c.kind, Kind::kTcp) << c.why;
    EXPECT_TRUE(contains(c.why, format("rank %d: verbs unavailable: ibv_open_device failed", lacking))) << c.why;
    EXPECT_TRUE(contains(c.why, "fabric ib-A")) << c.why;
    EXPECT_TRUE(contains(c.why, "no RDMA at both ends")) << c.why;
  }
}

TEST_F(TransportSelectTest, RdmaNicWithoutAnRdmaDeviceIsTcpNamingThatRank) {
  // Ranks 2 (host b) and 6 (host f) share ib-A, but f's ib0 is emulated (no RDMA device), and no other RDMA
  // fabric joins them.
  PairChoice c = pick(2, 6);
  EXPECT_EQ(c.kind, Kind::kTcp) << c.why;
  EXPECT_TRUE(contains(c.why, "fabric ib-A")) << c.why;
  EXPECT_TRUE(contains(c.why, "rank 6's NIC on it has no RDMA device")) << c.why;
}

TEST_F(TransportSelectTest, EthernetOnlyIsTcp) {
  PairChoice c = pick(0, 3);
  EXPECT_EQ(c.kind, Kind::kTcp) << c.why;
  EXPECT_TRUE(contains(c.why, "fabric eth-A (eth, 10 Gb/s)")) << c.why;
  EXPECT_FALSE(contains(c.why, "RDMA")) << "nothing to say about RDMA on an Ethernet-only pair: " << c.why;
  // Even when UCX runs at both ends: it is only chosen on an RDMA fabric.
  offers[3].ucx = true;
  EXPECT_EQ(pick(0, 3).kind, Kind::kTcp);
}

TEST_F(TransportSelectTest, NoSharedFabricIsTcp) {
  for (int other : {0, 2, 3, 5}) {
    PairChoice c = pick(4, other);
    EXPECT_EQ(c.kind, Kind::kTcp) << c.why;
    EXPECT_TRUE(contains(c.why, "no shared fabric")) << c.why;
  }
}

TEST_F(TransportSelectTest, IbIsPreferredOverRoceAndVerbsOnAnyRdmaFabricOverUcx) {
  // Hosts g and h share an ib and a roce fabric.
  NodeDescription g = makeNode("g", {makeNic("ib0", NicKind::kIb, 100000, "ib-X", "mlx5_0:1"),
                                     makeNic("roce0", NicKind::kRoce, 200000, "roce-X", "mlx5_1:1")});
  NodeDescription h = makeNode("h", {makeNic("ib0", NicKind::kIb, 100000, "ib-X", "mlx5_0:1"),
                                     makeNic("roce0", NicKind::kRoce, 200000, "roce-X", "mlx5_1:1")});
  view = build({g, h});
  offers = {offerOf("g", true, {"mlx5_0:1", "mlx5_1:1"}), offerOf("h", true, {"mlx5_0:1", "mlx5_1:1"})};
  PairChoice c = pick(0, 1);
  EXPECT_EQ(c.kind, Kind::kVerbs);
  EXPECT_TRUE(contains(c.why, "fabric ib-X")) << "ib comes first, even against a faster roce: " << c.why;
  // Verbs only on the roce ports: verbs over roce beats UCX over ib.
  offers[0].verbsPorts = {"mlx5_1:1"};
  offers[1].verbsPorts = {"mlx5_1:1"};
  c = pick(0, 1);
  EXPECT_EQ(c.kind, Kind::kVerbs);
  EXPECT_TRUE(contains(c.why, "fabric roce-X")) << c.why;
  EXPECT_TRUE(contains(c.why, "mlx5_1:1 / mlx5_1:1")) << c.why;
  // No verbs at one end: UCX on the best RDMA fabric.
  offers[1].verbsPorts.clear();
  c = pick(0, 1);
  EXPECT_EQ(c.kind, Kind::kUcx);
  EXPECT_TRUE(contains(c.why, "fabric ib-X")) << c.why;
}

TEST_F(TransportSelectTest, VerbsNeedsItsOwnPortOnTheSharedFabric) {
  // Verbs runs at both ends, but at rank 0 only on a port of another fabric: not on ib-A.
  offers[0].verbsPorts = {"mlx5_9:1"};
  PairChoice c = pick(0, 2);
  EXPECT_NE(c.kind, Kind::kVerbs) << c.why;
  EXPECT_EQ(c.kind, Kind::kUcx) << c.why;
}

// A host with two ports on one fabric (two rails into the same switch) whose verbs was restricted to the second
// one (HETCOMM_IB_HCA=mlx5_1): verbs still serves the fabric, through the port it has.
TEST_F(TransportSelectTest, VerbsUsesWhicheverOfTheHostsPortsOnTheFabricItRuns) {
  NodeDescription g = makeNode("g", {makeNic("ib0", NicKind::kIb, 100000, "ib-X", "mlx5_0:1"),
                                     makeNic("ib1", NicKind::kIb, 100000, "ib-X", "mlx5_1:1")});
  NodeDescription h = makeNode("h", {makeNic("ib0", NicKind::kIb, 100000, "ib-X", "mlx5_0:1")});
  view = build({g, h});
  offers = {offerOf("g", false, {"mlx5_1:1"}), offerOf("h", false, {"mlx5_0:1"})};
  PairChoice c = pick(0, 1);
  EXPECT_EQ(c.kind, Kind::kVerbs) << c.why;
  EXPECT_TRUE(contains(c.why, "mlx5_1:1 / mlx5_0:1")) << c.why;
}

// ---- symmetry over a random-ish cluster ----

struct RandomCluster {
  std::vector<NodeDescription> nodes;
  std::vector<Offer> offers;
};

// hosts hosts with 1-3 ranks each; each host gets a random subset of 2 ib, 2 roce and 3 Ethernet fabrics, RDMA
// NICs with or without an RDMA device, and random offers (UCX or not, verbs on some of its ports or none).
RandomCluster randomCluster(uint32_t seed, int hosts) {
  std::mt19937 rng(seed);
  auto coin = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  RandomCluster rc;
  for (int h = 0; h < hosts; ++h) {
    const std::string id = "host" + std::to_string(h);
    std::vector<Nic> nics;
    std::vector<std::string> ports;
    const struct {
      const char* fabric;
      NicKind kind;
      uint64_t rate;
    } fabrics[] = {{"ib-1", NicKind::kIb, 200000},     {"ib-2", NicKind::kIb, 100000},
                   {"roce-1", NicKind::kRoce, 100000}, {"roce-2", NicKind::kRoce, 25000},
                   {"eth-1", NicKind::kEth, 10000},    {"eth-2", NicKind::kEth, 1000},
                   {"eth-3", NicKind::kEth, 0}};
    int i = 0;
    for (const auto& f : fabrics) {
      if (!coin(45)) continue;
      std::string rdma;
      if (f.kind != NicKind::kEth && coin(80)) {
        rdma = format("mlx5_%d:1", i);
        ports.push_back(rdma);
      }
      nics.push_back(makeNic(format("nic%d", i++), f.kind, coin(80) ? f.rate : 0, f.fabric, rdma));
    }
    const bool ucx = coin(50);
    std::vector<std::string> verbs;
    for (const auto& p : ports)
      if (coin(70)) verbs.push_back(p);
    const int ranks = 1 + static_cast<int>(rng() % 3);
    for (int r = 0; r < ranks; ++r) {
      rc.nodes.push_back(makeNode(id, nics));
      // Ranks of a host usually offer the same, but need not (one rank's UCX may fail to start).
      rc.offers.push_back(offerOf(id, r == 0 || coin(80) ? ucx : !ucx, verbs));
    }
  }
  return rc;
}

TEST(TransportSelectSymmetry, BothEndsOfEveryPairChooseTheSameForAnyForcedList) {
  const std::vector<std::vector<Kind>> forcedLists = {
      {}, {Kind::kUcx}, {Kind::kShm, Kind::kUcx}, {Kind::kVerbs}, {Kind::kTcp}, {Kind::kVerbs, Kind::kUcx}};
  int pairs = 0;
  int seen[kKinds] = {};
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    RandomCluster rc = randomCluster(seed, 2 + seed % 6);
    auto view = topo::ClusterView::build(rc.nodes);
    ASSERT_TRUE(view) << view.error().toString();
    const int n = view->nranks();
    for (const auto& forced : forcedLists)
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b) {
          if (a == b) continue;
          SCOPED_TRACE(format("seed %u, forced '%s', ranks %d and %d", seed, kindsOf(forced).c_str(), a, b));
          PairChoice ab = choose(*view, rc.offers, forced, a, b);
          PairChoice ba = choose(*view, rc.offers, forced, b, a);
          ASSERT_EQ(ab.kind, ba.kind) << ab.why << " | " << ba.why;
          ASSERT_EQ(ab.why, ba.why);
          ++pairs;
          ++seen[static_cast<int>(ab.kind)];
          // The choice is one both ends can run.
          const Offer& A = rc.offers[a];
          const Offer& B = rc.offers[b];
          switch (ab.kind) {
            case Kind::kShm:
              EXPECT_EQ(A.hostId, B.hostId) << ab.why;
              break;
            case Kind::kUcx:
              EXPECT_TRUE(A.ucx && B.ucx) << ab.why;
              break;
            case Kind::kVerbs:
              EXPECT_TRUE(!A.verbsPorts.empty() && !B.verbsPorts.empty()) << ab.why;
              break;
            case Kind::kTcp:
              break;
          }
          // Automatic: shm exactly within a host.
          if (forced.empty()) {
            EXPECT_EQ(ab.kind == Kind::kShm, A.hostId == B.hostId) << ab.why;
          }
        }
  }
  // The random clusters exercised every outcome.
  for (int k = 0; k < kKinds; ++k)
    EXPECT_GT(seen[k], 0) << transport::kindName(static_cast<Kind>(k)) << " never chosen in " << pairs << " pairs";
}

// ---- HETCOMM_TRANSPORT ----

TEST_F(TransportSelectTest, ForcedUcxServesEveryPairWhereBothRunIt) {
  for (int a = 0; a < view.nranks(); ++a)
    for (int b = a + 1; b < view.nranks(); ++b) {
      SCOPED_TRACE(format("ranks %d and %d", a, b));
      PairChoice c = pick(a, b, {Kind::kUcx});
      if (offers[a].ucx && offers[b].ucx) {
        EXPECT_EQ(c.kind, Kind::kUcx) << c.why;  // same host and no shared fabric included: UCX finds its way
        EXPECT_EQ(c.why, "HETCOMM_TRANSPORT forces ucx");
      } else {
        // Rank 3 or 4 has no UCX: the automatic choice, and the reason says why the forced one could not be used.
        EXPECT_NE(c.kind, Kind::kUcx) << c.why;
        EXPECT_TRUE(contains(c.why, "HETCOMM_TRANSPORT cannot serve this pair: ucx: rank ")) << c.why;
        const int lacking = offers[a].ucx ? b : a;
        EXPECT_TRUE(contains(c.why, format("rank %d: %s", lacking, offers[lacking].ucxWhy.c_str()))) << c.why;
        EXPECT_EQ(c.kind, choose(view, offers, {}, a, b).kind) << "not the automatic choice";
      }
    }
}

TEST_F(TransportSelectTest, ForcedShmThenUcxIsShmWithinAHostAndUcxAcross) {
  const std::vector<Kind> forced = {Kind::kShm, Kind::kUcx};
  PairChoice c = pick(0, 1, forced);
  EXPECT_EQ(c.kind, Kind::kShm);
  EXPECT_EQ(c.why, "HETCOMM_TRANSPORT forces shm");
  for (int other : {2, 5, 6}) {  // hosts with UCX
    c = pick(0, other, forced);
    EXPECT_EQ(c.kind, Kind::kUcx) << c.why;
    EXPECT_EQ(c.why.rfind("HETCOMM_TRANSPORT forces ucx", 0), 0u) << c.why;
    EXPECT_TRUE(contains(c.why, "shm: shm reaches one host only")) << "why not the first listed: " << c.why;
  }
  // Rank 3 runs no UCX: automatic (tcp over eth-A), with both refusals in the reason.
  c = pick(0, 3, forced);
  EXPECT_EQ(c.kind, Kind::kTcp) << c.why;
  EXPECT_TRUE(contains(c.why, "shm: shm reaches one host only")) << c.why;
  EXPECT_TRUE(contains(c.why, "ucx: rank 3: ")) << c.why;
}

TEST_F(TransportSelectTest, ForcedVerbsWithNoVerbsFallsBackToAutomaticSayingItCannotServe) {
  for (auto& o : offers) {
    o.verbsPorts.clear();
    o.verbsWhy = "verbs unavailable: no RDMA device";
  }
  for (auto [a, b] : std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {0, 3}, {0, 4}, {5, 6}}) {
    SCOPED_TRACE(format("ranks %d and %d", a, b));
    PairChoice forced = pick(a, b, {Kind::kVerbs});
    PairChoice automatic = pick(a, b);
    EXPECT_EQ(forced.kind, automatic.kind);
    EXPECT_NE(forced.kind, Kind::kVerbs);
    EXPECT_TRUE(contains(forced.why, "cannot serve")) << forced.why;
    EXPECT_TRUE(contains(forced.why, format("verbs: rank %d: verbs unavailable: no RDMA device", a))) << forced.why;
    EXPECT_EQ(forced.why.rfind(automatic.why, 0), 0u) << "the automatic reason comes first: " << forced.why;
  }
}

TEST_F(TransportSelectTest, ForcedVerbsServesAPairWithVerbsAtBothEnds) {
  PairChoice c = pick(0, 2, {Kind::kVerbs});
  EXPECT_EQ(c.kind, Kind::kVerbs);
  EXPECT_EQ(c.why, "HETCOMM_TRANSPORT forces verbs");
}

// Verbs at both ends is not enough: RDMA needs a fabric that joins their ports. Hosts b (ib-A) and e (roce-A) both
// run verbs but share only Ethernet, so a forced verbs cannot serve them and the pair keeps the automatic choice.
TEST_F(TransportSelectTest, ForcedVerbsCannotServeHostsWithoutASharedRdmaFabric) {
  PairChoice c = pick(2, 5, {Kind::kVerbs});
  EXPECT_NE(c.kind, Kind::kVerbs) << c.why;
  EXPECT_EQ(c.kind, Kind::kTcp) << c.why;
  EXPECT_TRUE(contains(c.why, "cannot serve")) << c.why;
}

TEST_F(TransportSelectTest, ForcedTcpServesEveryPair) {
  for (int a = 0; a < view.nranks(); ++a)
    for (int b = a + 1; b < view.nranks(); ++b) {
      PairChoice c = pick(a, b, {Kind::kTcp, Kind::kShm});
      EXPECT_EQ(c.kind, Kind::kTcp) << a << "," << b << ": " << c.why;
      EXPECT_EQ(c.why, "HETCOMM_TRANSPORT forces tcp");
    }
}

// ---- parseTransportList ----

Result<std::vector<Kind>> parse(const std::string& s) { return parseTransportList(s); }

TEST(ParseTransportList, EmptyMeansAutomatic) {
  auto r = parse("");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_TRUE(r->empty());
  // Only separators: nothing listed either.
  r = parse(",");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_TRUE(r->empty());
}

TEST(ParseTransportList, NamesInOrder) {
  auto r = parse("tcp");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(*r, std::vector<Kind>{Kind::kTcp});
  r = parse("shm,ucx");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(*r, (std::vector<Kind>{Kind::kShm, Kind::kUcx}));
  r = parse("verbs,ucx,tcp,shm");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(*r, (std::vector<Kind>{Kind::kVerbs, Kind::kUcx, Kind::kTcp, Kind::kShm}));
}

TEST(ParseTransportList, RepeatsAreDroppedKeepingTheFirstPlace) {
  auto r = parse("tcp,shm,tcp,tcp,shm");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(*r, (std::vector<Kind>{Kind::kTcp, Kind::kShm}));
}

TEST(ParseTransportList, EmptyWordsAreSkipped) {
  auto r = parse(",tcp,,shm,");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(*r, (std::vector<Kind>{Kind::kTcp, Kind::kShm}));
}

// Decision: blanks around a name are not part of it ("shm, tcp" is how people write lists), so they are trimmed;
// a name with a blank inside is still unknown.
TEST(ParseTransportList, BlanksAroundNamesAreIgnored) {
  for (const std::string spec : {" shm,tcp", "shm, tcp", " shm , tcp ", "\tshm,tcp\t"}) {
    SCOPED_TRACE("'" + spec + "'");
    auto r = parse(spec);
    ASSERT_TRUE(r) << r.error().toString();
    EXPECT_EQ(*r, (std::vector<Kind>{Kind::kShm, Kind::kTcp}));
  }
  auto r = parse(" ");
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_TRUE(r->empty());
  r = parse("s hm");
  ASSERT_FALSE(r);
  EXPECT_TRUE(contains(r.error().message(), "'s hm'")) << r.error().message();
}

TEST(ParseTransportList, UnknownNameIsAnInvalidArgumentNamingIt) {
  auto r = parse("foo");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(r.error().message(), "'foo'")) << r.error().message();
  EXPECT_TRUE(contains(r.error().message(), "HETCOMM_TRANSPORT=foo")) << r.error().message();
  // The valid names are listed.
  for (const char* k : {"shm", "tcp", "ucx", "verbs"}) EXPECT_TRUE(contains(r.error().message(), k));

  r = parse("tcp,bogus");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(r.error().message(), "'bogus'")) << r.error().message();
  EXPECT_FALSE(contains(r.error().message(), "'tcp'")) << "tcp is fine: " << r.error().message();

  // Names are lowercase, as kindName() writes them.
  r = parse("TCP");
  ASSERT_FALSE(r);
  EXPECT_TRUE(contains(r.error().message(), "'TCP'")) << r.error().message();
}

// ---- mayNeed ----

NodeDescription ethOnlyHost() { return makeNode("x", {makeNic("eth0", NicKind::kEth, 10000, "eth-A")}); }
NodeDescription ibHost() {
  return makeNode("x", {makeNic("eth0", NicKind::kEth, 10000, "eth-A"),
                        makeNic("ib0", NicKind::kIb, 100000, "ib-A", "mlx5_0:1")});
}

TEST(MayNeed, AutomaticNeedsShmAndTcpAlwaysAndRdmaTransportsOnlyWithAnRdmaPort) {
  for (Kind k : {Kind::kShm, Kind::kTcp}) {
    EXPECT_TRUE(mayNeed(k, {}, ethOnlyHost())) << transport::kindName(k);
    EXPECT_TRUE(mayNeed(k, {}, ibHost())) << transport::kindName(k);
  }
  for (Kind k : {Kind::kUcx, Kind::kVerbs}) {
    SCOPED_TRACE(transport::kindName(k));
    EXPECT_FALSE(mayNeed(k, {}, ethOnlyHost()));
    EXPECT_TRUE(mayNeed(k, {}, ibHost()));
    NodeDescription roce = makeNode("x", {makeNic("roce0", NicKind::kRoce, 25000, "roce-A", "mlx5_2:1")});
    EXPECT_TRUE(mayNeed(k, {}, roce));
    // An ib NIC without an RDMA device behind it (emulated), or one that is down, does not count.
    NodeDescription emulated = makeNode("x", {makeNic("ib0", NicKind::kIb, 100000, "ib-A")});
    EXPECT_FALSE(mayNeed(k, {}, emulated));
    NodeDescription down = ibHost();
    for (auto& n : down.nics) n.state = topo::NicState::kDown;
    EXPECT_FALSE(mayNeed(k, {}, down));
    // An RDMA device on an Ethernet-kind NIC is not an RDMA fabric for the selection either.
    NodeDescription odd = makeNode("x", {makeNic("eth5", NicKind::kEth, 10000, "eth-A", "mlx5_5:1")});
    EXPECT_FALSE(mayNeed(k, {}, odd));
  }
}

TEST(MayNeed, AForcedKindIsAlwaysNeeded) {
  EXPECT_TRUE(mayNeed(Kind::kUcx, {Kind::kUcx}, ethOnlyHost()));
  EXPECT_TRUE(mayNeed(Kind::kVerbs, {Kind::kVerbs}, ethOnlyHost()));
  EXPECT_TRUE(mayNeed(Kind::kUcx, {Kind::kShm, Kind::kUcx}, ethOnlyHost()));
  EXPECT_TRUE(mayNeed(Kind::kShm, {Kind::kTcp, Kind::kShm}, ethOnlyHost()));
}

TEST(MayNeed, ListStartingWithTcpNeedsOnlyWhatItLists) {
  // tcp serves every pair, so nothing unlisted is ever chosen.
  EXPECT_TRUE(mayNeed(Kind::kTcp, {Kind::kTcp}, ibHost()));
  EXPECT_FALSE(mayNeed(Kind::kShm, {Kind::kTcp}, ibHost()));
  EXPECT_FALSE(mayNeed(Kind::kUcx, {Kind::kTcp}, ibHost()));
  EXPECT_FALSE(mayNeed(Kind::kVerbs, {Kind::kTcp}, ibHost()));
  EXPECT_TRUE(mayNeed(Kind::kUcx, {Kind::kTcp, Kind::kUcx}, ibHost()));
}

TEST(MayNeed, OtherListsKeepTheAutomaticFallbackReady) {
  // Pairs the list cannot serve take the automatic choice, so its transports must listen too.
  for (const std::vector<Kind>& forced :
       {std::vector<Kind>{Kind::kShm}, std::vector<Kind>{Kind::kUcx}, std::vector<Kind>{Kind::kVerbs, Kind::kUcx}}) {
    SCOPED_TRACE(kindsOf(forced));
    EXPECT_TRUE(mayNeed(Kind::kShm, forced, ibHost()));
    EXPECT_TRUE(mayNeed(Kind::kTcp, forced, ethOnlyHost()));
    EXPECT_TRUE(mayNeed(Kind::kVerbs, forced, ibHost()));
    EXPECT_TRUE(mayNeed(Kind::kUcx, forced, ibHost()));
  }
  EXPECT_FALSE(mayNeed(Kind::kVerbs, {Kind::kShm}, ethOnlyHost()));
}

// What the communicator relies on: every rank starts what mayNeed says (and offers what started), and choose()
// then only ever names a transport both ends started. Over random clusters and every list.
TEST(MayNeed, ChoicesOnlyNameTransportsBothEndsStarted) {
  const std::vector<std::vector<Kind>> forcedLists = {{},
                                                      {Kind::kTcp},
                                                      {Kind::kShm},
                                                      {Kind::kUcx},
                                                      {Kind::kVerbs},
                                                      {Kind::kShm, Kind::kUcx},
                                                      {Kind::kVerbs, Kind::kUcx},
                                                      {Kind::kTcp, Kind::kUcx},
                                                      {Kind::kUcx, Kind::kTcp}};
  for (uint32_t seed = 100; seed < 130; ++seed) {
    RandomCluster rc = randomCluster(seed, 2 + seed % 5);
    auto view = topo::ClusterView::build(rc.nodes);
    ASSERT_TRUE(view) << view.error().toString();
    const int n = view->nranks();
    for (const auto& forced : forcedLists) {
      // started[r][k]: rank r listens on k. UCX and verbs may still fail to start (the random offer says).
      std::vector<std::array<bool, kKinds>> started(n);
      std::vector<Offer> offers = rc.offers;
      for (int r = 0; r < n; ++r) {
        for (Kind k : {Kind::kShm, Kind::kTcp, Kind::kUcx, Kind::kVerbs})
          started[r][static_cast<int>(k)] = mayNeed(k, forced, rc.nodes[r]);
        if (!started[r][static_cast<int>(Kind::kUcx)]) offers[r].ucx = false;
        if (!started[r][static_cast<int>(Kind::kVerbs)]) offers[r].verbsPorts.clear();
        started[r][static_cast<int>(Kind::kUcx)] = offers[r].ucx;
        started[r][static_cast<int>(Kind::kVerbs)] = !offers[r].verbsPorts.empty();
      }
      for (int a = 0; a < n; ++a)
        for (int b = a + 1; b < n; ++b) {
          PairChoice c = choose(*view, offers, forced, a, b);
          const int k = static_cast<int>(c.kind);
          EXPECT_TRUE(started[a][k] && started[b][k])
              << "seed " << seed << ", forced '" << kindsOf(forced) << "': ranks " << a << " and " << b << " get "
              << transport::kindName(c.kind) << ", which rank " << (started[a][k] ? b : a)
              << " did not start (" << c.why << ")";
        }
    }
  }
}

}  // namespace
}  // namespace hetcomm::comm
