// engine.h: progress. One pass lets every communicator of the process advance its current operation (post sends and
// receives, reduce what arrived). Passes are run by whichever thread needs them, one at a time:
//
//   - A thread that waits for an operation (a blocking call, a stream synchronize) drives the passes itself: no
//     hand-off to another thread, no wake-up on either side of a message while both ranks are inside a call. It
//     polls for a bounded time (HETCOMM_SPIN_US), yielding the core between idle passes so that ranks which share
//     cores do not starve each other, then sleeps and leaves the rest to the engine thread.
//   - A lone blocking send or receive, or a host-slot allreduce, with nothing queued on its communicator skips the
//     queue altogether: runExclusive() gives the calling thread the pass lock for a few polls (the communicator
//     hands the call to the queue's machinery if that is not enough).
//   - A thread that queues an asynchronous operation starts it (a few passes, bounded in time) and wakes the engine
//     thread only if the operation is not finished by then.
//   - The engine thread runs passes for work nobody waits on, sleeping in epoll on the transports' fds and a wake-up
//     eventfd until something arrives or the nearest deadline. While a caller drives, or when no operation is
//     queued anywhere, it parks on a condition variable and watches no fd at all, so that messages a caller is
//     about to consume do not wake it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/param.h"
#include "common/status.h"

namespace hetcomm::comm {

// How long a waiting caller polls without movement before it sleeps. Measured on 2 cores (issue 18): a small
// collective's reply from a peer that is inside the same call arrives within microseconds, while every sleep costs
// a wake-up on both sides; past a few hundred microseconds the peer is not in the call yet and polling only burns
// the core. The link probe waits the same way, so that the latency it measures is the one a collective sees.
HC_PARAM_INT(spinUsParam, "SPIN_US", 200)

class Communicator;

class Engine {
 public:
  static Engine& get();

  // The engine starts calling comm->progressOnce(); fds (its transports' waitFds) join the epoll set.
  Status attach(Communicator* comm, const std::vector<int>& fds);
  // Blocks until no pass will touch comm again.
  void detach(Communicator* comm, const std::vector<int>& fds);
  // A communicator has this many ranks that may run on this rank's CPUs, on this many CPUs in all: when the ranks
  // outnumber the CPUs, a waiting caller yields after a few idle passes instead of a few hundred (the peer it waits
  // for may need this CPU to answer). Ranks bound to cores of their own poll without yielding.
  void noteCpuSharing(int ranks, int cpus);
  // Work was queued or a communicator failed: the engine thread runs a pass soon, unless a caller drives.
  void wake();

  // Waits until pred() holds, driving progress on this thread for up to HETCOMM_SPIN_US without movement, then
  // sleeping while the engine thread progresses. pred is re-checked whenever an operation finishes.
  void waitUntil(const std::function<bool()>& pred);
  // An asynchronous operation was queued: run passes on this thread while they move, for at most a few
  // microseconds, and hand what is left to the engine thread. done() says whether anything is left.
  void start(const std::function<bool()>& done);
  // Called (by whoever ran the pass, or by an aborting thread) when operations finished.
  void notifyFinished();
  // Runs fn(polls) on this thread holding the pass lock, if no pass is running now and comm is attached (a
  // detached one may be torn down meanwhile); returns whether it ran. polls: how many idle polls fn may make
  // before it must let go (fewer where ranks share this rank's CPUs, noteCpuSharing: the peer may need this one).
  // For a caller that can finish a small operation in a few polls without queueing it (Communicator::sendRecvHere).
  template <class Fn>
  bool runExclusive(Communicator* comm, Fn&& fn) {
    if (!passMu_.try_lock()) return false;
    std::lock_guard<std::mutex> lock(passMu_, std::adopt_lock);
    if (std::find(comms_.begin(), comms_.end(), comm) == comms_.end()) return false;
    fn(std::min(kHoldPasses, yieldAfter_.load(std::memory_order_relaxed)));
    return true;
  }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Mode : int { kRunning, kSleeping, kParked };
  // A driver keeps the pass lock over a run of passes (two atomic operations a pass are a good part of a pass),
  // and lets go before a yield and every kHoldPasses passes, so that attach, detach and other drivers get their turn.
  static constexpr unsigned kHoldPasses = 64;

  Engine();
  void run();
  // One pass over every communicator, by a thread that holds passMu_; true when anything moved.
  bool pass();
  // Runs passes on the calling thread until done() holds, no pass has moved for idleBudget, or totalBudget is
  // spent. Returns done().
  bool drive(const std::function<bool()>& done, Clock::duration idleBudget, Clock::duration totalBudget);
  // Some communicator has an operation queued or running.
  bool anyPending();

  int epollFd_ = -1;
  int wakeFd_ = -1;
  std::mutex passMu_;   // held for a whole pass, and to change comms_
  std::mutex commsMu_;  // also held to change comms_: anyPending() reads it without running a pass
  std::vector<Communicator*> comms_;
  std::mutex doneMu_;
  std::condition_variable doneCv_;
  std::atomic<int> sleepers_{0};  // threads asleep in waitUntil

  // The engine thread's state, and what wakes it: wake() bumps wakeSeq_, then ends its sleep (eventfd) or its park
  // (condition variable). It sleeps or parks only if wakeSeq_ did not move since its last pass began.
  std::atomic<int> drivers_{0};            // callers inside drive()
  std::atomic<unsigned> yieldAfter_{256};  // idle passes a driver polls before it yields the core
  std::atomic<uint64_t> wakeSeq_{0};
  std::atomic<Mode> mode_{Mode::kRunning};
  std::mutex parkMu_;
  std::condition_variable parkCv_;
  std::thread thread_;
};

}  // namespace hetcomm::comm
