// ProcessGroupHetcomm: a torch.distributed backend (PyTorch 1.13's c10d::ProcessGroup) over hetcomm's public C API.
//
// Every operation is queued on its own hetcomm stream, in call order, under one lock, so all ranks queue a group's
// operations in the same order (a communicator runs its operations in that order, whatever their streams). One
// watcher thread per group waits for them in the same order, copies results into the caller's tensors where an
// operation needed a staging buffer (list forms of allgather and reduce_scatter), and completes the Work and its
// Future. A failed operation completes its Work with hetcomm's message; the communicator's error is sticky, so every
// later operation of the group fails at once with the same cause, on every rank.
//
// CPU tensors only: a tensor on another device is refused with a message saying so.
#pragma once

#include <hetcomm/hetcomm.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace hetcomm::torch_backend {

class ProcessGroupHetcomm;

class HetcommWork : public c10d::Work {
 public:
  HetcommWork(int rank, c10d::OpType type, const char* what, std::vector<at::Tensor> outputs);
  ~HetcommWork() override;

  std::vector<at::Tensor> result() override { return outputs_; }
  // Sends and receives wait in their group until one of them is waited for: these send them first.
  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  friend class ProcessGroupHetcomm;
  // A contiguous tensor to write the result into: t itself, or a staged copy written back into t when done.
  at::Tensor writable(const at::Tensor& t);
  // A contiguous tensor with t's values to send, alive until the operation is done.
  at::Tensor readable(const at::Tensor& t);
  void writeBack(const at::Tensor& dst, const at::Tensor& src);
  // Runs the write-backs, then completes the Work (waiters wake, wait() rethrows error) and its Future.
  void complete(std::exception_ptr error);

  const char* what_;                 // "allreduce", ... for messages
  std::vector<at::Tensor> outputs_;  // what result() and the future give
  std::vector<at::Tensor> keep_;     // inputs and staging buffers, alive until the operation is done
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;  // (caller's tensor, staged result), in order
  hetcommStream_t stream_ = nullptr;
  std::string queueError_;  // a send or receive of its group could not be queued: the watcher fails it with this
  std::vector<c10::intrusive_ptr<HetcommWork>> followers_;  // sends and receives of the same group
  std::atomic<ProcessGroupHetcomm*> pg_{nullptr};           // set while a send or receive waits in its group
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupHetcomm : public c10d::ProcessGroup {
 public:
  // Collective over the group: rank 0 makes a hetcomm unique id and shares it through store. timeout bounds every
  // wait of the communicator (hetcomm's timeoutSec).
  ProcessGroupHetcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout);
  ~ProcessGroupHetcomm() override;

  const std::string getBackendName() const override { return "hetcomm"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // The algorithm hetcomm runs for an allreduce of count float32 elements ("ring", "hier", ...): for tests and
  // benchmarks that want to see the hierarchical collectives chosen.
  std::string algorithmFor(size_t count) const;

  // Queues the sends and receives that wait in their group.
  void flushPointToPoint();

  // Runs a wait that may take long, letting other threads run meanwhile: the Python module makes it release
  // Python's lock, which the watcher may need.
  static std::function<void(const std::function<void()>&)> blockingRegion;

 private:
  using Enqueue = std::function<hetcommResult_t(hetcommStream_t)>;
  struct P2p {
    bool send;
    void* data;
    size_t count;
    hetcommDataType_t type;
    int peer;
  };
  // Queues one operation on a fresh stream (under mu_) and hands it to the watcher.
  c10::intrusive_ptr<c10d::Work> launch(c10::intrusive_ptr<HetcommWork> work, const Enqueue& enqueue);
  c10::intrusive_ptr<c10d::Work> queuePointToPoint(c10::intrusive_ptr<HetcommWork> work, P2p message);
  // An operation in place on the caller's one tensor: checks it, and queues call(data, count, datatype, stream) on
  // its contiguous buffer (the tensor itself, or a staged copy written back when done).
  using InPlaceCall = std::function<hetcommResult_t(void*, size_t, hetcommDataType_t, hetcommStream_t)>;
  c10::intrusive_ptr<c10d::Work> inPlace(std::vector<at::Tensor>& tensors, c10d::OpType type, const char* what,
                                         const InPlaceCall& call);
  void flushLocked(std::vector<c10::intrusive_ptr<HetcommWork>>& failed);
  void failPointToPoint(std::vector<c10::intrusive_ptr<HetcommWork>>& failed);
  c10::intrusive_ptr<c10d::Work> exchange(c10::intrusive_ptr<HetcommWork> work,
                                          const std::vector<at::Tensor>& sendBlocks,
                                          const std::vector<at::Tensor>& recvBlocks, hetcommDataType_t type);
  void watch();
  std::string errorText(const char* what, hetcommResult_t r) const;
  [[noreturn]] void fail(const char* what, hetcommResult_t r) const;

  hetcommComm_t comm_ = nullptr;
  std::mutex mu_;  // queue order: hetcomm calls of this group, p2p_ and pending_
  std::condition_variable cv_;
  std::vector<std::pair<c10::intrusive_ptr<HetcommWork>, P2p>> p2p_;  // sends and receives not yet queued
  std::deque<c10::intrusive_ptr<HetcommWork>> pending_;               // queued, for the watcher
  std::vector<c10::intrusive_ptr<HetcommWork>> done_;                 // completed, freed by the next caller
  bool stop_ = false;
  std::thread watcher_;
};

}  // namespace hetcomm::torch_backend
