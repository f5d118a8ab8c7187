// link_probe: how the communicator's pairs fall into link classes (one probe per class, a representative pair
// each), how measured figures spread back to every pair of a class, and the per-cluster cache file (round trip,
// and every way a file that does not match this cluster is ignored). The measurement itself runs at every
// multi-rank init, so the integration suite exercises it over tcp, shm, ucx and the emulated clusters.
#include "comm/link_probe.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/topology/cluster_fixtures.h"

namespace hetcomm::comm {
namespace {

using topo::LinkClass;
using topo::Nic;
using topo::NicKind;
using topo::NodeDescription;
using transport::Kind;
using topo::testing::makeNic;
using topo::testing::makeNode;

// mixed-4x2's shape: hosts 0-1 on an IB fabric, 2-3 on RoCE, all four on Ethernet; two ranks per host.
topo::ClusterView mixedCluster() {
  std::vector<NodeDescription> nodes;
  for (int h = 0; h < 4; ++h) {
    std::vector<Nic> nics{makeNic("eth0", NicKind::kEth, 200, {}, "eth")};
    if (h < 2) nics.push_back(makeNic("ib0", NicKind::kIb, 1600, {}, "ib-a"));
    else nics.push_back(makeNic("roce0", NicKind::kRoce, 800, {}, "roce-b"));
    for (int r = 0; r < 2; ++r) nodes.push_back(makeNode("host" + std::to_string(h), nics));
  }
  auto view = topo::ClusterView::build(std::move(nodes));
  EXPECT_TRUE(view.has_value()) << view.error().message();
  return std::move(*view);
}

// Same host: shm; across hosts: tcp (as a forced HETCOMM_TRANSPORT=tcp run would choose, say).
Kind kindByHost(const topo::ClusterView& v, int i, int j) { return v.hostOf(i) == v.hostOf(j) ? Kind::kShm : Kind::kTcp; }

TEST(LinkProbe, OneClassPerLinkKindFabricAndTransport) {
  auto view = mixedCluster();
  auto links = topo::LinkMatrix::nominal(view);
  auto classes = linkClasses(view, links, [&](int i, int j) { return kindByHost(view, i, j); });
  ASSERT_EQ(classes.size(), 4u);
  // In rank order of their first pair: (0,1) same host, (0,2) IB, (0,4) Ethernet, (4,6) RoCE.
  EXPECT_EQ(classes[0].cls, LinkClass::kSameHost);
  EXPECT_EQ(classes[0].kind, Kind::kShm);
  EXPECT_EQ(std::make_pair(classes[0].a, classes[0].b), std::make_pair(0, 1));
  EXPECT_EQ(classes[1].cls, LinkClass::kIb);
  EXPECT_EQ(classes[1].rateMbps, 1600u);
  EXPECT_EQ(std::make_pair(classes[1].a, classes[1].b), std::make_pair(0, 2));
  EXPECT_EQ(classes[2].cls, LinkClass::kEth);
  EXPECT_EQ(std::make_pair(classes[2].a, classes[2].b), std::make_pair(0, 4));
  EXPECT_EQ(classes[3].cls, LinkClass::kRoce);
  EXPECT_EQ(std::make_pair(classes[3].a, classes[3].b), std::make_pair(4, 6));
  for (const auto& c : classes) {
    EXPECT_GE(c.streamMsgBytes, 64u << 10) << c.key;
    EXPECT_LE(c.streamMsgBytes, 1u << 20) << c.key;
  }
  // A transport of its own makes a class of its own: pair (0,2) on ucx splits the IB class.
  auto split = linkClasses(view, links, [&](int i, int j) {
    if (std::min(i, j) == 0 && std::max(i, j) == 2) return Kind::kUcx;
    return kindByHost(view, i, j);
  });
  EXPECT_EQ(split.size(), 5u);
}

TEST(LinkProbe, ResultsReachEveryPairOfTheClassBothWays) {
  auto view = mixedCluster();
  auto links = topo::LinkMatrix::nominal(view);
  auto kindOf = [&](int i, int j) { return kindByHost(view, i, j); };
  auto classes = linkClasses(view, links, kindOf);
  const double nominalRoceAlpha = links.at(4, 6).alphaUs;
  classes[1].alphaUs = 14;     // IB
  classes[1].bwGBps = 0.18;
  classes[2].alphaUs = 15;     // Ethernet
  classes[2].bwGBps = 0.022;
  classes[3].alphaUs = 0;      // RoCE: the probe could not time it; nominal values stay
  classes[3].bwGBps = 0.09;
  ASSERT_TRUE(applyProbe(classes, view, kindOf, links).ok());
  for (auto [i, j] : {std::pair{0, 2}, {2, 0}, {1, 3}, {3, 0}}) {
    EXPECT_DOUBLE_EQ(links.at(i, j).alphaUs, 14) << i << "-" << j;
    EXPECT_DOUBLE_EQ(links.at(i, j).bwGBps, 0.18) << i << "-" << j;
    EXPECT_TRUE(links.at(i, j).measured);
  }
  EXPECT_DOUBLE_EQ(links.at(7, 0).bwGBps, 0.022);
  EXPECT_DOUBLE_EQ(links.at(5, 7).alphaUs, nominalRoceAlpha);
  EXPECT_DOUBLE_EQ(links.at(5, 7).bwGBps, 0.09);
  EXPECT_EQ(links.at(5, 7).cls, LinkClass::kRoce);  // the class stays
}

TEST(LinkProbe, AFigureAboveAKnownLineRateIsCappedAtIt) {
  auto view = mixedCluster();
  // Each link read far above every line rate, over verbs (IB's line rate caps it) and over TCP (less the headers).
  auto probed = [&](Kind across) {
    auto kindOf = [&](int i, int j) { return view.hostOf(i) == view.hostOf(j) ? Kind::kShm : across; };
    auto links = topo::LinkMatrix::nominal(view);
    auto classes = linkClasses(view, links, kindOf);
    for (auto& c : classes) {
      c.alphaUs = 14;
      c.bwGBps = 1e3;
    }
    EXPECT_TRUE(applyProbe(classes, view, kindOf, links).ok());
    return links;
  };
  const double ibRate = topo::LinkMatrix::nominal(view).at(0, 2).bwGBps;
  auto verbs = probed(Kind::kVerbs);
  EXPECT_DOUBLE_EQ(verbs.at(0, 2).bwGBps, ibRate);
  EXPECT_DOUBLE_EQ(verbs.at(0, 2).alphaUs, 14);  // the latency is still the probe's
  EXPECT_TRUE(verbs.at(0, 2).measured);
  EXPECT_NEAR(probed(Kind::kTcp).at(0, 2).bwGBps, 0.94 * ibRate, 1e-12);
  EXPECT_DOUBLE_EQ(verbs.at(0, 1).bwGBps, 1e3);  // same host: no NIC, nothing caps it
}

class ProbeCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hetcomm-probe-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/sub/probe.txt";  // the writer creates the missing directory
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::vector<LinkClassProbe> classes() {
    auto view = mixedCluster();
    auto links = topo::LinkMatrix::nominal(view);
    auto c = linkClasses(view, links, [&](int i, int j) { return kindByHost(view, i, j); });
    for (size_t i = 0; i < c.size(); ++i) {
      c[i].alphaUs = 10.0 + i;
      c[i].bwGBps = 0.1 * (i + 1);
    }
    return c;
  }
  void writeRaw(const std::string& text) { std::ofstream(path_) << text; }
  std::string dir_, path_;
};

TEST_F(ProbeCache, RoundTrip) {
  auto written = classes();
  ASSERT_TRUE(writeProbeCache(path_, written).ok());
  auto read = classes();
  for (auto& c : read) c.alphaUs = c.bwGBps = -1;
  ASSERT_TRUE(readProbeCache(path_, read));
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_DOUBLE_EQ(read[i].alphaUs, written[i].alphaUs);
    EXPECT_DOUBLE_EQ(read[i].bwGBps, written[i].bwGBps);
  }
}

TEST_F(ProbeCache, FilesThatDoNotMatchAreIgnored) {
  auto c = classes();
  EXPECT_FALSE(readProbeCache(dir_ + "/missing.txt", c));
  ASSERT_TRUE(writeProbeCache(path_, c).ok());
  // A class this cluster does not have, or one missing: not this cluster's file.
  auto fewer = c;
  fewer.pop_back();
  EXPECT_FALSE(readProbeCache(path_, fewer));
  ASSERT_TRUE(writeProbeCache(path_, fewer).ok());
  EXPECT_FALSE(readProbeCache(path_, c));
  // Garbage, a wrong first line, a negative or non-numeric figure.
  const std::string line = c[0].key + "\t1\t2\n";
  // Versions 1 to 4 measured otherwise (same-host links in cache or one way only; streams a quarter as long;
  // loopback tcp under the system's pacing): their figures are not reused.
  for (const std::string& text : {std::string("garbage\n"), "hetcomm-probe 0\n" + line, "hetcomm-probe 2\n" + line,
                                  "hetcomm-probe 3\n" + line, "hetcomm-probe 4\n" + line,
                                  "hetcomm-probe 5\n" + c[0].key + "\t-1\t2\n",
                                  "hetcomm-probe 5\n" + c[0].key + "\t1\tfast\n", std::string("")}) {
    writeRaw(text);
    auto one = c;
    one.resize(1);
    EXPECT_FALSE(readProbeCache(path_, one)) << text;
  }
  writeRaw("hetcomm-probe 5\n" + line);
  auto one = c;
  one.resize(1);
  EXPECT_TRUE(readProbeCache(path_, one));
}

TEST_F(ProbeCache, UnwritableDirectoryIsAnErrorThatSaysWhere) {
  Status st = writeProbeCache("/proc/hetcomm-no-such-dir/probe.txt", classes());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("/proc/hetcomm-no-such-dir"), std::string::npos) << st.message();
}

// Another process burning a CPU while a figure is taken: the figure must not be cached. (That our own processes
// do not count cannot be pinned here: the test suite runs other tests beside this one.)
TEST(ForeignLoad, SeesOtherProcesses) {
  auto spin = [](double sec) {
    const double end = nowSec() + sec;
    volatile double x = 0;
    while (nowSec() < end) x = x + 1;
  };
  ForeignLoad load({static_cast<int>(getpid())});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    spin(0.4);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::string why;
  EXPECT_TRUE(load.busy(&why)) << load.cpus();
  EXPECT_NE(why.find("other processes"), std::string::npos) << why;
}

// One rate per size, 64 KiB up by 8x, the largest asked for last; every rate positive.
TEST(MemoryRates, MeasuredBySizeAndTrustedWhenQuiet) {
  const MemoryRates r = measureMemoryRates({static_cast<int>(getpid())}, 8 << 20);
  ASSERT_EQ(r.bySize.size(), 4u);
  const double sizes[] = {64 << 10, 512 << 10, 4 << 20, 8 << 20};
  for (size_t i = 0; i < r.bySize.size(); ++i) {
    EXPECT_EQ(r.bySize[i].bytes, sizes[i]);
    EXPECT_GT(r.bySize[i].copyGBps, 0.1);
    EXPECT_GT(r.bySize[i].reduceGBps, 0.1);
  }
  // Trust depends on the machine being quiet; the reason must say why when it is not.
  if (!r.trusted) {
    EXPECT_FALSE(r.why.empty());
  }
}

// The cache file's and the exchange's text: read back bit for bit; anything else refused, not half read.
TEST(MemoryRates, TextRoundTripsAndMalformedTextIsRefused) {
  const std::vector<topo::MemoryRate> rates = {{65536, 31.25, 20.1}, {33554432, 5.0834872571499252, 3.5}};
  std::vector<topo::MemoryRate> back;
  ASSERT_TRUE(parseMemoryRates(formatMemoryRates(rates), &back));
  EXPECT_EQ(back, rates);
  ASSERT_TRUE(parseMemoryRates("65536 31 20", &back));  // one size is enough
  EXPECT_EQ(back.size(), 1u);
  // Empty; sizes not ascending; a rate of zero, NaN, or missing; trailing words; a negative size.
  for (const char* bad :
       {"", "65536 31 20 1024 5 3", "65536 0 20", "65536 31 nan", "65536 31 20 x", "65536 31", "-1 5 3"}) {
    std::vector<topo::MemoryRate> out = rates;
    EXPECT_FALSE(parseMemoryRates(bad, &out)) << bad;
    EXPECT_EQ(out, rates) << bad;  // untouched
  }
}

TEST(LinkProbe, CacheFileIsPerCluster) {
  auto view = mixedCluster();
  auto links = topo::LinkMatrix::nominal(view);
  auto kindOf = [&](int i, int j) { return kindByHost(view, i, j); };
  auto c = linkClasses(view, links, kindOf);
  const std::string a = probeCacheFile(view, c);
  auto ucx = linkClasses(view, links, [&](int i, int j) { return i / 2 == j / 2 ? Kind::kShm : Kind::kUcx; });
  EXPECT_NE(a, probeCacheFile(view, ucx));
  EXPECT_EQ(a, probeCacheFile(view, c));
  // Figures taken where ranks share cores (every message a switch) are kept apart from the others.
  EXPECT_NE(a, probeCacheFile(view, c, /*coresShared=*/true));
  EXPECT_EQ(a, probeCacheFile(view, c, /*coresShared=*/false));
  // A sanitized or unoptimised build's figures (a thread-sanitized rank moves a tenth of the bytes) are its own.
  EXPECT_EQ(a, probeCacheFile(view, c, false, buildFlavour()));
  EXPECT_NE(probeCacheFile(view, c, false, ""), probeCacheFile(view, c, false, "thread sanitizer"));
  EXPECT_NE(probeCacheFile(view, c, false, "address sanitizer"), probeCacheFile(view, c, false, "thread sanitizer"));
}

TEST(MemoryRates, CacheFileIsPerHostAndBuild) {
  const std::string a = memoryCacheFile("host a");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, memoryCacheFile("host a", buildFlavour()));
  EXPECT_NE(a, memoryCacheFile("host b"));
  EXPECT_NE(memoryCacheFile("host a", ""), memoryCacheFile("host a", "address sanitizer"));
  EXPECT_NE(memoryCacheFile("host a", "unoptimised"), memoryCacheFile("host a", "address sanitizer"));
}

}  // namespace
}  // namespace hetcomm::comm
