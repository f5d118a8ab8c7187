#include "comm/engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "comm/communicator.h"
#include "common/log.h"

namespace hetcomm::comm {

namespace {
// Upper bound on one sleep, so a lost wake-up can cost at most this much (none is expected).
constexpr int kMaxSleepMs = 1000;
}  // namespace

Engine& Engine::get() {
  // Never destroyed: the thread may still be sleeping in epoll when the process exits.
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
    std::lock_guard<std::mutex> lock(commsMu_);
    comms_.push_back(comm);
  }
  wake();
  return okStatus();
}

void Engine::detach(Communicator* comm, const std::vector<int>& fds) {
  {
    std::lock_guard<std::mutex> lock(commsMu_);
    comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
  }
  for (int fd : fds)
    if (fd >= 0) epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr);
  // A pass that started before the erase may still hold comm: wait for it to end.
  std::lock_guard<std::mutex> pass(passMu_);
}

void Engine::wake() {
  uint64_t one = 1;
  ssize_t rc = ::write(wakeFd_, &one, sizeof(one));
  (void)rc;  // a full counter already means "wake up"
}

void Engine::notifyFinished() {
  { std::lock_guard<std::mutex> lock(doneMu_); }
  doneCv_.notify_all();
}

void Engine::waitUntil(const std::function<bool()>& pred) {
  std::unique_lock<std::mutex> lock(doneMu_);
  // Predicates read state the engine publishes before notifying; the timed wait guards against a check that
  // raced the notification.
  while (!pred()) doneCv_.wait_for(lock, std::chrono::milliseconds(50));
}

void Engine::run() {
  pthread_setname_np(pthread_self(), "hc-progress");
  std::vector<Communicator*> comms;
  while (true) {
    bool moved = false;
    Deadline nearest = Deadline::never();
    {
      std::lock_guard<std::mutex> pass(passMu_);
      {
        std::lock_guard<std::mutex> lock(commsMu_);
        comms = comms_;
      }
      for (Communicator* c : comms) {
        if (c->progressOnce()) moved = true;
        nearest = Deadline::earlier(nearest, c->deadline());
      }
      // About to sleep: transports that must re-arm their wake-up do it now, and may find work instead.
      for (Communicator* c : comms)
        if (!moved && !c->readyToSleep()) moved = true;
    }
    if (moved) continue;
    // Nothing moved: sleep until a socket is ready, work is queued, or the nearest operation times out.
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
}

}  // namespace hetcomm::comm
