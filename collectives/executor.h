// executor.h: runs one schedule as a non-blocking state machine. advance() posts every step whose dependencies
// are done, runs local steps (reduce, copy, divide) inline, and collects finished transfers; it never waits.
// The progress engine calls it after the transports' progress() and sleeps in epoll when nothing moved.
//
// An executor borrows the connections and buffers; its owner keeps them alive until the executor is done or
// its connections are closed (closing drops every reference the transport holds to the executor's requests).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "collectives/schedule.h"
#include "common/status.h"
#include "transports/transport.h"

namespace hetcomm::coll {

class Executor {
 public:
  // buffers[b] is the base of Buf b (send, recv, scratch, extras); conns[p] the connection to group rank p.
  // opSeq (1 .. 2^31-1) keeps the tags of different operations on one communicator apart.
  Executor(std::shared_ptr<const Schedule> schedule, std::vector<std::byte*> buffers,
           std::vector<transport::Connection*> conns, uint64_t opSeq);
  Executor() = default;
  // Makes this executor run another schedule, as a fresh one would; its arrays keep their memory (a small
  // collective's latency is partly its allocations). Only once the last run is done or its connections closed.
  void reset(std::shared_ptr<const Schedule> schedule, std::span<std::byte* const> buffers,
             const std::vector<transport::Connection*>& conns, uint64_t opSeq);

  // Before start(): also exchange `descriptor` with the ring neighbours (send to sendTo, receive from
  // recvFrom) and call verify on what arrives; its error fails the operation. Catches ranks calling different
  // collectives, or the same one with different arguments.
  void addConsistencyCheck(int sendTo, int recvFrom, std::span<const std::byte> descriptor,
                           std::function<Status(std::span<const std::byte>)> verify);

  // Advances as far as possible without blocking: true when every step is done. *moved says whether any step
  // was issued or finished (the engine sleeps only after a pass where nothing moved).
  Result<bool> advance(bool* moved = nullptr);
  // "recv from rank 1, send to rank 3": what the executor is still waiting for, for timeout messages.
  std::string waitingOn() const;

  static constexpr uint32_t kCheckTag = 0xffffffffu;
  // The wire tag of a point-to-point message: its per-peer sequence number, in a space apart from collectives'.
  static constexpr uint64_t p2pWireTag(uint32_t seq) { return (1ull << 63) | seq; }

 private:
  Status issue(uint32_t i);
  void complete(uint32_t i);
  uint64_t wireTag(uint32_t tag) const;
  std::byte* at(const Slice& s) const { return buffers_[static_cast<size_t>(s.buf)] + s.offset; }

  std::shared_ptr<const Schedule> sched_;
  std::vector<std::byte*> buffers_;
  std::vector<transport::Connection*> conns_;
  uint64_t opSeq_ = 0;

  std::vector<uint8_t> depsLeft_;
  std::vector<uint32_t> dependentsStart_, dependents_;  // CSR: who waits for step i
  std::vector<transport::Request> reqs_;
  std::vector<uint32_t> ready_, inflight_;
  std::vector<uint32_t> fill_;  // reset()'s scratch
  size_t remaining_ = 0;
  bool started_ = false;

  struct Check {
    int sendTo = -1, recvFrom = -1;
    std::vector<std::byte> mine, theirs;
    std::function<Status(std::span<const std::byte>)> verify;
    transport::Request sendReq, recvReq;
    bool pending = false;
  } check_;
};

}  // namespace hetcomm::coll
