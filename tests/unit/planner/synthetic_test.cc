// One-line cluster descriptions (hetcomm-plan --synthetic): the cluster file they give, read back by the library
// as a model communicator, and errors that name the key.
#include "planner/synthetic.h"

#include <gtest/gtest.h>
#include <hetcomm/hetcomm.h>

#include <set>

namespace hetcomm::planner {
namespace {

TEST(Synthetic, HostsTypesIslandsAndFabrics) {
  auto text =
      syntheticClusterJson("hosts=8,ranks=4,islands=2,types=big:300:80G/small:100:16G,fast=ib:100000/roce:50000");
  ASSERT_TRUE(text.has_value()) << text.error().message();
  hetcommComm_t m = nullptr;
  ASSERT_EQ(hetcommCommInitModel(&m, text->c_str()), hetcommSuccess) << hetcommGetLastError(nullptr);
  int n = 0;
  hetcommCommCount(m, &n);
  EXPECT_EQ(n, 32);
  std::set<int> hosts, islands;
  for (int r = 0; r < n; ++r) {
    int h = -1, i = -1;
    ASSERT_EQ(hetcommCommRankPlacement(m, r, &h, &i), hetcommSuccess);
    hosts.insert(h), islands.insert(i);
    double peak = 0;
    size_t memory = 0;
    ASSERT_EQ(hetcommCommRankDevice(m, r, &peak, &memory), hetcommSuccess);
    // The first half of the hosts hold the first type.
    EXPECT_EQ(peak, r < 16 ? 300 : 100) << r;
    EXPECT_EQ(memory, (r < 16 ? size_t{80} : size_t{16}) << 30) << r;
  }
  EXPECT_EQ(hosts.size(), 8u);
  EXPECT_EQ(islands.size(), 4u);
  // Inside an island the fast fabric, across islands the slow one: a message takes longer across.
  const int inside[2] = {0, 4}, across[2] = {0, 8};
  double in = 0, out = 0;
  ASSERT_EQ(hetcommCommPredict(m, hetcommCollSendRecv, 1 << 24, hetcommFloat32, inside, 2, nullptr, 0, &in),
            hetcommSuccess);
  ASSERT_EQ(hetcommCommPredict(m, hetcommCollSendRecv, 1 << 24, hetcommFloat32, across, 2, nullptr, 0, &out),
            hetcommSuccess);
  EXPECT_GT(out, 2 * in);
  hetcommCommDestroy(m);
}

TEST(Synthetic, ErrorsNameTheKey) {
  auto expectError = [](const char* spec, const char* what) {
    auto r = syntheticClusterJson(spec);
    ASSERT_FALSE(r.has_value()) << spec;
    EXPECT_NE(r.error().message().find(what), std::string::npos) << r.error().message();
  };
  expectError("ranks=8", "hosts: missing");
  expectError("hosts=0", "outside 1..100000");
  expectError("hosts=4,gpus=2", "unknown key");
  expectError("hosts=4,types=A100:fast:40G", "entry 0 'A100:fast:40G'");
  expectError("hosts=4,fast=nvlink:100", "kind 'nvlink' is not ib, roce or eth");
  expectError("hosts=4,hosts=5", "given twice");
  expectError("hosts=2,types=a:1:1G/b:1:1G/c:1:1G", "3 types for 2 hosts");
}

}  // namespace
}  // namespace hetcomm::planner
