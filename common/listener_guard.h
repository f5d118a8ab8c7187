// listener_guard.h: what a listening socket owes to connections that have not proven the job secret yet (the
// store's and the tcp transport's listeners):
//   HandshakeDeadline   closes an accepted socket whose handshake has not finished in time;
//   Unauthenticated     counts the connections in their handshake, so a listener can cap them;
//   RefusalLog          one warning per interval for refused connections, with how many and the last reason.
// A port scanner, a half-open peer or a flood of strangers then costs a bounded number of file descriptors and a
// log line every few seconds. Header-only (Boost.Asio); every member runs on the listener's io_context thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/log.h"

namespace hetcomm {

template <class Socket>
class HandshakeDeadline {
 public:
  HandshakeDeadline(boost::asio::io_context& io, Socket& sock, std::chrono::milliseconds limit)
      : timer_(io, limit), state_(std::make_shared<State>(State{&sock})) {
    // The handler may already be queued when the guard goes: it reaches the socket through the shared state,
    // which the destructor disconnects.
    timer_.async_wait([state = state_](const boost::system::error_code& ec) {
      if (ec || state->sock == nullptr || state->expired) return;
      state->expired = true;
      boost::system::error_code ignored;
      state->sock->close(ignored);
    });
  }
  ~HandshakeDeadline() { disarm(); }
  HandshakeDeadline(const HandshakeDeadline&) = delete;
  HandshakeDeadline& operator=(const HandshakeDeadline&) = delete;

  // The handshake finished in time: the socket is no longer the guard's to close.
  void disarm() {
    state_->sock = nullptr;
    timer_.cancel();
  }
  // The deadline passed and the socket was closed (reads and writes on it failed because of that).
  bool expired() const { return state_->expired; }

 private:
  struct State {
    Socket* sock;
    bool expired = false;
  };
  boost::asio::steady_timer timer_;
  std::shared_ptr<State> state_;
};

// Counts one connection in its handshake for as long as it lives or until done(). The count is shared: a
// connection's coroutine may outlive the listener's state when its io_context goes last.
class Unauthenticated {
 public:
  explicit Unauthenticated(std::shared_ptr<int> count) : count_(std::move(count)) { ++*count_; }
  ~Unauthenticated() { done(); }
  Unauthenticated(const Unauthenticated&) = delete;
  Unauthenticated& operator=(const Unauthenticated&) = delete;
  void done() {
    if (count_) --*count_;
    count_.reset();
  }

 private:
  std::shared_ptr<int> count_;
};

class RefusalLog {
 public:
  explicit RefusalLog(std::string who, std::chrono::seconds every = std::chrono::seconds(10))
      : who_(std::move(who)), every_(every) {}
  void refuse(const std::string& why) {
    const auto now = std::chrono::steady_clock::now();
    ++count_;
    last_ = why;
    if (now < next_) return;
    if (count_ == 1)
      HC_WARN("%s: refused %s", who_.c_str(), last_.c_str());
    else
      HC_WARN("%s: refused %llu connections in the last %llds, the last one: %s", who_.c_str(),
              (unsigned long long)count_, (long long)every_.count(), last_.c_str());
    count_ = 0;
    next_ = now + every_;
  }

 private:
  std::string who_;
  std::chrono::seconds every_;
  uint64_t count_ = 0;
  std::string last_;
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace hetcomm
