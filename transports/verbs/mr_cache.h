// mr_cache.h: a cache of memory registrations, so that a buffer sent or received again (a collective's buffers,
// every iteration) is not registered again: ibv_reg_mr pins pages and costs tens of microseconds per megabyte.
//
// acquire(addr, len) returns a handle on a registration covering [addr, addr + len): a hit when a cached one
// covers it, else a new registration of the page-aligned range, merged with the cached registrations it overlaps
// (so cached ranges never overlap and a lookup is one map search). Released registrations stay cached, least
// recently used first out beyond a byte or entry limit; one in use is never evicted.
//
// Caching is only correct while the memory stays mapped: after free() gives pages back and something new is mapped
// at the same address, a cached registration still points at the old, pinned pages. So the cache watches
// munmap/mremap/brk/madvise through UCX's memory hooks (libucm, UCM_EVENT_VM_UNMAPPED) and drops what overlaps an
// unmapped range. The hook runs in whatever thread unmaps, possibly inside malloc, where it must not allocate nor
// wait for a lock the same thread may hold: it marks overlapping entries under a try-lock, or queues the range in
// a fixed ring when the lock is busy, and the owner's next call (acquire, release or purge) deregisters. When the
// hook cannot be installed, the cache keeps nothing (every release deregisters).
//
// Access. A registration is made for a use: a receive buffer is written by our RDMA READs (local write only); a send
// buffer is read by the peer's (remote read). A send buffer may be read-only memory (a PROT_READ mapping, .rodata),
// where asking for local write makes ibv_reg_mr fail with EFAULT, so sends ask for local write and remote read first
// and fall back to remote read alone on EFAULT. The write-first attempt stays because a read-only pin of private
// pages never written yet can go stale on older kernels: the pin holds the shared zero page, and the first write
// copies the page elsewhere. A hit must grant at least what its use needs (a read-only registration never serves a
// receive); a registration that replaces overlapping ones asks for the union of their access.
//
// Pinned memory is limited (RLIMIT_MEMLOCK): when a registration is refused for lack of it, the cache drops every
// unused registration it keeps and tries once more before giving up.
//
// Register and deregister are injected, so tests run it with a fake registrar; the verbs transport plugs in
// ibv_reg_mr and ibv_dereg_mr. Threading: one owner thread calls acquire/release/purge; only the hook comes from
// other threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>

#include "common/status.h"

namespace hetcomm::transport::verbs {

struct Registration {
  void* handle = nullptr;  // ibv_mr*, or whatever the registrar uses
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint8_t access = 0;  // MrCache::Access bits it was registered with
};

// A system error for a refused registration (ibv_reg_mr's errno), with the RLIMIT_MEMLOCK hint when pinning was
// refused and a note on read-only memory for EFAULT.
Status registrationError(int err, const void* addr, size_t len);

class MrCache {
  struct Entry;

 public:
  // What the NIC may do with the memory. Our own bits, so this header needs no <infiniband/verbs.h>; the verbs
  // registrar maps them to IBV_ACCESS_LOCAL_WRITE and IBV_ACCESS_REMOTE_READ.
  enum Access : uint8_t { kLocalWrite = 1, kRemoteRead = 2 };
  // What a registration is for: a send's buffer is read by the peer, a receive's written by our reads.
  enum class Use : uint8_t { kSend, kRecv };
  static uint8_t needs(Use use) { return use == Use::kSend ? kRemoteRead : kLocalWrite; }

  // Registers [addr, addr + len) with exactly `access`; 0 and *out filled, or an errno value (as ibv_reg_mr sets
  // errno: EFAULT for memory that is not mapped, or not writable when local write is asked; ENOMEM, EAGAIN or EPERM
  // when pinning is refused).
  using RegisterFn = std::function<int(void* addr, size_t len, uint8_t access, Registration* out)>;
  using DeregisterFn = std::function<void(const Registration&)>;

  struct Limits {
    size_t maxBytes = size_t{4} << 30;  // registered bytes kept, in use or not
    size_t maxEntries = 1024;           // 0: cache nothing
  };
  struct Stats {
    uint64_t hits = 0, misses = 0, evictions = 0, invalidations = 0;
    uint64_t reclaims = 0;  // unused registrations dropped because pinning more was refused
    size_t entries = 0;  // live registrations
    size_t bytes = 0;
    size_t inUse = 0;
  };

  // A registration in use. Move-only; releasing it (reset() or destruction) returns it to the cache, which must
  // outlive it.
  class Handle {
   public:
    Handle() = default;
    Handle(Handle&& o) noexcept : cache_(o.cache_), entry_(o.entry_) { o.cache_ = nullptr, o.entry_ = nullptr; }
    Handle& operator=(Handle&& o) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { reset(); }

    explicit operator bool() const { return entry_ != nullptr; }
    uint32_t lkey() const;
    uint32_t rkey() const;
    uintptr_t base() const;  // the registered (page-aligned) range
    size_t length() const;
    uint8_t access() const;  // Access bits: at least what the use it was acquired for needs
    // Releases. dropNow: the registration must not outlive its last user (a peer may still hold its rkey after a
    // failure), so it is deregistered as soon as nobody else uses it instead of staying cached.
    void reset(bool dropNow = false);

   private:
    friend class MrCache;
    Handle(MrCache* cache, Entry* entry) : cache_(cache), entry_(entry) {}
    MrCache* cache_ = nullptr;
    Entry* entry_ = nullptr;
  };

  // watchUnmaps: install the libucm hook; when that fails nothing is cached. false: the owner promises to report
  // unmaps itself through onUnmapped (tests of the cache's logic).
  MrCache(RegisterFn reg, DeregisterFn dereg, Limits limits, bool watchUnmaps = true);
  ~MrCache();  // deregisters everything; no handle may outlive it
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // A registration covering [addr, addr + len) with the access `use` needs; len > 0.
  Result<Handle> acquire(const void* addr, size_t len, Use use);
  // Applies the invalidations the hook queued or marked and deregisters what is no longer used. Cheap (one atomic
  // load) when there are none: the transport calls it from progress().
  void purge();
  bool invalidationsPending() const { return dirty_.load(std::memory_order_acquire); }

  // True while unmaps are watched (by the libucm hook, or by the owner); false means nothing is cached.
  bool watching() const { return watching_; }
  bool hooked() const { return hooked_; }  // the libucm hook is installed
  Stats stats() const;

  // The hook's entry point: [addr, addr + len) is about to be unmapped. Any thread; never allocates or blocks.
  void onUnmapped(const void* addr, size_t len) noexcept;

 private:
  struct Entry {
    uintptr_t start = 0, end = 0;  // page-aligned [start, end)
    Registration reg;
    int refs = 0;
    bool indexed = false;  // in index_ (else detached: deregistered when its last user releases it)
    bool invalid = false;  // overlaps an unmapped range: detach at the next purge
    std::list<Entry*>::iterator lru;
    bool inLru = false;
    std::list<Entry>::iterator self;  // in all_
  };
  struct Range {
    uintptr_t start, end;
  };
  static constexpr size_t kRingSize = 64;

  // All with mu_ held by the owner thread.
  void lockOwner();
  void unlockOwner();
  void purgeLocked();
  void markLocked(uintptr_t start, uintptr_t end) noexcept;  // no allocation: the hook calls it
  void detachLocked(Entry* e);
  void destroyLocked(Entry* e);
  void evictLocked();
  size_t dropUnusedLocked();  // every unused (LRU) entry; returns how many
  // One registration of [start, end) asking `want`; on EFAULT, when `need` does not include local write, again
  // without it (read-only memory). 0 or an errno value.
  int registerLocked(uintptr_t start, uintptr_t end, uint8_t want, uint8_t need, Registration* out);
  void release(Entry* e, bool dropNow);

  RegisterFn reg_;
  DeregisterFn dereg_;
  Limits limits_;
  bool watching_ = false;
  bool hooked_ = false;  // the libucm handler is installed

  mutable std::mutex mu_;
  std::atomic<uint64_t> holder_{0};    // pthread_self() of the thread holding mu_ (the hook may run inside it)
  std::list<Entry> all_;               // every live registration (indexed or detached), stable addresses
  std::map<uintptr_t, Entry*> index_;  // by start; ranges never overlap
  std::atomic<size_t> indexed_{0};     // index_.size(), for the hook's fast exit
  std::list<Entry*> lru_;              // unused and indexed, least recently used first
  size_t entries_ = 0, bytes_ = 0, inUse_ = 0;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, invalidations_ = 0, reclaims_ = 0;

  std::atomic<bool> dirty_{false};  // entries marked invalid, or ranges queued
  std::atomic_flag ringLock_ = ATOMIC_FLAG_INIT;
  Range ring_[kRingSize];
  size_t ringCount_ = 0;
  bool ringOverflow_ = false;  // more ranges than the ring holds: treat as "everything unmapped"
};

}  // namespace hetcomm::transport::verbs
