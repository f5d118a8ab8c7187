// The verbs transport. Most of it needs no RDMA device and runs everywhere:
//   - HETCOMM_IB_HCA matching and the port-pair choice;
//   - encode/decode round trips of the listen() blob, the queue-pair information and the message header, with
//     malformed input of every kind (truncated at each byte, wrong magic, absurd counts) failing cleanly;
//   - the registration cache (MrCache*) with a fake registrar: hits, misses, merging of overlapping ranges, LRU
//     eviction, in-use entries never evicted, invalidation when memory is unmapped (reported, and through a real
//     mmap/munmap caught by libucm's hook, also from another thread), access modes (receives local write only,
//     sends from read-only memory without it), and dropping unused registrations when pinning is refused;
//   - the data path (VerbsLoopback*): two real VerbsConnections joined by a software queue pair that behaves like
//     RC (receives consumed in order, send queues completing in order, RDMA READs checked against both sides'
//     registrations and access and against both ports' max_msg_sz, the read depth, the error state with reads
//     that still land after it), under seeded random and adversarial schedules: eager and rendezvous sizes,
//     credits (a SEND finding no posted receive fails the test), size mismatches, aborts and their linger, close
//     and its fence, asynchronous events;
//   - on a machine without a device, discover() says so and create() fails cleanly.
// The device tests (VerbsData*) connect two transports of one process through a real port's loopback, like the tcp
// tests: they run only where discover() finds an active port, and skip with its reason elsewhere.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/param.h"
#include "common/strings.h"
#include "tests/support/transport_harness.h"
#include "transports/verbs/mr_cache.h"
#include "transports/verbs/verbs_connection.h"
#include "transports/verbs/verbs_device.h"
#include "transports/verbs/verbs_transport.h"
#include "transports/verbs/verbs_wire.h"

namespace hetcomm::transport::verbs {
namespace {

using testing::Bytes;
using testing::bytesOf;
using testing::contains;
using testing::pattern;

PortInfo ibPort(const std::string& dev, int port, uint64_t prefix, uint64_t rateMbps, uint16_t lid) {
  PortInfo p;
  p.device = dev;
  p.port = port;
  p.roce = false;
  p.rateMbps = rateMbps;
  p.lid = lid;
  for (int i = 0; i < 8; ++i) p.gid[i] = static_cast<uint8_t>(prefix >> (56 - 8 * i));
  for (int i = 8; i < 16; ++i) p.gid[i] = static_cast<uint8_t>(lid + i);
  p.gidIndex = 0;
  p.mtu = 4096;
  p.maxMsgSize = 1u << 31;
  return p;
}

PortInfo rocePort(const std::string& dev, int port, uint64_t rateMbps, uint8_t ipLast) {
  PortInfo p;
  p.device = dev;
  p.port = port;
  p.roce = true;
  p.rateMbps = rateMbps;
  p.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, ipLast};
  p.gidIndex = 3;
  p.gidType = GidType::kRoceV2;
  p.mtu = 1024;
  p.maxMsgSize = 1u << 30;
  return p;
}

// ---- HETCOMM_IB_HCA ----

TEST(VerbsHcaMatches, EmptyMatchesEverything) {
  EXPECT_TRUE(hcaMatches("", "mlx5_0", 1));
  EXPECT_TRUE(hcaMatches("", "rxe0", 2));
  EXPECT_TRUE(hcaMatches("^", "mlx5_0", 1));  // excludes nothing
  EXPECT_TRUE(hcaMatches(",", "mlx5_0", 1));
}

TEST(VerbsHcaMatches, Prefixes) {
  EXPECT_TRUE(hcaMatches("mlx5", "mlx5_0", 1));
  EXPECT_TRUE(hcaMatches("mlx5", "mlx5_12", 2));
  EXPECT_FALSE(hcaMatches("mlx5", "mlx4_0", 1));
  EXPECT_FALSE(hcaMatches("mlx5_1", "mlx5_0", 1));
  EXPECT_TRUE(hcaMatches("mlx5_1", "mlx5_10", 1));  // a prefix, as in NCCL_IB_HCA
  EXPECT_TRUE(hcaMatches("mlx5_0,bnxt", "bnxt_re0", 1));
  EXPECT_FALSE(hcaMatches("mlx5_0,bnxt", "rxe0", 1));
}

TEST(VerbsHcaMatches, Ports) {
  EXPECT_TRUE(hcaMatches("mlx5_0:1,mlx5_1", "mlx5_0", 1));
  EXPECT_FALSE(hcaMatches("mlx5_0:1,mlx5_1", "mlx5_0", 2));
  EXPECT_TRUE(hcaMatches("mlx5_0:1,mlx5_1", "mlx5_1", 2));
  EXPECT_FALSE(hcaMatches("mlx5_0:1,mlx5_1", "mlx5_2", 1));
}

TEST(VerbsHcaMatches, ExcludeAndExact) {
  EXPECT_FALSE(hcaMatches("^mlx5_0", "mlx5_0", 1));
  EXPECT_FALSE(hcaMatches("^mlx5_0", "mlx5_01", 1));
  EXPECT_TRUE(hcaMatches("^mlx5_0", "mlx5_1", 1));
  EXPECT_FALSE(hcaMatches("^mlx5_0:2", "mlx5_0", 2));
  EXPECT_TRUE(hcaMatches("^mlx5_0:2", "mlx5_0", 1));
  EXPECT_TRUE(hcaMatches("=mlx5_1", "mlx5_1", 1));
  EXPECT_FALSE(hcaMatches("=mlx5_1", "mlx5_10", 1));
  EXPECT_FALSE(hcaMatches("^=mlx5_1", "mlx5_1", 1));
  EXPECT_TRUE(hcaMatches("^=mlx5_1", "mlx5_10", 1));
}

// ---- port pair ----

TEST(VerbsPortPair, SameSubnetFastestWins) {
  std::vector<PortInfo> a = {ibPort("mlx5_0", 1, 0xfe80000000000000, 100000, 1),
                             ibPort("mlx5_1", 1, 0xfe80000000000000, 200000, 2)};
  std::vector<PortInfo> b = {ibPort("mlx5_0", 1, 0xfe80000000000000, 200000, 3)};
  auto r = choosePortPair(a, 0, b, 1);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(r->low, 1u);
  EXPECT_EQ(r->high, 0u);
}

TEST(VerbsPortPair, InfiniBandNeedsTheSameSubnet) {
  std::vector<PortInfo> a = {ibPort("mlx5_0", 1, 0xfe80000000000001, 400000, 1),
                             ibPort("mlx5_1", 1, 0xfe80000000000002, 100000, 2)};
  std::vector<PortInfo> b = {ibPort("mlx5_4", 1, 0xfe80000000000002, 400000, 3)};
  auto r = choosePortPair(a, 2, b, 5);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(r->low, 1u);  // the slower port, but the only one on rank 5's subnet
  EXPECT_EQ(r->high, 0u);
}

TEST(VerbsPortPair, NothingSharedNamesBothRanksPorts) {
  std::vector<PortInfo> a = {ibPort("mlx5_0", 1, 0xfe80000000000001, 200000, 1)};
  std::vector<PortInfo> b = {ibPort("mlx5_3", 2, 0xfe80000000000009, 200000, 7), rocePort("mlx5_5", 1, 100000, 9)};
  auto r = choosePortPair(a, 3, b, 8);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidUsage);
  const std::string m(r.error().message());
  EXPECT_TRUE(contains(m, "rank 3 and rank 8 share no usable RDMA port pair")) << m;
  EXPECT_TRUE(contains(m, "rank 3 has mlx5_0:1 (IB 200 Gb/s, subnet fe80000000000001, lid 1)")) << m;
  EXPECT_TRUE(contains(m, "rank 8 has mlx5_3:2 (IB")) << m;
  EXPECT_TRUE(contains(m, "mlx5_5:1 (RoCE v2 100 Gb/s, gid 3 ::ffff:10.0.0.9)")) << m;
}

TEST(VerbsPortPair, LinkLayersMustMatch) {
  std::vector<PortInfo> a = {ibPort("mlx5_0", 1, 0xfe80000000000000, 400000, 1), rocePort("mlx5_1", 1, 100000, 1)};
  std::vector<PortInfo> b = {rocePort("mlx5_2", 1, 200000, 2)};
  auto r = choosePortPair(a, 0, b, 1);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(r->low, 1u);  // RoCE with RoCE, whatever the IB port's speed
  EXPECT_EQ(r->high, 0u);
  // RoCE is routed by IP: no subnet test.
  std::vector<PortInfo> c = {rocePort("mlx5_0", 1, 100000, 3)};
  EXPECT_TRUE(choosePortPair(c, 0, b, 1));
}

PortInfo roceV1(const std::string& dev, uint8_t ipLast) {
  PortInfo p = rocePort(dev, 1, 100000, ipLast);
  p.gidType = GidType::kRoceV1;
  return p;
}

PortInfo roceV2Ipv6(const std::string& dev, uint8_t last) {
  PortInfo p = rocePort(dev, 1, 100000, last);
  p.gid = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
  return p;
}

TEST(VerbsPortPair, RoceGidTypesMustMatch) {
  // Each rank picks its GID alone: a v2 IPv4 GID cannot reach a v1 GID, nor an IPv6 one.
  std::vector<PortInfo> a = {rocePort("mlx5_0", 1, 100000, 1)};
  for (const auto& other : {roceV1("mlx5_1", 2), roceV2Ipv6("mlx5_1", 2)}) {
    auto r = choosePortPair(a, 0, {other}, 1);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kInvalidUsage);
    const std::string m(r.error().message());
    EXPECT_TRUE(contains(m, "rank 0 and rank 1 have RoCE ports, but addressed by GIDs of different kinds")) << m;
    EXPECT_TRUE(contains(m, "rank 0: mlx5_0:1 RoCE v2 IPv4")) << m;
    EXPECT_TRUE(contains(m, other.gidType == GidType::kRoceV1 ? "rank 1: mlx5_1:1 RoCE v1" : "mlx5_1:1 RoCE v2 IPv6"))
        << m;
    EXPECT_TRUE(contains(m, "HETCOMM_IB_GID_INDEX")) << m;
  }
  // A pair of the same kind is chosen even when a faster one of another kind exists.
  std::vector<PortInfo> b = {roceV1("fast", 3), rocePort("slow", 1, 25000, 4)};
  b[0].rateMbps = 400000;
  auto r = choosePortPair(a, 0, b, 1);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(r->high, 1u);
  // Two v1 ports talk; so do two v2 IPv6 ports.
  EXPECT_TRUE(choosePortPair({roceV1("x", 1)}, 0, {roceV1("y", 2)}, 1));
  EXPECT_TRUE(choosePortPair({roceV2Ipv6("x", 1)}, 0, {roceV2Ipv6("y", 2)}, 1));
  EXPECT_EQ(describePort(roceV1("m", 9)), "m:1 (RoCE v1 100 Gb/s, gid 3 ::ffff:10.0.0.9)");
}

TEST(VerbsPortPair, EqualRailsPreferEqualIndexAndSpreadOverPeers) {
  std::vector<PortInfo> a, b;
  for (int i = 0; i < 4; ++i) {
    a.push_back(ibPort(format("mlx5_%d", i), 1, 0xfe80000000000000, 200000, static_cast<uint16_t>(10 + i)));
    b.push_back(ibPort(format("mlx5_%d", i), 1, 0xfe80000000000000, 200000, static_cast<uint16_t>(20 + i)));
  }
  std::set<size_t> used;
  for (int low = 0; low < 4; ++low) {
    auto r = choosePortPair(a, low, b, 7);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->low, r->high);  // rail i to rail i
    used.insert(r->low);
  }
  EXPECT_EQ(used.size(), 4u) << "four peers of rank 7 should use four rails";
}

TEST(VerbsPortPair, BothRanksComputeTheSamePair) {
  // Each side calls with the lower rank's ports first; the answer must not depend on who asks.
  std::vector<PortInfo> r2 = {rocePort("a", 1, 100000, 1), rocePort("b", 1, 100000, 2), rocePort("c", 1, 50000, 3)};
  std::vector<PortInfo> r9 = {rocePort("x", 1, 100000, 4), rocePort("y", 1, 100000, 5)};
  auto first = choosePortPair(r2, 2, r9, 9);
  auto second = choosePortPair(r2, 2, r9, 9);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->low, second->low);
  EXPECT_EQ(first->high, second->high);
}

TEST(VerbsPortPair, NoPortsAtAll) {
  auto r = choosePortPair({}, 0, {rocePort("x", 1, 1, 1)}, 1);
  ASSERT_FALSE(r);
  EXPECT_TRUE(contains(r.error().message(), "rank 0 has no port")) << r.error().message();
}

// ---- listen() blob ----

Blob sampleBlob() {
  Blob b;
  b.sideband = bytesOf("hctcp=1\nhost=h\nport=4242\naddrs=10.0.0.1\n");
  b.ports = {ibPort("mlx5_0", 1, 0xfe80000000000000, 200000, 17), rocePort("mlx5_bond_0", 2, 100000, 42)};
  return b;
}

TEST(VerbsBlob, RoundTrip) {
  Blob b = sampleBlob();
  auto d = decodeBlob(encodeBlob(b), 3);
  ASSERT_TRUE(d) << d.error().toString();
  EXPECT_EQ(d->sideband, b.sideband);
  ASSERT_EQ(d->ports.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const PortInfo &x = b.ports[i], &y = d->ports[i];
    EXPECT_EQ(y.device, x.device);
    EXPECT_EQ(y.port, x.port);
    EXPECT_EQ(y.roce, x.roce);
    EXPECT_EQ(y.rateMbps, x.rateMbps);
    EXPECT_EQ(y.lid, x.lid);
    EXPECT_EQ(y.gid, x.gid);
    EXPECT_EQ(y.gidIndex, x.gidIndex);
    EXPECT_EQ(y.gidType, x.gidType);
    EXPECT_EQ(y.mtu, x.mtu);
    EXPECT_EQ(y.maxMsgSize, x.maxMsgSize);
  }
}

TEST(VerbsBlob, EveryTruncationFailsCleanly) {
  Bytes raw = encodeBlob(sampleBlob());
  for (size_t n = 0; n < raw.size(); ++n) {
    auto d = decodeBlob(std::span<const std::byte>(raw.data(), n), 5);
    ASSERT_FALSE(d) << "decoded a blob cut at " << n << " of " << raw.size();
    EXPECT_EQ(d.error().code(), Code::kRemote);
    EXPECT_TRUE(contains(d.error().message(), "rank 5's verbs address blob is malformed")) << d.error().message();
  }
}

TEST(VerbsBlob, WrongMagicVersionAndGarbage) {
  Bytes raw = encodeBlob(sampleBlob());
  Bytes bad = raw;
  bad[0] = std::byte{'h'};
  auto d = decodeBlob(bad, 1);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "bad magic")) << d.error().message();

  bad = raw;
  bad[4] = std::byte{9};  // version
  d = decodeBlob(bad, 1);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "version 9")) << d.error().message();

  // The tcp transport's blob is not a verbs blob.
  d = decodeBlob(bytesOf("hctcp=1\nhost=h\nport=1\naddrs=1.2.3.4\n"), 1);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "bad magic")) << d.error().message();

  bad = raw;
  bad.push_back(std::byte{0});
  d = decodeBlob(bad, 1);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "trailing garbage")) << d.error().message();
}

TEST(VerbsBlob, AbsurdCountsAreRejectedBeforeAllocating) {
  Bytes raw = encodeBlob(sampleBlob());
  // Port count (bytes 6..7) of 65535.
  Bytes bad = raw;
  bad[6] = bad[7] = std::byte{0xff};
  auto d = decodeBlob(bad, 2);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "65535 ports")) << d.error().message();
  // Zero ports.
  bad = raw;
  bad[6] = bad[7] = std::byte{0};
  d = decodeBlob(bad, 2);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "0 ports")) << d.error().message();
  // A side-band length (bytes 8..11) of 4 GiB.
  bad = raw;
  for (int i = 8; i < 12; ++i) bad[i] = std::byte{0xff};
  d = decodeBlob(bad, 2);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "side-band address of 4294967295 bytes")) << d.error().message();
  // A device name length of 0 and of 200 (the byte after the side band).
  const size_t nameLenAt = 12 + sampleBlob().sideband.size();
  for (uint8_t len : {uint8_t{0}, uint8_t{200}}) {
    bad = raw;
    bad[nameLenAt] = std::byte{len};
    d = decodeBlob(bad, 2);
    ASSERT_FALSE(d);
    EXPECT_TRUE(contains(d.error().message(), format("device name of %u bytes", len))) << d.error().message();
  }
}

TEST(VerbsBlob, BadPortFields) {
  Blob b = sampleBlob();
  b.ports[0].mtu = 1500;  // not an IB MTU
  auto d = decodeBlob(encodeBlob(b), 4);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "mtu 1500")) << d.error().message();
  b = sampleBlob();
  b.ports[1].device = "bad name";
  d = decodeBlob(encodeBlob(b), 4);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "not printable")) << d.error().message();
  b = sampleBlob();
  b.ports[0].gidType = GidType::kRoceV2;  // on an InfiniBand port
  d = decodeBlob(encodeBlob(b), 4);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "port 0: gid type 2 on InfiniBand")) << d.error().message();
  b = sampleBlob();
  b.ports[1].gidType = GidType::kIb;  // on a RoCE port
  d = decodeBlob(encodeBlob(b), 4);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "port 1: gid type 0 on RoCE")) << d.error().message();
  b = sampleBlob();
  b.ports[1].maxMsgSize = 100;
  d = decodeBlob(encodeBlob(b), 4);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "port 1: max message size 100")) << d.error().message();
  b = sampleBlob();
  b.ports[1].maxMsgSize = 0;  // unknown: allowed
  EXPECT_TRUE(decodeBlob(encodeBlob(b), 4));
}

TEST(VerbsBlob, RandomBytesNeverCrash) {
  uint32_t x = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes raw(static_cast<size_t>(trial % 97));
    for (auto& c : raw) {
      x = x * 1103515245 + 12345;
      c = static_cast<std::byte>(x >> 16);
    }
    if (raw.size() >= 4 && trial % 2) {  // half of them with the right magic, to get past the first check
      raw[0] = std::byte{0x48};
      raw[1] = std::byte{0x43};
      raw[2] = std::byte{0x56};
      raw[3] = std::byte{0x42};
    }
    (void)decodeBlob(raw, 0);
    (void)decodeQpInfo(raw, 0);
    (void)parseMessage(raw, 64, 0);
  }
}

// ---- queue-pair information ----

QpInfo sampleQpInfo() {
  QpInfo q;
  q.rank = 6;
  q.commId = 0x1122334455667788ull;
  q.qpn = 0x1234;
  q.psn = 0xabcdef;
  q.lid = 33;
  q.gid = rocePort("x", 1, 1, 7).gid;
  q.mtu = 2048;
  q.senderPort = 1;
  q.receiverPort = 0;
  q.recvSlots = 32;
  q.slotPayload = 8192;
  q.eagerMax = 4096;
  q.rdAtomic = 16;
  q.maxMsgSize = 8u << 20;
  return q;
}

TEST(VerbsQpInfo, RoundTrip) {
  QpInfo q = sampleQpInfo();
  Bytes raw = encodeQpInfo(q);
  EXPECT_EQ(raw.size(), kQpInfoBytes);
  auto d = decodeQpInfo(raw, 6);
  ASSERT_TRUE(d) << d.error().toString();
  EXPECT_EQ(d->rank, q.rank);
  EXPECT_EQ(d->commId, q.commId);
  EXPECT_EQ(d->qpn, q.qpn);
  EXPECT_EQ(d->psn, q.psn);
  EXPECT_EQ(d->lid, q.lid);
  EXPECT_EQ(d->gid, q.gid);
  EXPECT_EQ(d->mtu, q.mtu);
  EXPECT_EQ(d->senderPort, q.senderPort);
  EXPECT_EQ(d->receiverPort, q.receiverPort);
  EXPECT_EQ(d->recvSlots, q.recvSlots);
  EXPECT_EQ(d->slotPayload, q.slotPayload);
  EXPECT_EQ(d->eagerMax, q.eagerMax);
  EXPECT_EQ(d->rdAtomic, q.rdAtomic);
  EXPECT_EQ(d->maxMsgSize, q.maxMsgSize);
}

TEST(VerbsQpInfo, MalformedIsRejected) {
  Bytes raw = encodeQpInfo(sampleQpInfo());
  for (size_t n = 0; n < raw.size(); ++n) {
    auto d = decodeQpInfo(std::span<const std::byte>(raw.data(), n), 6);
    ASSERT_FALSE(d) << n;
    EXPECT_TRUE(contains(d.error().message(), "rank 6 sent malformed verbs queue-pair information"));
  }
  struct Case {
    std::function<void(QpInfo&)> edit;
    const char* want;
  };
  std::vector<Case> cases = {
      {[](QpInfo& q) { q.qpn = 0; }, "qpn 0"},
      {[](QpInfo& q) { q.qpn = 1u << 24; }, "qpn 0x1000000"},
      {[](QpInfo& q) { q.psn = 1u << 24; }, "psn"},
      {[](QpInfo& q) { q.mtu = 9000; }, "mtu 9000"},
      {[](QpInfo& q) { q.recvSlots = 1; }, "1 receive slots"},
      {[](QpInfo& q) { q.recvSlots = 1u << 30; }, "receive slots"},
      {[](QpInfo& q) { q.slotPayload = 0xffffffff; }, "slot payload"},
      {[](QpInfo& q) { q.eagerMax = 1; }, "eager limit 1"},
      {[](QpInfo& q) { q.senderPort = 1000; }, "port indices"},
      {[](QpInfo& q) { q.rdAtomic = 0; }, "rdma read depth 0"},
      {[](QpInfo& q) { q.maxMsgSize = 100; }, "max message size 100"},
  };
  for (const auto& c : cases) {
    QpInfo q = sampleQpInfo();
    c.edit(q);
    auto d = decodeQpInfo(encodeQpInfo(q), 6);
    ASSERT_FALSE(d) << c.want;
    EXPECT_TRUE(contains(d.error().message(), c.want)) << d.error().message();
  }
  Bytes bad = raw;
  bad[0] = std::byte{0};
  auto d = decodeQpInfo(bad, 6);
  ASSERT_FALSE(d);
  EXPECT_TRUE(contains(d.error().message(), "bad magic")) << d.error().message();
}

// ---- messages ----

Bytes message(MsgHeader h, const std::string& payload = "") {
  h.len = static_cast<uint32_t>(payload.size());
  Bytes out(sizeof(h) + payload.size());
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), payload.data(), payload.size());
  return out;
}

TEST(VerbsMessage, ValidMessagesParse) {
  MsgHeader e;
  e.type = MsgHeader::kEager;
  e.tag = 99;
  e.size = 5;
  e.credits = 7;
  auto h = parseMessage(message(e, "hello"), 64, 1);
  ASSERT_TRUE(h) << h.error().toString();
  EXPECT_EQ(h->tag, 99u);
  EXPECT_EQ(h->credits, 7u);
  MsgHeader r;
  r.type = MsgHeader::kRts;
  r.size = 1 << 20;
  r.addr = 0x7f0000001000;
  r.rkey = 5;
  r.id = 3;
  EXPECT_TRUE(parseMessage(message(r), 64, 1));
  MsgHeader f;
  f.type = MsgHeader::kFin;
  f.status = MsgHeader::kFinSizeMismatch;
  EXPECT_TRUE(parseMessage(message(f), 64, 1));
  MsgHeader c;
  c.type = MsgHeader::kCredit;
  EXPECT_TRUE(parseMessage(message(c), 64, 1));
  MsgHeader a;
  a.type = MsgHeader::kAbort;
  EXPECT_TRUE(parseMessage(message(a, "out of memory"), 64, 1));
}

TEST(VerbsMessage, MalformedMessagesFailNamingThePeer) {
  auto expectBad = [](const Bytes& raw, size_t maxPayload, const char* want) {
    auto h = parseMessage(raw, maxPayload, 4);
    ASSERT_FALSE(h) << want;
    EXPECT_EQ(h.error().code(), Code::kRemote);
    EXPECT_TRUE(contains(h.error().message(), "rank 4 sent a malformed verbs message")) << h.error().message();
    EXPECT_TRUE(contains(h.error().message(), want)) << h.error().message();
  };
  expectBad(Bytes(10), 64, "shorter than a header");
  MsgHeader e;
  e.type = MsgHeader::kEager;
  e.size = 6;
  expectBad(message(e, "hello"), 64, "eager message of 6 bytes carrying 5");
  Bytes lying = message(e, "hello!");
  lying.pop_back();  // the header says 6 follow, 5 did
  expectBad(lying, 64, "announces 6 bytes but 5 followed");
  e.size = 70;
  expectBad(message(e, std::string(70, 'x')), 64, "more than a receive buffer holds");
  MsgHeader u;
  u.type = 42;
  expectBad(message(u), 64, "unknown message type 42");
  MsgHeader r;
  r.type = MsgHeader::kRts;
  r.size = 0;
  r.addr = 1;
  expectBad(message(r), 64, "rendezvous announcement");
  MsgHeader f;
  f.type = MsgHeader::kFin;
  f.status = 9;
  expectBad(message(f), 64, "status 9");
  MsgHeader a;
  a.type = MsgHeader::kAbort;
  expectBad(message(a, std::string(kMaxAbortReason + 1, 'x')), 1 << 20, "abort reason of 1025 bytes");
}

// ---- registration cache ----

// Records registrations; handles are sequence numbers. Models what ibv_reg_mr refuses: read-only memory asked for
// local write (EFAULT), and pinning beyond a limit (ENOMEM, as with RLIMIT_MEMLOCK).
struct FakeRegistrar {
  struct Reg {
    uintptr_t start;
    size_t len;
    uint8_t access = 0;
  };
  std::map<uintptr_t, Reg> live;  // by handle
  std::vector<Reg> registered, deregistered;
  std::vector<Reg> attempts;  // every call, refused or not
  uintptr_t next = 1;
  std::function<int(uintptr_t, size_t)> refuse;           // an errno value: fail this registration with it
  std::function<void()> duringRegister;                   // runs inside register (with the cache's lock held)
  std::vector<std::pair<uintptr_t, uintptr_t>> readOnly;  // [start, end): local write there is EFAULT
  size_t pinLimit = SIZE_MAX;                             // live bytes at most: beyond, ENOMEM

  size_t pinned() const {
    size_t n = 0;
    for (const auto& [h, r] : live) n += r.len;
    return n;
  }
  MrCache::RegisterFn reg() {
    return [this](void* addr, size_t len, uint8_t access, Registration* out) -> int {
      if (duringRegister) duringRegister();
      const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
      attempts.push_back({a, len, access});
      if (refuse)
        if (int err = refuse(a, len); err != 0) return err;
      if (access & MrCache::kLocalWrite)
        for (const auto& [ro, roEnd] : readOnly)
          if (a < roEnd && a + len > ro) return EFAULT;
      if (pinned() + len > pinLimit) return ENOMEM;
      const uintptr_t h = next++;
      live[h] = {a, len, access};
      registered.push_back({a, len, access});
      *out = Registration{reinterpret_cast<void*>(h), static_cast<uint32_t>(h), static_cast<uint32_t>(h + 1000)};
      return 0;
    };
  }
  MrCache::DeregisterFn dereg() {
    return [this](const Registration& r) {
      auto it = live.find(reinterpret_cast<uintptr_t>(r.handle));
      ASSERT_NE(it, live.end()) << "deregistered twice or never registered";
      deregistered.push_back(it->second);
      live.erase(it);
    };
  }
};

const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
// Addresses for the fake registrar: never dereferenced.
const void* at(uintptr_t pages, uintptr_t offset = 0) {
  return reinterpret_cast<const void*>((uintptr_t{1} << 32) + pages * kPage + offset);
}

MrCache::Limits limits(size_t entries, size_t bytes = size_t{1} << 40) { return MrCache::Limits{bytes, entries}; }

// Most cache tests are about ranges, not access: they acquire for sends (local write and remote read on writable
// memory, which serves either use).
Result<MrCache::Handle> acquire(MrCache& c, const void* addr, size_t len, MrCache::Use use = MrCache::Use::kSend) {
  return c.acquire(addr, len, use);
}

TEST(MrCache, MissRegistersPageAlignedThenHits) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), /*watchUnmaps=*/false);
  auto h1 = acquire(c, at(2, 100), 50);
  ASSERT_TRUE(h1) << h1.error().toString();
  ASSERT_EQ(f.registered.size(), 1u);
  EXPECT_EQ(f.registered[0].start, reinterpret_cast<uintptr_t>(at(2)));
  EXPECT_EQ(f.registered[0].len, kPage);
  EXPECT_EQ(h1->base(), reinterpret_cast<uintptr_t>(at(2)));
  EXPECT_EQ(h1->length(), kPage);
  // Anything inside the page hits, in use or not.
  auto h2 = acquire(c, at(2, 0), kPage);
  ASSERT_TRUE(h2);
  EXPECT_EQ(h2->lkey(), h1->lkey());
  EXPECT_EQ(h2->rkey(), h1->lkey() + 1000);
  h1->reset();
  h2->reset();
  auto h3 = acquire(c, at(2, 4000 % kPage), 1);
  ASSERT_TRUE(h3);
  EXPECT_EQ(f.registered.size(), 1u);
  MrCache::Stats s = c.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.inUse, 1u);
  // Crossing into the next page is a miss.
  auto h4 = acquire(c, at(2, kPage - 1), 2);
  ASSERT_TRUE(h4);
  EXPECT_EQ(f.registered.size(), 2u);
}

TEST(MrCache, OverlappingRangesMergeIntoOne) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  {
    auto a = acquire(c, at(10), 2 * kPage);  // pages 10-11
    ASSERT_TRUE(a);
  }
  auto held = acquire(c, at(13), kPage);  // page 13, in use
  ASSERT_TRUE(held);
  auto b = acquire(c, at(11), 3 * kPage);  // pages 11-13: overlaps both
  ASSERT_TRUE(b);
  ASSERT_EQ(f.registered.size(), 3u);
  EXPECT_EQ(f.registered[2].start, reinterpret_cast<uintptr_t>(at(10)));  // the union, pages 10-13
  EXPECT_EQ(f.registered[2].len, 4 * kPage);
  // The unused old one went at once; the one in use stays until released.
  ASSERT_EQ(f.deregistered.size(), 1u);
  EXPECT_EQ(f.deregistered[0].start, reinterpret_cast<uintptr_t>(at(10)));
  EXPECT_EQ(f.deregistered[0].len, 2 * kPage);
  uint32_t oldKey = held->lkey();
  held->reset();
  ASSERT_EQ(f.deregistered.size(), 2u);
  EXPECT_EQ(f.deregistered[1].start, reinterpret_cast<uintptr_t>(at(13)));
  // Everything in pages 10-13 now hits the union.
  auto d = acquire(c, at(13), kPage);
  ASSERT_TRUE(d);
  EXPECT_NE(d->lkey(), oldKey);
  EXPECT_EQ(d->lkey(), b->lkey());
  EXPECT_EQ(f.registered.size(), 3u);
  EXPECT_EQ(c.stats().entries, 1u);
}

TEST(MrCache, UnionThatCannotBeRegisteredFallsBackToTheRequest) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  { ASSERT_TRUE(acquire(c, at(20), 2 * kPage)); }                                 // pages 20-21
  f.refuse = [](uintptr_t, size_t len) { return len > 2 * kPage ? EFAULT : 0; };  // the union, pages 20-22
  auto b = acquire(c, at(21), 2 * kPage);                                         // pages 21-22
  ASSERT_TRUE(b) << b.error().toString();
  EXPECT_EQ(f.registered.back().start, reinterpret_cast<uintptr_t>(at(21)));
  EXPECT_EQ(f.registered.back().len, 2 * kPage);
  // Ranges in the cache still never overlap: the old entry was dropped.
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(f.deregistered.size(), 1u);
}

TEST(MrCache, RegistrationErrorsPropagate) {
  FakeRegistrar f;
  f.refuse = [](uintptr_t, size_t) { return EINVAL; };
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  auto h = acquire(c, at(1), 10);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code(), Code::kSystem);
  const std::string want =
      format("verbs: ibv_reg_mr of %s at %p: %s", humanBytes(kPage).c_str(), at(1), std::strerror(EINVAL));
  EXPECT_TRUE(contains(h.error().message(), want)) << h.error().message();
  EXPECT_EQ(c.stats().entries, 0u);
  auto z = acquire(c, at(1), 0);
  ASSERT_FALSE(z);
  EXPECT_EQ(z.error().code(), Code::kInvalidArgument);
}

TEST(MrCache, ReceivesAskForLocalWriteOnlySendsForRemoteReadToo) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  auto r = acquire(c, at(300), kPage, MrCache::Use::kRecv);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_EQ(f.registered.size(), 1u);
  EXPECT_EQ(f.registered[0].access, MrCache::kLocalWrite) << "a receive buffer is only written by our reads";
  EXPECT_EQ(r->access(), MrCache::kLocalWrite);
  auto s2 = acquire(c, at(310), kPage, MrCache::Use::kSend);
  ASSERT_TRUE(s2);
  EXPECT_EQ(f.registered[1].access, MrCache::kLocalWrite | MrCache::kRemoteRead) << "write first, see mr_cache.h";
  // A send registration (it has local write) serves a receive: a hit.
  auto r2 = acquire(c, at(310), 10, MrCache::Use::kRecv);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->lkey(), s2->lkey());
  EXPECT_EQ(f.registered.size(), 2u);
}

TEST(MrCache, ASendOverAReceiveRegistrationMergesTheAccess) {
  // In place: the same buffer is received into, then sent from. The receive's registration cannot serve the send
  // (no remote read); the new one asks for both, replaces it, and from then on both uses hit.
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  { ASSERT_TRUE(acquire(c, at(320), 2 * kPage, MrCache::Use::kRecv)); }
  auto s1 = acquire(c, at(321), kPage, MrCache::Use::kSend);
  ASSERT_TRUE(s1);
  ASSERT_EQ(f.registered.size(), 2u);
  EXPECT_EQ(f.registered[1].start, reinterpret_cast<uintptr_t>(at(320))) << "the union of both ranges";
  EXPECT_EQ(f.registered[1].len, 2 * kPage);
  EXPECT_EQ(f.registered[1].access, MrCache::kLocalWrite | MrCache::kRemoteRead);
  EXPECT_EQ(f.deregistered.size(), 1u);
  s1->reset();
  { ASSERT_TRUE(acquire(c, at(320), 2 * kPage, MrCache::Use::kRecv)); }
  { ASSERT_TRUE(acquire(c, at(320), 2 * kPage, MrCache::Use::kSend)); }
  EXPECT_EQ(f.registered.size(), 2u);
  EXPECT_EQ(c.stats().entries, 1u);
}

TEST(MrCache, ReadOnlyMemoryIsRegisteredForSendsWithoutLocalWrite) {
  FakeRegistrar f;
  f.readOnly.push_back({reinterpret_cast<uintptr_t>(at(400)), reinterpret_cast<uintptr_t>(at(402))});
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  auto s1 = acquire(c, at(400, 10), kPage, MrCache::Use::kSend);
  ASSERT_TRUE(s1) << s1.error().toString();
  // Write first (refused: EFAULT), then read only.
  ASSERT_EQ(f.attempts.size(), 2u);
  EXPECT_EQ(f.attempts[0].access, MrCache::kLocalWrite | MrCache::kRemoteRead);
  EXPECT_EQ(f.attempts[1].access, MrCache::kRemoteRead);
  EXPECT_EQ(s1->access(), MrCache::kRemoteRead);
  // Sends hit it...
  auto s2 = acquire(c, at(400), kPage, MrCache::Use::kSend);
  ASSERT_TRUE(s2);
  EXPECT_EQ(s2->lkey(), s1->lkey());
  // ... a receive never does, and cannot be registered there at all.
  auto r = acquire(c, at(400), 100, MrCache::Use::kRecv);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kSystem);
  EXPECT_TRUE(contains(r.error().message(), std::strerror(EFAULT))) << r.error().message();
  EXPECT_TRUE(contains(r.error().message(), "read-only")) << r.error().message();
  for (size_t i = 2; i < f.attempts.size(); ++i)
    EXPECT_TRUE(f.attempts[i].access & MrCache::kLocalWrite) << "a receive registration without local write";
  // The read-only entry still serves sends.
  auto s3 = acquire(c, at(401), 1, MrCache::Use::kSend);
  ASSERT_TRUE(s3);
  EXPECT_EQ(s3->lkey(), s1->lkey());
}

TEST(MrCache, RefusedPinningDropsUnusedRegistrationsAndRetries) {
  FakeRegistrar f;
  f.pinLimit = 3 * kPage;  // RLIMIT_MEMLOCK
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  auto held = acquire(c, at(500), kPage);
  ASSERT_TRUE(held);
  for (uintptr_t p : {502, 504}) ASSERT_TRUE(acquire(c, at(p), kPage));  // released: cached, unused
  EXPECT_EQ(f.pinned(), 3 * kPage);
  auto big = acquire(c, at(510), 2 * kPage);  // needs 2 more pages: only after the unused two go
  ASSERT_TRUE(big) << big.error().toString();
  EXPECT_EQ(c.stats().reclaims, 2u);
  EXPECT_EQ(f.deregistered.size(), 2u);
  EXPECT_EQ(c.stats().entries, 2u);
  EXPECT_EQ(f.live.count(held->lkey()), 1u) << "the registration in use stays";
  // Nothing unused left to drop: the refusal comes back, with the errno.
  auto more = acquire(c, at(520), kPage);
  ASSERT_FALSE(more);
  EXPECT_TRUE(contains(more.error().message(), std::strerror(ENOMEM))) << more.error().message();
  EXPECT_EQ(c.stats().reclaims, 2u);
}

TEST(MrCache, RefusedPinningRetriesOnlyOnce) {
  FakeRegistrar f;
  int calls = 0;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  { ASSERT_TRUE(acquire(c, at(600), kPage)); }
  f.refuse = [&](uintptr_t, size_t) {
    ++calls;
    return ENOMEM;
  };
  auto h = acquire(c, at(610), kPage);
  ASSERT_FALSE(h);
  EXPECT_EQ(calls, 2) << "one attempt, then one after dropping the unused registration";
  EXPECT_EQ(c.stats().entries, 0u);
}

TEST(MrCache, LeastRecentlyUsedGoesFirst) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(2), false);
  for (uintptr_t p : {30, 32}) ASSERT_TRUE(acquire(c, at(p), kPage));
  { ASSERT_TRUE(acquire(c, at(30), 1)); }  // touch 30: 32 is now the least recently used
  { ASSERT_TRUE(acquire(c, at(34), kPage)); }
  ASSERT_EQ(f.deregistered.size(), 1u);
  EXPECT_EQ(f.deregistered[0].start, reinterpret_cast<uintptr_t>(at(32)));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().entries, 2u);
}

TEST(MrCache, ByteLimitEvicts) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(100, 3 * kPage), false);
  { ASSERT_TRUE(acquire(c, at(40), 2 * kPage)); }
  { ASSERT_TRUE(acquire(c, at(50), 2 * kPage)); }  // 4 pages > 3: the first goes
  ASSERT_EQ(f.deregistered.size(), 1u);
  EXPECT_EQ(f.deregistered[0].start, reinterpret_cast<uintptr_t>(at(40)));
  EXPECT_EQ(c.stats().bytes, 2 * kPage);
}

TEST(MrCache, InUseIsNeverEvicted) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(1), false);
  auto a = acquire(c, at(60), kPage);
  auto b = acquire(c, at(61, 1), 1);
  auto d = acquire(c, at(70), kPage);
  ASSERT_TRUE(a && b && d);
  EXPECT_TRUE(f.deregistered.empty()) << "evicted a registration in use";
  EXPECT_EQ(c.stats().entries, 3u);  // over the limit while in use
  EXPECT_EQ(c.stats().inUse, 3u);
  a->reset();  // back to the cache, which is over its limit: goes now
  EXPECT_EQ(f.deregistered.size(), 1u);
  EXPECT_EQ(b->lkey(), f.next - 2);  // still valid
  b->reset();
  d->reset();
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.stats().inUse, 0u);
}

TEST(MrCache, ZeroEntriesCachesNothing) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(0));  // even with watchUnmaps: nothing to watch
  EXPECT_FALSE(c.watching());
  EXPECT_FALSE(c.hooked());
  for (int i = 0; i < 3; ++i) {
    auto h = acquire(c, at(80), 100);
    ASSERT_TRUE(h);
  }
  EXPECT_EQ(f.registered.size(), 3u);
  EXPECT_EQ(f.deregistered.size(), 3u);
}

TEST(MrCache, DropNowDeregistersOnLastRelease) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  auto a = acquire(c, at(90), kPage);
  auto b = acquire(c, at(90), kPage);
  ASSERT_TRUE(a && b);
  a->reset(/*dropNow=*/true);
  EXPECT_TRUE(f.deregistered.empty()) << "b still uses it";
  auto again = acquire(c, at(90), kPage);  // no longer in the index: a new registration
  ASSERT_TRUE(again);
  EXPECT_EQ(f.registered.size(), 2u);
  b->reset();
  EXPECT_EQ(f.deregistered.size(), 1u);
}

TEST(MrCache, ReportedUnmapInvalidatesOverlappingEntries) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  { ASSERT_TRUE(acquire(c, at(100), 2 * kPage)); }
  { ASSERT_TRUE(acquire(c, at(110), kPage)); }
  auto held = acquire(c, at(120), kPage);
  ASSERT_TRUE(held);
  c.onUnmapped(at(101, 5), 10);  // inside the first entry
  c.onUnmapped(at(120), kPage);  // the one in use
  EXPECT_TRUE(c.invalidationsPending());
  c.purge();
  EXPECT_FALSE(c.invalidationsPending());
  ASSERT_EQ(f.deregistered.size(), 1u);
  EXPECT_EQ(f.deregistered[0].start, reinterpret_cast<uintptr_t>(at(100)));
  // The one in use lives until released, but nobody new gets it.
  auto fresh = acquire(c, at(120), 1);
  ASSERT_TRUE(fresh);
  EXPECT_NE(fresh->lkey(), held->lkey());
  held->reset();
  EXPECT_EQ(f.deregistered.size(), 2u);
  // The untouched entry still hits.
  auto hit = acquire(c, at(110), 1);
  ASSERT_TRUE(hit);
  EXPECT_EQ(c.stats().invalidations, 2u);
  // An unmap next to, but not overlapping, an entry leaves it alone.
  hit->reset();
  c.onUnmapped(at(111), kPage);
  c.onUnmapped(at(109), kPage);
  c.purge();
  EXPECT_EQ(c.stats().invalidations, 2u);
}

TEST(MrCache, UnmapDuringRegistrationIsQueuedNotDeadlocked) {
  // ibv_reg_mr may free memory, so the hook can fire in the owner thread while it holds the cache's lock; and a
  // burst of unmaps beyond the queue's size must still invalidate (everything).
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  { ASSERT_TRUE(acquire(c, at(200), kPage)); }
  { ASSERT_TRUE(acquire(c, at(300), kPage)); }
  f.duringRegister = [&] { c.onUnmapped(at(200), kPage); };
  { ASSERT_TRUE(acquire(c, at(400), kPage)); }  // queued during this call, applied at the next
  f.duringRegister = nullptr;
  EXPECT_TRUE(c.invalidationsPending());
  c.purge();
  ASSERT_EQ(f.deregistered.size(), 1u);
  EXPECT_EQ(f.deregistered[0].start, reinterpret_cast<uintptr_t>(at(200)));
  // Overflow: 200 ranges that touch nothing, queued while the lock is held, then one more registration.
  f.duringRegister = [&] {
    for (int i = 0; i < 200; ++i) c.onUnmapped(at(5000 + i), kPage);
  };
  { ASSERT_TRUE(acquire(c, at(500), kPage)); }
  f.duringRegister = nullptr;
  c.purge();
  EXPECT_EQ(c.stats().entries, 0u) << "an overflowing queue must invalidate everything";
}

TEST(MrCache, UnmapFromAnotherThread) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), false);
  { ASSERT_TRUE(acquire(c, at(600), kPage)); }
  std::thread t([&] { c.onUnmapped(at(600), kPage); });
  t.join();
  c.purge();
  EXPECT_EQ(f.deregistered.size(), 1u);
}

// The real thing: libucm catches munmap of memory the test mapped itself.
TEST(MrCacheUcm, MunmapOfARealRegionInvalidates) {
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(16), /*watchUnmaps=*/true);
  if (!c.hooked()) GTEST_SKIP() << "libucm could not install its memory hooks here";
  const size_t len = 8 * kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* p = static_cast<std::byte*>(m);
  { ASSERT_TRUE(acquire(c, p, len)); }
  { ASSERT_TRUE(acquire(c, p + kPage, kPage)); }  // a hit
  ASSERT_EQ(f.registered.size(), 1u);
  // Unmap the middle two pages only: the registration covers them, so it must go.
  ASSERT_EQ(munmap(p + 3 * kPage, 2 * kPage), 0);
  EXPECT_TRUE(c.invalidationsPending());
  c.purge();
  ASSERT_EQ(f.deregistered.size(), 1u);
  EXPECT_EQ(f.deregistered[0].start, reinterpret_cast<uintptr_t>(p));
  // Map again (maybe at the same address): a new registration, not the stale one.
  void* m2 = mmap(p + 3 * kPage, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_NE(m2, MAP_FAILED);
  { ASSERT_TRUE(acquire(c, p, len)); }
  EXPECT_EQ(f.registered.size(), 2u);
  // An unmap somewhere else leaves the entry alone.
  void* other = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(other, MAP_FAILED);
  ASSERT_EQ(munmap(other, kPage), 0);
  c.purge();
  EXPECT_EQ(f.deregistered.size(), 1u);
  // munmap of everything; then the cache goes before the hook could fire again.
  ASSERT_EQ(munmap(p, len), 0);
  c.purge();
  EXPECT_EQ(f.deregistered.size(), 2u);
  EXPECT_EQ(c.stats().entries, 0u);
}

TEST(MrCacheUcm, MunmapInAnotherThreadWhileTheOwnerWorks) {
  // The owner keeps taking the cache's lock (hits on the regions it keeps) while another thread unmaps the other
  // regions: the hook either marks under the lock or queues; either way every unmapped region's registration is
  // gone after the next purge, and the kept ones are untouched.
  FakeRegistrar f;
  MrCache c(f.reg(), f.dereg(), limits(1024), true);
  if (!c.hooked()) GTEST_SKIP() << "libucm could not install its memory hooks here";
  const int kRegions = 32;
  std::vector<std::byte*> regions;
  for (int i = 0; i < kRegions; ++i) {
    void* m = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    regions.push_back(static_cast<std::byte*>(m));
    ASSERT_TRUE(acquire(c, m, 2 * kPage));
  }
  std::atomic<bool> stop{false};
  std::atomic<long> passes{0};
  std::thread owner([&] {
    while (!stop.load()) {
      for (int i = kRegions / 2; i < kRegions; ++i) (void)acquire(c, regions[i], 1);
      c.purge();
      ++passes;
    }
  });
  while (passes.load() == 0) std::this_thread::yield();
  for (int i = 0; i < kRegions / 2; ++i) ASSERT_EQ(munmap(regions[i], 2 * kPage), 0);
  stop.store(true);
  owner.join();
  c.purge();
  EXPECT_EQ(f.registered.size(), static_cast<size_t>(kRegions));  // the kept ones only ever hit
  EXPECT_EQ(f.deregistered.size(), static_cast<size_t>(kRegions / 2));
  for (const auto& d : f.deregistered)
    EXPECT_TRUE(std::find(regions.begin(), regions.begin() + kRegions / 2, reinterpret_cast<std::byte*>(d.start)) !=
                regions.begin() + kRegions / 2);
  EXPECT_EQ(c.stats().entries, static_cast<size_t>(kRegions / 2));
  for (int i = kRegions / 2; i < kRegions; ++i) ASSERT_EQ(munmap(regions[i], 2 * kPage), 0);
  c.purge();
  EXPECT_EQ(c.stats().entries, 0u);
}

// ---- the data path over a software loopback ----
//
// Two VerbsConnections joined by a fake QueuePair that behaves like an RC pair: SENDs consume the peer's posted
// receives in order (a SEND finding none counts as receiver-not-ready, which the credits must prevent), RDMA READs
// copy from the peer's memory after checking its registration (rkey and bounds, from each side's MrCache), every
// work request completes into a per-side completion queue, and the error state flushes. A seeded random schedule
// interleaves the two sides' work and completions, so each test runs under many orders.

struct Loopback;

class LoopQp final : public QueuePair {
 public:
  LoopQp(Loopback* lb, int side) : lb_(lb), side_(side) {}
  uint32_t qpn() const override { return 0x100u + static_cast<uint32_t>(side_); }
  int postRecv(ibv_recv_wr& wr) override;
  int postSend(ibv_send_wr& wr) override;
  Status connect(const PortInfo&, const QpInfo&, uint32_t, uint32_t rdAtomic, const ConnectionOptions&) override;
  void setError() override;

 private:
  Loopback* lb_;
  int side_;
};

// The completion source of the loopback: a connection's fence and linger (Shared::pollFor) let the "hardware" run
// (both sides' work requests execute) and take that connection's completions only.
struct LoopShared final : Shared {
  Loopback* lb = nullptr;
  bool stalled = false;  // a wedged device: nothing executes or completes any more
  int pollForCalls = 0;
  Status pollFor(uint32_t connId) override;
};

struct Loopback {
  struct PostedRecv {
    uint64_t wrId;
    std::byte* addr;
    uint32_t len;
  };
  struct PendingSend {
    uint64_t wrId;
    ibv_wr_opcode opcode;
    ibv_sge sge;
    uint64_t remoteAddr;
    uint32_t rkey;
    bool executed = false;  // its effect happened; its completion waits for those before it (a send queue completes
                            // in order)
    ibv_wc_status status = IBV_WC_SUCCESS;
  };
  struct Mr {
    uintptr_t start;
    size_t len;
    uint8_t access;
  };
  struct Side {
    std::deque<PostedRecv> recvs;
    std::deque<PendingSend> sendq;
    std::deque<ibv_wc> cq;
    bool error = false;
    std::map<uint32_t, Mr> mrs;  // by key: what the cache registered
    uint32_t nextKey = 1;
    std::vector<std::pair<uintptr_t, uintptr_t>> readOnly;  // [start, end): registering it writable is EFAULT
    int efaults = 0;
    uint32_t maxMsg = 0;    // the port's max_msg_sz (0: unlimited)
    uint32_t rdAtomic = 0;  // the read depth connect() gave the queue pair
    int maxReads = 0;       // most RDMA READs outstanding at once
    std::unique_ptr<MrCache> cache;
    std::byte* bounce = nullptr;
    uint32_t connId = 0;
    std::unique_ptr<VerbsConnection> conn;
  };

  ConnectionOptions opts;
  Side side[2];
  std::shared_ptr<LoopShared> shared = std::make_shared<LoopShared>();
  std::mt19937 rng;
  int rnr = 0;          // SENDs that found no receive posted: flow control failed
  int sqOverflows = 0;  // work requests beyond the send queue's depth
  int rqOverflows = 0;
  int readDepthExceeded = 0;  // READs posted beyond the queue pair's read depth: the send queue would stall
  int tooLong = 0;            // READs longer than a port's max_msg_sz
  uint64_t maxReadLen = 0;
  int dmaIntoReleased = 0;  // READ data landed (after the error state) in memory no longer registered: the buffer
                            // was handed back to its owner while the hardware still wrote into it
  // Reads are "slow": posted READs do not execute (other work requests behind them do) until this is cleared.
  bool freezeReads = false;

  explicit Loopback(ConnectionOptions o, uint32_t seed = 1, std::array<uint32_t, 2> maxMsg = {0, 0})
      : opts(o), rng(seed) {
    shared->lb = this;
    for (int s = 0; s < 2; ++s) {
      Side& sd = side[s];
      sd.maxMsg = maxMsg[s];
      sd.cache = std::make_unique<MrCache>(
          [this, s](void* addr, size_t len, uint8_t access, Registration* out) -> int {
            Side& me = side[s];
            const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
            if (access & MrCache::kLocalWrite)
              for (const auto& [ro, roEnd] : me.readOnly)
                if (a < roEnd && a + len > ro) {
                  ++me.efaults;
                  return EFAULT;
                }
            uint32_t key = me.nextKey++;
            me.mrs[key] = {a, len, access};
            *out = Registration{reinterpret_cast<void*>(uintptr_t{key}), key, key};
            return 0;
          },
          [this, s](const Registration& r) { side[s].mrs.erase(static_cast<uint32_t>(r.lkey)); }, limits(8),
          /*watchUnmaps=*/false);
      BounceBuffers b;
      b.bytes = VerbsConnection::bounceBytes(opts);
      b.base = static_cast<std::byte*>(std::aligned_alloc(4096, b.bytes));
      b.lkey = 0xB0B0;
      b.release = [base = b.base] { std::free(base); };
      sd.bounce = b.base;
      auto c = VerbsConnection::assemble(shared, sd.cache.get(), std::make_unique<LoopQp>(this, s), std::move(b), s,
                                         1 - s, port(s), 0, opts);
      EXPECT_TRUE(c) << c.error().toString();
      if (c) {
        sd.conn = std::move(*c);
        sd.connId = sd.conn->id();
      }
    }
    if (!side[0].conn || !side[1].conn) return;
    QpInfo i0 = side[0].conn->localInfo(1, 0), i1 = side[1].conn->localInfo(1, 0);
    EXPECT_TRUE(side[0].conn->connect(i1, port(1)).ok());
    EXPECT_TRUE(side[1].conn->connect(i0, port(0)).ok());
  }
  ~Loopback() {
    for (auto& sd : side) sd.conn.reset();  // before the caches their registrations come from
  }
  PortInfo port(int s) const {
    PortInfo p = rocePort(format("fake%d", s), 1, 100000, static_cast<uint8_t>(s));
    p.maxMsgSize = side[s].maxMsg;
    return p;
  }
  bool ok() const { return side[0].conn && side[1].conn; }
  VerbsConnection& conn(int s) { return *side[s].conn; }

  static ibv_wc wc(uint64_t wrId, ibv_wc_status status, ibv_wc_opcode op, uint32_t bytes = 0) {
    ibv_wc w{};
    w.wr_id = wrId;
    w.status = status;
    w.opcode = op;
    w.byte_len = bytes;
    return w;
  }

  // The error state: posted receives flush at once (they only hold bounce buffers). Send-queue work requests come
  // back flushed too, but only as the hardware gets to them (execute): a READ under way may still write its data.
  void setError(int s) { side[s].error = true; }
  void flushRecvs(int s) {
    Side& sd = side[s];
    for (auto& r : sd.recvs) sd.cq.push_back(wc(r.wrId, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
    sd.recvs.clear();
  }

  bool covered(const Side& sd, uint32_t key, uintptr_t addr, size_t len, uint8_t access) const {
    auto it = sd.mrs.find(key);
    return it != sd.mrs.end() && addr >= it->second.start && addr + len <= it->second.start + it->second.len &&
           (it->second.access & access) == access;
  }

  // The next work request of side s the hardware may run: in order, except that frozen READs let the work behind
  // them go (a READ waits for its response; SENDs after it need not). In the error state everything comes back.
  PendingSend* executable(int s) {
    Side& me = side[s];
    for (auto& p : me.sendq) {
      if (p.executed) continue;
      if (p.opcode == IBV_WR_RDMA_READ && freezeReads && !me.error) continue;
      return &p;
    }
    return nullptr;
  }

  // Runs one work request of side s (see executable()), then completes, in order, what is done at the front.
  void execute(int s) {
    Side &me = side[s], &peer = side[1 - s];
    PendingSend* pp = executable(s);
    ASSERT_NE(pp, nullptr);
    PendingSend& p = *pp;
    p.executed = true;
    if (p.opcode == IBV_WR_RDMA_READ) maxReadLen = std::max<uint64_t>(maxReadLen, p.sge.length);
    auto finish = [&](ibv_wc_status status) {
      p.status = status;
      if (status != IBV_WC_SUCCESS) setError(s);
    };
    if (me.error) {
      // Flushed. A READ the hardware had started may still land: the worst case, modelled. Into memory that is no
      // longer registered, it is a use-after-release (counted, not written: the memory may be gone).
      if (p.opcode == IBV_WR_RDMA_READ && covered(peer, p.rkey, p.remoteAddr, p.sge.length, MrCache::kRemoteRead)) {
        if (covered(me, p.sge.lkey, p.sge.addr, p.sge.length, MrCache::kLocalWrite))
          std::memcpy(reinterpret_cast<void*>(p.sge.addr), reinterpret_cast<const void*>(p.remoteAddr), p.sge.length);
        else
          ++dmaIntoReleased;
      }
      finish(IBV_WC_WR_FLUSH_ERR);
    } else if (peer.error) {  // no answer from a queue pair in the error state
      finish(IBV_WC_RETRY_EXC_ERR);
    } else if (p.opcode == IBV_WR_SEND) {
      if (peer.recvs.empty()) {
        ++rnr;
        finish(IBV_WC_RNR_RETRY_EXC_ERR);
      } else {
        PostedRecv r = peer.recvs.front();
        peer.recvs.pop_front();
        if (p.sge.length > r.len) {
          peer.cq.push_back(wc(r.wrId, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV));
          setError(1 - s);
          flushRecvs(1 - s);
          finish(IBV_WC_REM_INV_REQ_ERR);
        } else {
          std::memcpy(r.addr, reinterpret_cast<const void*>(p.sge.addr), p.sge.length);
          peer.cq.push_back(wc(r.wrId, IBV_WC_SUCCESS, IBV_WC_RECV, p.sge.length));
          finish(IBV_WC_SUCCESS);
        }
      }
    } else {
      EXPECT_EQ(p.opcode, IBV_WR_RDMA_READ);
      const uint32_t limit = std::min(me.maxMsg ? me.maxMsg : UINT32_MAX, peer.maxMsg ? peer.maxMsg : UINT32_MAX);
      if (p.sge.length > limit) {
        ++tooLong;
        finish(IBV_WC_LOC_LEN_ERR);
      } else if (!covered(peer, p.rkey, p.remoteAddr, p.sge.length, MrCache::kRemoteRead)) {
        finish(IBV_WC_REM_ACCESS_ERR);
      } else if (!covered(me, p.sge.lkey, p.sge.addr, p.sge.length, MrCache::kLocalWrite)) {
        finish(IBV_WC_LOC_PROT_ERR);
      } else {
        std::memcpy(reinterpret_cast<void*>(p.sge.addr), reinterpret_cast<const void*>(p.remoteAddr), p.sge.length);
        finish(IBV_WC_SUCCESS);
      }
    }
    while (!me.sendq.empty() && me.sendq.front().executed) {
      const PendingSend& f = me.sendq.front();
      me.cq.push_back(wc(f.wrId, f.status, f.opcode == IBV_WR_SEND ? IBV_WC_SEND : IBV_WC_RDMA_READ,
                         f.status == IBV_WC_SUCCESS ? f.sge.length : 0));
      me.sendq.pop_front();
    }
    if (me.error) flushRecvs(s);  // after the completion that reports why
  }

  // Hands one completion of side s to its connection, through the connection table as Shared::poll does (a
  // connection being destroyed is still there while it closes).
  void deliver(int s, std::deque<ibv_wc>::iterator it) {
    Side& sd = side[s];
    ibv_wc w = *it;
    sd.cq.erase(it);
    auto c = shared->conns.find(wrConn(w.wr_id));
    if (c != shared->conns.end()) c->second->onCompletion(w);
  }

  // The adversary's schedule: run every work request and deliver send completions before any receive's, so
  // both sides spend all the credits they can before either hears from the other.
  bool starveReceives = false;

  // One step; false when nothing is left to do.
  bool step() {
    std::vector<int> choices;  // 0,1: execute a work request of that side; 2,3: deliver a completion
    for (int s = 0; s < 2; ++s) {
      if (executable(s)) choices.push_back(s);
      if (!side[s].cq.empty()) choices.push_back(2 + s);
    }
    if (choices.empty()) return false;
    int c = choices[rng() % choices.size()];
    if (starveReceives) {
      auto sendCqe = [&](int s) {
        return std::find_if(side[s].cq.begin(), side[s].cq.end(),
                            [](const ibv_wc& w) { return w.opcode != IBV_WC_RECV; }) != side[s].cq.end();
      };
      if (executable(0) || executable(1))
        c = !executable(0) ? 1 : !executable(1) ? 0 : static_cast<int>(rng() % 2);
      else if (sendCqe(0) || sendCqe(1))
        c = sendCqe(0) ? 2 : 3;
    }
    if (c < 2) {
      execute(c);
      return true;
    }
    Side& sd = side[c - 2];
    auto it = sd.cq.begin();
    if (starveReceives) {
      auto nonRecv = std::find_if(sd.cq.begin(), sd.cq.end(), [](const ibv_wc& w) { return w.opcode != IBV_WC_RECV; });
      if (nonRecv != sd.cq.end()) it = nonRecv;  // a CQ is not FIFO across queues: the adversary may reorder
    }
    deliver(c - 2, it);
    return true;
  }
  // Steps until done() or nothing is left to do.
  bool drive(const std::function<bool()>& done, long maxSteps = 10'000'000) {
    for (long i = 0; i < maxSteps; ++i) {
      if (done()) return true;
      if (!step()) return done();
    }
    return false;
  }
  // Steps until nothing is left to do; false if that never happens (messages that beget messages forever).
  bool settle(long maxSteps = 1'000'000) {
    for (long i = 0; i < maxSteps; ++i)
      if (!step()) return true;
    return false;
  }
  // For LoopShared::pollFor: the hardware runs, and connId's completions (only) are delivered.
  void pollFor(uint32_t connId) {
    for (int round = 0; round < 100000; ++round) {
      bool moved = false;
      for (int s = 0; s < 2; ++s)
        while (executable(s)) {
          execute(s);
          moved = true;
        }
      for (int s = 0; s < 2; ++s)
        if (side[s].connId == connId)
          while (!side[s].cq.empty()) {
            deliver(s, side[s].cq.begin());
            moved = true;
          }
      if (!moved) return;
    }
  }
};

Status LoopShared::pollFor(uint32_t connId) {
  ++pollForCalls;
  if (!stalled) lb->pollFor(connId);
  return okStatus();
}

int LoopQp::postRecv(ibv_recv_wr& wr) {
  Loopback::Side& sd = lb_->side[side_];
  if (wr.num_sge != 1 || wr.next) return EINVAL;
  if (sd.error) {
    sd.cq.push_back(Loopback::wc(wr.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
    return 0;
  }
  if (sd.recvs.size() >= lb_->opts.recvSlots) {
    ++lb_->rqOverflows;
    return ENOMEM;
  }
  sd.recvs.push_back({wr.wr_id, reinterpret_cast<std::byte*>(wr.sg_list->addr), wr.sg_list->length});
  return 0;
}

int LoopQp::postSend(ibv_send_wr& wr) {
  Loopback::Side& sd = lb_->side[side_];
  if (wr.num_sge != 1 || wr.next || !(wr.send_flags & IBV_SEND_SIGNALED)) return EINVAL;
  // (In the error state too: it comes back flushed, in order, when the hardware gets to it.)
  if (sd.sendq.size() >= lb_->opts.sqDepth) {
    ++lb_->sqOverflows;
    return ENOMEM;
  }
  sd.sendq.push_back({wr.wr_id, wr.opcode, *wr.sg_list, wr.wr.rdma.remote_addr, wr.wr.rdma.rkey});
  if (wr.opcode == IBV_WR_RDMA_READ) {
    const int reads = static_cast<int>(
        std::count_if(sd.sendq.begin(), sd.sendq.end(), [](const auto& p) { return p.opcode == IBV_WR_RDMA_READ; }));
    sd.maxReads = std::max(sd.maxReads, reads);
    if (reads > static_cast<int>(sd.rdAtomic)) ++lb_->readDepthExceeded;
  }
  return 0;
}

Status LoopQp::connect(const PortInfo&, const QpInfo&, uint32_t, uint32_t rdAtomic, const ConnectionOptions&) {
  lb_->side[side_].rdAtomic = rdAtomic;
  return okStatus();
}

void LoopQp::setError() {
  lb_->setError(side_);
  lb_->flushRecvs(side_);
}

ConnectionOptions smallOptions() {
  ConnectionOptions o;
  o.recvSlots = 4;  // few buffers and a short send queue: flow control and queueing get exercised hard
  o.sendSlots = 3;
  o.slotPayload = 256;
  o.eagerMax = 256;
  o.sqDepth = 5;
  o.rdAtomic = 4;
  o.maxReadChunk = 1000;  // multi-chunk reads at small sizes
  return o;
}

class VerbsLoopbackSizes : public ::testing::TestWithParam<size_t> {};

TEST_P(VerbsLoopbackSizes, BothDirectionsReceivesBeforeAndAfter) {
  const size_t n = GetParam();
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(format("seed %u", seed));
    Loopback lb(smallOptions(), seed);
    ASSERT_TRUE(lb.ok());
    Bytes out01 = pattern(n, seed), out10 = pattern(n, seed + 100), in01(n), in10(n);
    Request r01, r10, s01, s10;
    ASSERT_TRUE(lb.conn(1).irecv(r01, in01, 7).ok());  // posted first
    ASSERT_TRUE(lb.conn(0).isend(s01, out01, 7).ok());
    ASSERT_TRUE(lb.conn(1).isend(s10, out10, 7).ok());  // the same tag the other way is another message
    ASSERT_TRUE(lb.drive([&] { return r01.finished() && s01.finished(); }));
    // Posted after the data (eager) or the announcement (rendezvous) came; a rendezvous send waits for it.
    ASSERT_TRUE(lb.settle());
    EXPECT_EQ(s10.finished(), n <= 256) << "a rendezvous send completes only once its receive read it";
    ASSERT_TRUE(lb.conn(0).irecv(r10, in10, 7).ok());
    ASSERT_TRUE(lb.drive([&] { return r10.finished() && s10.finished(); }));
    for (Request* r : {&r01, &r10, &s01, &s10}) {
      EXPECT_TRUE(r->done()) << r->error.toString();
      EXPECT_EQ(r->bytes, n);
    }
    EXPECT_TRUE(in01 == out01);
    EXPECT_TRUE(in10 == out10);
    EXPECT_EQ(lb.rnr + lb.sqOverflows + lb.rqOverflows, 0);
    EXPECT_EQ(lb.conn(0).lateReceiveIsFree(n), n > 256);
    ASSERT_TRUE(lb.settle());  // the fins
    for (auto& sd : lb.side) EXPECT_EQ(sd.cache->stats().inUse, 0u) << "a registration was not released";
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, VerbsLoopbackSizes, ::testing::Values(0, 1, 255, 256, 257, 999, 1000, 1001, 100003),
                         [](const auto& info) { return "bytes" + std::to_string(info.param); });

TEST(VerbsLoopback, FloodBothWaysWithFewBuffersNeverOverrunsOrDeadlocks) {
  // Each side queues hundreds of messages to the other before any receive is posted: eager ones keep arriving
  // (and are kept), so buffers must be re-posted and credits returned with and without piggy-backing; then the
  // receives go in, in reverse tag order.
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(format("seed %u", seed));
    Loopback lb(smallOptions(), seed);
    ASSERT_TRUE(lb.ok());
    const int kMsgs = 300;
    std::vector<Bytes> out[2], in[2];
    std::vector<Request> sends[2], recvs[2];
    for (int s = 0; s < 2; ++s) {
      out[s].resize(kMsgs);
      in[s].resize(kMsgs);
      sends[s].resize(kMsgs);
      recvs[s].resize(kMsgs);
      for (int i = 0; i < kMsgs; ++i) {
        size_t len = i % 10 == 0 ? 3000 + static_cast<size_t>(i) : static_cast<size_t>(i % 300);
        out[s][i] = pattern(len, static_cast<uint32_t>(i * 2 + s));
        in[s][i].resize(len);
        ASSERT_TRUE(lb.conn(s).isend(sends[s][i], out[s][i], static_cast<uint64_t>(i)).ok());
      }
    }
    ASSERT_TRUE(lb.settle());
    for (int s = 0; s < 2; ++s)
      for (int i = kMsgs; i-- > 0;)
        ASSERT_TRUE(lb.conn(1 - s).irecv(recvs[s][i], in[s][i], static_cast<uint64_t>(i)).ok());
    auto allDone = [&] {
      for (int s = 0; s < 2; ++s)
        for (int i = 0; i < kMsgs; ++i)
          if (!sends[s][i].finished() || !recvs[s][i].finished()) return false;
      return true;
    };
    ASSERT_TRUE(lb.drive(allDone)) << "stuck: flow control deadlocked";
    EXPECT_TRUE(lb.settle()) << "credit messages beget credit messages";
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < kMsgs; ++i) {
        ASSERT_TRUE(recvs[s][i].done()) << recvs[s][i].error.toString();
        ASSERT_TRUE(sends[s][i].done()) << sends[s][i].error.toString();
        ASSERT_TRUE(in[s][i] == out[s][i]) << "message " << i << " from side " << s;
      }
    EXPECT_EQ(lb.rnr, 0) << "a SEND found no posted receive";
    EXPECT_EQ(lb.sqOverflows + lb.rqOverflows, 0);
  }
}

TEST(VerbsLoopback, BothSidesOutOfCreditsAtOnceStillRecover) {
  // The schedule the reserved credit is for: both sides spend every credit they may on data before either
  // processes a single arrival; each must still be able to return credits to the other.
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(format("seed %u", seed));
    Loopback lb(smallOptions(), seed);
    ASSERT_TRUE(lb.ok());
    lb.starveReceives = true;
    const int kMsgs = 40;
    std::vector<Bytes> out[2], in[2];
    std::vector<Request> sends[2], recvs[2];
    for (int s = 0; s < 2; ++s) {
      out[s].assign(kMsgs, Bytes(16));
      in[s].assign(kMsgs, Bytes(16));
      sends[s].resize(kMsgs);
      recvs[s].resize(kMsgs);
      for (int i = 0; i < kMsgs; ++i) {
        out[s][i] = pattern(16, static_cast<uint32_t>(i * 2 + s));
        ASSERT_TRUE(lb.conn(1 - s).irecv(recvs[s][i], in[s][i], static_cast<uint64_t>(i)).ok());
        ASSERT_TRUE(lb.conn(s).isend(sends[s][i], out[s][i], static_cast<uint64_t>(i)).ok());
      }
    }
    ASSERT_TRUE(lb.drive([&] {
      for (int s = 0; s < 2; ++s)
        for (int i = 0; i < kMsgs; ++i)
          if (!recvs[s][i].finished()) return false;
      return true;
    })) << "deadlock: neither side can return credits";
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < kMsgs; ++i) EXPECT_TRUE(in[s][i] == out[s][i]);
    EXPECT_EQ(lb.rnr, 0);
    EXPECT_TRUE(lb.settle());
  }
}

TEST(VerbsLoopback, OneWayTrafficGetsCreditsBackExplicitly) {
  // Only side 0 sends, so no reply carries credits back: explicit credit messages must.
  Loopback lb(smallOptions(), 3);
  ASSERT_TRUE(lb.ok());
  const int kMsgs = 200;
  std::vector<Bytes> out(kMsgs), in(kMsgs);
  std::vector<Request> sends(kMsgs), recvs(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    out[i] = pattern(static_cast<size_t>(i), static_cast<uint32_t>(i));
    in[i].resize(out[i].size());
    ASSERT_TRUE(lb.conn(1).irecv(recvs[i], in[i], static_cast<uint64_t>(i)).ok());
    ASSERT_TRUE(lb.conn(0).isend(sends[i], out[i], static_cast<uint64_t>(i)).ok());
  }
  ASSERT_TRUE(
      lb.drive([&] { return std::all_of(recvs.begin(), recvs.end(), [](const Request& r) { return r.finished(); }); }));
  for (int i = 0; i < kMsgs; ++i) {
    EXPECT_TRUE(recvs[i].done()) << recvs[i].error.toString();
    EXPECT_TRUE(in[i] == out[i]) << i;
  }
  EXPECT_EQ(lb.rnr, 0);
}

TEST(VerbsLoopback, SizeMismatchEitherProtocol) {
  for (auto [sent, expected] : {std::pair<size_t, size_t>{100, 200}, {5000, 9000}, {100, 5000}, {5000, 100}}) {
    SCOPED_TRACE(format("sent %zu, expected %zu", sent, expected));
    Loopback lb(smallOptions(), 5);
    ASSERT_TRUE(lb.ok());
    Bytes out = pattern(sent, 1), in(expected), out2 = pattern(sent, 2), in2(sent);
    Request s, r, s2, r2;
    ASSERT_TRUE(lb.conn(1).irecv(r, in, 11).ok());
    ASSERT_TRUE(lb.conn(0).isend(s, out, 11).ok());
    ASSERT_TRUE(lb.drive([&] { return r.finished() && s.finished(); }));
    ASSERT_TRUE(r.failed());
    EXPECT_EQ(r.error.code(), Code::kInvalidUsage);
    EXPECT_TRUE(
        contains(r.error.message(), format("rank 0 sent %zu bytes (tag 0xb) but rank 1 expected %zu", sent, expected)))
        << r.error.message();
    EXPECT_TRUE(s.done()) << "the sender did its part: " << s.error.toString();
    // The connection still works.
    ASSERT_TRUE(lb.conn(0).isend(s2, out2, 12).ok());
    ASSERT_TRUE(lb.conn(1).irecv(r2, in2, 12).ok());
    ASSERT_TRUE(lb.drive([&] { return r2.finished() && s2.finished(); }));
    EXPECT_TRUE(r2.done()) << r2.error.toString();
    EXPECT_TRUE(in2 == out2);
  }
  // The same when the receive comes after the data.
  Loopback lb(smallOptions(), 6);
  Bytes out = pattern(5000, 1), in(100);
  Request s, r;
  ASSERT_TRUE(lb.conn(0).isend(s, out, 3).ok());
  ASSERT_TRUE(lb.settle());
  ASSERT_TRUE(lb.conn(1).irecv(r, in, 3).ok());
  ASSERT_TRUE(lb.drive([&] { return r.finished() && s.finished(); }));
  EXPECT_TRUE(r.failed());
  EXPECT_TRUE(s.done());
}

TEST(VerbsLoopback, AbortReachesThePeersPendingRequests) {
  Loopback lb(smallOptions(), 7);
  ASSERT_TRUE(lb.ok());
  Bytes in(10), big(5000), bigIn(5000);
  Request r, s, r2;
  ASSERT_TRUE(lb.conn(1).irecv(r, in, 1).ok());
  ASSERT_TRUE(lb.conn(1).isend(s, big, 2).ok());  // rendezvous, never received
  ASSERT_TRUE(lb.settle());
  lb.conn(0).sendAbort("rank 0 ran out of patience");
  ASSERT_TRUE(lb.settle());
  lb.conn(0).close(invalidUsage("closing after the abort"));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kRemote);
  EXPECT_TRUE(contains(r.error.message(), "rank 0 aborted: rank 0 ran out of patience")) << r.error.message();
  ASSERT_TRUE(s.failed());
  EXPECT_TRUE(contains(s.error.message(), "rank 0 aborted")) << s.error.message();
  // Later requests fail at once with the same reason.
  ASSERT_TRUE(lb.conn(1).irecv(r2, bigIn, 3).ok());
  EXPECT_TRUE(r2.failed());
  EXPECT_TRUE(contains(r2.error.message(), "ran out of patience")) << r2.error.message();
  for (auto& sd : lb.side) EXPECT_EQ(sd.cache->stats().inUse, 0u);
}

TEST(VerbsLoopback, CloseFailsPendingAndThePeerSeesACompletionError) {
  Loopback lb(smallOptions(), 8);
  ASSERT_TRUE(lb.ok());
  Bytes big = pattern(5000, 1), small(10), in(10);
  Request s, r, late, peerSend;
  ASSERT_TRUE(lb.conn(0).isend(s, big, 1).ok());
  ASSERT_TRUE(lb.conn(0).irecv(r, in, 2).ok());
  ASSERT_TRUE(lb.settle());
  lb.conn(0).close(invalidUsage("closing for the test"));
  EXPECT_TRUE(s.failed());
  EXPECT_TRUE(r.failed());
  EXPECT_TRUE(contains(r.error.message(), "closing for the test"));
  ASSERT_TRUE(lb.conn(0).isend(late, small, 3).ok());
  EXPECT_TRUE(late.failed());
  // Rank 1's next message finds a queue pair in the error state: retry exceeded, named as such.
  ASSERT_TRUE(lb.conn(1).isend(peerSend, small, 4).ok());
  ASSERT_TRUE(lb.settle());
  Request after;
  ASSERT_TRUE(lb.conn(1).irecv(after, in, 5).ok());
  ASSERT_TRUE(after.failed());
  EXPECT_EQ(after.error.code(), Code::kRemote);
  const std::string m(after.error.message());
  EXPECT_TRUE(contains(m, "rank 1: verbs send to rank 0 failed on r1->r0/verbs(fake1:1 -> fake0:1")) << m;
  EXPECT_TRUE(contains(m, ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR))) << m;
  for (auto& sd : lb.side) EXPECT_EQ(sd.cache->stats().inUse, 0u);
}

TEST(VerbsLoopback, ASecondMessageWithAPendingTagIsAProtocolError) {
  Loopback lb(smallOptions(), 9);
  ASSERT_TRUE(lb.ok());
  Bytes a(10), b(10), in(10);
  Request s1, s2, r;
  ASSERT_TRUE(lb.conn(0).isend(s1, a, 5).ok());
  ASSERT_TRUE(lb.conn(0).isend(s2, b, 5).ok());
  ASSERT_TRUE(lb.settle());
  ASSERT_TRUE(lb.conn(1).irecv(r, in, 6).ok());
  ASSERT_TRUE(r.failed());
  EXPECT_TRUE(contains(r.error.message(), "rank 0 sent a second message with tag 0x5")) << r.error.message();
}

TEST(VerbsLoopback, AbortWithoutCreditsIsDroppedNotQueued) {
  // sendAbort never blocks and never waits: with no credit it does nothing, and close still fails everything.
  Loopback lb(smallOptions(), 10);
  ASSERT_TRUE(lb.ok());
  std::vector<Bytes> out(8, Bytes(10));
  std::vector<Request> sends(8);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(lb.conn(0).isend(sends[i], out[i], static_cast<uint64_t>(i)).ok());
  lb.conn(0).sendAbort("no room");  // the credits are spent on the queued sends, nothing has moved yet
  lb.conn(0).close(invalidUsage("closed"));
  for (auto& s : sends) EXPECT_TRUE(s.finished());
}

TEST(VerbsLoopback, ReadChunksStayWithinBothPortsMaxMessageSize) {
  // rxe's ports allow 8 MiB messages, mlx5's 1 GiB: a read chunk is one message for both ports. Here side 0's port
  // allows 5000 bytes and side 1's 3000; the connection options would allow a gigabyte.
  ConnectionOptions o = smallOptions();
  o.maxReadChunk = uint64_t{1} << 30;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(format("seed %u", seed));
    Loopback lb(o, seed, {5000, 3000});
    ASSERT_TRUE(lb.ok());
    EXPECT_EQ(lb.conn(0).readChunk(), 3000u) << "the peer's limit comes in its queue-pair information";
    EXPECT_EQ(lb.conn(1).readChunk(), 3000u);
    const size_t n = 100003;
    Bytes out01 = pattern(n, seed), out10 = pattern(n, seed + 7), in01(n), in10(n);
    Request s01, s10, r01, r10;
    ASSERT_TRUE(lb.conn(1).irecv(r01, in01, 1).ok());
    ASSERT_TRUE(lb.conn(0).irecv(r10, in10, 2).ok());
    ASSERT_TRUE(lb.conn(0).isend(s01, out01, 1).ok());
    ASSERT_TRUE(lb.conn(1).isend(s10, out10, 2).ok());
    ASSERT_TRUE(lb.drive([&] { return r01.finished() && r10.finished() && s01.finished() && s10.finished(); }));
    for (Request* r : {&r01, &r10, &s01, &s10}) EXPECT_TRUE(r->done()) << r->error.toString();
    EXPECT_TRUE(in01 == out01);
    EXPECT_TRUE(in10 == out10);
    EXPECT_EQ(lb.tooLong, 0) << "a read longer than a port's max_msg_sz";
    EXPECT_EQ(lb.maxReadLen, 3000u);
  }
  // Ports that say nothing (0): the default chunk, 8 MiB.
  EXPECT_EQ(ConnectionOptions{}.maxReadChunk, uint64_t{8} << 20);
  Loopback lb(ConnectionOptions{}, 1);
  ASSERT_TRUE(lb.ok());
  EXPECT_EQ(lb.conn(0).readChunk(), uint64_t{8} << 20);
}

TEST(VerbsLoopback, ReadOnlySendBufferAndReceiveAccess) {
  // A send from read-only memory (a PROT_READ mapping): its registration cannot ask for local write, but the peer's
  // read of it works. Receive buffers are registered for local write only, and the fake checks both ends' access.
  const size_t len = 2 * kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* ro = static_cast<std::byte*>(m);
  const Bytes want = pattern(len, 5);
  std::memcpy(ro, want.data(), len);
  ASSERT_EQ(mprotect(ro, len, PROT_READ), 0);
  {
    Loopback lb(smallOptions(), 3);
    ASSERT_TRUE(lb.ok());
    lb.side[0].readOnly.push_back({reinterpret_cast<uintptr_t>(ro), reinterpret_cast<uintptr_t>(ro) + len});
    const size_t n = len - 100;
    Bytes in(n);
    Request s, r;
    ASSERT_TRUE(lb.conn(1).irecv(r, in, 9).ok());
    ASSERT_TRUE(lb.conn(0).isend(s, std::span<const std::byte>(ro + 50, n), 9).ok());
    ASSERT_TRUE(lb.drive([&] { return r.finished() && s.finished(); }));
    ASSERT_TRUE(s.done()) << s.error.toString();
    ASSERT_TRUE(r.done()) << r.error.toString();
    EXPECT_TRUE(std::equal(in.begin(), in.end(), want.begin() + 50));
    EXPECT_EQ(lb.side[0].efaults, 1) << "the write-first attempt";
    ASSERT_EQ(lb.side[0].mrs.size(), 1u);
    EXPECT_EQ(lb.side[0].mrs.begin()->second.access, MrCache::kRemoteRead);
    ASSERT_EQ(lb.side[1].mrs.size(), 1u);
    EXPECT_EQ(lb.side[1].mrs.begin()->second.access, MrCache::kLocalWrite) << "a receive buffer needs no remote read";
    // Receiving into read-only memory fails the receive, with the reason, and tells the sender.
    Bytes out = pattern(n, 6);
    Request s2, r2;
    ASSERT_TRUE(lb.conn(1).isend(s2, out, 10).ok());
    ASSERT_TRUE(lb.conn(0).irecv(r2, std::span<std::byte>(ro + 50, n), 10).ok());
    ASSERT_TRUE(lb.drive([&] { return r2.finished() && s2.finished(); }));
    ASSERT_TRUE(r2.failed());
    EXPECT_TRUE(contains(r2.error.message(), "rank 0: receiving")) << r2.error.message();
    EXPECT_TRUE(contains(r2.error.message(), std::strerror(EFAULT))) << r2.error.message();
    ASSERT_TRUE(s2.failed());
    EXPECT_TRUE(contains(s2.error.message(), "rank 0 could not receive")) << s2.error.message();
    EXPECT_EQ(lb.rnr + lb.sqOverflows + lb.rqOverflows, 0);
  }
  ASSERT_EQ(munmap(ro, len), 0);
}

TEST(VerbsLoopback, CloseWaitsForReadsInFlightBeforeReleasingBuffers) {
  // Reads are under way (posted, not done) when the receiver closes. The error state does not stop a read already
  // moving data (modelled: it still lands, then completes flushed), so close() must wait for every work request to
  // come back before it fails the request and drops the registration: nothing may land after.
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(format("seed %u", seed));
    Bytes out = pattern(5000, seed), in(5000);
    Request s, r;  // before the connections, whose teardown fails what is still pending
    Loopback lb(smallOptions(), seed);
    ASSERT_TRUE(lb.ok());
    lb.freezeReads = true;
    ASSERT_TRUE(lb.conn(0).isend(s, out, 4).ok());
    ASSERT_TRUE(lb.conn(1).irecv(r, in, 4).ok());
    ASSERT_TRUE(lb.settle());
    ASSERT_FALSE(lb.side[1].sendq.empty()) << "reads should be in flight";
    lb.conn(1).close(invalidUsage("closing while reads are in flight"));
    EXPECT_TRUE(r.failed());
    EXPECT_TRUE(contains(r.error.message(), "closing while reads are in flight")) << r.error.message();
    EXPECT_TRUE(lb.side[1].sendq.empty()) << "close() returned with work requests still outstanding";
    EXPECT_EQ(lb.dmaIntoReleased, 0) << "a read landed in a buffer after its registration was dropped";
    EXPECT_EQ(lb.side[1].cache->stats().inUse, 0u);
    EXPECT_GT(lb.shared->pollForCalls, 0);
    EXPECT_FALSE(lb.shared->fenceTimedOut);
    // Nothing moves any more on that side.
    const Bytes after = in;
    lb.freezeReads = false;
    ASSERT_TRUE(lb.settle());
    EXPECT_TRUE(in == after);
  }
}

TEST(VerbsLoopback, FenceGivesUpOnAWedgedDevice) {
  // A device that completes nothing: close() still returns (after the bound) and fails everything; later fences of
  // the transport do not wait again.
  Loopback lb(smallOptions(), 2);
  ASSERT_TRUE(lb.ok());
  lb.freezeReads = true;
  Bytes out = pattern(5000, 1), in(5000);
  Request s, r;
  ASSERT_TRUE(lb.conn(0).isend(s, out, 4).ok());
  ASSERT_TRUE(lb.conn(1).irecv(r, in, 4).ok());
  ASSERT_TRUE(lb.settle());
  lb.shared->stalled = true;
  lb.conn(1).close(invalidUsage("closing a wedged device"));
  EXPECT_TRUE(r.failed());
  EXPECT_TRUE(lb.shared->fenceTimedOut);
  const int calls = lb.shared->pollForCalls;
  Request s2;
  Bytes big = pattern(5000, 2);
  ASSERT_TRUE(lb.conn(0).isend(s2, big, 5).ok());  // an rts in flight on side 0
  lb.conn(0).close(invalidUsage("closing too"));
  EXPECT_TRUE(s2.failed());
  EXPECT_EQ(lb.shared->pollForCalls, calls) << "the second fence waited again";
  lb.shared->stalled = false;
}

TEST(VerbsLoopback, ReadsInFlightStayWithinTheReadDepthAndLeaveRoomForSends) {
  // Many rendezvous messages to side 1, whose reads are slow (frozen): side 1 must keep its reads within the agreed
  // depth (more would stall its send queue) and within the room the bounce buffers leave, so its own messages (an
  // eager reply here; fins and credits in general) still go out while the reads wait.
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(format("seed %u", seed));
    // A send queue completes in order: a SEND behind a slow read keeps its bounce buffer until the read is done, so
    // a few more bounce buffers than smallOptions' three (two go to credit messages here).
    ConnectionOptions o = smallOptions();
    o.sendSlots = 6;
    o.sqDepth = 8;
    Loopback lb(o, seed);
    ASSERT_TRUE(lb.ok());
    EXPECT_EQ(lb.conn(1).readDepth(), 2u) << "min(rdAtomic 4, send queue 8 - 6 bounce buffers)";
    EXPECT_EQ(lb.side[1].rdAtomic, 4u);
    lb.freezeReads = true;
    const int kBig = 4;
    std::vector<Bytes> out(kBig), in(kBig);
    std::vector<Request> sends(kBig), recvs(kBig);
    for (int i = 0; i < kBig; ++i) {
      out[i] = pattern(5000 + static_cast<size_t>(i), static_cast<uint32_t>(i));
      in[i].resize(out[i].size());
      ASSERT_TRUE(lb.conn(1).irecv(recvs[i], in[i], static_cast<uint64_t>(i)).ok());
      ASSERT_TRUE(lb.conn(0).isend(sends[i], out[i], static_cast<uint64_t>(i)).ok());
    }
    ASSERT_TRUE(lb.settle());
    EXPECT_GT(lb.side[1].maxReads, 0);
    Bytes reply = pattern(100, 9), replyIn(100);
    Request rs, rr;
    ASSERT_TRUE(lb.conn(0).irecv(rr, replyIn, 100).ok());
    ASSERT_TRUE(lb.conn(1).isend(rs, reply, 100).ok());
    ASSERT_TRUE(lb.drive([&] { return rr.finished(); })) << "the reply is stuck behind the reads";
    EXPECT_TRUE(rr.done()) << rr.error.toString();
    EXPECT_TRUE(replyIn == reply);
    lb.freezeReads = false;
    ASSERT_TRUE(lb.drive([&] {
      return std::all_of(recvs.begin(), recvs.end(), [](const Request& r) { return r.finished(); }) &&
             std::all_of(sends.begin(), sends.end(), [](const Request& r) { return r.finished(); });
    }));
    for (int i = 0; i < kBig; ++i) {
      EXPECT_TRUE(recvs[i].done()) << recvs[i].error.toString();
      EXPECT_TRUE(sends[i].done()) << sends[i].error.toString();
      EXPECT_TRUE(in[i] == out[i]);
    }
    EXPECT_LE(lb.side[1].maxReads, 2);
    EXPECT_EQ(lb.readDepthExceeded, 0);
    EXPECT_EQ(lb.rnr + lb.sqOverflows + lb.rqOverflows, 0);
  }
}

TEST(VerbsLoopback, OneAbortLingerDeadlinePerTransport) {
  // A rank giving up aborts every connection, then closes them one after another: the aborts share one linger
  // deadline, set by the first, so the engine lingers once, not once per connection.
  Loopback lb(smallOptions(), 12);
  ASSERT_TRUE(lb.ok());
  EXPECT_FALSE(lb.shared->abortLingerUntil);
  lb.shared->stalled = true;  // the aborts never leave
  lb.conn(0).sendAbort("first");
  ASSERT_TRUE(lb.shared->abortLingerUntil);
  const auto deadline = *lb.shared->abortLingerUntil;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  lb.conn(1).sendAbort("second");
  EXPECT_EQ(*lb.shared->abortLingerUntil, deadline) << "a later abort moved the deadline";
  lb.conn(0).close(invalidUsage("closing 0"));
  EXPECT_GE(std::chrono::steady_clock::now(), deadline);
  const int calls = lb.shared->pollForCalls;
  lb.conn(1).close(invalidUsage("closing 1"));  // its abort is still in flight, but the deadline has passed
  EXPECT_EQ(lb.shared->pollForCalls, calls) << "the second close lingered";
  lb.shared->stalled = false;
}

TEST(VerbsLoopback, AbortStillLeavesWhenClosedAtOnce) {
  Loopback lb(smallOptions(), 13);
  ASSERT_TRUE(lb.ok());
  Bytes in(10);
  Request r;
  ASSERT_TRUE(lb.conn(1).irecv(r, in, 1).ok());
  lb.conn(0).sendAbort("bye");
  lb.conn(0).close(invalidUsage("closing"));  // the linger lets the abort out first
  ASSERT_TRUE(lb.drive([&] { return r.finished(); }));
  EXPECT_TRUE(contains(r.error.message(), "rank 0 aborted: bye")) << r.error.message();
}

TEST(VerbsLoopback, AsyncEventsFailTheConnectionsTheyConcern) {
  struct Case {
    ibv_event_type type;
    int port = 1;
    uint32_t qpn = 0;
    bool failsSide0;
    std::string want;
  };
  ibv_qp fakeQp{};
  const std::vector<Case> cases = {
      {IBV_EVENT_PORT_ERR, 2, 0, false, ""},  // another port of the device
      {IBV_EVENT_PORT_ACTIVE, 1, 0, false, ""},
      {IBV_EVENT_QP_FATAL, 1, 0x999, false, ""},  // another queue pair
      {IBV_EVENT_PORT_ERR, 1, 0, true, format("port fake0:1 went down (%s)", ibv_event_type_str(IBV_EVENT_PORT_ERR))},
      {IBV_EVENT_DEVICE_FATAL, 1, 0, true,
       format("device fake0 reported a fatal error (%s)", ibv_event_type_str(IBV_EVENT_DEVICE_FATAL))},
      {IBV_EVENT_QP_FATAL, 1, 0x100, true,
       format("queue pair 0x100 on fake0 reported %s", ibv_event_type_str(IBV_EVENT_QP_FATAL))},
      {IBV_EVENT_QP_ACCESS_ERR, 1, 0x100, true, "queue pair 0x100 on fake0"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(ibv_event_type_str(c.type));
    Bytes in0(10), in1(10);
    Request r0, r1;  // before the connections, whose teardown fails what is still pending
    Loopback lb(smallOptions(), 14);
    ASSERT_TRUE(lb.ok());
    auto owned = std::make_unique<Device>();
    owned->name = "fake0";  // side 0's device; side 1 is on fake1
    Device& dev = *owned;
    lb.shared->devices.push_back(std::move(owned));
    ASSERT_TRUE(lb.conn(0).irecv(r0, in0, 1).ok());
    ASSERT_TRUE(lb.conn(1).irecv(r1, in1, 1).ok());
    ibv_async_event ev{};
    ev.event_type = c.type;
    if (c.qpn) {
      fakeQp.qp_num = c.qpn;
      ev.element.qp = &fakeQp;
    } else {
      ev.element.port_num = c.port;
    }
    lb.shared->onAsyncEvent(dev, ev);
    EXPECT_FALSE(r1.finished()) << "a connection on another device failed";
    if (!c.failsSide0) {
      EXPECT_FALSE(r0.finished()) << r0.error.toString();
      continue;
    }
    ASSERT_TRUE(r0.failed());
    const std::string m(r0.error.message());
    EXPECT_TRUE(contains(m, "rank 0: verbs connection to rank 1 failed on r0->r1/verbs(fake0:1 -> fake1:1")) << m;
    EXPECT_TRUE(contains(m, c.want)) << m;
    EXPECT_EQ(dev.fatal, c.type == IBV_EVENT_DEVICE_FATAL);
    // The peer learns it the usual way: its next message finds no queue pair.
    Request s1;
    Bytes small(4);
    ASSERT_TRUE(lb.conn(1).isend(s1, small, 2).ok());
    ASSERT_TRUE(lb.drive([&] { return r1.finished(); }));
    EXPECT_EQ(r1.error.code(), Code::kRemote);
  }
}

// ---- this machine ----

TEST(VerbsDiscover, ReportsWhyNothingIsUsable) {
  Availability av = discover("");
  if (!av.ports.empty()) {
    for (const auto& p : av.ports) {
      EXPECT_FALSE(p.device.empty());
      EXPECT_GE(p.port, 1);
      EXPECT_TRUE(p.mtu >= 256 && p.mtu <= 4096) << p.mtu;
    }
    EXPECT_TRUE(av.reason.empty());
    GTEST_SKIP() << "this machine has RDMA ports: " << describePort(av.ports[0]);
  }
  EXPECT_FALSE(av.reason.empty());
  // Without any device (no /sys/class/infiniband): exactly this; with devices but no active port: another reason.
  if (access("/sys/class/infiniband", F_OK) != 0) {
    EXPECT_EQ(av.reason, "no RDMA device (ibv_get_device_list found none)");
  }
}

TEST(VerbsDiscover, SpecThatMatchesNothing) {
  Availability av = discover("=no_such_hca_9");
  EXPECT_TRUE(av.ports.empty());
  EXPECT_FALSE(av.reason.empty());
  if (access("/sys/class/infiniband", F_OK) == 0) {
    EXPECT_TRUE(contains(av.reason, "HETCOMM_IB_HCA==no_such_hca_9 matches none of")) << av.reason;
  }
}

transport::Config configFor(int rank, int n) {
  transport::Config cfg;
  cfg.rank = rank;
  cfg.nranks = n;
  for (size_t i = 0; i < cfg.secret.size(); ++i) cfg.secret[i] = static_cast<uint8_t>(i * 7 + 1);
  cfg.commId = 0xBEEF;
  cfg.timeoutSec = 20;
  cfg.hostId = "unit-test-host";
  return cfg;
}

TEST(VerbsCreate, FailsCleanlyWithoutAPort) {
  Availability av = discover(param::readString("IB_HCA", ""));
  if (!av.ports.empty()) GTEST_SKIP() << "this machine has RDMA ports";
  auto t = VerbsTransport::create(configFor(0, 2));
  ASSERT_FALSE(t);
  EXPECT_TRUE(t.error().code() == Code::kSystem || t.error().code() == Code::kInvalidUsage) << t.error().toString();
  EXPECT_TRUE(contains(t.error().message(), "verbs: ")) << t.error().message();
  EXPECT_TRUE(contains(t.error().message(), av.reason)) << t.error().message();
}

TEST(VerbsCreate, TakesAnAvailabilityDiscoveredBefore) {
  // The communicator discovers once and hands the result over: no second device scan; no ports, no transport.
  Availability none;
  none.reason = "HETCOMM_IB_HCA=xyz matches none of mlx5_0";
  none.code = Code::kInvalidUsage;
  auto t = VerbsTransport::create(configFor(0, 2), none);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), Code::kInvalidUsage);
  EXPECT_EQ(t.error().message(), "verbs: HETCOMM_IB_HCA=xyz matches none of mlx5_0");
  t = VerbsTransport::create(configFor(0, 2), Availability{});
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), Code::kSystem);
  Availability av = discover("");
  if (av.ports.empty()) {
    EXPECT_EQ(av.code, Code::kSystem);
    t = VerbsTransport::create(configFor(0, 2), av);
    ASSERT_FALSE(t);
    EXPECT_TRUE(contains(t.error().message(), av.reason)) << t.error().message();
  } else {
    EXPECT_EQ(av.code, Code::kOk);
  }
}

// ---- two transports of one process over a real device (skipped without one) ----

// Drives without an iteration bound, 30 s by default.
struct Pair : testing::TransportGroup {
  bool drive(const std::function<bool()>& done, double wallSec = 30) {
    return TransportGroup::drive(done, wallSec, std::numeric_limits<long>::max());
  }
};

// Connects two ranks over this machine's first port, or skips.
void makePair(Pair& g) {
  Availability av = discover(param::readString("IB_HCA", ""));
  if (av.ports.empty()) GTEST_SKIP() << "no usable RDMA port: " << av.reason;
  ASSERT_NO_FATAL_FAILURE(
      testing::makeGroup(g, 2, [](int r) { return testing::asTransport(VerbsTransport::create(configFor(r, 2))); }));
  EXPECT_EQ(g.t[0]->properties().kind, Kind::kVerbs);
  EXPECT_TRUE(contains(g.conn(0, 1).describe(), "r0->r1/verbs(")) << g.conn(0, 1).describe();
}

class VerbsData : public ::testing::TestWithParam<size_t> {};

TEST_P(VerbsData, BothDirectionsReceivesBeforeAndAfter) {
  const size_t n = GetParam();
  Pair g;
  ASSERT_NO_FATAL_FAILURE(makePair(g));
  if (g.t.empty()) return;  // skipped
  Bytes out01 = pattern(n, 1), out10 = pattern(n, 2), in01(n), in10(n);
  Request r01, r10, s01, s10;
  ASSERT_TRUE(g.conn(1, 0).irecv(r01, in01, 7).ok());  // posted first
  ASSERT_TRUE(g.conn(0, 1).isend(s01, out01, 7).ok());
  ASSERT_TRUE(g.conn(1, 0).isend(s10, out10, 8).ok());
  ASSERT_TRUE(g.drive([&] { return r01.finished() && s01.finished(); }));
  ASSERT_TRUE(g.conn(0, 1).irecv(r10, in10, 8).ok());  // posted after the data (or announcement) came
  ASSERT_TRUE(g.drive([&] { return r10.finished() && s10.finished(); }));
  for (Request* r : {&r01, &r10, &s01, &s10}) {
    EXPECT_TRUE(r->done()) << r->error.toString();
    EXPECT_EQ(r->bytes, n);
  }
  EXPECT_TRUE(in01 == out01);
  EXPECT_TRUE(in10 == out10);
  EXPECT_EQ(g.conn(0, 1).lateReceiveIsFree(n), n > 8192);
}

INSTANTIATE_TEST_SUITE_P(Sizes, VerbsData, ::testing::Values(0, 1, 8192, 8193, (1u << 20) + 3, 64u << 20),
                         [](const auto& info) { return "bytes" + std::to_string(info.param); });

TEST(VerbsDataMany, ManyTagsOutOfOrderOutrunTheCredits) {
  Pair g;
  ASSERT_NO_FATAL_FAILURE(makePair(g));
  if (g.t.empty()) return;
  const int kMsgs = 500;  // far more than the receive buffers: the credits must throttle, not overrun
  std::vector<Bytes> out(kMsgs), in(kMsgs);
  std::vector<Request> sends(kMsgs), recvs(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    out[i] = pattern(static_cast<size_t>(i % 3 == 0 ? 100000 + i : i * 7), static_cast<uint32_t>(i));
    in[i].resize(out[i].size());
    ASSERT_TRUE(g.conn(0, 1).isend(sends[i], out[i], static_cast<uint64_t>(i)).ok());
  }
  for (int i = kMsgs; i-- > 0;) ASSERT_TRUE(g.conn(1, 0).irecv(recvs[i], in[i], static_cast<uint64_t>(i)).ok());
  ASSERT_TRUE(g.drive([&] {
    return std::all_of(recvs.begin(), recvs.end(), [](const Request& r) { return r.finished(); }) &&
           std::all_of(sends.begin(), sends.end(), [](const Request& r) { return r.finished(); });
  }));
  for (int i = 0; i < kMsgs; ++i) {
    EXPECT_TRUE(recvs[i].done()) << i << ": " << recvs[i].error.toString();
    EXPECT_TRUE(in[i] == out[i]) << i;
  }
}

TEST(VerbsDataErrors, SizeMismatchBothProtocols) {
  Pair g;
  ASSERT_NO_FATAL_FAILURE(makePair(g));
  if (g.t.empty()) return;
  for (auto [sent, expected] :
       {std::pair<size_t, size_t>{100, 200}, {1 << 20, 2 << 20}, {100, 1 << 20}, {1 << 20, 100}}) {
    SCOPED_TRACE(format("sent %zu, expected %zu", sent, expected));
    Bytes out = pattern(sent, 3), in(expected);
    Request s, r;
    const uint64_t tag = sent * 3 + expected;
    ASSERT_TRUE(g.conn(1, 0).irecv(r, in, tag).ok());
    ASSERT_TRUE(g.conn(0, 1).isend(s, out, tag).ok());
    ASSERT_TRUE(g.drive([&] { return r.finished() && s.finished(); }));
    ASSERT_TRUE(r.failed());
    EXPECT_EQ(r.error.code(), Code::kInvalidUsage);
    EXPECT_TRUE(contains(r.error.message(), format("rank 0 sent %zu bytes", sent))) << r.error.message();
    EXPECT_TRUE(s.done()) << s.error.toString();
  }
}

TEST(VerbsDataErrors, AbortReachesThePeer) {
  Pair g;
  ASSERT_NO_FATAL_FAILURE(makePair(g));
  if (g.t.empty()) return;
  Bytes in(1 << 20);
  Request r;
  ASSERT_TRUE(g.conn(1, 0).irecv(r, in, 1).ok());
  g.conn(0, 1).sendAbort("rank 0 ran out of patience");
  g.conn(0, 1).close(invalidUsage("test closes"));
  ASSERT_TRUE(g.drive([&] { return r.finished(); }));
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.error.code(), Code::kRemote);
  EXPECT_TRUE(contains(r.error.message(), "rank 0 aborted: rank 0 ran out of patience")) << r.error.message();
}

TEST(VerbsDataErrors, CloseFailsPendingRequests) {
  Pair g;
  ASSERT_NO_FATAL_FAILURE(makePair(g));
  if (g.t.empty()) return;
  Bytes big = pattern(4 << 20, 9), in(16);
  Request s, r;
  ASSERT_TRUE(g.conn(0, 1).isend(s, big, 1).ok());  // rendezvous: waits for rank 1's read
  ASSERT_TRUE(g.conn(0, 1).irecv(r, in, 2).ok());
  g.conn(0, 1).close(invalidUsage("closing for the test"));
  EXPECT_TRUE(s.failed());
  EXPECT_TRUE(r.failed());
  EXPECT_TRUE(contains(r.error.message(), "closing for the test"));
  Request late;
  ASSERT_TRUE(g.conn(0, 1).isend(late, big, 3).ok());
  EXPECT_TRUE(late.failed());
}

}  // namespace
}  // namespace hetcomm::transport::verbs
