// hetcomm.hpp: a header-only C++20 layer over the C API: RAII owners for communicators and streams,
// std::span overloads that infer the datatype, and an exception carrying the result code and message.
//
//   hetcomm::Comm world = hetcomm::Comm::fromEnv();
//   std::vector<float> grads(n);
//   world.allReduce(std::span(grads), hetcomm::Op::kAvg);          // in place, blocking
//   hetcomm::Stream s;
//   world.allReduce(std::span<const float>(a), std::span(b), hetcomm::Op::kSum, &s);  // queued
//   s.synchronize();
//
// Calls throw hetcomm::Error on failure; the C API underneath never throws.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "hetcomm/hetcomm.h"

namespace hetcomm {

class Error : public std::runtime_error {
 public:
  Error(hetcommResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  hetcommResult_t code() const noexcept { return code_; }

 private:
  hetcommResult_t code_;
};

// Throws Error with hetcommGetLastError's message when r is not success.
inline void check(hetcommResult_t r, hetcommComm_t comm = nullptr) {
  if (r == hetcommSuccess) return;
  std::string msg = hetcommGetLastError(comm);
  throw Error(r, std::string(hetcommGetErrorString(r)) + (msg.empty() ? "" : ": " + msg));
}

enum class Op : int { kSum = hetcommSum, kProd = hetcommProd, kMax = hetcommMax, kMin = hetcommMin, kAvg = hetcommAvg };

// The hetcomm datatype of a C++ element type. float16/bfloat16 buffers use the tag types below.
struct Float16 {
  uint16_t bits;
};
struct Bfloat16 {
  uint16_t bits;
};
template <class T>
constexpr hetcommDataType_t dataTypeOf() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, int8_t> || std::is_same_v<U, char>)
    return hetcommInt8;
  else if constexpr (std::is_same_v<U, uint8_t>)
    return hetcommUint8;
  else if constexpr (std::is_same_v<U, int32_t>)
    return hetcommInt32;
  else if constexpr (std::is_same_v<U, uint32_t>)
    return hetcommUint32;
  else if constexpr (std::is_same_v<U, int64_t>)
    return hetcommInt64;
  else if constexpr (std::is_same_v<U, uint64_t>)
    return hetcommUint64;
  else if constexpr (std::is_same_v<U, Float16>)
    return hetcommFloat16;
  else if constexpr (std::is_same_v<U, Bfloat16>)
    return hetcommBfloat16;
  else if constexpr (std::is_same_v<U, float>)
    return hetcommFloat32;
  else if constexpr (std::is_same_v<U, double>)
    return hetcommFloat64;
  else
    static_assert(sizeof(T) == 0, "hetcomm has no datatype for this element type");
}

// An ordered queue of asynchronous operations; destroying it waits for them.
class Stream {
 public:
  Stream() { check(hetcommStreamCreate(&s_)); }
  ~Stream() {
    if (s_) hetcommStreamDestroy(s_);
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (s_) hetcommStreamDestroy(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void synchronize() { check(hetcommStreamSynchronize(s_)); }
  // true when every queued operation is done; throws the first error any of them hit.
  bool query() {
    hetcommResult_t r = hetcommStreamQuery(s_);
    if (r == hetcommInProgress) return false;
    check(r);
    return true;
  }
  hetcommStream_t get() const { return s_; }

 private:
  hetcommStream_t s_ = nullptr;
};

// Owns a communicator: destroyed (after its queued work) when the object goes away.
class Comm {
 public:
  Comm() = default;
  explicit Comm(hetcommComm_t c) : c_(c) {}
  ~Comm() { reset(); }
  Comm(Comm&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::exchange(o.c_, nullptr);
    }
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  static Comm fromEnv() {
    hetcommComm_t c = nullptr;
    check(hetcommCommInitFromEnv(&c));
    return Comm(c);
  }
  static Comm initRank(int nranks, const hetcommUniqueId& id, int rank) {
    hetcommComm_t c = nullptr;
    check(hetcommCommInitRank(&c, nranks, id, rank));
    return Comm(c);
  }
  static hetcommUniqueId uniqueId() {
    hetcommUniqueId id;
    check(hetcommGetUniqueId(&id));
    return id;
  }

  // Empty Comm for HETCOMM_SPLIT_NOCOLOR.
  Comm split(int color, int key) const {
    hetcommComm_t out = nullptr;
    check(hetcommCommSplit(c_, color, key, &out, nullptr), c_);
    return Comm(out);
  }
  int rank() const {
    int r = 0;
    check(hetcommCommUserRank(c_, &r), c_);
    return r;
  }
  int size() const {
    int n = 0;
    check(hetcommCommCount(c_, &n), c_);
    return n;
  }
  void finalize() { check(hetcommCommFinalize(c_), c_); }
  void abort() {
    if (c_) hetcommCommAbort(std::exchange(c_, nullptr));
  }
  hetcommComm_t get() const { return c_; }
  explicit operator bool() const { return c_ != nullptr; }

  template <class T>
  void allReduce(std::span<const T> send, std::span<T> recv, Op op, Stream* s = nullptr) {
    sameSize(send.size(), recv.size(), "allReduce");
    check(hetcommAllReduce(send.data(), recv.data(), recv.size(), dataTypeOf<T>(), static_cast<hetcommRedOp_t>(op), c_,
                           st(s)),
          c_);
  }
  template <class T>
  void allReduce(std::span<T> inout, Op op, Stream* s = nullptr) {
    allReduce(std::span<const T>(inout), inout, op, s);
  }
  template <class T>
  void broadcast(std::span<T> inout, int root, Stream* s = nullptr) {
    check(hetcommBroadcast(inout.data(), inout.data(), inout.size(), dataTypeOf<T>(), root, c_, st(s)), c_);
  }
  template <class T>
  void reduce(std::span<const T> send, std::span<T> recv, Op op, int root, Stream* s = nullptr) {
    check(hetcommReduce(send.data(), recv.data(), send.size(), dataTypeOf<T>(), static_cast<hetcommRedOp_t>(op), root,
                        c_, st(s)),
          c_);
  }
  // recv holds size() blocks of send.size() elements.
  template <class T>
  void allGather(std::span<const T> send, std::span<T> recv, Stream* s = nullptr) {
    sameSize(send.size() * size(), recv.size(), "allGather");
    check(hetcommAllGather(send.data(), recv.data(), send.size(), dataTypeOf<T>(), c_, st(s)), c_);
  }
  // send holds size() blocks of recv.size() elements.
  template <class T>
  void reduceScatter(std::span<const T> send, std::span<T> recv, Op op, Stream* s = nullptr) {
    sameSize(send.size(), recv.size() * size(), "reduceScatter");
    check(hetcommReduceScatter(send.data(), recv.data(), recv.size(), dataTypeOf<T>(), static_cast<hetcommRedOp_t>(op),
                               c_, st(s)),
          c_);
  }
  template <class T>
  void alltoAll(std::span<const T> send, std::span<T> recv, Stream* s = nullptr) {
    sameSize(send.size(), recv.size(), "alltoAll");
    check(hetcommAlltoAll(send.data(), recv.data(), send.size() / size(), dataTypeOf<T>(), c_, st(s)), c_);
  }
  template <class T>
  void send(std::span<const T> buf, int peer, Stream* s = nullptr) {
    check(hetcommSend(buf.data(), buf.size(), dataTypeOf<T>(), peer, c_, st(s)), c_);
  }
  template <class T>
  void recv(std::span<T> buf, int peer, Stream* s = nullptr) {
    check(hetcommRecv(buf.data(), buf.size(), dataTypeOf<T>(), peer, c_, st(s)), c_);
  }

 private:
  static hetcommStream_t st(Stream* s) { return s ? s->get() : nullptr; }
  static void sameSize(size_t a, size_t b, const char* what) {
    if (a != b) throw Error(hetcommInvalidArgument, std::string(what) + ": buffer sizes do not match");
  }
  void reset() {
    if (c_) hetcommCommDestroy(std::exchange(c_, nullptr));
  }
  hetcommComm_t c_ = nullptr;
};

// Sends and receives between group() and its end run together (RAII for GroupStart/GroupEnd).
class Group {
 public:
  Group() { check(hetcommGroupStart()); }
  // Ends the group; use end() to see its error, the destructor swallows it.
  ~Group() {
    if (open_) hetcommGroupEnd();
  }
  void end() {
    open_ = false;
    check(hetcommGroupEnd());
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

 private:
  bool open_ = true;
};

}  // namespace hetcomm
