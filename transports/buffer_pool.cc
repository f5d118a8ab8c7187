#include "transports/buffer_pool.h"

#include <algorithm>
#include <bit>
#include <new>

namespace hetcomm::transport {

namespace {
// A cache line: small messages (a loss, a flag, a pipeline's control word) often come before their receives, many
// at a time, and each must not take a page of its own (a fault per message here, tens of microseconds).
constexpr size_t kMinCapacity = 64;
}

BufferPool::Lease& BufferPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    mem_ = std::move(o.mem_);
    capacity_ = o.capacity_;
    o.pool_ = nullptr;
    o.capacity_ = 0;
  }
  return *this;
}

void BufferPool::Lease::release() {
  if (pool_ && mem_) {
    pool_->leased_ -= capacity_;
    pool_->give(std::move(mem_), capacity_);
  }
  mem_.reset();
  pool_ = nullptr;
  capacity_ = 0;
}

BufferPool::Lease BufferPool::take(size_t bytes) {
  Lease lease;
  lease.pool_ = this;
  // Sizes round up to a power of two, so buffers of one size class serve each other's messages.
  if (bytes > (size_t{1} << 62)) return lease;  // no such memory, and bit_ceil would overflow
  const size_t capacity = std::bit_ceil(std::max(bytes, kMinCapacity));
  if (auto it = free_.lower_bound(capacity); it != free_.end() && it->first <= 2 * capacity) {
    lease.mem_ = std::move(it->second);
    lease.capacity_ = it->first;
    kept_ -= it->first;
    free_.erase(it);
    leased_ += lease.capacity_;
    return lease;
  }
  lease.mem_.reset(new (std::nothrow) std::byte[capacity]);
  if (!lease.mem_) return lease;
  lease.capacity_ = capacity;
  leased_ += capacity;
  return lease;
}

void BufferPool::give(std::unique_ptr<std::byte[]> mem, size_t capacity) {
  if (capacity > maxKept_) return;  // freed
  free_.emplace(capacity, std::move(mem));
  kept_ += capacity;
  while (kept_ > maxKept_) {  // the largest go first: the small ones are the common case
    auto last = std::prev(free_.end());
    kept_ -= last->first;
    free_.erase(last);
  }
}

}  // namespace hetcomm::transport
