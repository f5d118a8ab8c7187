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

namespace hetcomm::coll {
namespace {

using kernels::DataType;
using kernels::RedOp;

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
                                  DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kFloat32,
                                  DataType::kFloat64, DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

void setElem(std::byte* base, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kInt8: reinterpret_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: reinterpret_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: reinterpret_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DataType::kUint32: reinterpret_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: reinterpret_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint64: reinterpret_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case DataType::kFloat16: reinterpret_cast<uint16_t*>(base)[i] = kernels::floatToHalf(static_cast<float>(v)); break;
    case DataType::kFloat32: reinterpret_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: reinterpret_cast<double*>(base)[i] = v; break;
    case DataType::kBfloat16:
      reinterpret_cast<uint16_t*>(base)[i] = kernels::floatToBfloat16(static_cast<float>(v));
      break;
  }
}

// Small values keep every result exact: sums of [-2, 2] (or [0, 4]) and products of 1s and 2s.
double inputValue(int rank, size_t i, DataType t, RedOp op) {
  bool isUnsigned = t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
  if (op == RedOp::kProd) return ((rank + 3 * i) % 5 == 0) ? 2 : 1;
  int v = static_cast<int>((rank * 7 + i * 13) % 5);
  return isUnsigned ? v : v - 2;
}

using Buffer = std::vector<std::byte>;

struct Case {
  CollKind kind;
  int n;
  size_t count;
  DataType dtype;
  RedOp op;
  int root;
  bool inPlace;
};

std::string describe(const Case& c) {
  return format("%s n=%d count=%zu %s %s root=%d %s", name(c.kind), c.n, c.count, kernels::name(c.dtype),
                kernels::name(c.op), c.root, c.inPlace ? "in-place" : "out-of-place");
}

// Folds the ranks' inputs in rank order (exact inputs make the order irrelevant).
Buffer reduceAll(const std::vector<Buffer>& in, size_t offsetElems, size_t count, const Case& c) {
  size_t esz = kernels::sizeOf(c.dtype);
  Buffer acc(in[0].begin() + offsetElems * esz, in[0].begin() + (offsetElems + count) * esz);
  for (int r = 1; r < c.n; ++r)
    if (count) kernels::reduce(acc.data(), acc.data(), in[r].data() + offsetElems * esz, count, c.dtype, c.op);
  if (c.op == RedOp::kAvg && count) kernels::divideBy(acc.data(), count, c.dtype, c.n);
  return acc;
}

void runCase(const Case& c, size_t chunkBytes, bool lateReceiveFree = false, const std::string& algo = "",
             const testing::SimTopology& topo = {}) {
  SCOPED_TRACE(describe(c));
  const int n = c.n;
  const size_t esz = kernels::sizeOf(c.dtype);
  Args a;
  a.kind = c.kind;
  a.count = c.count;
  a.dtype = c.dtype;
  a.op = c.op;
  a.root = c.root;
  const size_t sendElems = a.sendBytes(n) / esz, recvElems = a.recvBytes(n) / esz;
  std::vector<Buffer> inputs(n), send(n), recv(n);
  std::vector<Args> args(n, a);
  std::vector<std::vector<std::byte*>> bufs(n);
  for (int r = 0; r < n; ++r) {
    inputs[r].resize(sendElems * esz);
    for (size_t i = 0; i < sendElems; ++i) setElem(inputs[r].data(), i, c.dtype, inputValue(r, i, c.dtype, c.op));
    recv[r].assign(recvElems * esz + 1, std::byte{0x5a});
    send[r] = inputs[r];
    std::byte* sb = send[r].data();
    std::byte* rb = recv[r].data();
    if (c.inPlace) {
      // The in-place layouts of nccl.h: allgather reads from recv + rank*count, reduce-scatter writes to
      // send + rank*count, the others share one buffer.
      size_t need = std::max(sendElems, recvElems) * esz;
      recv[r].assign(need + 1, std::byte{0x5a});
      rb = recv[r].data();
      if (c.kind == CollKind::kAllGather) {
        std::memcpy(rb + r * c.count * esz, inputs[r].data(), inputs[r].size());
        sb = rb + r * c.count * esz;
      } else if (c.kind == CollKind::kReduceScatter) {
        std::memcpy(rb, inputs[r].data(), inputs[r].size());
        sb = rb;
        rb = rb + r * c.count * esz;
      } else {
        std::memcpy(rb, inputs[r].data(), inputs[r].size());
        sb = rb;
      }
      args[r].inPlace = true;
    }
    bufs[r] = {sb, rb};
  }
  Status st = testing::runSimulated(n, args, bufs, chunkBytes, algo, nullptr, lateReceiveFree, topo);
  ASSERT_TRUE(st.ok()) << st.toString();

  for (int r = 0; r < n; ++r) {
    const std::byte* out = bufs[r][1];
    Buffer expect;
    switch (c.kind) {
      case CollKind::kAllReduce: expect = reduceAll(inputs, 0, c.count, c); break;
      case CollKind::kReduceScatter: expect = reduceAll(inputs, r * c.count, c.count, c); break;
      case CollKind::kReduce:
        if (r != c.root) continue;
        expect = reduceAll(inputs, 0, c.count, c);
        break;
      case CollKind::kBroadcast: expect = inputs[c.root]; break;
      case CollKind::kAllGather:
        for (int p = 0; p < n; ++p) expect.insert(expect.end(), inputs[p].begin(), inputs[p].end());
        break;
      case CollKind::kAlltoAll:
        for (int p = 0; p < n; ++p)
          expect.insert(expect.end(), inputs[p].begin() + r * c.count * esz, inputs[p].begin() + (r + 1) * c.count * esz);
        break;
      default: FAIL();
    }
    ASSERT_EQ(0, std::memcmp(out, expect.data(), expect.size())) << "rank " << r << " has a wrong result";
    if (!c.inPlace) {
      EXPECT_EQ(recv[r][recvElems * esz], std::byte{0x5a}) << "rank " << r << " wrote past the end";
    }
  }
}

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

// The lowest level runs at most kPaceWindow pieces ahead of the top one: of the first sends within the host, only
// that many (per chunk of a piece) may go out before anything has come back across the islands. Unpaced, all 64
// would, and the host and island levels would burst through the whole buffer while the slow top level waits.
TEST(Collectives, HierarchicalLowerLevelsArePacedByTheTopLevel) {
  const testing::SimTopology t = shape(4, 2, 2);
  struct Expect {
    CollKind kind;
    size_t count;
    size_t unpacedSends;  // host-level sends that wait on nothing from the other island
  };
  // 64 pieces of allreduce; 16 pieces of reduce-scatter, each 4 chunks at the host level (one per rank place).
  for (Expect e : {Expect{CollKind::kAllReduce, 128 << 10, kPaceWindow},
                   Expect{CollKind::kReduceScatter, 32 << 10, 4 * kPaceWindow}}) {
    GroupView g = viewOf(t);
    g.chunkBytes = 4096;
    Args a;
    a.kind = e.kind;
    a.count = e.count;
    auto sel = selectAlgorithm(a, g, "hier");
    ASSERT_TRUE(sel);
    auto plan = sel->algo->plan(a, g);
    ASSERT_TRUE(plan);
    const std::vector<Step>& steps = plan->steps;
    EXPECT_EQ(plan->dependencyCycle(), "");
    // crossed[i]: step i is, or waits on, a receive from the other island. Dependencies may point forward, so
    // sweep until nothing changes.
    std::vector<bool> crossed(steps.size());
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < steps.size(); ++i) {
        bool c = steps[i].op == Step::Op::kRecv && t.island[steps[i].peer] != t.island[0];
        for (int d = 0; d < steps[i].ndeps; ++d) c = c || crossed[steps[i].deps[d]];
        if (c && !crossed[i]) crossed[i] = changed = true;
      }
    }
    size_t hostSends = 0, unpaced = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].op != Step::Op::kSend || t.host[steps[i].peer] != t.host[0]) continue;
      ++hostSends;
      if (!crossed[i]) ++unpaced;
    }
    EXPECT_EQ(unpaced, e.unpacedSends) << name(e.kind) << ": " << hostSends << " host-level sends";
  }
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
  EXPECT_NEAR(hierAllReduce().estimateUs(a, g), (island0 + island1) / 2, 1e-6);
  // Equal islands: every rank's path is the sum of the levels.
  g.bw = shape(4, 2, 2).bw;
  EXPECT_NEAR(hierAllReduce().estimateUs(a, g), host + fast + cross, 1e-6);
}

// Recursive doubling: each step at its slowest pair, where a host's ranks that all talk off the host at once share
// its NIC; the extra ranks of a non-power-of-two group add a hand-in and a hand-back.
TEST(Collectives, RecursiveDoublingEstimateSharesAHostsNic) {
  Args a;
  a.kind = CollKind::kAllReduce;
  a.count = 1 << 20;
  const double b = 4.0 * a.count;
  // 4 hosts x 2 ranks, 2 islands: partners on the host (10 GB/s), in the island (1 GB/s, 2 ranks per NIC), across
  // (0.1 GB/s, 2 ranks per NIC).
  EXPECT_NEAR(recursiveDoublingAllReduce().estimateUs(a, viewOf(shape(4, 2, 2))),
              b / 10e3 + 2 * b / 1e3 + 2 * b / 0.1e3, 1e-6);
  // 5 hosts of one rank: rank 4 hands in to rank 0 and gets the result back; two steps of 4 ranks.
  EXPECT_NEAR(recursiveDoublingAllReduce().estimateUs(a, viewOf(shape(5, 1, 1))), 4 * b / 1e3, 1e-6);
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
