// op.h: one queued operation (a collective, or a fused group of sends and receives) and the streams that
// order them. Ops are made by API threads and run by the progress engine; their state is the hand-over point.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "collectives/args.h"
#include "common/status.h"

namespace hetcomm::comm {

class Communicator;
struct Stream;

struct Op {
  enum State : int { kQueued, kRunning, kDone, kFailed };

  coll::Args args;
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<std::byte*> extras;  // point-to-point groups: operation i's buffer
  Communicator* comm = nullptr;
  Stream* stream = nullptr;   // nullptr: the caller waits for it
  std::shared_ptr<Op> after;  // the previous op of the same stream: runs first
  uint64_t seq = 0;           // collective sequence number on comm (0 for point-to-point)
  double predictedUs = 0;     // the cost model's time for the algorithm that runs it (set when planned)
  std::string_view algorithm;  // that algorithm's name (set when planned)

  // Staged operations (device buffers) are queued at the call, in order, but may not start until their inputs are
  // in the staging buffers: each staging job that feeds this op opens one gate (device_staging.h).
  std::atomic<int> gates{0};
  std::atomic<int> state{kQueued};
  Status error;  // written before state becomes kFailed

  // The op was refused before it was queued: finished, with why, so nothing waits on it.
  void failUnqueued(const Status& why) {
    error = why;
    state.store(kFailed, std::memory_order_release);
  }
  bool startable() const { return gates.load(std::memory_order_acquire) == 0 && (!after || after->finished()); }
  bool finished() const {
    int s = state.load(std::memory_order_acquire);
    return s == kDone || s == kFailed;
  }
};

// hetcommStream_t: an ordered queue. Ops on one stream start in issue order, even across communicators.
struct Stream {
  std::mutex mu;
  std::shared_ptr<Op> last;
  Status firstError;  // the first failure of any op on this stream, reported by synchronize/query
  std::atomic<int> pending{0};
  // A stream made by hetcommStreamCreateForCuda: its operations are ordered on this CUDA stream (cudaStream_t;
  // nullptr is the legacy default stream) and run through staging.
  bool wrapsCuda = false;
  void* cuda = nullptr;
};

}  // namespace hetcomm::comm
