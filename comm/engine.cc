#include "comm/engine.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "comm/communicator.h"
#include "common/log.h"
#include "common/param.h"

namespace hetcomm::comm {

namespace {
// Upper bound on one sleep, so a lost wake-up can cost at most this much (none is expected).
constexpr int kMaxSleepMs = 1000;
// What the caller of an asynchronous operation spends starting it: enough for a small operation to finish when
// the peers are in it too, short enough that the call still returns at once.
constexpr auto kStartBudget = std::chrono::microseconds(20);
// How long the engine thread keeps passing before it sleeps: a reply often comes within microseconds.
constexpr auto kEngineSpin = std::chrono::microseconds(5);

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

Engine& Engine::get() {
  // Never destroyed: the thread may still be sleeping when the process exits.
  static Engine* engine = new Engine();
  return *engine;
}

Engine::Engine() {
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  HC_CHECK(epollFd_ >= 0 && wakeFd_ >= 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakeFd_;
  HC_CHECK(epoll_ctl(epollFd_, EPOLL_CTL_ADD, wakeFd_, &ev) == 0);
  thread_ = std::thread([this] { run(); });
  thread_.detach();
}

Status Engine::attach(Communicator* comm, const std::vector<int>& fds) {
  for (int fd : fds) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &ev) != 0) return errnoStatus(errno, "engine: epoll_ctl add");
  }
  {
    std::scoped_lock lock(passMu_, commsMu_);
    comms_.push_back(comm);
  }
  wake();
  return okStatus();
}

void Engine::detach(Communicator* comm, const std::vector<int>& fds) {
  {
    // Taking passMu_ waits for a pass that may still use comm to end.
    std::scoped_lock lock(passMu_, commsMu_);
    comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
  }
  for (int fd : fds)
    if (fd >= 0) epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr);
}

void Engine::wake() {
  wakeSeq_.fetch_add(1, std::memory_order_seq_cst);
  switch (mode_.load(std::memory_order_seq_cst)) {
    case Mode::kSleeping: {
      uint64_t one = 1;
      ssize_t rc = ::write(wakeFd_, &one, sizeof(one));
      (void)rc;  // a full counter already means "wake up"
      break;
    }
    case Mode::kParked: {
      std::lock_guard<std::mutex> lock(parkMu_);
      parkCv_.notify_one();
      break;
    }
    case Mode::kRunning:
      break;  // it passes again before it sleeps: it sees wakeSeq_ moved
  }
}

void Engine::noteCpuSharing(int ranks, int cpus) {
  if (ranks > std::max(1, cpus)) yieldAfter_.store(4, std::memory_order_relaxed);
}

void Engine::notifyFinished() {
  // Only threads asleep in waitUntil need the notification; a caller that drives its operation sees it finish.
  // The fence pairs with the sleeper's count increment before it checks its predicate: either it sees the
  // operation finished, or this sees it counted.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_relaxed) == 0) return;
  { std::lock_guard<std::mutex> lock(doneMu_); }
  doneCv_.notify_all();
}

bool Engine::pass() {
  bool moved = false;
  for (Communicator* c : comms_)  // attach and detach change it only under passMu_, which the caller holds
    if (c->progressOnce()) moved = true;
  return moved;
}

bool Engine::anyPending() {
  std::lock_guard<std::mutex> lock(commsMu_);
  for (Communicator* c : comms_)
    if (!c->idle()) return true;
  return false;
}

bool Engine::drive(const std::function<bool()>& done, Clock::duration idleBudget, Clock::duration totalBudget) {
  drivers_.fetch_add(1, std::memory_order_seq_cst);
  // Read at the first look at the clock below, not here: an operation done in its first pass (a send into a ring)
  // then reads no clock at all.
  Clock::time_point start{}, lastMove{};
  bool finished = done();
  // The clock is read every few passes only: on virtual machines a read can cost as much as a pass.
  constexpr unsigned kClockEvery = 8;
  bool held = false;
  for (unsigned idle = 0, passes = 0; !finished; ++passes) {
    bool moved = false;
    if (held || passMu_.try_lock()) {
      held = true;
      moved = pass();
    }
    finished = done();
    if (finished) break;
    if (moved) {
      idle = 0;
      lastMove = Clock::time_point{};  // read again below
    } else {
      ++idle;
    }
    if (passes % kClockEvery == 0 || lastMove == Clock::time_point{}) {
      const auto now = Clock::now();
      if (start == Clock::time_point{}) start = now;
      if (lastMove == Clock::time_point{}) lastMove = now;
      if (now - lastMove >= idleBudget || now - start >= totalBudget) break;
    }
    // Nothing moved: a rank that shares this core may need it to answer. With a core per rank, yield only now and
    // then (a peer on another core answers within a microsecond, and a yield is a system call); with more ranks
    // than cores, yield after a few idle passes.
    const bool yield = !moved && idle % yieldAfter_.load(std::memory_order_relaxed) == 0;
    if (held && (yield || passes % kHoldPasses == kHoldPasses - 1)) {
      passMu_.unlock();
      held = false;
    }
    if (yield)
      sched_yield();
    else if (!moved)
      relax();
  }
  if (held) passMu_.unlock();
  // The last driver out hands the engine thread whatever is still queued or running; with nothing pending it
  // stays parked (a message that arrives meanwhile waits in the transport for the operation that takes it).
  if (drivers_.fetch_sub(1, std::memory_order_seq_cst) == 1 && anyPending()) wake();
  return finished;
}

void Engine::start(const std::function<bool()>& done) {
  if (!drive(done, kStartBudget, kStartBudget)) wake();
}

void Engine::waitUntil(const std::function<bool()>& pred) {
  const auto spin = std::chrono::microseconds(std::max<int64_t>(0, spinUsParam()));
  if (drive(pred, spin, Clock::duration::max())) return;
  wake();  // drive() woke the engine if work is pending; this covers a pred that waits on another thread
  std::unique_lock<std::mutex> lock(doneMu_);
  sleepers_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with notifyFinished's
  // Predicates read state the engine publishes before notifying; the timed wait guards against a check that
  // raced the notification.
  while (!pred()) doneCv_.wait_for(lock, std::chrono::milliseconds(50));
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

void Engine::run() {
  pthread_setname_np(pthread_self(), "hc-progress");
  while (true) {
    // Park while a caller drives, and when there is nothing to do, until wake().
    uint64_t seen = wakeSeq_.load(std::memory_order_seq_cst);
    if (drivers_.load(std::memory_order_seq_cst) > 0 || !anyPending()) {
      std::unique_lock<std::mutex> lock(parkMu_);
      mode_.store(Mode::kParked, std::memory_order_seq_cst);
      parkCv_.wait(lock, [&] {
        return drivers_.load(std::memory_order_seq_cst) == 0 && wakeSeq_.load(std::memory_order_seq_cst) != seen;
      });
      mode_.store(Mode::kRunning, std::memory_order_seq_cst);
      continue;
    }
    bool moved = false;
    Deadline nearest = Deadline::never();
    const auto spinUntil = Clock::now() + kEngineSpin;
    {
      std::lock_guard<std::mutex> lock(passMu_);
      do {
        moved = pass();
        if (moved || drivers_.load(std::memory_order_relaxed) > 0) break;
        relax();
      } while (Clock::now() < spinUntil);
      // About to sleep: transports that must re-arm their wake-up do it now, and may find work instead.
      for (Communicator* c : comms_)
        if (!moved && !c->readyToSleep()) moved = true;
      for (Communicator* c : comms_) nearest = Deadline::earlier(nearest, c->deadline());
    }
    if (moved) continue;
    // Nothing moved: sleep until a socket is ready, work is queued, or the nearest operation times out.
    mode_.store(Mode::kSleeping, std::memory_order_seq_cst);
    if (wakeSeq_.load(std::memory_order_seq_cst) == seen && drivers_.load(std::memory_order_seq_cst) == 0) {
      int timeout = nearest.isNever() ? kMaxSleepMs : std::min(kMaxSleepMs, nearest.msLeft());
      epoll_event evs[16];
      int n = epoll_wait(epollFd_, evs, 16, timeout);
      for (int i = 0; i < n; ++i) {
        if (evs[i].data.fd == wakeFd_) {
          uint64_t v;
          ssize_t rc = ::read(wakeFd_, &v, sizeof(v));
          (void)rc;
        }
      }
    }
    mode_.store(Mode::kRunning, std::memory_order_seq_cst);
  }
}

}  // namespace hetcomm::comm
