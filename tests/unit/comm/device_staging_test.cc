// device_staging_test.cc: the chunk layout of each collective and the staging pipeline's order of copies and ops,
// with a scripted copy engine and ops (no GPU, no communicator). The end-to-end path runs in the comm_api_staged
// test: the whole C API suite with host buffers forced through staging.
#include "comm/device_staging.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hetcomm::comm::staging {
namespace {

coll::Args args(coll::CollKind kind, size_t count, int root = 0) {
  coll::Args a;
  a.kind = kind;
  a.count = count;
  a.dtype = kernels::DataType::kFloat32;
  a.root = root;
  return a;
}

TEST(StagingLayout, AllReduceSplitsIntoWholeElementsWithAShortLastChunk) {
  Layout l = planCollective(args(coll::CollKind::kAllReduce, 10), 4, 1, 18);  // 18 bytes: 4 floats per chunk
  ASSERT_EQ(l.chunks.size(), 3u);
  EXPECT_EQ(l.chunks[0].count, 4u);
  EXPECT_EQ(l.chunks[2].count, 2u);
  EXPECT_EQ(l.chunks[1].in.userOffset, 16u);
  EXPECT_EQ(l.chunks[2].out.width, 8u);
  EXPECT_EQ(l.chunks[2].out.height, 1u);
  EXPECT_EQ(l.slotSendBytes, 16u);
  EXPECT_EQ(l.slotRecvBytes, 16u);
}

TEST(StagingLayout, AllGatherWritesOneRowPerRank) {
  Layout l = planCollective(args(coll::CollKind::kAllGather, 6), 3, 0, 64);  // 64 bytes over 3 rows: 5 floats
  ASSERT_EQ(l.chunks.size(), 2u);
  const Copy2D& out = l.chunks[1].out;
  EXPECT_EQ(out.height, 3u);
  EXPECT_EQ(out.userOffset, 20u);  // element 5 of each rank's block
  EXPECT_EQ(out.userPitch, 24u);   // a block is 6 floats
  EXPECT_EQ(out.stagePitch, 4u);   // packed: the host op's count is 1
  EXPECT_EQ(l.chunks[1].count, 1u);
  EXPECT_EQ(l.chunks[1].in.height, 1u);
  EXPECT_EQ(l.slotRecvBytes, 3 * 20u);
}

TEST(StagingLayout, ReduceScatterAndAlltoAllReadOneRowPerRank) {
  Layout rs = planCollective(args(coll::CollKind::kReduceScatter, 8), 2, 1, 1 << 20);
  ASSERT_EQ(rs.chunks.size(), 1u);
  EXPECT_EQ(rs.chunks[0].in.height, 2u);
  EXPECT_EQ(rs.chunks[0].out.height, 1u);
  Layout a2a = planCollective(args(coll::CollKind::kAlltoAll, 8), 2, 1, 1 << 20);
  EXPECT_EQ(a2a.chunks[0].in.height, 2u);
  EXPECT_EQ(a2a.chunks[0].out.height, 2u);
}

TEST(StagingLayout, RootedCollectivesCopyOnlyWhatThisRankUses) {
  Layout bNonRoot = planCollective(args(coll::CollKind::kBroadcast, 4, 2), 3, 0, 1024);
  EXPECT_TRUE(bNonRoot.chunks[0].in.empty());
  EXPECT_FALSE(bNonRoot.chunks[0].out.empty());
  Layout rNonRoot = planCollective(args(coll::CollKind::kReduce, 4, 2), 3, 0, 1024);
  EXPECT_FALSE(rNonRoot.chunks[0].in.empty());
  EXPECT_TRUE(rNonRoot.chunks[0].out.empty());
  Layout rRoot = planCollective(args(coll::CollKind::kReduce, 4, 2), 3, 2, 1024);
  EXPECT_FALSE(rRoot.chunks[0].out.empty());
}

TEST(StagingLayout, ZeroCountHasNoChunks) {
  EXPECT_TRUE(planCollective(args(coll::CollKind::kAllReduce, 0), 2, 0, 64).chunks.empty());
}

// Records every call in order, and checks the rules the pipeline must keep as it goes.
struct Script : CopyEngine, ChunkOps {
  int chunks, slots;
  std::vector<std::string> log;
  std::vector<int> slotOwner;  // chunk whose data is in the slot, -1 when free
  std::vector<bool> inDone, opened, opDone, outDone;
  int failCopyInAt = -1, failOpAt = -1, abandonedFrom = -1;
  Script(int n, int s) : chunks(n), slots(s), slotOwner(s, -1), inDone(n), opened(n), opDone(n), outDone(n) {}

  Status copyIn(int j, int slot) override {
    log.push_back("in" + std::to_string(j));
    EXPECT_EQ(slot, j % slots);
    if (slotOwner[slot] >= 0) {
      EXPECT_TRUE(outDone[slotOwner[slot]]) << "chunk " << j << " overwrote a slot in use";
    }
    if (j == failCopyInAt) return systemError("copy in %d failed", j);
    slotOwner[slot] = j;
    inDone[j] = true;
    return okStatus();
  }
  Status waitIn(int k) override {
    EXPECT_TRUE(inDone[k]);
    return okStatus();
  }
  Status copyOut(int k, int slot) override {
    log.push_back("out" + std::to_string(k));
    EXPECT_TRUE(opDone[k]) << "copied out chunk " << k << " before its op finished";
    EXPECT_EQ(slotOwner[slot], k);
    outDone[k] = true;
    return okStatus();
  }
  Status finish() override { return okStatus(); }
  void open(int k) override {
    log.push_back("open" + std::to_string(k));
    EXPECT_TRUE(inDone[k]) << "op " << k << " opened before its copy in";
    if (k > 0) {
      EXPECT_TRUE(opened[k - 1]);
    }
    opened[k] = true;
  }
  Status wait(int k) override {
    if (!opened[k] && abandonedFrom < 0) ADD_FAILURE() << "waited for op " << k << ", which can never start";
    opDone[k] = true;
    if (k == failOpAt) return remoteError("op %d failed", k);
    return okStatus();
  }
  void abandon(int from, const Status&) override {
    abandonedFrom = from;
    for (int k = from; k < chunks; ++k) opened[k] = true;
  }
};

TEST(StagingPipeline, EveryChunkGoesInRunsAndComesOutThroughTheSlots) {
  for (int n : {1, 2, 3, 7})
    for (int slots : {2, 3}) {
      Script s(n, slots);
      ASSERT_TRUE(runPipeline(n, std::min(slots, n), s, s).ok());
      for (int k = 0; k < n; ++k) EXPECT_TRUE(s.outDone[k]) << k;
    }
}

TEST(StagingPipeline, TheNextOpIsOpenBeforeThePreviousIsWaitedFor) {
  Script s(4, 3);
  ASSERT_TRUE(runPipeline(4, 3, s, s).ok());
  // The network never waits on a copy: op k+1 is open before op k's copy out.
  std::vector<std::string> want = {"in0", "in1",   "in2",  "open0", "open1", "out0",
                                   "in3", "open2", "out1", "open3", "out2",  "out3"};
  EXPECT_EQ(s.log, want);
}

TEST(StagingPipeline, ACopyFailureAbandonsTheOpsNotYetOpen) {
  Script s(6, 2);
  s.failCopyInAt = 3;
  Status st = runPipeline(6, 2, s, s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("copy in 3"), std::string::npos);
  EXPECT_EQ(s.abandonedFrom, 3);
}

TEST(StagingPipeline, AnOpFailureStopsTheCopiesOut) {
  Script s(5, 2);
  s.failOpAt = 1;
  Status st = runPipeline(5, 2, s, s);
  EXPECT_EQ(st.code(), Code::kRemote);
  EXPECT_TRUE(s.outDone[0]);
  EXPECT_FALSE(s.outDone[1]);
}

}  // namespace
}  // namespace hetcomm::comm::staging
