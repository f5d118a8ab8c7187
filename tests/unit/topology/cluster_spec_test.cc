// Cluster files (topology/cluster_spec.h): what they give each rank, their GPUs, the round trip through
// clusterSpecJson, and errors that name the path.
#include "topology/cluster_spec.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "topology/cluster.h"

namespace hetcomm::topo {
namespace {

constexpr const char* kTwoHosts = R"({"name": "two", "ranksPerHost": 2, "hosts": [
    {"name": "a", "nics": [{"name": "ib0", "kind": "ib", "rateMbps": 1600, "fabric": "ib"}],
     "gpus": [{"model": "big", "peakTflops": 300, "memoryBytes": "80G"}, {"model": "small", "peakTflops": 100}]},
    {"name": "b", "ranks": 3, "nics": [{"name": "ib0", "kind": "ib", "rateMbps": 800, "fabric": "ib"}],
     "gpus": [{"model": "mid", "peakTflops": 150, "memoryBytes": 1000, "count": 3}]}]})";

TEST(ClusterSpec, RanksHostsAndGpus) {
  auto spec = parseClusterSpec(kTwoHosts, "two.json");
  ASSERT_TRUE(spec.has_value()) << spec.error().message();
  EXPECT_EQ(spec->nranks(), 5);
  const std::vector<NodeDescription> nodes = spec->nodes();
  ASSERT_EQ(nodes.size(), 5u);
  EXPECT_EQ(nodes[1].hostId, "a");
  EXPECT_EQ(nodes[1].localRank, 1);
  EXPECT_EQ(nodes[4].hostId, "b");
  ASSERT_EQ(nodes[0].gpus.size(), 2u);
  EXPECT_EQ(nodes[0].gpus[0].memoryBytes, uint64_t{80} << 30);
  ASSERT_EQ(nodes[2].gpus.size(), 3u);  // count expanded
  EXPECT_EQ(nodes[4].gpus[2].peakTflops, 150);
  auto view = ClusterView::build(nodes);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->gpuOf(1)->model, "small");  // local rank k drives GPU k
  EXPECT_EQ(view->gpuOf(3)->model, "mid");
}

TEST(ClusterSpec, JsonRoundTrip) {
  auto spec = parseClusterSpec(kTwoHosts, "two.json");
  ASSERT_TRUE(spec.has_value());
  auto again = parseClusterSpec(clusterSpecJson(*spec), "again");
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_EQ(again->nodes().size(), spec->nodes().size());
  for (size_t r = 0; r < spec->nodes().size(); ++r) {
    EXPECT_EQ(again->nodes()[r].gpus, spec->nodes()[r].gpus);
    EXPECT_EQ(again->nodes()[r].nics, spec->nodes()[r].nics);
  }
}

TEST(ClusterSpec, ErrorsNameThePath) {
  auto expectError = [](const char* text, const char* what) {
    auto spec = parseClusterSpec(text, "bad.json");
    ASSERT_FALSE(spec.has_value()) << text;
    EXPECT_NE(std::string(spec.error().message()).find(what), std::string::npos) << spec.error().message();
    EXPECT_NE(std::string(spec.error().message()).find("bad.json"), std::string::npos);
  };
  expectError(R"({"name": "x", "hosts": [{"name": "a", "nics": [{"name": "e", "kind": "eth", "rateMbps": 10,
      "fabric": "f"}], "gpus": [{"peakTflops": "fast"}]}]})",
              "$.hosts[0].gpus[0].peakTflops");
  expectError(R"({"name": "x", "hosts": [{"name": "a", "nics": [{"name": "e", "kind": "eth", "rateMbps": 10,
      "fabric": "f"}], "gpus": [{"count": 0}]}]})",
              "$.hosts[0].gpus[0].count");
  expectError(R"({"name": "x", "hosts": [{"name": "a", "nics": [{"name": "e", "kind": "wifi", "rateMbps": 10,
      "fabric": "f"}]}]})",
              "$.hosts[0].nics[0].kind");
  expectError(R"({"name": "x", "hosts": []})", "$.hosts");
}

TEST(ClusterSpec, EveryShippedClusterLoads) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(HETCOMM_SOURCE_DIR) + "/clusters")) {
    if (entry.path().extension() != ".json") continue;
    auto spec = loadClusterSpec(entry.path().string());
    EXPECT_TRUE(spec.has_value()) << entry.path() << ": " << spec.error().message();
    ++files;
  }
  EXPECT_GE(files, 8);
}

}  // namespace
}  // namespace hetcomm::topo
