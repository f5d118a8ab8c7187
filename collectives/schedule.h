// schedule.h: a collective as data. A Schedule is a list of steps (send, receive, reduce, copy, divide) over
// slices of three buffers, each step runnable once the steps it depends on are done. Every algorithm is a
// planner that emits one (algorithm.h); one executor runs them all (executor.h), so a new algorithm is a new
// schedule, not new plumbing.
//
// A schedule must not make a receive wait for a send to the same peer to complete: a transport may complete
// large sends only when the peer has received them (single-copy rendezvous), and the peer waits the same way.
//
// Tags: a send and the receive it matches carry the same step tag; the executor widens it with the operation's
// sequence number, so messages of different operations never meet.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/datatype.h"

namespace hetcomm::coll {

// Buffers a step may touch: the call's send and receive buffers, the executor's scratch, and for
// point-to-point groups one buffer per operation (kExtra0 + i).
enum class Buf : uint16_t { kSend = 0, kRecv = 1, kScratch = 2, kExtra0 = 3 };
inline Buf extraBuf(size_t i) { return static_cast<Buf>(static_cast<size_t>(Buf::kExtra0) + i); }

struct Slice {
  Buf buf = Buf::kRecv;
  size_t offset = 0;  // bytes
  size_t bytes = 0;
};

struct Step {
  enum class Op : uint8_t {
    kSend,    // src -> peer
    kRecv,    // peer -> dst (exactly dst.bytes)
    kReduce,  // dst = src op src2 (dst may be src or src2)
    kCopy,    // dst = src
    kDivide,  // dst /= nranks (the last step of Avg)
  };
  static constexpr int kMaxDeps = 4;

  Op op;
  int8_t path = -1;  // send: the path to take to the peer (Connection::isendOn); -1: the transport's choice
  int peer = -1;     // group rank for send/recv
  uint32_t tag = 0;
  Slice src, src2, dst;
  std::array<uint32_t, kMaxDeps> deps{};
  uint8_t ndeps = 0;

  void dependOn(uint32_t step);
};

struct Schedule {
  std::vector<Step> steps;
  size_t scratchBytes = 0;
  kernels::DataType dtype = kernels::DataType::kFloat32;
  kernels::RedOp op = kernels::RedOp::kSum;
  int nranks = 1;        // for kDivide
  bool p2pTags = false;  // tags are per-peer message numbers, not step numbers (point-to-point groups)
  // No steps: the ranks' host slots carry the collective (GroupView::hostSlotBytes; the communicator runs it).
  bool hostSlots = false;

  uint32_t add(const Step& s) {
    steps.push_back(s);
    return static_cast<uint32_t>(steps.size() - 1);
  }
  uint32_t send(int peer, uint32_t tag, Slice src);
  uint32_t recv(int peer, uint32_t tag, Slice dst);
  uint32_t reduce(Slice dst, Slice a, Slice b);
  uint32_t copy(Slice dst, Slice src);
  uint32_t divide(Slice dst);
  // Checks indices, dependencies (acyclic) and slice bounds; used by tests and debug builds.
  std::string validate(size_t sendBytes, size_t recvBytes) const;
  // Empty when every step can run eventually; otherwise which step waits forever. A step may depend on a later
  // one (pacing ties an early level to a later level's progress).
  std::string dependencyCycle() const;
};

}  // namespace hetcomm::coll
