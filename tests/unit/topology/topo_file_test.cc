// Topology files: overrides applied to a discovered node (NIC kind, rate, fabric; GPUs; matching by id, name and
// "*"; file order), errors that name the file, the JSON path and the problem, the shipped example, and cluster
// dumps that load back into the same view.
#include "topology/topo_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/unit/topology/cluster_fixtures.h"
#include "tests/unit/topology/fake_sysfs.h"

namespace hetcomm::topo {
namespace {

using testing::makeNic;
using testing::makeNode;

// What discovery sees in an emulated host: two veths that look alike, no GPU.
NodeDescription emulatedHost(const std::string& id) {
  NodeDescription n = makeNode(id, {makeNic("veth-eth", NicKind::kEth, 10000, {"10.0.0.1/24"}),
                                    makeNic("veth-ib", NicKind::kEth, 0, {"10.1.0.1/24"})});
  n.nics[0].isVirtual = n.nics[1].isVirtual = true;
  return n;
}

TopoFile parseOk(const std::string& text) {
  auto f = TopoFile::parse(text, "test.json");
  EXPECT_TRUE(f.has_value()) << f.error().toString();
  return f.has_value() ? std::move(f).value() : TopoFile();
}

std::string parseError(const std::string& text) {
  auto f = TopoFile::parse(text, "test.json");
  if (f.has_value()) return "(no error)";
  EXPECT_EQ(f.error().code(), Code::kInvalidArgument);
  return std::string(f.error().message());
}

TEST(TopoFile, OverridesNicKindRateAndFabric) {
  TopoFile f = parseOk(R"({"version": 1, "hosts": [{"hostId": "h0", "nics": [
      {"name": "veth-ib", "kind": "ib", "rateMbps": 100000, "fabric": "ib-a"}]}]})");
  NodeDescription n = emulatedHost("h0");
  EXPECT_EQ(f.apply(n), 1);
  const Nic& ib = n.nics[1];
  EXPECT_EQ(ib.name, "veth-ib");
  EXPECT_EQ(ib.kind, NicKind::kIb);
  EXPECT_EQ(ib.rateMbps, 100000u);
  EXPECT_EQ(ib.fabric, "ib-a");
  EXPECT_TRUE(ib.fromTopoFile);
  EXPECT_EQ(ib.addresses, std::vector<std::string>{"10.1.0.1/24"}) << "what the file does not give stays";
  EXPECT_FALSE(n.nics[0].fromTopoFile);
  EXPECT_EQ(n.nics[0].kind, NicKind::kEth);
  EXPECT_EQ(n.topoFile, "test.json");
}

TEST(TopoFile, NonMatchingHostIsUntouched) {
  TopoFile f = parseOk(R"({"hosts": [{"hostId": "h1", "nics": [{"name": "veth-ib", "kind": "ib"}]},
                                     {"hostName": "other", "nics": [{"name": "veth-ib", "kind": "roce"}]}]})");
  NodeDescription n = emulatedHost("h0");
  NodeDescription before = n;
  EXPECT_EQ(f.apply(n), 0);
  EXPECT_EQ(n, before);
  EXPECT_TRUE(n.topoFile.empty());
}

TEST(TopoFile, WildcardsBothKeysAndFileOrder) {
  // Entry 0 applies everywhere, entry 1 only where id AND name match, entry 2 overrides entry 0 on h0.
  TopoFile f = parseOk(R"({"hosts": [
      {"hostId": "*", "nics": [{"name": "veth-ib", "kind": "ib", "rateMbps": 56000}]},
      {"hostId": "h0", "hostName": "wrong-name", "nics": [{"name": "veth-ib", "kind": "eth"}]},
      {"hostName": "h0", "nics": [{"name": "veth-ib", "rateMbps": 100000}]}]})");
  NodeDescription h0 = emulatedHost("h0"), h1 = emulatedHost("h1");
  EXPECT_EQ(f.apply(h0), 2);
  EXPECT_EQ(f.apply(h1), 1);
  EXPECT_EQ(h0.nics[1].kind, NicKind::kIb);
  EXPECT_EQ(h0.nics[1].rateMbps, 100000u);
  EXPECT_EQ(h1.nics[1].kind, NicKind::kIb);
  EXPECT_EQ(h1.nics[1].rateMbps, 56000u);
}

TEST(TopoFile, AddsUndiscoveredNicsInNameOrder) {
  TopoFile f = parseOk(R"({"hosts": [{"hostId": "h0", "nics": [
      {"name": "mlx5_0:1", "kind": "ib", "rateMbps": 200000, "fabric": "ib-a"},
      {"name": "aaa0", "state": "down"}]}]})");
  NodeDescription n = emulatedHost("h0");
  f.apply(n);
  ASSERT_EQ(n.nics.size(), 4u);
  EXPECT_EQ(n.nics[0].name, "aaa0");
  EXPECT_EQ(n.nics[0].kind, NicKind::kEth);
  EXPECT_EQ(n.nics[0].state, NicState::kDown);
  EXPECT_EQ(n.nics[1].name, "mlx5_0:1");
  EXPECT_EQ(n.nics[1].state, NicState::kUp);
  EXPECT_EQ(n.nics[1].kind, NicKind::kIb);
  EXPECT_TRUE(n.nics[1].fromTopoFile);
}

TEST(TopoFile, GpusOverrideDiscoveredThenAdd) {
  TopoFile f = parseOk(R"({"hosts": [{"hostId": "h0", "gpus": [
      {"peakTflops": 989, "count": 2},
      {"model": "NVIDIA A100-SXM4-40GB", "peakTflops": 312, "memoryBytes": "40G"}]}]})");
  NodeDescription n = emulatedHost("h0");
  n.gpus = {{"NVIDIA H100 80GB HBM3", 80ull << 30, 0, "0000:1b:00.0", 0, false}};
  f.apply(n);
  ASSERT_EQ(n.gpus.size(), 3u);
  EXPECT_EQ(n.gpus[0].model, "NVIDIA H100 80GB HBM3") << "a field the file does not give stays";
  EXPECT_EQ(n.gpus[0].peakTflops, 989);
  EXPECT_EQ(n.gpus[0].pciBusId, "0000:1b:00.0");
  EXPECT_EQ(n.gpus[1].peakTflops, 989) << "count 2 covers GPU 1, which it adds";
  EXPECT_TRUE(n.gpus[1].model.empty());
  EXPECT_EQ(n.gpus[2].model, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(n.gpus[2].memoryBytes, 40ull << 30);
  for (const Gpu& g : n.gpus) EXPECT_TRUE(g.fromTopoFile);
}

TEST(TopoFile, ErrorsNameFilePathAndProblem) {
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": "h0", "nics": [{"name": "x"}, {"name": "y", "kind": "infini"}]}]})"),
            "topo file test.json: $.hosts[0].nics[1].kind: expected one of ib, roce, eth, got \"infini\"");
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": "h0", "nic": []}]})"),
            "topo file test.json: $.hosts[0].nic: unknown field");
  EXPECT_EQ(parseError(R"({"hosts": [{"nics": []}]})"),
            "topo file test.json: $.hosts[0]: needs \"hostId\" or \"hostName\"");
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": ""}]})"),
            "topo file test.json: $.hosts[0].hostId: empty (use \"*\" for any host)");
  EXPECT_EQ(parseError(R"({"version": 1})"), "topo file test.json: $.hosts: missing");
  EXPECT_EQ(parseError(R"({"version": 2, "hosts": []})"),
            "topo file test.json: $.version: version 2 is not supported (this build reads 1)");
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": "*", "nics": [{"name": "a", "rateMbps": "100G"}]}]})"),
            "topo file test.json: $.hosts[0].nics[0].rateMbps: expected a non-negative integer, got \"100G\"");
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": "*", "nics": [{"name": "a", "state": "sleepy"}]}]})"),
            "topo file test.json: $.hosts[0].nics[0].state: expected up or down, got \"sleepy\"");
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": "*", "nics": [{"name": "a"}, {"name": "a"}]}]})"),
            "topo file test.json: $.hosts[0].nics[1].name: NIC \"a\" given twice");
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": "*", "gpus": [{"count": 0}]}]})"),
            "topo file test.json: $.hosts[0].gpus[0].count: expected 1 to 4096, got 0");
  EXPECT_EQ(parseError(R"({"hosts": [{"hostId": "*", "gpus": [{"memoryBytes": "lots"}]}]})"),
            "topo file test.json: $.hosts[0].gpus[0].memoryBytes: expected a byte count (an integer, or a string "
            "like \"80G\"), got \"lots\"");
  EXPECT_EQ(parseError(R"({"hosts": {}})"), "topo file test.json: $.hosts: expected an array, got {}");
}

TEST(TopoFile, SyntaxErrorsGiveLineAndColumn) {
  std::string err = parseError("{\n  \"hosts\": [\n    {\"hostId\": \"h0\",}\n  ]\n}\n");
  EXPECT_EQ(err.rfind("topo file test.json: parse error at line 3, column 21", 0), 0u) << err;
  EXPECT_EQ(parseError("").rfind("topo file test.json: parse error", 0), 0u);
}

TEST(TopoFile, CommentsAreAllowed) {
  TopoFile f = parseOk("// emulated cluster\n{\"hosts\": [ /* none yet */ ]}");
  EXPECT_TRUE(f.hosts().empty());
}

TEST(TopoFile, LoadNamesTheFile) {
  auto missing = TopoFile::load("/nonexistent/topo.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Code::kSystem);
  EXPECT_NE(missing.error().message().find("/nonexistent/topo.json"), std::string_view::npos)
      << missing.error().toString();

  testing::FakeSysfs dir;  // a temp dir that cleans up after itself
  dir.write("bad.json", R"({"hosts": [{"hostId": "h0", "nics": [{"kind": "ib"}]}]})");
  std::string path = dir.path("bad.json").string();
  auto bad = TopoFile::load(path);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(std::string(bad.error().message()), "topo file " + path + ": $.hosts[0].nics[0].name: missing");
}

// The example shipped next to the code must stay valid and mean what it says.
TEST(TopoFile, ShippedExampleParses) {
  auto f = TopoFile::load(HETCOMM_EXAMPLE_TOPO_FILE);
  ASSERT_TRUE(f.has_value()) << f.error().toString();
  ASSERT_FALSE(f->hosts().empty());
  NodeDescription h0 = makeNode("h0", {makeNic("veth-ib", NicKind::kEth, 0, {"10.1.0.1/24"})});
  EXPECT_EQ(f->apply(h0), 2) << "the \"*\" entry and h0's";
  ASSERT_EQ(h0.nics.size(), 2u);
  EXPECT_EQ(h0.nics[0].name, "veth-eth") << "declared by the \"*\" entry";
  EXPECT_EQ(h0.nics[1].name, "veth-ib");
  EXPECT_EQ(h0.nics[1].kind, NicKind::kIb);
  EXPECT_EQ(h0.nics[1].fabric, "ib-a");
  EXPECT_FALSE(h0.gpus.empty());
  EXPECT_GT(h0.gpus[0].peakTflops, 0);
}

TEST(ClusterDump, RoundTripRebuildsTheSameView) {
  auto view = ClusterView::build(testing::referenceCluster());
  ASSERT_TRUE(view.has_value()) << view.error().toString();
  LinkMatrix links = LinkMatrix::nominal(*view);
  std::string dump = dumpClusterJson(*view, &links);

  auto nodes = parseClusterDump(dump, "dump.json");
  ASSERT_TRUE(nodes.has_value()) << nodes.error().toString();
  ASSERT_EQ(nodes->size(), 8u);
  for (int r = 0; r < 8; ++r) EXPECT_EQ((*nodes)[r], view->node(r)) << "rank " << r;
  auto again = ClusterView::build(*nodes);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->format(), view->format());
  EXPECT_EQ(dumpClusterJson(*again, &links), dump);
  EXPECT_NE(dump.find("\"classes\""), std::string::npos) << "links are dumped for readers";
}

TEST(ClusterDump, HandWrittenAndErrors) {
  auto nodes = parseClusterDump(R"({"ranks": [
      {"hostId": "a", "hostName": "a", "nics": [{"name": "ib0", "kind": "ib", "addresses": ["10.1.0.1/24"]}]},
      {"hostId": "b", "hostName": "b", "nics": [{"name": "ib0", "kind": "ib", "addresses": ["10.1.0.2/24"]}]}]})",
                                "hand.json");
  ASSERT_TRUE(nodes.has_value()) << nodes.error().toString();
  auto view = ClusterView::build(*nodes);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->fabrics().size(), 1u);

  auto bad = parseClusterDump(R"({"ranks": [{"hostId": "a", "hostName": "a", "nics": [{"name": "x", "kind": "ib",
                                  "addresses": ["10.1.0.1"]}]}]})",
                              "hand.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(std::string(bad.error().message()),
            "cluster file hand.json: $.ranks[0].nics[0].addresses[0]: expected an address with prefix length like "
            "\"10.0.0.1/24\", got \"10.1.0.1\"");
  auto empty = parseClusterDump(R"({"ranks": []})", "hand.json");
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(std::string(empty.error().message()), "cluster file hand.json: $.ranks: empty");
}

}  // namespace
}  // namespace hetcomm::topo
