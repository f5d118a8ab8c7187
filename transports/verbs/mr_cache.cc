// mr_cache.cc: the registration cache (see mr_cache.h for what it guarantees and why the hook is built this way).
#include "transports/verbs/mr_cache.h"

#include <pthread.h>
#include <ucm/api/ucm.h>
#include <ucs/type/status.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::transport::verbs {

namespace {

// Order among libucm's handlers of the same event; UCX's own registration cache uses 1000 too.
constexpr int kHookPriority = 1000;

uintptr_t pageSize() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

uint64_t selfId() { return static_cast<uint64_t>(pthread_self()); }

void unmapHook(ucm_event_type_t type, ucm_event_t* event, void* arg) {
  if (type != UCM_EVENT_VM_UNMAPPED) return;
  static_cast<MrCache*>(arg)->onUnmapped(event->vm_unmapped.address, event->vm_unmapped.size);
}

}  // namespace

// ---- Handle ----

MrCache::Handle& MrCache::Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    cache_ = o.cache_;
    entry_ = o.entry_;
    o.cache_ = nullptr;
    o.entry_ = nullptr;
  }
  return *this;
}

uint32_t MrCache::Handle::lkey() const { return entry_->reg.lkey; }
uint32_t MrCache::Handle::rkey() const { return entry_->reg.rkey; }
uintptr_t MrCache::Handle::base() const { return entry_->start; }
size_t MrCache::Handle::length() const { return entry_->end - entry_->start; }

void MrCache::Handle::reset(bool dropNow) {
  if (!entry_) return;
  cache_->release(entry_, dropNow);
  cache_ = nullptr;
  entry_ = nullptr;
}

// ---- cache ----

MrCache::MrCache(RegisterFn reg, DeregisterFn dereg, Limits limits, bool watchUnmaps)
    : reg_(std::move(reg)), dereg_(std::move(dereg)), limits_(limits) {
  if (limits_.maxEntries == 0) return;  // nothing is kept, so nothing can go stale
  if (!watchUnmaps) {
    watching_ = true;  // the owner reports unmaps itself (tests)
    return;
  }
  // Last in the constructor: the hook may fire in another thread as soon as it is installed.
  ucs_status_t st = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, kHookPriority, unmapHook, this);
  if (st == UCS_OK) {
    watching_ = true;
    hooked_ = true;
  } else {
    limits_.maxEntries = 0;
    HC_INFO(Ib, "verbs: libucm cannot watch munmap (%s): memory registrations are not cached", ucs_status_string(st));
  }
}

MrCache::~MrCache() {
  // First: once this returns no hook runs (libucm takes its event lock exclusively to remove a handler).
  if (hooked_) ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, unmapHook, this);
  std::lock_guard<std::mutex> lock(mu_);
  if (inUse_ > 0) HC_WARN("verbs: %zu memory registrations still in use when their cache is destroyed", inUse_);
  for (auto& e : all_) dereg_(e.reg);
  all_.clear();
  index_.clear();
  lru_.clear();
}

void MrCache::lockOwner() {
  mu_.lock();
  holder_.store(selfId(), std::memory_order_relaxed);
}

void MrCache::unlockOwner() {
  holder_.store(0, std::memory_order_relaxed);
  indexed_.store(index_.size(), std::memory_order_release);
  mu_.unlock();
}

void MrCache::onUnmapped(const void* addr, size_t len) noexcept {
  // Every munmap of the process comes here: leave at once when nothing is cached.
  if (len == 0 || indexed_.load(std::memory_order_acquire) == 0) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
  // This thread may be the owner, inside acquire() (ibv_reg_mr freeing memory): then the lock is ours and taking
  // it again would deadlock. Another thread never blocks either: it may hold malloc's arena lock while the owner,
  // holding mu_, waits for that lock in malloc.
  if (holder_.load(std::memory_order_relaxed) != selfId() && mu_.try_lock()) {
    markLocked(start, end);
    mu_.unlock();
    return;
  }
  while (ringLock_.test_and_set(std::memory_order_acquire)) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  if (ringCount_ < kRingSize)
    ring_[ringCount_++] = {start, end};
  else
    ringOverflow_ = true;
  dirty_.store(true, std::memory_order_release);
  ringLock_.clear(std::memory_order_release);
}

void MrCache::markLocked(uintptr_t start, uintptr_t end) noexcept {
  auto mark = [&](Entry* e) {
    if (!e->invalid) {
      e->invalid = true;
      dirty_.store(true, std::memory_order_release);
    }
  };
  auto it = index_.upper_bound(start);
  if (it != index_.begin()) {
    Entry* prev = std::prev(it)->second;
    if (prev->end > start) mark(prev);
  }
  for (; it != index_.end() && it->first < end; ++it) mark(it->second);
}

void MrCache::purgeLocked() {
  if (!dirty_.exchange(false, std::memory_order_acq_rel)) return;
  Range ranges[kRingSize];
  size_t n;
  bool overflow;
  while (ringLock_.test_and_set(std::memory_order_acquire)) {
  }
  n = ringCount_;
  std::copy(ring_, ring_ + n, ranges);
  overflow = ringOverflow_;
  ringCount_ = 0;
  ringOverflow_ = false;
  ringLock_.clear(std::memory_order_release);
  if (overflow) {
    for (auto& [start, e] : index_) e->invalid = true;
  }
  for (size_t i = 0; i < n; ++i) markLocked(ranges[i].start, ranges[i].end);
  for (auto it = index_.begin(); it != index_.end();) {
    Entry* e = it->second;
    ++it;  // detachLocked erases e's node
    if (e->invalid) {
      ++invalidations_;
      detachLocked(e);
    }
  }
}

void MrCache::detachLocked(Entry* e) {
  if (e->indexed) {
    index_.erase(e->start);
    e->indexed = false;
  }
  if (e->inLru) {
    lru_.erase(e->lru);
    e->inLru = false;
  }
  if (e->refs == 0) destroyLocked(e);
}

void MrCache::destroyLocked(Entry* e) {
  dereg_(e->reg);
  bytes_ -= e->end - e->start;
  --entries_;
  all_.erase(e->self);
}

void MrCache::evictLocked() {
  while ((bytes_ > limits_.maxBytes || entries_ > limits_.maxEntries) && !lru_.empty()) {
    Entry* victim = lru_.front();
    ++evictions_;
    detachLocked(victim);  // unused (it is in the LRU list), so destroyed
  }
}

Result<MrCache::Handle> MrCache::acquire(const void* addr, size_t len) {
  if (len == 0) return invalidArgument("verbs: cannot register an empty buffer");
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  if (start + len < start) return invalidArgument("verbs: buffer %p + %zu wraps around", addr, len);
  const uintptr_t end = start + len;
  lockOwner();
  purgeLocked();
  auto it = index_.upper_bound(start);
  if (it != index_.begin()) {
    Entry* c = std::prev(it)->second;
    if (c->start <= start && c->end >= end) {
      if (c->inLru) {
        lru_.erase(c->lru);
        c->inLru = false;
      }
      if (c->refs++ == 0) ++inUse_;
      ++hits_;
      unlockOwner();
      return Handle(this, c);
    }
  }
  ++misses_;
  const uintptr_t page = pageSize();
  const uintptr_t pstart = start & ~(page - 1);
  const uintptr_t pend = (end + page - 1) & ~(page - 1);
  // Cached ranges this one overlaps: register the union and drop them, so ranges in the index never overlap.
  std::vector<Entry*> overlaps;
  uintptr_t ustart = pstart, uend = pend;
  it = index_.upper_bound(pstart);
  if (it != index_.begin() && std::prev(it)->second->end > pstart) --it;
  for (; it != index_.end() && it->first < pend; ++it) {
    overlaps.push_back(it->second);
    ustart = std::min(ustart, it->second->start);
    uend = std::max(uend, it->second->end);
  }
  Result<Registration> reg = reg_(reinterpret_cast<void*>(ustart), uend - ustart);
  if (!reg && (ustart != pstart || uend != pend)) {
    // The union may span memory that is gone without our hearing of it: register just what was asked.
    ustart = pstart;
    uend = pend;
    reg = reg_(reinterpret_cast<void*>(ustart), uend - ustart);
  }
  if (!reg) {
    unlockOwner();
    return reg.error();
  }
  for (Entry* o : overlaps) detachLocked(o);
  all_.emplace_back();
  Entry* e = &all_.back();
  e->self = std::prev(all_.end());
  e->start = ustart;
  e->end = uend;
  e->reg = *reg;
  e->refs = 1;
  e->indexed = true;
  index_[ustart] = e;
  ++entries_;
  ++inUse_;
  bytes_ += uend - ustart;
  evictLocked();
  unlockOwner();
  return Handle(this, e);
}

void MrCache::release(Entry* e, bool dropNow) {
  lockOwner();
  purgeLocked();  // may detach e (it is still referenced, so not destroyed)
  if (--e->refs == 0) --inUse_;
  if (dropNow || !e->indexed) {
    detachLocked(e);  // destroyed when nobody else uses it
  } else if (e->refs == 0) {
    lru_.push_back(e);
    e->lru = std::prev(lru_.end());
    e->inLru = true;
    evictLocked();
  }
  unlockOwner();
}

void MrCache::purge() {
  if (!dirty_.load(std::memory_order_acquire)) return;
  lockOwner();
  purgeLocked();
  unlockOwner();
}

MrCache::Stats MrCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.invalidations = invalidations_;
  s.entries = entries_;
  s.bytes = bytes_;
  s.inUse = inUse_;
  return s;
}

}  // namespace hetcomm::transport::verbs
