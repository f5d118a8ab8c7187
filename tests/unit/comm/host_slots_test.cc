// HostSlots with every "rank" in this thread over one region of heap memory: the allreduce's result and its bits,
// the alternation of the two slots over many rounds, mismatches seen in a slot or in an announcement, a peer that
// is gone, and the sleep flag's hand-shake.
#include "comm/host_slots.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <new>
#include <vector>

namespace hetcomm::comm {
namespace {

using kernels::DataType;
using kernels::RedOp;

HostSlots::Descriptor descriptorOf(uint64_t seq, uint64_t count, uint8_t op = 0) {
  HostSlots::Descriptor d{};
  std::memcpy(d.data(), &seq, sizeof(seq));
  std::memcpy(d.data() + 8, &count, sizeof(count));
  d[16] = std::byte{op};
  return d;
}

// A region and one HostSlots per rank over it, as n processes would have.
struct Group {
  explicit Group(int n) : n(n) {
    bytes = HostSlots::regionBytes(n);
    mem.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t(64))));
    std::memset(mem.get(), 0, bytes);
    for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<HostSlots>(std::span(mem.get(), bytes), r, n));
  }
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  int n;
  size_t bytes;
  std::unique_ptr<std::byte[], Free> mem;
  std::vector<std::unique_ptr<HostSlots>> ranks;
};

// The verify a communicator passes: any descriptor that differs is a mismatch.
Status mismatch(std::span<const std::byte>, int from) { return invalidUsage("mismatch with rank %d", from); }

const std::vector<transport::Connection*> kNoConns;

TEST(HostSlots, AllReduceGivesEveryRankTheSameSumOverManyRounds) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 257;
  Group g(kRanks);
  for (uint64_t seq = 1; seq <= 7; ++seq) {  // both slots, several times each
    std::vector<std::vector<float>> in(kRanks, std::vector<float>(kCount)), out(kRanks, std::vector<float>(kCount));
    for (int r = 0; r < kRanks; ++r)
      for (size_t i = 0; i < kCount; ++i) in[r][i] = 0.1f * static_cast<float>(r + 1) + static_cast<float>(i * seq);
    const bool inPlace = seq % 2 == 0;
    for (int r = 0; r < kRanks; ++r) {
      if (inPlace) out[r] = in[r];
      g.ranks[r]->announce(seq, descriptorOf(seq, kCount));
      g.ranks[r]->startAllReduce(seq, descriptorOf(seq, kCount), inPlace ? out[r].data() : in[r].data(),
                                 out[r].data(), kCount, DataType::kFloat32, RedOp::kSum);
    }
    for (int r = 0; r < kRanks; ++r) {
      Result<bool> done = g.ranks[r]->advance(kNoConns, mismatch, nullptr);
      ASSERT_TRUE(done.has_value()) << done.error().message();
      EXPECT_TRUE(*done);
    }
    for (size_t i = 0; i < kCount; ++i) {
      const float expect = (in[0][i] + in[1][i]) + in[2][i];  // rank order
      for (int r = 0; r < kRanks; ++r) ASSERT_EQ(out[r][i], expect) << "seq " << seq << " rank " << r << " i " << i;
    }
  }
}

TEST(HostSlots, AvgDividesAndIntegersWork) {
  Group g(2);
  std::vector<int32_t> a{10, -7, 3}, b{20, 1, 4}, oa(3), ob(3);
  g.ranks[0]->startAllReduce(1, descriptorOf(1, 3, 4), a.data(), oa.data(), 3, DataType::kInt32, RedOp::kAvg);
  g.ranks[1]->startAllReduce(1, descriptorOf(1, 3, 4), b.data(), ob.data(), 3, DataType::kInt32, RedOp::kAvg);
  ASSERT_TRUE(*g.ranks[0]->advance(kNoConns, mismatch, nullptr));
  ASSERT_TRUE(*g.ranks[1]->advance(kNoConns, mismatch, nullptr));
  EXPECT_EQ(oa, (std::vector<int32_t>{15, -3, 3}));
  EXPECT_EQ(ob, oa);
}

TEST(HostSlots, WaitsForALatePeerAndNamesIt) {
  Group g(3);
  float x = 1, y = 2, z = 4, o0 = 0, o1 = 0, o2 = 0;
  g.ranks[0]->startAllReduce(1, descriptorOf(1, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  g.ranks[2]->startAllReduce(1, descriptorOf(1, 1), &z, &o2, 1, DataType::kFloat32, RedOp::kSum);
  bool moved = false;
  Result<bool> done = g.ranks[0]->advance(kNoConns, mismatch, &moved);
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(*done);
  EXPECT_TRUE(moved);  // its own slot (rank 0) is folded in
  EXPECT_NE(g.ranks[0]->waitingOn().find("rank 1"), std::string::npos) << g.ranks[0]->waitingOn();
  g.ranks[1]->startAllReduce(1, descriptorOf(1, 1), &y, &o1, 1, DataType::kFloat32, RedOp::kSum);
  for (int r : {0, 1, 2}) ASSERT_TRUE(*g.ranks[r]->advance(kNoConns, mismatch, nullptr));
  EXPECT_EQ(o0, 7);
  EXPECT_EQ(o1, 7);
  EXPECT_EQ(o2, 7);
}

TEST(HostSlots, AnotherDescriptorInThePeersSlotIsAMismatch) {
  Group g(2);
  float x = 1, y = 2, o0 = 0, o1 = 0;
  g.ranks[0]->startAllReduce(1, descriptorOf(1, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  g.ranks[1]->startAllReduce(1, descriptorOf(1, 1, /*op=*/2), &y, &o1, 1, DataType::kFloat32, RedOp::kMax);
  Result<bool> done = g.ranks[0]->advance(kNoConns, mismatch, nullptr);
  ASSERT_FALSE(done.has_value());
  EXPECT_NE(std::string(done.error().message()).find("rank 1"), std::string::npos);
}

// The peer went by messages (another size, say) under the same sequence number: its announcement tells.
TEST(HostSlots, APeerAnnouncingAnotherOperationIsAMismatch) {
  Group g(2);
  float x = 1, o0 = 0;
  g.ranks[1]->announce(5, descriptorOf(5, 1 << 20));
  g.ranks[0]->announce(5, descriptorOf(5, 1));
  g.ranks[0]->startAllReduce(5, descriptorOf(5, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  Result<bool> done = g.ranks[0]->advance(kNoConns, mismatch, nullptr);
  ASSERT_FALSE(done.has_value());
  // An announcement of an earlier operation is not one.
  Group h(2);
  h.ranks[1]->announce(4, descriptorOf(4, 1 << 20));
  h.ranks[0]->startAllReduce(5, descriptorOf(5, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  done = h.ranks[0]->advance(kNoConns, mismatch, nullptr);
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(*done);
}

class GoneConnection final : public transport::Connection {
 public:
  int peer() const override { return 1; }
  Status isend(transport::Request&, std::span<const std::byte>, uint64_t) override { return okStatus(); }
  Status irecv(transport::Request&, std::span<std::byte>, uint64_t) override { return okStatus(); }
  void sendAbort(std::string_view) noexcept override {}
  void close(const Status&) noexcept override {}
  std::string describe() const override { return "gone"; }
  Status health() const override { return remoteError("rank 1 exited"); }
};

TEST(HostSlots, APeerThatIsGoneFailsTheWait) {
  Group g(2);
  GoneConnection gone;
  const std::vector<transport::Connection*> conns{nullptr, &gone};
  float x = 1, o0 = 0;
  g.ranks[0]->startAllReduce(1, descriptorOf(1, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  Status last;
  for (int i = 0; i < 1 && last.ok(); ++i) {  // at the first look
    Result<bool> done = g.ranks[0]->advance(conns, mismatch, nullptr);
    if (!done.has_value()) last = done.error();
  }
  ASSERT_FALSE(last.ok());
  EXPECT_NE(std::string(last.message()).find("exited"), std::string::npos);
}

TEST(HostSlots, ASleepingRankIsWokenByTheRoundItWaitsFor) {
  Group g(2);
  std::vector<int> woken;
  g.ranks[1]->setWake([&](int peer) { woken.push_back(peer); });
  float x = 1, y = 2, o0 = 0, o1 = 0;
  g.ranks[0]->startAllReduce(1, descriptorOf(1, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  ASSERT_FALSE(*g.ranks[0]->advance(kNoConns, mismatch, nullptr));
  EXPECT_TRUE(g.ranks[0]->armForSleep());  // nothing came: it may sleep, flag up
  g.ranks[1]->startAllReduce(1, descriptorOf(1, 1), &y, &o1, 1, DataType::kFloat32, RedOp::kSum);
  EXPECT_EQ(woken, std::vector<int>{0});
  ASSERT_TRUE(*g.ranks[0]->advance(kNoConns, mismatch, nullptr));
  ASSERT_TRUE(*g.ranks[1]->advance(kNoConns, mismatch, nullptr));
  // The next round: the awaited round comes up between rank 0's last look and its arming, so it must not sleep;
  // and its flag comes down again, so the round after wakes nobody for nothing.
  g.ranks[0]->startAllReduce(2, descriptorOf(2, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  ASSERT_FALSE(*g.ranks[0]->advance(kNoConns, mismatch, nullptr));
  g.ranks[1]->startAllReduce(2, descriptorOf(2, 1), &y, &o1, 1, DataType::kFloat32, RedOp::kSum);
  EXPECT_FALSE(g.ranks[0]->armForSleep());
  ASSERT_TRUE(*g.ranks[0]->advance(kNoConns, mismatch, nullptr));
  ASSERT_TRUE(*g.ranks[1]->advance(kNoConns, mismatch, nullptr));
  g.ranks[0]->startAllReduce(3, descriptorOf(3, 1), &x, &o0, 1, DataType::kFloat32, RedOp::kSum);
  g.ranks[1]->startAllReduce(3, descriptorOf(3, 1), &y, &o1, 1, DataType::kFloat32, RedOp::kSum);
  EXPECT_EQ(woken, std::vector<int>{0});
  EXPECT_EQ(o0, 3);
}

}  // namespace
}  // namespace hetcomm::comm
