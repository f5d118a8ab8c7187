// BufferPool: early-arrival buffers are reused instead of freshly mapped for every message.
#include "transports/buffer_pool.h"

#include <gtest/gtest.h>

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
  BufferPool::Lease c = pool.take(1);  // a tiny one gets its own (at least 64 KiB)
  EXPECT_NE(c.get(), first);
  EXPECT_GE(c.capacity(), size_t{64} << 10);
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

}  // namespace
}  // namespace hetcomm::transport
