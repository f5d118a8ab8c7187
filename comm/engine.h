// engine.h: the progress engine. One thread per process serves every communicator: each pass lets every
// communicator advance its current operation (post sends and receives, reduce what arrived), and when nothing
// moved it sleeps in epoll on the transports' fds and a wake-up eventfd, until the nearest deadline.
//
// API threads never touch connections; they queue ops and wait on the engine's condition variable.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"

namespace hetcomm::comm {

class Communicator;
struct Op;

class Engine {
 public:
  static Engine& get();

  // The engine starts calling comm->progressOnce(); fds (its transports' waitFds) join the epoll set.
  Status attach(Communicator* comm, const std::vector<int>& fds);
  // Blocks until the engine will never touch comm again.
  void detach(Communicator* comm, const std::vector<int>& fds);
  void wake();

  // Waits until pred() holds; pred is re-checked whenever an operation finishes.
  void waitUntil(const std::function<bool()>& pred);
  // Called (by the engine or by an aborting thread) when operations finished.
  void notifyFinished();

 private:
  Engine();
  void run();

  int epollFd_ = -1;
  int wakeFd_ = -1;
  std::mutex commsMu_;
  std::vector<Communicator*> comms_;
  std::mutex passMu_;  // held for a whole pass: detach takes it to be sure no pass still uses the comm
  std::mutex doneMu_;
  std::condition_variable doneCv_;
  std::thread thread_;
};

}  // namespace hetcomm::comm
