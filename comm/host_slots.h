// host_slots.h: small collectives on one host through memory every rank of the communicator maps (the shm
// transport's host region), without messages.
//
// Each rank owns a block: an announcement of the operation it runs, and two slots, each a round word, the
// operation's descriptor and kSlotBytes of data. An allreduce (collectives/allreduce/slots.cc) is: copy the input
// into this rank's slot for the round, raise the slot's round, and fold every rank's slot into the output in rank
// order as their rounds come up. Rounds alternate between the two slots. A rank overwrites its slot of round r + 2
// only after it saw every peer's round r + 1 up, and a peer raises round r + 1 only after it finished reading round
// r: so no slot is written while someone still reads it, and no second phase is needed.
//
// What messages give the executor, this keeps:
//   - a mismatch (ranks calling different collectives, or the same with other arguments) fails in microseconds:
//     the slot carries the descriptor, and a peer that runs another operation with the same sequence number (one
//     that went by messages) has announced it;
//   - a peer that exits or aborts fails the operation through its connection's health (the shm transport watches
//     its pidfd and its abort frames);
//   - the communicator's timeout (waitingOn names the slot still awaited).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/datatype.h"
#include "transports/transport.h"

namespace hetcomm::comm {

class HostSlots {
 public:
  static constexpr size_t kSlotBytes = 16384;  // the largest buffer a slot collective takes
  static constexpr int kMaxRanks = 64;        // larger groups go by messages (the region grows with the ranks)
  using Descriptor = std::array<std::byte, 24>;

  // The region's size for nranks ranks.
  static size_t regionBytes(int nranks);

  // region: regionBytes(nranks) bytes, zero when first mapped, the same memory in every rank.
  HostSlots(std::span<std::byte> region, int rank, int nranks);

  // Every collective this rank runs by messages says so first: a peer waiting in a slot collective of the same
  // sequence number compares it with its own (a slot collective's slot carries its descriptor).
  void announce(uint64_t opSeq, const Descriptor& d);

  // Starts an allreduce of count elements (count * size <= kSlotBytes): send may equal recv.
  void startAllReduce(uint64_t opSeq, const Descriptor& d, const void* send, void* recv, size_t count,
                      kernels::DataType dtype, kernels::RedOp op);

  // Folds in the slots whose rounds are up; never waits. True when the output is complete. verify(theirs, from)
  // judges a peer's descriptor that differs from this rank's (its error fails the operation); conns[q] is the
  // connection to rank q, whose health says whether q can still answer.
  using Verify = std::function<Status(std::span<const std::byte> theirs, int from)>;
  Result<bool> advance(const std::vector<transport::Connection*>& conns, const Verify& verify, bool* moved);

  // "the slot of rank 3 (round 17)": what an unfinished operation waits for.
  std::string waitingOn() const;

  // Sleeping. Before the progress engine sleeps with a slot collective unfinished, armForSleep raises this rank's
  // flag and looks once more (false: the awaited round came up meanwhile, do not sleep); a rank that raises a round
  // wakes every peer whose flag is up through `wake` (the shm transport's datagram). One of the two always sees the
  // other's write, as with the shm rings' flags.
  void setWake(std::function<void(int peer)> wake) { wake_ = std::move(wake); }
  bool armForSleep();

 private:
  struct Block;
  Block& block(int r) const;
  bool roundUp(int q) const;
  // A peer's announcement, if it is complete and for opSeq; false otherwise.
  bool announced(int q, uint64_t opSeq, Descriptor* d) const;
  static void storeDescriptor(uint64_t* words, const Descriptor& d);
  static Descriptor loadDescriptor(const uint64_t* words);

  std::byte* base_;
  int rank_, nranks_;
  uint64_t round_ = 0;  // rounds this rank started; round_ & 1 is the slot in use
  // The running allreduce.
  uint64_t opSeq_ = 0;
  Descriptor desc_{};
  void* out_ = nullptr;
  size_t count_ = 0;
  kernels::DataType dtype_{};
  kernels::RedOp op_{};
  int next_ = 0;  // ranks folded into the output so far, in rank order
  std::function<void(int)> wake_;
};

}  // namespace hetcomm::comm
