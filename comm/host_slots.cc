#include "comm/host_slots.h"

#include <atomic>
#include <cstring>

#include "common/strings.h"
#include "kernels/reduce.h"

namespace hetcomm::comm {

// One rank's part of the region. Its words are read and written through std::atomic_ref: the memory is shared
// with other processes, where a plain load could be torn or hoisted out of a polling loop.
struct HostSlots::Block {
  alignas(64) uint64_t announce[4];  // [0]: the operation's sequence number (0 while [1..3] change), [1..3] its descriptor
  struct alignas(64) Head {
    uint64_t round;    // raised after data and desc are written
    uint64_t desc[3];  // the descriptor of the slot's operation
  } head[2];
  alignas(64) uint64_t sleeping;  // this rank's engine may sleep: wake it after raising a round
  alignas(64) std::byte data[2][kSlotBytes];
};

namespace {
using Ref = std::atomic_ref<uint64_t>;
static_assert(sizeof(HostSlots::Descriptor) == 3 * sizeof(uint64_t));
}  // namespace

size_t HostSlots::regionBytes(int nranks) { return static_cast<size_t>(nranks) * sizeof(Block); }

HostSlots::HostSlots(std::span<std::byte> region, int rank, int nranks)
    : base_(region.data()), rank_(rank), nranks_(nranks) {}

HostSlots::Block& HostSlots::block(int r) const { return reinterpret_cast<Block*>(base_)[r]; }

void HostSlots::storeDescriptor(uint64_t* words, const Descriptor& d) {
  uint64_t w[3];
  std::memcpy(w, d.data(), sizeof(w));
  for (int i = 0; i < 3; ++i) Ref(words[i]).store(w[i], std::memory_order_relaxed);
}

HostSlots::Descriptor HostSlots::loadDescriptor(const uint64_t* words) {
  uint64_t w[3];
  for (int i = 0; i < 3; ++i) w[i] = Ref(const_cast<uint64_t&>(words[i])).load(std::memory_order_relaxed);
  Descriptor d;
  std::memcpy(d.data(), w, sizeof(w));
  return d;
}

// A sequence lock: the number goes to 0 while the descriptor changes, so a reader that sees the same number before
// and after reading the descriptor has a whole one.
void HostSlots::announce(uint64_t opSeq, const Descriptor& d) {
  uint64_t* a = block(rank_).announce;
  Ref(a[0]).store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  storeDescriptor(a + 1, d);
  Ref(a[0]).store(opSeq, std::memory_order_release);
}

bool HostSlots::announced(int q, uint64_t opSeq, Descriptor* d) const {
  uint64_t* a = block(q).announce;
  if (opSeq == 0 || Ref(a[0]).load(std::memory_order_acquire) != opSeq) return false;
  *d = loadDescriptor(a + 1);
  std::atomic_thread_fence(std::memory_order_acquire);
  return Ref(a[0]).load(std::memory_order_relaxed) == opSeq;
}

void HostSlots::startAllReduce(uint64_t opSeq, const Descriptor& d, const void* send, void* recv, size_t count,
                               kernels::DataType dtype, kernels::RedOp op) {
  ++round_;
  const int b = static_cast<int>(round_ & 1);
  Block& mine = block(rank_);
  if (count) std::memcpy(mine.data[b], send, count * kernels::sizeOf(dtype));  // count 0 may come with null buffers
  storeDescriptor(mine.head[b].desc, d);
  Ref(mine.head[b].round).store(round_, std::memory_order_release);
  // Pairs with armForSleep's fence: either the sleeper sees the round, or this sees its flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    Ref flag(block(q).sleeping);
    if (flag.load(std::memory_order_relaxed) && flag.exchange(0, std::memory_order_seq_cst) && wake_) wake_(q);
  }
  opSeq_ = opSeq;
  desc_ = d;
  out_ = recv;
  count_ = count;
  dtype_ = dtype;
  op_ = op;
  next_ = 0;
}

bool HostSlots::roundUp(int q) const {
  return q == rank_ || Ref(block(q).head[round_ & 1].round).load(std::memory_order_acquire) == round_;
}

Result<bool> HostSlots::advance(const std::vector<transport::Connection*>& conns, const Verify& verify, bool* moved) {
  const int b = static_cast<int>(round_ & 1);
  // Awake: peers need not wake this rank (cleared only when set: a store takes the line from the peers that read it).
  if (Ref flag(block(rank_).sleeping); flag.load(std::memory_order_relaxed)) flag.store(0, std::memory_order_relaxed);
  while (next_ < nranks_) {
    const int q = next_;
    // q's data fetched beside its round (as the shm ring's readIn does): a hint, read below only once the round is up.
    if (q != rank_) __builtin_prefetch(block(q).data[b]);
    if (!roundUp(q)) {
      // Still waiting for q: has it started something else under this sequence number, or gone?
      Descriptor theirs;
      if (announced(q, opSeq_, &theirs) && theirs != desc_) HC_TRY(verify(theirs, q));
      // On every look: the pass that read q's abort frame (progressTransports, just before) must also fail this,
      // or the engine would sleep on a round that never comes until the timeout.
      if (q < static_cast<int>(conns.size()) && conns[q]) HC_TRY(conns[q]->health());
      return false;
    }
    if (q != rank_) {
      const Descriptor theirs = loadDescriptor(block(q).head[b].desc);
      if (theirs != desc_) HC_TRY(verify(theirs, q));
    }
    // Rank order on every rank: the same bits everywhere. Rank 0's slot waits for rank 1's to be folded with it.
    if (q == 1)
      kernels::reduce(out_, block(0).data[b], block(1).data[b], count_, dtype_, op_);
    else if (q > 1)
      kernels::reduce(out_, out_, block(q).data[b], count_, dtype_, op_);
    ++next_;
    if (moved) *moved = true;
  }
  if (op_ == kernels::RedOp::kAvg) kernels::divideBy(out_, count_, dtype_, nranks_);
  return true;
}

bool HostSlots::armForSleep() {
  if (next_ >= nranks_) return true;
  Ref flag(block(rank_).sleeping);
  flag.store(1, std::memory_order_seq_cst);
  if (!roundUp(next_)) return true;
  flag.store(0, std::memory_order_relaxed);  // or every peer's next round would send a wake-up nobody needs
  return false;
}

std::string HostSlots::waitingOn() const {
  return format("the host slot of rank %d (round %llu)", next_, static_cast<unsigned long long>(round_));
}

}  // namespace hetcomm::comm
