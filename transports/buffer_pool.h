// buffer_pool.h: where a message that arrived before its receive was posted waits. A fresh allocation of a few
// hundred KiB or more comes from mmap and its pages fault in on first touch, then go back to the kernel when freed:
// every early message paid a fault per page. On a paravirtualised guest (this project's machines) a fault costs
// tens of microseconds, and two ranks exchanging a few MiB each way over loopback TCP stalled for 15-35 ms per step
// (2 ms without). A connection keeps the buffers its early messages used, for the next ones.
#pragma once

#include <cstddef>
#include <map>
#include <memory>

namespace hetcomm::transport {

class BufferPool {
 public:
  // Keeps at most maxKeptBytes of free buffers (the largest sizes first to go).
  explicit BufferPool(size_t maxKeptBytes = kDefaultKeptBytes) : maxKept_(maxKeptBytes) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` (uninitialised), back to the pool when the lease ends. The pool must outlive its
  // leases. A lease whose get() is null: the memory could not be had (the caller says what it was for).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept { *this = std::move(o); }
    Lease& operator=(Lease&& o) noexcept;
    ~Lease() { release(); }
    std::byte* get() const { return mem_.get(); }
    size_t capacity() const { return capacity_; }

   private:
    friend class BufferPool;
    void release();
    BufferPool* pool_ = nullptr;
    std::unique_ptr<std::byte[]> mem_;
    size_t capacity_ = 0;
  };
  Lease take(size_t bytes);

  size_t keptBytes() const { return kept_; }
  size_t leasedBytes() const { return leased_; }  // capacity of the leases now out
  static constexpr size_t kDefaultKeptBytes = 64 << 20;

 private:
  void give(std::unique_ptr<std::byte[]> mem, size_t capacity);
  std::multimap<size_t, std::unique_ptr<std::byte[]>> free_;  // by capacity
  size_t kept_ = 0, maxKept_;
  size_t leased_ = 0;
};

}  // namespace hetcomm::transport
