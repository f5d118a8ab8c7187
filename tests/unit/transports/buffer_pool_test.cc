// BufferPool: early-arrival buffers are reused instead of freshly mapped for every message. InboundMessages: the
// bounds a peer's frame headers meet before anything is allocated or written.
#include "transports/buffer_pool.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transports/inbound.h"

namespace hetcomm::transport {
namespace {

TEST(BufferPool, ReusesWhatALeaseGaveBack) {
  BufferPool pool(8 << 20);
  std::byte* first = nullptr;
  {
    BufferPool::Lease a = pool.take(1 << 20);
    ASSERT_NE(a.get(), nullptr);
    EXPECT_GE(a.capacity(), size_t{1} << 20);
    first = a.get();
    a.get()[(1 << 20) - 1] = std::byte{7};  // the whole size asked for is usable
  }
  EXPECT_EQ(pool.keptBytes(), size_t{1} << 20);
  BufferPool::Lease b = pool.take(700 << 10);  // same size class (rounded up to a power of two)
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(pool.keptBytes(), 0u);
  BufferPool::Lease c = pool.take(1);  // a tiny one gets its own, a cache line
  EXPECT_NE(c.get(), first);
  EXPECT_EQ(c.capacity(), size_t{64});
}

// Thousands of small messages that come before their receives (a sender far ahead) take a few bytes each, not a
// page each: every fresh page is a fault, tens of microseconds on this project's machines.
TEST(BufferPool, SmallMessagesTakeSmallBuffersAndShareThem) {
  BufferPool pool;
  std::vector<BufferPool::Lease> leases;
  for (int i = 0; i < 10000; ++i) leases.push_back(pool.take(8 + i % 100));
  EXPECT_LE(pool.leasedBytes(), size_t{10000} * 128);
  leases.clear();
  const size_t kept = pool.keptBytes();
  EXPECT_GT(kept, 0u);
  for (int i = 0; i < 10000; ++i) leases.push_back(pool.take(8 + i % 100));  // all from what came back
  EXPECT_EQ(pool.keptBytes(), 0u);
}

TEST(BufferPool, KeepsAtMostItsCapAndNeverTooBigABuffer) {
  BufferPool pool(2 << 20);
  {
    BufferPool::Lease big = pool.take(4 << 20);  // over the cap: freed, not kept
    BufferPool::Lease a = pool.take(1 << 20), b = pool.take(1 << 20), c = pool.take(1 << 20);
  }
  EXPECT_LE(pool.keptBytes(), size_t{2} << 20);
  // A small message does not take a buffer much larger than it needs.
  BufferPool::Lease small = pool.take(64 << 10);
  EXPECT_EQ(small.capacity(), size_t{64} << 10);
  // Moving a lease moves the buffer; the moved-from lease gives nothing back.
  BufferPool::Lease moved = std::move(small);
  EXPECT_EQ(small.get(), nullptr);
  EXPECT_NE(moved.get(), nullptr);
}

TEST(BufferPool, CountsWhatIsLeasedAndRefusesWhatNoMemoryHolds) {
  BufferPool pool;
  {
    BufferPool::Lease a = pool.take(1 << 20), b = pool.take(100);
    EXPECT_EQ(pool.leasedBytes(), (size_t{1} << 20) + 128);  // 100 B rounds up to 128
  }
  EXPECT_EQ(pool.leasedBytes(), 0u);
  BufferPool::Lease none = pool.take(size_t{1} << 63);  // a header's claim, not a size: null, no exception
  EXPECT_EQ(none.get(), nullptr);
  EXPECT_EQ(pool.leasedBytes(), 0u);
}

// InboundMessages: what a peer's frame headers can make a receiver do.
TEST(InboundMessages, AFrameOutsideItsMessageIsARemoteError) {
  InboundMessages in("tcp", 0, 1);
  auto m = in.frame(7, 100, 90, 20);  // [90, 110) of 100 bytes
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code(), Code::kRemote);
  EXPECT_NE(std::string(m.error().message()).find("malformed tcp frame"), std::string::npos) << m.error().message();
  ASSERT_TRUE(in.frame(8, 100, 0, 50));
  EXPECT_FALSE(in.frame(8, 200, 50, 50)) << "a later frame that changes the message's total";
  ASSERT_NE(in.announce(9, 64, 0x1000), nullptr);  // a message announced for a pull (shm's attach)
  EXPECT_FALSE(in.frame(9, 64, 0, 64)) << "a data frame for it";
}

TEST(InboundMessages, AnEarlyMessagePastTheBudgetIsRefusedBeforeAnyAllocation) {
  InboundMessages in("shm", 0, 3);
  // 2^60 bytes announced by one header: refused by the budget (16 GiB by default), naming the variable.
  auto huge = in.frame(1, uint64_t{1} << 60, 0, 0);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().code(), Code::kRemote);
  EXPECT_NE(std::string(huge.error().message()).find("HETCOMM_EARLY_MAX_BYTES"), std::string::npos)
      << huge.error().message();
  // A posted receive of the announced size takes the message straight into its buffer: no budget applies.
  std::vector<std::byte> buf(4096);
  Request r;
  ASSERT_TRUE(in.post(r, buf, 2, okStatus()));
  auto posted = in.frame(2, buf.size(), 0, buf.size());
  ASSERT_TRUE(posted);
  EXPECT_TRUE((*posted)->intoUser);
}

}  // namespace
}  // namespace hetcomm::transport
