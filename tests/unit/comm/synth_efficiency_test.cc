// The learned efficiency of the synthesised schedules (comm/synth_efficiency.h): what counts as learned (enough
// calls, agreeing in their middle half), its text and file (round trip, anything else refused with where), and
// that it goes with the probe's cache it was measured against.
#include "comm/synth_efficiency.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "comm/communicator.h"
#include "comm/link_probe.h"
#include "tests/unit/topology/cluster_fixtures.h"

namespace hetcomm::comm {
namespace {

using coll::CollKind;
using topo::testing::makeNic;
using topo::testing::makeNode;

// Hosts h0.. with the given rank counts, each on one Ethernet fabric at `mbps`.
topo::ClusterView clusterOf(const std::vector<int>& ranksPerHost, uint64_t mbps = 1000) {
  std::vector<topo::NodeDescription> nodes;
  for (size_t h = 0; h < ranksPerHost.size(); ++h)
    for (int r = 0; r < ranksPerHost[h]; ++r)
      nodes.push_back(makeNode("h" + std::to_string(h), {makeNic("eth0", topo::NicKind::kEth, mbps, {}, "eth")}));
  auto view = topo::ClusterView::build(std::move(nodes));
  EXPECT_TRUE(view.has_value()) << view.error().message();
  return std::move(*view);
}

TEST(SynthEfficiency, TheMedianOnceEnoughCallsAgree) {
  SynthEfficiency log;
  log.add(CollKind::kAllReduce, 1.02);
  log.add(CollKind::kAllReduce, 0.98);
  EXPECT_EQ(log.learned(CollKind::kAllReduce), 0) << "two calls are too few";
  log.add(CollKind::kAllReduce, 1.00);
  EXPECT_DOUBLE_EQ(log.learned(CollKind::kAllReduce), 1.00);
  log.add(CollKind::kAllReduce, 1.04);
  EXPECT_DOUBLE_EQ(log.learned(CollKind::kAllReduce), 1.01);  // the mean of the middle two
  // Kinds learn apart.
  EXPECT_EQ(log.learned(CollKind::kBroadcast), 0);
  EXPECT_EQ(log.learnedAll()[static_cast<size_t>(CollKind::kAllReduce)], log.learned(CollKind::kAllReduce));
  EXPECT_EQ(log.observations(CollKind::kAllReduce), 4u);
}

TEST(SynthEfficiency, AnOutlierDoesNotSpoilTheRestButScatterTeachesNothing) {
  SynthEfficiency log;
  for (double v : {0.95, 0.96, 0.40, 0.97, 0.95, 1.45, 0.96, 0.96}) log.add(CollKind::kAllGather, v);
  EXPECT_NEAR(log.learned(CollKind::kAllGather), 0.96, 1e-12);
  SynthEfficiency scattered;
  for (double v : {0.5, 0.7, 0.9, 1.1, 1.3}) scattered.add(CollKind::kAllGather, v);
  EXPECT_EQ(scattered.learned(CollKind::kAllGather), 0);
}

TEST(SynthEfficiency, KeepsTheLatestCallsWithinBounds) {
  SynthEfficiency log;
  for (size_t i = 0; i < SynthEfficiency::kKeep; ++i) log.add(CollKind::kReduce, 0.6);
  for (size_t i = 0; i < SynthEfficiency::kKeep; ++i) log.add(CollKind::kReduce, 1.0);
  EXPECT_EQ(log.observations(CollKind::kReduce), SynthEfficiency::kKeep);
  EXPECT_DOUBLE_EQ(log.learned(CollKind::kReduce), 1.0);  // the older machine state is forgotten
  // A call far outside (a stall, a clock jump) counts at the bound; one that is not a number not at all.
  SynthEfficiency odd;
  odd.add(CollKind::kReduce, 50);
  odd.add(CollKind::kReduce, 0.0);
  odd.add(CollKind::kReduce, std::nan(""));
  EXPECT_EQ(odd.observations(CollKind::kReduce), 2u);
  auto back = SynthEfficiency::parse(odd.format());
  ASSERT_TRUE(back) << back.error().message();
}

TEST(SynthEfficiency, TextRoundTripsAndAnythingElseIsRefusedSayingWhere) {
  SynthEfficiency log;
  for (double v : {0.91, 0.93, 0.92}) log.add(CollKind::kBroadcast, v);
  log.add(CollKind::kReduceScatter, 1.01);
  auto back = SynthEfficiency::parse(log.format());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->format(), log.format());
  EXPECT_DOUBLE_EQ(back->learned(CollKind::kBroadcast), 0.92);
  EXPECT_EQ(back->observations(CollKind::kReduceScatter), 1u);

  const std::string head = "hetcomm-synth-efficiency 1\n";
  const struct {
    std::string text, says;
  } bad[] = {
      {"", "first line"},
      {"hetcomm-synth-efficiency 0\nallreduce 1\n", "first line"},
      {head + "allreduce 1\nreduction 1\n", "line 3: \"reduction\" is not a collective"},
      {head + "allreduce 1 fast\n", "line 2: \"fast\""},
      {head + "allreduce 1 -1\n", "line 2: \"-1\""},
      {head + "allreduce 1 inf\n", "line 2: \"inf\""},
      {head + "allreduce 1\nallreduce 1\n", "line 3: allreduce is listed twice"},
      {head + "allgather\n", "line 2: allgather has no values"},
      {head + "allgather 1 1 1 1 1 1 1 1 1\n", "line 2: more than 8 values"},
  };
  for (const auto& b : bad) {
    auto r = SynthEfficiency::parse(b.text);
    ASSERT_FALSE(r) << b.text;
    EXPECT_NE(std::string(r.error().message()).find(b.says), std::string::npos) << r.error().message();
  }
}

// Only a call the rank holds no result of until every rank's data has come times the whole call: the root of a
// broadcast, or a rank beside it, is done once the data has left its host; a reduce's other ranks once their part
// has. Such times neither test the cached link figures nor teach the efficiency.
TEST(SynthEfficiency, OnlyCallsTimedWholeCount) {
  coll::GroupView two;  // two hosts of two ranks
  two.nranks = 4;
  two.host = {0, 0, 1, 1};
  coll::Args a;
  for (CollKind k : {CollKind::kAllReduce, CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAlltoAll}) {
    a.kind = k;
    EXPECT_TRUE(timesWholeCall(a, two, 0)) << coll::name(k);
  }
  a.kind = CollKind::kBroadcast;
  a.root = 0;
  EXPECT_FALSE(timesWholeCall(a, two, 0)) << "the root";
  EXPECT_FALSE(timesWholeCall(a, two, 1)) << "beside the root";
  EXPECT_TRUE(timesWholeCall(a, two, 2)) << "on another host";
  a.root = 3;
  EXPECT_TRUE(timesWholeCall(a, two, 0));
  a.kind = CollKind::kReduce;
  EXPECT_FALSE(timesWholeCall(a, two, 0)) << "not the root";
  EXPECT_TRUE(timesWholeCall(a, two, 3)) << "the root";
  a.kind = CollKind::kSendRecv;
  EXPECT_FALSE(timesWholeCall(a, two, 0));
}

class SynthEfficiencyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hetcomm-synth-eff-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(SynthEfficiencyFile, OnePerShapeBesideTheProbeCacheAndTheyGoWithIt) {
  const std::string probe = dir_ + "/probe-0123456789abcdef.txt";
  const std::string file = synthEfficiencyFile(probe, clusterOf({2, 2}));
  EXPECT_EQ(file.rfind(dir_ + "/probe-0123456789abcdef-synth-", 0), 0u) << file;
  EXPECT_EQ(synthEfficiencyFile(probe, clusterOf({2, 2})), file) << "the same shape, the same file";
  // The same hosts with other rank counts or other NIC rates pack other trees: a file of their own.
  const std::string other = synthEfficiencyFile(probe, clusterOf({1, 3}));
  EXPECT_NE(other, file);
  EXPECT_NE(synthEfficiencyFile(probe, clusterOf({2, 2}, 400)), file);
  EXPECT_EQ(synthEfficiencyFile("", clusterOf({2, 2})), "");

  auto none = readSynthEfficiency(file);
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_EQ(none->observations(CollKind::kAllReduce), 0u);

  SynthEfficiency log;
  for (double v : {1.0, 1.02, 0.99}) log.add(CollKind::kAllReduce, v);
  ASSERT_TRUE(writeSynthEfficiency(file, log).ok());
  ASSERT_TRUE(writeSynthEfficiency(other, log).ok());
  auto read = readSynthEfficiency(file);
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_DOUBLE_EQ(read->learned(CollKind::kAllReduce), 1.0);
  EXPECT_EQ(synthEfficiencyFiles(probe).size(), 2u);

  std::ofstream(probe) << "hetcomm-probe 5\n";
  ASSERT_TRUE(dropProbeCache(probe).ok());
  EXPECT_NE(access(probe.c_str(), F_OK), 0);
  EXPECT_NE(access(file.c_str(), F_OK), 0) << "what was learned against the dropped figures goes with them";
  EXPECT_NE(access(other.c_str(), F_OK), 0);
  EXPECT_TRUE(dropProbeCache(probe).ok()) << "dropping twice is harmless";
}

TEST_F(SynthEfficiencyFile, AFileThatDoesNotParseIsAnErrorThatNamesIt) {
  const std::string file = dir_ + "/probe-x-synth.txt";
  std::ofstream(file) << "hetcomm-synth-efficiency 1\nallreduce 7\n";
  auto r = readSynthEfficiency(file);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.error().message()).find(file), std::string::npos) << r.error().message();
  EXPECT_NE(std::string(r.error().message()).find("line 2"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace hetcomm::comm
