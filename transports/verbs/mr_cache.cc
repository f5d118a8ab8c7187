// mr_cache.cc: the registration cache (see mr_cache.h for what it guarantees and why the hook is built this way).
#include "transports/verbs/mr_cache.h"

#include <pthread.h>
#include <sys/resource.h>
#include <ucm/api/ucm.h>
#include <ucs/type/status.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

// ibv_reg_mr's answers when the pages could not be pinned (RLIMIT_MEMLOCK, or the kernel's own limits).
bool pinningRefused(int err) { return err == ENOMEM || err == EAGAIN || err == EPERM; }

void unmapHook(ucm_event_type_t type, ucm_event_t* event, void* arg) {
  if (type != UCM_EVENT_VM_UNMAPPED) return;
  static_cast<MrCache*>(arg)->onUnmapped(event->vm_unmapped.address, event->vm_unmapped.size);
}

}  // namespace

Status registrationError(int err, const void* addr, size_t len) {
  std::string hint;
  rlimit rl{};
  if (pinningRefused(err) && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    hint = format(" (RLIMIT_MEMLOCK is %s: raise it, e.g. ulimit -l unlimited)",
                  humanBytes(static_cast<uint64_t>(rl.rlim_cur)).c_str());
  else if (err == EFAULT)
    hint = " (the memory is not mapped, or is read-only where write access is needed: a receive buffer must be "
           "writable)";
  return systemError("verbs: ibv_reg_mr of %s at %p: %s%s", humanBytes(len).c_str(), addr, std::strerror(err),
                     hint.c_str());
}

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
uint8_t MrCache::Handle::access() const { return entry_->reg.access; }

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

size_t MrCache::dropUnusedLocked() {
  size_t n = 0;
  while (!lru_.empty()) {
    detachLocked(lru_.front());  // unused (it is in the LRU list), so destroyed
    ++n;
  }
  reclaims_ += n;
  return n;
}

int MrCache::registerLocked(uintptr_t start, uintptr_t end, uint8_t want, uint8_t need, Registration* out) {
  void* addr = reinterpret_cast<void*>(start);
  int err = reg_(addr, end - start, want, out);
  if (err == EFAULT && (want & kLocalWrite) && !(need & kLocalWrite)) {
    // Read-only memory (a send from a PROT_READ mapping or .rodata): the peer only reads it.
    want &= static_cast<uint8_t>(~kLocalWrite);
    err = reg_(addr, end - start, want, out);
  }
  if (err == 0) out->access = want;
  return err;
}

Result<MrCache::Handle> MrCache::acquire(const void* addr, size_t len, Use use) {
  if (len == 0) return invalidArgument("verbs: cannot register an empty buffer");
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  if (start + len < start) return invalidArgument("verbs: buffer %p + %zu wraps around", addr, len);
  const uintptr_t end = start + len;
  const uint8_t need = needs(use);
  // Sends ask for local write too (see the header): read-only pins of never-written pages can go stale.
  const uint8_t prefer = use == Use::kSend ? (kLocalWrite | kRemoteRead) : kLocalWrite;
  lockOwner();
  purgeLocked();
  auto it = index_.upper_bound(start);
  if (it != index_.begin()) {
    Entry* c = std::prev(it)->second;
    if (c->start <= start && c->end >= end && (c->reg.access & need) == need) {
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
  // Cached ranges this one overlaps: register the union, with the access of all of them, and drop them, so ranges
  // in the index never overlap and no user of theirs loses access it had.
  std::vector<Entry*> overlaps;
  uintptr_t ustart = pstart, uend = pend;
  uint8_t uaccess = prefer;
  auto collect = [&] {
    overlaps.clear();
    ustart = pstart;
    uend = pend;
    uaccess = prefer;
    auto o = index_.upper_bound(pstart);
    if (o != index_.begin() && std::prev(o)->second->end > pstart) --o;
    for (; o != index_.end() && o->first < pend; ++o) {
      overlaps.push_back(o->second);
      ustart = std::min(ustart, o->second->start);
      uend = std::max(uend, o->second->end);
      uaccess |= o->second->reg.access;
    }
  };
  collect();
  Registration reg;
  int err = registerLocked(ustart, uend, uaccess, need, &reg);
  if (pinningRefused(err) && !lru_.empty()) {
    // Out of pinnable memory, while registrations nobody uses hold some: let them go and try once more. The
    // overlapping ones among them are gone, so the union is taken again.
    const size_t dropped = dropUnusedLocked();
    HC_TRACE(Ib, "verbs: registering %s refused (%s): dropped %zu unused registrations and retrying",
             humanBytes(uend - ustart).c_str(), std::strerror(err), dropped);
    collect();
    err = registerLocked(ustart, uend, uaccess, need, &reg);
  }
  if (err != 0 && (ustart != pstart || uend != pend || uaccess != prefer)) {
    // The union may span memory that is gone without our hearing of it, or read-only memory another use needs
    // written: register just what was asked, for just this use.
    ustart = pstart;
    uend = pend;
    err = registerLocked(ustart, uend, prefer, need, &reg);
  }
  if (err != 0) {
    unlockOwner();
    return registrationError(err, reinterpret_cast<const void*>(pstart), pend - pstart);
  }
  for (Entry* o : overlaps) detachLocked(o);
  all_.emplace_back();
  Entry* e = &all_.back();
  e->self = std::prev(all_.end());
  e->start = ustart;
  e->end = uend;
  e->reg = reg;
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
  s.reclaims = reclaims_;
  s.entries = entries_;
  s.bytes = bytes_;
  s.inUse = inUse_;
  return s;
}

}  // namespace hetcomm::transport::verbs
