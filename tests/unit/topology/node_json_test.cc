// NodeDescription to bytes and back: a full round trip, canonical NIC order, and errors that name the field.
#include "topology/node_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/unit/topology/cluster_fixtures.h"

namespace hetcomm::topo {
namespace {

using nlohmann::json;

// Every field away from its default, so a field the writer or the reader forgets shows up.
NodeDescription fullNode() {
  NodeDescription n;
  n.hostId = "gpu17:1a2b3c4d";
  n.hostName = "gpu17";
  n.packages = {{0, 16, 32}, {1, 16, 32}};
  n.numaNodes = {{0, 68719476736ull, 16}, {1, 34359738368ull, 16}};
  n.cores = 32;
  n.pus = 64;
  n.pciDevices = {{"0000:81:00.0", 0x15b3, 0x101b, 0x0207, "MT28908 Family [ConnectX-6]", 1, {"ib0", "mlx5_0"}}};
  Nic ib;
  ib.name = "ib0";
  ib.kind = NicKind::kIb;
  ib.rateMbps = 200000;
  ib.state = NicState::kUp;
  ib.fabric = "ib-a";
  ib.addresses = {"10.1.0.17/24", "fd00:1::17/64"};
  ib.numaNode = 1;
  ib.pciBusId = "0000:81:00.0";
  ib.rdmaDevice = "mlx5_0";
  ib.rdmaPort = 1;
  ib.fromTopoFile = true;
  Nic veth;
  veth.name = "veth0";
  veth.state = NicState::kDown;
  veth.isVirtual = true;
  Nic lo;
  lo.name = "lo";
  lo.loopback = true;
  lo.isVirtual = true;
  n.nics = {ib, lo, veth};
  n.gpus = {{"NVIDIA H100 80GB HBM3", 85520809984ull, 989.5, "0000:1b:00.0", 0, true}};
  n.topoFile = "/etc/hetcomm/topo.json";
  n.pid = 4242;
  n.localRank = 3;
  return n;
}

std::vector<std::byte> bytesOf(const std::string& s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// The wire document of fullNode() with one edit, to check that the reader catches it.
std::vector<std::byte> edited(const std::function<void(json&)>& edit) {
  json doc = {{"version", kNodeFormatVersion}, {"node", nodeToJson(fullNode())}};
  edit(doc);
  return bytesOf(doc.dump());
}

std::string errorOf(const std::vector<std::byte>& bytes) {
  auto r = deserializeNode(bytes);
  if (r.has_value()) return "(no error)";
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  return std::string(r.error().message());
}

TEST(NodeJson, RoundTripKeepsEveryField) {
  NodeDescription n = fullNode();
  auto back = deserializeNode(serializeNode(n));
  ASSERT_TRUE(back.has_value()) << back.error().toString();
  EXPECT_EQ(*back, n);
}

TEST(NodeJson, MinimalNodeGetsDefaults) {
  auto back = deserializeNode(bytesOf(R"({"version": 1, "node": {"hostId": "h0", "hostName": "h0",
      "nics": [{"name": "eth0", "kind": "eth"}]}})"));
  ASSERT_TRUE(back.has_value()) << back.error().toString();
  EXPECT_EQ(back->localRank, -1);
  ASSERT_EQ(back->nics.size(), 1u);
  EXPECT_EQ(back->nics[0].state, NicState::kUp);
  EXPECT_EQ(back->nics[0].rateMbps, 0u);
  EXPECT_EQ(back->nics[0].numaNode, -1);
}

TEST(NodeJson, ReaderSortsNicsAndAddresses) {
  auto back = deserializeNode(edited([](json& d) {
    d["node"]["nics"] = json::array({nodeToJson(fullNode())["nics"][2], nodeToJson(fullNode())["nics"][0]});
    d["node"]["nics"][1]["addresses"] = {"fd00:1::17/64", "10.1.0.17/24"};
  }));
  ASSERT_TRUE(back.has_value()) << back.error().toString();
  ASSERT_EQ(back->nics.size(), 2u);
  EXPECT_EQ(back->nics[0].name, "ib0");
  EXPECT_EQ(back->nics[0].addresses, (std::vector<std::string>{"10.1.0.17/24", "fd00:1::17/64"}));
}

TEST(NodeJson, MemoryMayUseSuffixes) {
  auto back = deserializeNode(edited([](json& d) { d["node"]["gpus"][0]["memoryBytes"] = "80G"; }));
  ASSERT_TRUE(back.has_value()) << back.error().toString();
  EXPECT_EQ(back->gpus[0].memoryBytes, 80ull << 30);
}

TEST(NodeJson, ErrorsNameTheField) {
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["nics"][1]["kind"] = "infiniband"; })),
            "node description: $.node.nics[1].kind: expected one of ib, roce, eth, got \"infiniband\"");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["nics"][0]["rateMbps"] = -5; })),
            "node description: $.node.nics[0].rateMbps: expected a non-negative integer, got -5");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["nics"][0]["addresses"][1] = "10.1.0.17"; })),
            "node description: $.node.nics[0].addresses[1]: expected an address with prefix length like "
            "\"10.0.0.1/24\", got \"10.1.0.17\"");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"].erase("hostId"); })), "node description: $.node.hostId: missing");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["hostid"] = "x"; })),
            "node description: $.node.hostid: unknown field");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["gpus"][0]["peakTflops"] = "lots"; })),
            "node description: $.node.gpus[0].peakTflops: expected a number >= 0, got \"lots\"");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["pciDevices"][0]["classId"] = 70000; })),
            "node description: $.node.pciDevices[0].classId: PCI ids are 16-bit");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["packages"] = 3; })),
            "node description: $.node.packages: expected an array, got 3");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["nics"][2]["name"] = "ib0"; })),
            "node description: $.node.nics: two NICs named \"ib0\"");
  EXPECT_EQ(errorOf(edited([](json& d) { d["node"]["localRank"] = 1ull << 40; })),
            "node description: $.node.localRank: expected a 32-bit integer, got 1099511627776");
}

TEST(NodeJson, VersionAndEnvelope) {
  EXPECT_EQ(errorOf(edited([](json& d) { d["version"] = 2; })),
            "node description: $.version: format 2, this build reads 1 (ranks run different hetcomm builds?)");
  EXPECT_EQ(errorOf(edited([](json& d) { d.erase("node"); })), "node description: $.node: missing");
  EXPECT_EQ(errorOf(edited([](json& d) { d["extra"] = 1; })), "node description: $.extra: unknown field");
}

TEST(NodeJson, GarbageBytesSayWhere) {
  std::string err = errorOf(bytesOf("{\"version\": 1,\n \"node\": {\"hostId\": }"));
  EXPECT_NE(err.find("node description: parse error at line 2, column"), std::string::npos) << err;
  EXPECT_NE(errorOf({}).find("node description: "), std::string::npos);
  EXPECT_NE(errorOf(bytesOf("[1, 2]")).find("expected an object"), std::string::npos);
}

}  // namespace
}  // namespace hetcomm::topo
