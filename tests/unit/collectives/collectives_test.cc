// Every planner, run by the real executor over the in-memory transport, against a serial reference, for 1..8
// ranks, odd counts, every datatype x op, in place and out of place. Inputs are small integers so results are
// exact in any reduction order (nccl-tests' trick), so comparisons are bit-exact.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/algorithm_list.h"
#include "collectives/hierarchy.h"
#include "kernels/reduce.h"
#include "tests/support/sim_transport.h"
#include "tests/unit/collectives/case_runner.h"

namespace hetcomm::coll {
namespace {

using namespace test;  // NOLINT: the case runner is this file's vocabulary

constexpr int kRankCounts[] = {1, 2, 3, 4, 5, 8};
constexpr size_t kCounts[] = {0, 1, 7, 1023, 70001};

TEST(Collectives, EveryKindRankCountAndSizeFloatSum) {
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
                        CollKind::kReduce, CollKind::kAlltoAll})
    for (int n : kRankCounts)
      for (size_t count : kCounts)
        for (bool inPlace : {false, true}) {
          int root = n > 2 ? n - 2 : 0;
          runCase({kind, n, count, DataType::kFloat32, RedOp::kSum, root, inPlace}, /*chunkBytes=*/4096);
        }
}

TEST(Collectives, EveryDatatypeAndOp) {
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kReduce})
    for (DataType t : kAllTypes)
      for (RedOp op : kAllOps)
        for (int n : {3, 5})
          for (size_t count : {size_t{7}, size_t{1023}}) runCase({kind, n, count, t, op, 1, false}, 256);
  for (CollKind kind : {CollKind::kAllGather, CollKind::kBroadcast, CollKind::kAlltoAll})
    for (DataType t : kAllTypes) runCase({kind, 4, 33, t, RedOp::kSum, 3, true}, 64);
}

TEST(Collectives, ChunkingManyPiecesWithRemainders) {
  // 8 ranks, a count that leaves remainders everywhere, chunks of a few elements: hundreds of steps per rank.
  runCase({CollKind::kAllReduce, 8, 10007, DataType::kInt32, RedOp::kSum, 0, false}, 100);
  runCase({CollKind::kAllReduce, 7, 10007, DataType::kFloat16, RedOp::kMax, 0, true}, 100);
  runCase({CollKind::kReduceScatter, 6, 999, DataType::kFloat64, RedOp::kAvg, 0, true}, 160);
  runCase({CollKind::kReduce, 5, 4099, DataType::kBfloat16, RedOp::kSum, 4, false}, 64);
}

TEST(Collectives, FewStagingSlotsWhenLateReceivesAreFree) {
  // The ring's staging shrinks to a few reused slots on rendezvous links: many chunks, every rank count.
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter})
    for (int n : kRankCounts)
      for (bool inPlace : {false, true}) {
        runCase({kind, n, 10007, DataType::kFloat32, RedOp::kSum, 0, inPlace}, 256, /*lateReceiveFree=*/true);
        runCase({kind, n, 999, DataType::kInt64, RedOp::kAvg, 0, inPlace}, 64, /*lateReceiveFree=*/true);
      }
}

TEST(Collectives, SendRecvGroupWithSelf) {
  // Each rank sends to r+1 and r+2 and to itself; receives accordingly.
  const int n = 4;
  const size_t bytes = 1000;
  std::vector<Args> args(n);
  std::vector<std::vector<Buffer>> data(n);
  std::vector<std::vector<std::byte*>> bufs(n);
  for (int r = 0; r < n; ++r) {
    args[r].kind = CollKind::kSendRecv;
    auto add = [&](bool isSend, int peer, std::byte fill) {
      args[r].p2p.push_back({isSend, peer, bytes, 0});
      data[r].push_back(Buffer(bytes, fill));
    };
    add(true, (r + 1) % n, std::byte(r));
    add(true, (r + 2) % n, std::byte(16 + r));
    add(true, r, std::byte(32 + r));
    add(false, (r + n - 1) % n, std::byte{0});
    add(false, (r + n - 2) % n, std::byte{0});
    add(false, r, std::byte{0});
    bufs[r] = {nullptr, nullptr};
    for (auto& d : data[r]) bufs[r].push_back(d.data());
  }
  // Seq numbers per (peer, direction) are what the communicator assigns: all 0 here (first message each way),
  // except r+1 and r+2 coincide for n = 2 (not the case).
  Status st = testing::runSimulated(n, args, bufs, 4096);
  ASSERT_TRUE(st.ok()) << st.toString();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(data[r][3][bytes - 1], std::byte((r + n - 1) % n));
    EXPECT_EQ(data[r][4][0], std::byte(16 + (r + n - 2) % n));
    EXPECT_EQ(data[r][5][7], std::byte(32 + r));
  }
}

TEST(Collectives, SizeMismatchIsAnErrorNotAHang) {
  std::vector<Args> args(2);
  for (auto& a : args) {
    a.kind = CollKind::kAllReduce;
    a.dtype = DataType::kFloat32;
  }
  args[0].count = 100;
  args[1].count = 200;
  Buffer s0(800), r0(800), s1(800), r1(800);
  Status st = testing::runSimulated(2, args, {{s0.data(), r0.data()}, {s1.data(), r1.data()}}, 4096);
  EXPECT_FALSE(st.ok());
}

TEST(Collectives, SelectionHonoursForcedAlgorithmAndRejectsUnknown) {
  Args a;
  a.kind = CollKind::kAllReduce;
  a.count = 1 << 20;
  GroupView g;
  g.nranks = 4;
  auto ring = selectAlgorithm(a, g, "ring");
  ASSERT_TRUE(ring);
  EXPECT_EQ(ring->algo->name(), "ring");
  auto bad = selectAlgorithm(a, g, "no-such-algorithm");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
  EXPECT_NE(std::string(bad.error().message()).find("no-such-algorithm"), std::string::npos);
  EXPECT_NE(std::string(bad.error().message()).find("auto, ring, hier, rd"), std::string::npos) << bad.error().message();
  // "auto", the documented default, is the automatic choice.
  auto automatic = selectAlgorithm(a, g, "auto");
  ASSERT_TRUE(automatic);
  EXPECT_EQ(automatic->algo, selectAlgorithm(a, g, "")->algo);
}

TEST(Collectives, EvenBlocksAndChunking) {
  Blocks b = evenBlocks(10, 4);
  EXPECT_EQ(b.count, (std::vector<size_t>{3, 3, 2, 2}));
  EXPECT_EQ(b.offset, (std::vector<size_t>{0, 3, 6, 8}));
  Chunking ch = chunkingFor(1000, 4, 1024);  // 256 elements per chunk at most
  EXPECT_EQ(ch.nchunks, 4u);
  EXPECT_EQ(ch.per, 250u);
  EXPECT_EQ(ch.end(3, 1000), 1000u);
  EXPECT_EQ(ch.begin(3, 600), 600u);  // a shorter block has empty trailing chunks
}

// A cluster shape: `hosts` hosts of `perHost` ranks, hosts split evenly into `islands` islands (rank r on host
// r / perHost, host h in island h * islands / hosts). Links: 10 GB/s within a host, 1 within an island, 0.1 across.
testing::SimTopology shape(int hosts, int perHost, int islands) {
  testing::SimTopology t;
  const int n = hosts * perHost;
  for (int r = 0; r < n; ++r) {
    t.host.push_back(r / perHost);
    t.island.push_back(r / perHost * islands / hosts);
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      t.bw.push_back(t.host[i] == t.host[j] ? 10.0 : t.island[i] == t.island[j] ? 1.0 : 0.1);
  return t;
}

// Topology t as rank `rank` sees it: hosts, islands and link rates, alphaUs on every link.
GroupView viewOf(const testing::SimTopology& t, int rank = 0, double alphaUs = 0) {
  GroupView g;
  g.rank = rank;
  g.nranks = static_cast<int>(t.host.size());
  g.host = t.host;
  g.island = t.island;
  g.bw = t.bw;
  g.alpha.assign(t.bw.size(), alphaUs);
  return g;
}

// A prepared group keeps the choice per (collective, size class): the same algorithm for sizes within a class,
// whatever came first, so every rank chooses alike; the prediction is still for the size asked.
TEST(Collectives, SelectionIsKeptPerSizeClass) {
  GroupView g = viewOf(shape(4, 2, 2), 0, 10.0);
  g.prepare();
  Args a;
  a.kind = CollKind::kAllReduce;
  GroupView fresh = viewOf(shape(4, 2, 2), 0, 10.0);
  for (size_t count : {size_t{1}, size_t{100}, size_t{1} << 12, size_t{1} << 16, size_t{1} << 20, size_t{1} << 24}) {
    a.count = count;
    auto kept = selectAlgorithm(a, g, "");
    auto again = selectAlgorithm(a, g, "");
    ASSERT_TRUE(kept && again);
    EXPECT_EQ(kept->algo, again->algo);
    EXPECT_EQ(kept->algo, selectAlgorithm(a, fresh, "")->algo) << count;
    EXPECT_DOUBLE_EQ(kept->predictedUs, kept->algo->estimateUs(a, g));
  }
}

// Host slots serve small allreduces where the group has the region, and only the sizes that fit its slots. The
// choice for a size must not depend on which sizes came first, also where the slots' limit cuts a size class.
TEST(Collectives, SlotsServeSmallAllReducesThatFitWhateverCameFirst) {
  auto view = [](size_t slotBytes) {
    GroupView g = viewOf(shape(1, 4, 1), 0, 1.0);
    g.hostSlotBytes = slotBytes;
    g.prepare();
    return g;
  };
  Args a;
  a.kind = CollKind::kAllReduce;
  a.dtype = DataType::kFloat32;
  a.count = 2;
  EXPECT_EQ(selectAlgorithm(a, view(16384), "")->algo->name(), "slots");
  EXPECT_NE(selectAlgorithm(a, view(0), "")->algo->name(), "slots");
  a.count = 1 << 20;
  EXPECT_NE(selectAlgorithm(a, view(16384), "")->algo->name(), "slots");
  // 1010 bytes cuts the size class [982, 1024) after its middle (1003), 995 bytes before it: 992 bytes fit either
  // way, 1020 do not.
  for (auto [limit, smallFirst] : {std::pair{1010, true}, {1010, false}, {995, true}, {995, false}}) {
    SCOPED_TRACE(format("slots up to %d bytes, %s first", limit, smallFirst ? "992" : "1020"));
    GroupView g = view(limit);
    std::string small, large;
    for (int k = 0; k < 2; ++k) {
      a.count = (k == 0) == smallFirst ? 248 : 255;
      auto sel = selectAlgorithm(a, g, "");
      ASSERT_TRUE(sel);
      (a.count == 248 ? small : large) = std::string(sel->algo->name());
    }
    EXPECT_EQ(small, "slots");
    EXPECT_NE(large, "slots");
  }
}

constexpr CollKind kHierKinds[] = {CollKind::kAllReduce, CollKind::kAllGather, CollKind::kReduceScatter,
                                   CollKind::kBroadcast, CollKind::kReduce};

// The selection must not fall back to another algorithm: a forced name that does not apply is ignored.
void expectHierPlans(CollKind kind, const testing::SimTopology& t, int root = 0) {
  GroupView g;
  g.nranks = static_cast<int>(t.host.size());
  g.host = t.host;
  g.island = t.island;
  Args a;
  a.kind = kind;
  a.count = 1000;
  a.root = root;
  auto sel = selectAlgorithm(a, g, "hier");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->algo->name(), "hier") << name(kind);
}

TEST(Collectives, HierarchicalCollectivesOnEveryUniformShape) {
  struct Shape {
    int hosts, perHost, islands;
  };
  // Three levels, host + island, host + cross, island + cross, and three islands.
  for (CollKind kind : kHierKinds)
    for (Shape sh : {Shape{4, 2, 2}, Shape{2, 2, 1}, Shape{3, 3, 3}, Shape{4, 1, 2}, Shape{6, 2, 3}}) {
      const testing::SimTopology topo = shape(sh.hosts, sh.perHost, sh.islands);
      const int n = sh.hosts * sh.perHost;
      // Rooted kinds: the first rank, and one that is neither first on its host nor in the first island.
      const bool rooted = kind == CollKind::kBroadcast || kind == CollKind::kReduce;
      for (int root : rooted ? std::vector<int>{0, n - 1} : std::vector<int>{0}) {
        expectHierPlans(kind, topo, root);
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{70001}})
          for (bool inPlace : {false, true})
            runCase({kind, n, count, DataType::kFloat32, RedOp::kSum, root, inPlace}, 4096, false, "hier", topo);
      }
    }
}

// Paced plans make later pieces wait on earlier ones across levels, so no staging slot may wait on a later piece:
// with few slots reused in receive order (late receives free), a ring of 3 or more would close a cycle across
// ranks once a level has 8 pieces or more.
TEST(Collectives, PacedHierarchicalPlansWithFewStagingSlotsDoNotDeadlock) {
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter})
    for (const testing::SimTopology& t : {shape(3, 2, 1), shape(6, 2, 3), shape(3, 3, 3)}) {
      const int n = static_cast<int>(t.host.size());
      runCase({kind, n, 40000, DataType::kFloat32, RedOp::kSum, 0, false}, 1024, /*lateReceiveFree=*/true, "hier", t);
    }
}

TEST(Collectives, HierarchicalCollectivesEveryDatatypeAndOp) {
  for (CollKind kind : kHierKinds)
    for (DataType t : kAllTypes)
      for (RedOp op : kAllOps)
        for (bool late : {false, true})
          runCase({kind, 8, 5003, t, op, 5, false}, 1024, late, "hier", shape(4, 2, 2));
}

TEST(Collectives, HierarchicalNeedsAUniformShapeAndWinsAcrossSlowLinks) {
  Args a;
  a.kind = CollKind::kAllReduce;
  a.count = 16 << 20;
  testing::SimTopology t = shape(4, 2, 2);
  GroupView g = viewOf(t, 0, 10.0);
  auto best = selectAlgorithm(a, g, "");
  ASSERT_TRUE(best);
  EXPECT_EQ(best->algo->name(), "hier");
  auto ring = selectAlgorithm(a, g, "ring");
  ASSERT_TRUE(ring);
  // Ring: every hop carries 2(n-1)/n of the buffer, and two hops cross the 0.1 GB/s links. Hier: only 1/4 of the
  // buffer reaches the cross-island level, where each host's 2 ranks share the link.
  EXPECT_GT(ring->predictedUs / best->predictedUs, 2.5);
  // Uneven hosts (3 ranks on host 0, 1 on host 1): hier cannot plan it, and says so when forced.
  g.host = {0, 0, 0, 1, 2, 2, 3, 3};
  EXPECT_FALSE(selectAlgorithm(a, g, "")->algo->name() == "hier");
  EXPECT_EQ(selectAlgorithm(a, g, "hier")->algo->name(), "ring");
}

// Rooted hierarchical plans carry each host's share across the islands in parts, one per rank of the host: every
// rank sends (broadcast: away from the root's island; reduce: towards it) 1/(hosts per island x ranks per host)
// of the buffer over the slow fabric, so a host's NIC carries one stream per rank and the same bytes as one lead.
TEST(Collectives, RootedHierarchicalPlansCrossTheIslandsFromEveryRank) {
  const testing::SimTopology t = shape(4, 2, 2);  // ranks 0-3 in island 0, 4-7 in island 1
  for (CollKind kind : {CollKind::kBroadcast, CollKind::kReduce})
    for (int rank = 0; rank < 8; ++rank) {
      GroupView g = viewOf(t, rank);
      g.chunkBytes = 4096;
      Args a;
      a.kind = kind;
      a.count = 16 << 10;  // 64 KiB of float32
      a.root = 1;          // not a host's first rank
      auto sel = selectAlgorithm(a, g, "hier");
      ASSERT_TRUE(sel);
      auto plan = sel->algo->plan(a, g);
      ASSERT_TRUE(plan) << plan.status().message();
      size_t crossBytes = 0;
      for (const Step& st : plan->steps)
        if (st.op == Step::Op::kSend && t.island[st.peer] != t.island[rank]) crossBytes += st.src.bytes;
      // Broadcast sends from the root's island, reduce from the other one; each rank a quarter of 64 KiB (half a
      // share), so each host half the buffer, as one lead carried it before.
      const bool sends = (t.island[rank] == t.island[a.root]) == (kind == CollKind::kBroadcast);
      EXPECT_EQ(crossBytes, sends ? size_t{16 << 10} : 0) << name(kind) << " rank " << rank;
    }
}

// Sends of `plan` to peers that `to` accepts which wait on nothing (directly or not) received from peers that
// `from` accepts: what may go out before anything comes back over those links. Dependencies may point forward,
// so the sweep repeats until nothing changes.
template <class To, class From>
size_t sendsAhead(const Schedule& plan, To to, From from) {
  const std::vector<Step>& steps = plan.steps;
  std::vector<bool> waits(steps.size());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      bool w = steps[i].op == Step::Op::kRecv && from(steps[i].peer);
      for (int d = 0; d < steps[i].ndeps; ++d) w = w || waits[steps[i].deps[d]];
      if (w && !waits[i]) waits[i] = changed = true;
    }
  }
  size_t ahead = 0;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].op == Step::Op::kSend && to(steps[i].peer) && !waits[i]) ++ahead;
  return ahead;
}

// The lowest level runs at most kPaceWindow pieces ahead of the top one: of the first sends within the host, only
// that many (per chunk of a piece) may go out before anything has come back across the islands. Unpaced, all of
// them would, and the host and island levels would burst through the whole buffer while the slow top level waits.
// The reduce-scatter's first pieces are a ramp (rampedPieces), counted extra so that the window holds as many
// bytes.
TEST(Collectives, HierarchicalLowerLevelsArePacedByTheTopLevel) {
  const testing::SimTopology t = shape(4, 2, 2);
  struct Expect {
    CollKind kind;
    size_t count;
    size_t unpacedSends;  // host-level sends that wait on nothing from the other island
  };
  // 64 pieces of allreduce; 16 pieces and a ramp of reduce-scatter, each 4 chunks at the host level (one per rank
  // place).
  for (Expect e : {Expect{CollKind::kAllReduce, 128 << 10, kPaceWindow},
                   Expect{CollKind::kReduceScatter, 32 << 10, 4 * (kPaceWindow + kRampPieces)}}) {
    GroupView g = viewOf(t);
    g.chunkBytes = 4096;
    Args a;
    a.kind = e.kind;
    a.count = e.count;
    auto sel = selectAlgorithm(a, g, "hier");
    ASSERT_TRUE(sel);
    auto plan = sel->algo->plan(a, g);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->dependencyCycle(), "");
    const size_t unpaced = sendsAhead(
        *plan, [&](int peer) { return t.host[peer] == t.host[0]; },
        [&](int peer) { return t.island[peer] != t.island[0]; });
    EXPECT_EQ(unpaced, e.unpacedSends) << name(e.kind);
  }
}

// Every level but the one a piece crosses last keeps kLevelWindow pieces (and the ramp's extra ones) of its own
// in flight: a level given every piece at once would hand them all to the transport, and the piece the next level
// waits for would come about last. Reduce-scatter: the island level (2 chunks a piece, one per island) sends that
// many before its first receive; all-gather: the level across islands (1 chunk a piece).
TEST(Collectives, HierarchicalLevelsKeepAFewPiecesInFlight) {
  const testing::SimTopology t = shape(4, 2, 2);
  const size_t window = kLevelWindow + kRampPieces;
  struct Expect {
    CollKind kind;
    bool acrossIslands;  // the level measured: across islands, or within the island between hosts
    size_t ahead;
  };
  for (Expect e : {Expect{CollKind::kReduceScatter, false, 2 * window}, Expect{CollKind::kAllGather, true, window}}) {
    GroupView g = viewOf(t);
    g.chunkBytes = 4096;
    Args a;
    a.kind = e.kind;
    a.count = 32 << 10;  // 16 ordinary pieces
    auto sel = selectAlgorithm(a, g, "hier");
    ASSERT_TRUE(sel);
    auto plan = sel->algo->plan(a, g);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->dependencyCycle(), "");
    auto atLevel = [&](int peer) {
      const bool otherIsland = t.island[peer] != t.island[0];
      return e.acrossIslands ? otherIsland : !otherIsland && t.host[peer] != t.host[0];
    };
    EXPECT_EQ(sendsAhead(*plan, atLevel, atLevel), e.ahead) << name(e.kind);
  }
}

// The ramp: the first ordinary piece (the last, fromEnd) cut into halving pieces 1/2, 1/4, 1/8, 1/8 of it, the rest
// even; every element in exactly one piece, in order.
TEST(Collectives, RampedPiecesHalveTowardsTheEndTheySitAt) {
  for (bool fromEnd : {false, true})
    for (size_t count : {size_t{64 << 10}, size_t{1000003}}) {
      const size_t ordinary = 8;
      const Blocks b = rampedPieces(count, ordinary, fromEnd);
      ASSERT_EQ(b.count.size(), ordinary + kRampPieces);
      size_t off = 0;
      for (size_t k = 0; k < b.count.size(); ++k) {
        EXPECT_EQ(b.offset[k], off);
        EXPECT_LE(b.count[k], b.maxCount);
        off += b.count[k];
      }
      EXPECT_EQ(off, count);
      const double full = static_cast<double>(count) / ordinary;
      auto fromSmall = [&](size_t i) { return static_cast<double>(b.count[fromEnd ? b.count.size() - 1 - i : i]); };
      EXPECT_NEAR(fromSmall(0), full / 8, 1);
      EXPECT_NEAR(fromSmall(1), full / 8, 1);
      EXPECT_NEAR(fromSmall(2), full / 4, 1);
      EXPECT_NEAR(fromSmall(3), full / 2, 1);
      for (size_t i = 4; i < b.count.size(); ++i) EXPECT_NEAR(fromSmall(i), full, 1);
    }
  // Too few pieces to ramp: even, as before.
  const Blocks even = rampedPieces(1000, kRampFrom - 1, false);
  ASSERT_EQ(even.count.size(), kRampFrom - 1);
  EXPECT_EQ(even.maxCount, 334u);
}

TEST(Collectives, ScheduleDependenciesMayPointForwardButNeverInACycle) {
  Schedule s;
  const Slice none{Buf::kRecv, 0, 0};
  const uint32_t a = s.copy(none, none), b = s.copy(none, none), c = s.copy(none, none);
  s.steps[a].dependOn(c);  // forward: fine while c does not wait on a
  s.steps[b].dependOn(a);
  EXPECT_EQ(s.validate(0, 0), "");
  s.steps[c].dependOn(b);  // a -> c -> b -> a
  EXPECT_NE(s.validate(0, 0).find("dependency cycle"), std::string::npos) << s.validate(0, 0);
  Schedule t;
  t.copy({}, {});
  t.steps[0].dependOn(7);
  EXPECT_EQ(t.validate(0, 0), "step 0 depends on step 7, which does not exist");
}

// One piece of a hierarchical allreduce, islands of unequal speed: each rank's time is its own critical path (a
// group starts a level once its slowest member is ready), and the prediction is their mean, not the sum of every
// level's slowest group (which only the slow island's ranks pay).
TEST(Collectives, HierEstimateIsTheMeanOfEachRanksCriticalPath) {
  testing::SimTopology t = shape(4, 2, 2);
  for (size_t i = 0; i < t.bw.size(); ++i)
    if (t.island[i / 8] == 1 && t.island[i % 8] == 1 && t.host[i / 8] != t.host[i % 8]) t.bw[i] = 0.5;
  GroupView g = viewOf(t);
  g.chunkBytes = 1 << 20;
  Args a;
  a.kind = CollKind::kAllReduce;
  a.count = 256 << 10;  // 1 MiB: one piece
  const double mib = 1 << 20;
  // Whole-level times (us): the host moves 1 MiB at 10 GB/s; the island 512 KiB at 1 (island 0) or 0.5 GB/s
  // (island 1), shared by a host's 2 ranks; across islands 256 KiB at 0.1 GB/s, shared. Half up, half down.
  const double host = mib / 10e3, fast = mib / 2 / 0.5e3, slow = mib / 2 / 0.25e3, cross = mib / 4 / 0.05e3;
  const double crossDone = host / 2 + slow / 2 + cross;  // the cross level starts when island 1 is ready
  const double island0 = crossDone + fast / 2 + host / 2, island1 = crossDone + slow / 2 + host / 2;
  // Plus the reductions: each level's reduce-scatter reduces half of what reaches it (1/2 + 1/4 + 1/8 MiB), at the
  // nominal reduction rate (no memory rates are known here).
  const double reduce = 0.875 * mib / (GroupView::kNominalReduceGBps * 1e3);
  EXPECT_NEAR(hierAllReduce().estimateUs(a, g), (island0 + island1) / 2 + reduce, 1e-6);
  // Equal islands: every rank's path is the sum of the levels.
  g.bw = shape(4, 2, 2).bw;
  EXPECT_NEAR(hierAllReduce().estimateUs(a, g), host + fast + cross + reduce, 1e-6);
}

// Recursive doubling: each step at its slowest pair, where a host's ranks that all talk off the host at once share
// its NIC; the extra ranks of a non-power-of-two group add a hand-in and a hand-back.
TEST(Collectives, RecursiveDoublingEstimateSharesAHostsNic) {
  Args a;
  a.kind = CollKind::kAllReduce;
  a.count = 1 << 20;
  const double b = 4.0 * a.count;
  // The memory work, at the nominal rates: three reductions of the whole buffer (one per step, or the hand-in and
  // two steps), the first reading the input where it lies: nothing is copied.
  const double memory = 3 * b / (GroupView::kNominalReduceGBps * 1e3);
  // 4 hosts x 2 ranks, 2 islands: partners on the host (10 GB/s), in the island (1 GB/s, 2 ranks per NIC), across
  // (0.1 GB/s, 2 ranks per NIC).
  EXPECT_NEAR(recursiveDoublingAllReduce().estimateUs(a, viewOf(shape(4, 2, 2))),
              b / 10e3 + 2 * b / 1e3 + 2 * b / 0.1e3 + memory, 1e-6);
  // 5 hosts of one rank: rank 4 hands in to rank 0 and gets the result back; two steps of 4 ranks.
  EXPECT_NEAR(recursiveDoublingAllReduce().estimateUs(a, viewOf(shape(5, 1, 1))), 4 * b / 1e3 + memory, 1e-6);
}

// Two ranks on one host with 2 cores whose memory copies and reduces 8x faster in cache than out of it.
GroupView oneHostWithMemoryRates(int cores) {
  auto graph = std::make_shared<topo::LinkGraph>();
  topo::LinkGraph::HostNode host;
  host.name = "h0";
  host.ranks = {0, 1};
  host.cores = cores;
  host.memory = {{64 << 10, 40, 32}, {16 << 20, 5, 4}};
  graph->hosts.push_back(host);
  graph->hostOfRank = {0, 0};
  GroupView g = viewOf(shape(1, 2, 1), 0, 10.0);
  g.bw.assign(4, 1.0);
  g.graph = graph;
  return g;
}

// The memory rates follow the call's buffer size: the measured rate at a measured size, the nearest measured one
// outside them, log-linear between (halfway in log size, halfway in rate); halved where two ranks share a core.
TEST(Collectives, MemoryRatesFollowTheBufferSize) {
  const GroupView g = oneHostWithMemoryRates(2);
  EXPECT_DOUBLE_EQ(g.copyGBps(0, 64 << 10), 40);
  EXPECT_DOUBLE_EQ(g.reduceGBps(1, 16 << 20), 4);
  EXPECT_DOUBLE_EQ(g.copyGBps(0, 8), 40);
  EXPECT_DOUBLE_EQ(g.reduceGBps(0, 1e12), 4);
  EXPECT_NEAR(g.copyGBps(0, 1 << 20), 22.5, 1e-9);  // 2^20 is halfway between 2^16 and 2^24
  EXPECT_NEAR(g.reduceGBps(0, 1 << 20), 18, 1e-9);
  EXPECT_NEAR(oneHostWithMemoryRates(1).copyGBps(0, 64 << 10), 20, 1e-9);
  // Without measured rates: the nominal (out of cache) figures at every size.
  EXPECT_EQ(viewOf(shape(1, 2, 1)).copyGBps(0, 64 << 10), GroupView::kNominalCopyGBps);
}

// Two ranks move the same bytes by rd and by ring; rd saves a hop (alpha, 10 us here) and pays a reduction of the
// whole buffer instead of half. At 256 KiB that work is in cache (128 KiB more at 25 GB/s, 5.2 us: rd wins); at
// out-of-cache rates it would be 33 us and the ring would be chosen. At 64 MiB the memory work decides for the ring.
TEST(Collectives, SmallCallsChargeMemoryWorkAtCacheRates) {
  const GroupView g = oneHostWithMemoryRates(2);
  Args a;
  a.kind = CollKind::kAllReduce;
  a.count = 64 << 10;  // 256 KiB
  EXPECT_EQ(selectAlgorithm(a, g, "")->algo->name(), "rd");
  EXPECT_LT(recursiveDoublingAllReduce().estimateUs(a, g), ringAllReduce().estimateUs(a, g));
  a.count = 16 << 20;  // 64 MiB
  EXPECT_EQ(selectAlgorithm(a, g, "")->algo->name(), "ring");
}

// Every rank selects on its own, so every rank must predict the same times, even where the islands' fabrics
// differ (here island 1's links are half as fast as island 0's); and across slow links hier wins every kind.
TEST(Collectives, EveryRankPredictsTheSameTimesAndHierWinsEveryKind) {
  testing::SimTopology t = shape(4, 2, 2);
  for (size_t i = 0; i < t.bw.size(); ++i)
    if (t.island[i / 8] == 1 && t.island[i % 8] == 1 && t.host[i / 8] != t.host[i % 8]) t.bw[i] = 0.5;
  for (CollKind kind : kHierKinds)
    for (int root : {0, 5}) {
      Args a;
      a.kind = kind;
      a.count = 4 << 20;
      a.root = root;
      std::map<std::string, double> first;
      for (int r = 0; r < 8; ++r) {
        const GroupView g = viewOf(t, r, 10.0);
        for (const Algorithm* algo : allAlgorithms()) {
          if (!algo->supports(a, g)) continue;
          const double us = algo->estimateUs(a, g);
          auto [it, isNew] = first.emplace(std::string(algo->name()), us);
          EXPECT_EQ(it->second, us) << name(kind) << " " << algo->name() << " on rank " << r;
        }
        EXPECT_EQ(selectAlgorithm(a, g, "")->algo->name(), "hier") << name(kind);
      }
    }
}

TEST(Collectives, RecursiveDoublingAllReduceEveryRankCountSizeTypeAndOp) {
  for (int n : {2, 3, 4, 5, 6, 7, 8})
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{70001}})
      for (bool inPlace : {false, true})
        runCase({CollKind::kAllReduce, n, count, DataType::kFloat32, RedOp::kSum, 0, inPlace}, 4096, false, "rd");
  for (DataType t : kAllTypes)
    for (RedOp op : kAllOps) runCase({CollKind::kAllReduce, 6, 333, t, op, 0, false}, 4096, true, "rd");
}

// The running sum starts as the input where it lies: no rank of any count copies, in place or out of place; and
// out of place, the input is only ever read.
TEST(Collectives, RecursiveDoublingCopiesNothingAndOnlyReadsTheInput) {
  for (int n : {2, 3, 5, 6, 8})
    for (bool inPlace : {false, true})
      for (int r = 0; r < n; ++r) {
        Args a;
        a.kind = CollKind::kAllReduce;
        a.count = 1000;
        a.inPlace = inPlace;
        auto s = recursiveDoublingAllReduce().plan(a, viewOf(shape(1, n, 1), r));
        ASSERT_TRUE(s.has_value());
        for (const Step& step : s->steps) {
          EXPECT_NE(step.op, Step::Op::kCopy) << "n " << n << " rank " << r;
          if (step.op != Step::Op::kSend) {
            EXPECT_NE(step.dst.buf, Buf::kSend) << "n " << n << " rank " << r;
          }
        }
      }
}

TEST(Collectives, CostModelPicksRecursiveDoublingForSmallAndRingForLarge) {
  Args a;
  a.kind = CollKind::kAllReduce;
  GroupView g;
  g.nranks = 8;
  a.count = 2;  // 8 bytes: latency-bound, log2(8) = 3 hops beat the ring's 14
  EXPECT_EQ(selectAlgorithm(a, g, "")->algo->name(), "rd");
  a.count = 16 << 20;  // 64 MiB: bandwidth-bound, the ring moves 2(n-1)/n of it, rd 3 times all of it
  EXPECT_EQ(selectAlgorithm(a, g, "")->algo->name(), "ring");
}

TEST(Collectives, RingAllReduceRunsInNicAwareOrder) {
  // Ranks placed round-robin over 4 hosts: in rank order every hop leaves its host; in NIC-aware order only 4 do.
  testing::SimTopology t;
  const int n = 8;
  for (int r = 0; r < n; ++r) {
    t.host.push_back(r % 4);
    t.island.push_back(0);
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) t.bw.push_back(t.host[i] == t.host[j] ? 10.0 : 1.0);
  for (size_t count : {size_t{1}, size_t{1023}, size_t{70001}})
    runCase({CollKind::kAllReduce, n, count, DataType::kFloat32, RedOp::kSum, 0, false}, 4096, false, "ring", t);
  GroupView g;
  g.nranks = n;
  g.host = t.host;
  g.island = t.island;
  EXPECT_EQ(g.nicAwareOrder(), (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
}

TEST(Collectives, EveryRingAndChainCollectiveRunsInNicAwareOrder) {
  // Ranks interleaved over 2 islands of 2 hosts (rank r on host r % 4, island host / 2): allgather and
  // reduce-scatter ring, and broadcast and reduce chain from every root, in NIC-aware order, correct.
  testing::SimTopology t;
  const int n = 8;
  for (int r = 0; r < n; ++r) {
    t.host.push_back(r % 4);
    t.island.push_back((r % 4) / 2);
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) t.bw.push_back(t.host[i] == t.host[j] ? 10.0 : t.island[i] == t.island[j] ? 2 : 0.25);
  for (CollKind kind : {CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kBroadcast, CollKind::kReduce})
    for (int root : {0, 3, 6})
      for (size_t count : {size_t{1}, size_t{1023}, size_t{70001}})
        for (bool inPlace : {false, true})
          runCase({kind, n, count, DataType::kFloat32, RedOp::kSum, root, inPlace}, 4096, false, "", t);
  GroupView g;
  g.nranks = n;
  g.host = t.host;
  g.island = t.island;
  // From root 6 (host 2, island 1): its host, its island, then the other island host by host.
  EXPECT_EQ(g.nicAwareChain(6), (std::vector<int>{6, 2, 3, 7, 0, 4, 1, 5}));
  EXPECT_EQ(g.nicAwareChain(0), (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  // One crossing of the slow fabric in the chain; in rank order three hops would cross it.
  auto crossings = [&](const std::vector<int>& c) {
    int x = 0;
    for (size_t i = 1; i < c.size(); ++i) x += t.island[c[i - 1]] != t.island[c[i]];
    return x;
  };
  EXPECT_EQ(crossings(g.nicAwareChain(6)), 1);
  EXPECT_EQ(crossings({0, 1, 2, 3, 4, 5, 6, 7}), 3);
}

}  // namespace
}  // namespace hetcomm::coll
