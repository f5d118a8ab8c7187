#include "python/torch_backend/process_group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace hetcomm::torch_backend {
namespace {

// ---- checking and mapping the caller's tensors ----

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "hetcomm: ", what, " takes one tensor per process, got ", tensors.size());
  return tensors[0];
}

void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "hetcomm: ", what, ": the tensor is on ", t.device().str(),
              ", and the hetcomm backend takes CPU tensors only for now (GPU tensors are not supported yet)");
  TORCH_CHECK(t.layout() == c10::kStrided, "hetcomm: ", what, ": only dense tensors are supported, not ", t.layout(),
              " ones");
}

hetcommDataType_t dataType(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return hetcommFloat32;
    case at::kDouble:
      return hetcommFloat64;
    case at::kHalf:
      return hetcommFloat16;
    case at::kBFloat16:
      return hetcommBfloat16;
    case at::kChar:
      return hetcommInt8;
    case at::kByte:
      return hetcommUint8;
    case at::kBool:
      return hetcommUint8;  // one byte of 0 or 1; reductions map to max/min (reduceOp)
    case at::kInt:
      return hetcommInt32;
    case at::kLong:
      return hetcommInt64;
    default:
      TORCH_CHECK(false, "hetcomm: ", what, ": dtype ", t.scalar_type(),
                  " is not supported (float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool)");
  }
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "this op";
  }
}

hetcommRedOp_t reduceOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* what) {
  // On bool, as NCCL's backend does: SUM is a logical or (max of 0/1), PRODUCT a logical and (min).
  const bool isBool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return isBool ? hetcommMax : hetcommSum;
    case c10d::ReduceOp::PRODUCT:
      return isBool ? hetcommMin : hetcommProd;
    case c10d::ReduceOp::MIN:
      return hetcommMin;
    case c10d::ReduceOp::MAX:
      return hetcommMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool, "hetcomm: ", what, ": ReduceOp.AVG is not defined on bool tensors");
      return hetcommAvg;
    default:
      TORCH_CHECK(false, "hetcomm: ", what, ": ReduceOp.", opName(op.op_),
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

void checkSameKind(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "hetcomm: ", what, ": tensors of different dtypes (", a.scalar_type(),
              " and ", b.scalar_type(), ")");
}

size_t elements(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

}  // namespace

// ---- work ----

HetcommWork::HetcommWork(int rank, c10d::OpType type, const char* what, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      what_(what),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

HetcommWork::~HetcommWork() {
  if (stream_) hetcommStreamDestroy(stream_);
}

at::Tensor HetcommWork::writable(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  at::Tensor staged = t.contiguous();
  writeBack(t, staged);
  return staged;
}

at::Tensor HetcommWork::readable(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  keep_.push_back(c);
  return c;
}

void HetcommWork::writeBack(const at::Tensor& dst, const at::Tensor& src) { copies_.emplace_back(dst, src); }

void HetcommWork::complete(std::exception_ptr error) {
  if (!error) {
    try {
      for (auto& [dst, src] : copies_) dst.copy_(src);
    } catch (...) {
      error = std::current_exception();
    }
  }
  // keep_ and copies_ stay until the Work is freed: they may hold the caller's tensors, and freeing those can need
  // Python's lock, which this (watcher) thread must never wait for.
  finish(error);
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

bool HetcommWork::isCompleted() {
  if (ProcessGroupHetcomm* pg = pg_.load()) pg->flushPointToPoint();
  return c10d::Work::isCompleted();
}

bool HetcommWork::wait(std::chrono::milliseconds timeout) {
  if (ProcessGroupHetcomm* pg = pg_.load()) pg->flushPointToPoint();
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> HetcommWork::getFuture() {
  if (ProcessGroupHetcomm* pg = pg_.load()) pg->flushPointToPoint();
  return future_;
}

// ---- the group ----

ProcessGroupHetcomm::ProcessGroupHetcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  hetcommUniqueId id;
  const std::string key = "hetcomm/unique_id";  // the store is the group's own (prefixed) store
  if (rank == 0) {
    if (hetcommResult_t r = hetcommGetUniqueId(&id); r != hetcommSuccess) fail("init (hetcommGetUniqueId)", r);
    const auto* p = reinterpret_cast<const uint8_t*>(id.internal);
    store->set(key, std::vector<uint8_t>(p, p + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> v = store->get(key);
    TORCH_CHECK(v.size() == sizeof(id.internal), "hetcomm: init: the unique id in the store has ", v.size(),
                " bytes, not ", sizeof(id.internal), " (another program wrote the key ", key, "?)");
    std::memcpy(id.internal, v.data(), v.size());
  }
  hetcommConfig_t config = HETCOMM_CONFIG_INITIALIZER;
  const double seconds = std::ceil(static_cast<double>(timeout.count()) / 1000.0);
  config.timeoutSec = static_cast<int>(std::clamp(seconds, 1.0, 1e9));
  if (hetcommResult_t r = hetcommCommInitRankConfig(&comm_, size, id, rank, &config); r != hetcommSuccess)
    fail("init", r);
  watcher_ = std::thread([this] { watch(); });
}

ProcessGroupHetcomm::~ProcessGroupHetcomm() {
  flushPointToPoint();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // After every queued operation completed or failed. The caller may hold Python's lock (a group freed by the
  // garbage collector), which the watcher may need to complete a work (a future's Python callback, say).
  blockingRegion([&] { watcher_.join(); });
  done_.clear();
  if (comm_) hetcommCommDestroy(comm_);
}

std::function<void(const std::function<void()>&)> ProcessGroupHetcomm::blockingRegion =
    [](const std::function<void()>& f) { f(); };

// "hetcomm: allreduce failed on rank 1: <hetcomm's message> (<result>)": what every error of this backend says.
// The message is the calling thread's last failure (hetcommGetLastError).
std::string ProcessGroupHetcomm::errorText(const char* what, hetcommResult_t r) const {
  const char* msg = hetcommGetLastError(comm_);
  return c10::str("hetcomm: ", what, " failed on rank ", rank_, ": ", (msg && *msg) ? msg : "no message", " (",
                  hetcommGetErrorString(r), ")");
}

void ProcessGroupHetcomm::fail(const char* what, hetcommResult_t r) const { TORCH_CHECK(false, errorText(what, r)); }

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::launch(c10::intrusive_ptr<HetcommWork> work,
                                                           const Enqueue& enqueue) {
  std::vector<c10::intrusive_ptr<HetcommWork>> done, failed;  // handled on this thread, after the lock
  std::unique_lock<std::mutex> lock(mu_);
  done.swap(done_);
  flushLocked(failed);
  hetcommStream_t stream = nullptr;
  hetcommResult_t r = hetcommStreamCreate(&stream);
  if (r == hetcommSuccess) r = enqueue(stream);
  if (r != hetcommSuccess && r != hetcommInProgress) {
    // What the call queued before it failed may wait for peers: the stream is destroyed (which waits) unlocked.
    lock.unlock();
    failPointToPoint(failed);
    if (stream) hetcommStreamDestroy(stream);
    fail(work->what_, r);
  }
  work->stream_ = stream;
  pending_.push_back(work);
  cv_.notify_one();
  lock.unlock();
  failPointToPoint(failed);
  return work;
}

// Sends and receives wait in p2p_ and go to hetcomm together as one group, when the caller waits for one of them or
// queues anything else. A group runs its messages concurrently: ranks that each send to the other before they
// receive (isend, then irecv, as gloo allows) do not wait for each other.
c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::queuePointToPoint(c10::intrusive_ptr<HetcommWork> work,
                                                                      P2p message) {
  std::vector<c10::intrusive_ptr<HetcommWork>> done;  // freed on this thread, after the lock
  std::lock_guard<std::mutex> lock(mu_);
  done.swap(done_);
  work->pg_ = this;
  p2p_.push_back({work, message});
  return work;
}

void ProcessGroupHetcomm::flushPointToPoint() {
  std::vector<c10::intrusive_ptr<HetcommWork>> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    flushLocked(failed);
  }
  failPointToPoint(failed);
}

void ProcessGroupHetcomm::failPointToPoint(std::vector<c10::intrusive_ptr<HetcommWork>>& failed) {
  if (failed.empty()) return;
  auto error =
      std::make_exception_ptr(std::runtime_error(errorText("send/recv (creating its stream)", hetcommSystemError)));
  for (auto& work : failed) work->complete(error);  // unlocked: completion runs the futures' callbacks
  failed.clear();
}

// Queues the waiting sends and receives as one group on a stream of their own, for the watcher. A failure to
// queue them (a bad peer, say) still goes to the watcher with the stream: what the group queued before it failed
// is waited for there, not under mu_, and every work of the group completes with the stream's error. Only when
// no stream could be made are the works returned in failed, for the caller to complete once unlocked.
void ProcessGroupHetcomm::flushLocked(std::vector<c10::intrusive_ptr<HetcommWork>>& failed) {
  if (p2p_.empty()) return;
  std::vector<std::pair<c10::intrusive_ptr<HetcommWork>, P2p>> batch;
  batch.swap(p2p_);
  for (auto& [work, m] : batch) work->pg_ = nullptr;  // from here the watcher (or the caller) completes it
  hetcommStream_t stream = nullptr;
  if (hetcommStreamCreate(&stream) != hetcommSuccess) {
    for (auto& [work, m] : batch) failed.push_back(work);
    return;
  }
  hetcommGroupStart();
  hetcommResult_t r = hetcommSuccess;
  for (auto& [work, m] : batch) {
    r = m.send ? hetcommSend(m.data, m.count, m.type, m.peer, comm_, stream)
               : hetcommRecv(m.data, m.count, m.type, m.peer, comm_, stream);
    if (r != hetcommSuccess && r != hetcommInProgress) break;
  }
  const hetcommResult_t end = hetcommGroupEnd();
  if (r == hetcommSuccess || r == hetcommInProgress) r = end;
  if (r != hetcommSuccess && r != hetcommInProgress) {  // reported by the watcher, after what was queued is done
    batch.front().first->queueError_ = errorText("send/recv", r);
  }
  // The group's works share its stream: the first one owns it, the others complete with it.
  batch.front().first->stream_ = stream;
  for (size_t i = 1; i < batch.size(); ++i) batch.front().first->followers_.push_back(batch[i].first);
  pending_.push_back(batch.front().first);
  cv_.notify_one();
}

void ProcessGroupHetcomm::watch() {
  while (true) {
    c10::intrusive_ptr<HetcommWork> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      work = std::move(pending_.front());
      pending_.pop_front();
    }
    std::exception_ptr error;
    if (hetcommResult_t r = hetcommStreamSynchronize(work->stream_); r != hetcommSuccess) {
      error = std::make_exception_ptr(std::runtime_error(errorText(work->what_, r)));  // the synchronize's
    }
    if (!error && !work->queueError_.empty()) error = std::make_exception_ptr(std::runtime_error(work->queueError_));
    hetcommStreamDestroy(work->stream_);
    work->stream_ = nullptr;
    auto followers = std::move(work->followers_);
    work->complete(error);
    for (auto& f : followers) f->complete(error);
    // The works are freed by the next call on the group (or its destructor), never here: freeing a tensor that
    // Python knows takes Python's lock, and a thread holding it may be waiting for this one.
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(std::move(work));
    for (auto& f : followers) done_.push_back(std::move(f));
  }
}

std::string ProcessGroupHetcomm::algorithmFor(size_t count) const {
  char name[64] = {0};
  double us = 0;
  if (hetcommResult_t r =
          hetcommCommGetAlgorithm(comm_, hetcommCollAllReduce, count, hetcommFloat32, name, sizeof(name), &us);
      r != hetcommSuccess)
    fail("algorithm query", r);
  return name;
}

// ---- operations ----

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::inPlace(std::vector<at::Tensor>& tensors, c10d::OpType type,
                                                            const char* what, const InPlaceCall& call) {
  const at::Tensor& t = single(tensors, what);
  checkTensor(t, what);
  const hetcommDataType_t dtype = dataType(t, what);
  auto work = c10::make_intrusive<HetcommWork>(rank_, type, what, tensors);
  at::Tensor buf = work->writable(t);
  return launch(work, [&](hetcommStream_t s) { return call(buf.data_ptr(), elements(buf), dtype, s); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::allreduce(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts) {
  const hetcommRedOp_t op = reduceOp(opts.reduceOp, single(tensors, "allreduce"), "allreduce");
  return inPlace(tensors, c10d::OpType::ALLREDUCE, "allreduce",
                 [&](void* d, size_t n, hetcommDataType_t type, hetcommStream_t s) {
                   return hetcommAllReduce(d, d, n, type, op, comm_, s);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                        const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "hetcomm: allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) {
    checkTensor(t, "allreduce_coalesced");
    checkSameKind(tensors[0], t, "allreduce_coalesced");
  }
  const hetcommDataType_t type = dataType(tensors[0], "allreduce_coalesced");
  const hetcommRedOp_t op = reduceOp(opts.reduceOp, tensors[0], "allreduce_coalesced");
  auto work =
      c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors);
  // One flat buffer, one operation; the results go back into each tensor.
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  at::Tensor buf = at::cat(flat);
  work->keep_.push_back(buf);
  int64_t at = 0;
  for (const at::Tensor& t : tensors) {
    work->writeBack(t, buf.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
  return launch(work, [&](hetcommStream_t s) {
    return hetcommAllReduce(buf.data_ptr(), buf.data_ptr(), elements(buf), type, op, comm_, s);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::broadcast(std::vector<at::Tensor>& tensors,
                                                              const c10d::BroadcastOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  return inPlace(tensors, c10d::OpType::BROADCAST, "broadcast",
                 [&](void* d, size_t n, hetcommDataType_t type, hetcommStream_t s) {
                   return hetcommBroadcast(d, d, n, type, root, comm_, s);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::reduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOptions& opts) {
  const hetcommRedOp_t op = reduceOp(opts.reduceOp, single(tensors, "reduce"), "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return inPlace(tensors, c10d::OpType::REDUCE, "reduce",
                 [&](void* d, size_t n, hetcommDataType_t type, hetcommStream_t s) {
                   return hetcommReduce(d, d, n, type, op, root, comm_, s);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllgatherOptions&) {
  const at::Tensor& in = single(inputs, "allgather");
  checkTensor(in, "allgather");
  TORCH_CHECK(outputs.size() == 1, "hetcomm: allgather takes one output list per process, got ", outputs.size());
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "hetcomm: allgather: the output list has ",
              outputs[0].size(), " tensors, not one per rank (", size_, ")");
  for (const at::Tensor& o : outputs[0]) {
    checkTensor(o, "allgather");
    checkSameKind(in, o, "allgather");
    TORCH_CHECK(o.numel() == in.numel(), "hetcomm: allgather: an output tensor has ", o.numel(),
                " elements, the input ", in.numel());
  }
  const hetcommDataType_t type = dataType(in, "allgather");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::ALLGATHER, "allgather", outputs[0]);
  at::Tensor src = work->readable(in);
  at::Tensor stage = at::empty({size_ * in.numel()}, in.options().memory_format(at::MemoryFormat::Contiguous));
  work->keep_.push_back(stage);
  for (int r = 0; r < size_; ++r)
    work->writeBack(outputs[0][r], stage.narrow(0, r * in.numel(), in.numel()).view(outputs[0][r].sizes()));
  return launch(work, [&](hetcommStream_t s) {
    return hetcommAllGather(src.data_ptr(), stage.data_ptr(), elements(src), type, comm_, s);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::AllgatherOptions&) {
  checkTensor(input, "_allgather_base");
  checkTensor(output, "_allgather_base");
  checkSameKind(input, output, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * size_, "hetcomm: _allgather_base: the output has ", output.numel(),
              " elements, not world size (", size_, ") x the input's ", input.numel());
  const hetcommDataType_t type = dataType(input, "_allgather_base");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::_ALLGATHER_BASE, "_allgather_base",
                                               std::vector<at::Tensor>{output});
  at::Tensor src = work->readable(input);
  at::Tensor dst = work->writable(output);
  return launch(work, [&](hetcommStream_t s) {
    return hetcommAllGather(src.data_ptr(), dst.data_ptr(), elements(src), type, comm_, s);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                                   const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  checkTensor(out, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "hetcomm: reduce_scatter takes one input list per process, got ", inputs.size());
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "hetcomm: reduce_scatter: the input list has ",
              inputs[0].size(), " tensors, not one per rank (", size_, ")");
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : inputs[0]) {
    checkTensor(t, "reduce_scatter");
    checkSameKind(out, t, "reduce_scatter");
    TORCH_CHECK(t.numel() == out.numel(), "hetcomm: reduce_scatter: an input tensor has ", t.numel(),
                " elements, the output ", out.numel());
    flat.push_back(t.reshape({-1}));
  }
  const hetcommDataType_t type = dataType(out, "reduce_scatter");
  const hetcommRedOp_t op = reduceOp(opts.reduceOp, out, "reduce_scatter");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs);
  at::Tensor src = at::cat(flat);
  work->keep_.push_back(src);
  at::Tensor dst = work->writable(out);
  return launch(work, [&](hetcommStream_t s) {
    return hetcommReduceScatter(src.data_ptr(), dst.data_ptr(), elements(dst), type, op, comm_, s);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                         const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "_reduce_scatter_base");
  checkTensor(output, "_reduce_scatter_base");
  checkSameKind(input, output, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * size_, "hetcomm: _reduce_scatter_base: the input has ", input.numel(),
              " elements, not world size (", size_, ") x the output's ", output.numel());
  const hetcommDataType_t type = dataType(output, "_reduce_scatter_base");
  const hetcommRedOp_t op = reduceOp(opts.reduceOp, output, "_reduce_scatter_base");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base",
                                               std::vector<at::Tensor>{output});
  at::Tensor src = work->readable(input);
  at::Tensor dst = work->writable(output);
  return launch(work, [&](hetcommStream_t s) {
    return hetcommReduceScatter(src.data_ptr(), dst.data_ptr(), elements(dst), type, op, comm_, s);
  });
}

// Alltoall with per-peer sizes, as one group of sends and receives; this rank's own block is copied locally once
// the group is done (the output may still be in use by operations queued before this one).
c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::exchange(c10::intrusive_ptr<HetcommWork> work,
                                                             const std::vector<at::Tensor>& sendBlocks,
                                                             const std::vector<at::Tensor>& recvBlocks,
                                                             hetcommDataType_t type) {
  // Before any write-back of a staged output: the own block goes into the staged copy first.
  work->copies_.insert(work->copies_.begin(), {recvBlocks[rank_], sendBlocks[rank_]});
  return launch(work, [&](hetcommStream_t s) {
    hetcommGroupStart();
    hetcommResult_t r = hetcommSuccess;
    for (int p = 0; p < size_ && (r == hetcommSuccess || r == hetcommInProgress); ++p) {
      if (p == rank_) continue;
      if (sendBlocks[p].numel() > 0)
        r = hetcommSend(sendBlocks[p].data_ptr(), elements(sendBlocks[p]), type, p, comm_, s);
      if ((r == hetcommSuccess || r == hetcommInProgress) && recvBlocks[p].numel() > 0)
        r = hetcommRecv(recvBlocks[p].data_ptr(), elements(recvBlocks[p]), type, p, comm_, s);
    }
    hetcommResult_t end = hetcommGroupEnd();
    return (r == hetcommSuccess || r == hetcommInProgress) ? end : r;
  });
}

namespace {
// Rows per rank: the caller's split sizes, or dim 0 divided evenly when none are given.
std::vector<int64_t> splitRows(const at::Tensor& t, const std::vector<int64_t>& splits, int size, const char* side) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "hetcomm: alltoall_base: the ", side, " tensor's first dimension (", rows,
                ") does not divide evenly among ", size, " ranks; pass split sizes");
    return std::vector<int64_t>(size, rows / size);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "hetcomm: alltoall_base: ", splits.size(), " ", side,
              " split sizes for ", size, " ranks");
  for (int64_t s : splits) TORCH_CHECK(s >= 0, "hetcomm: alltoall_base: a negative ", side, " split size (", s, ")");
  TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows, "hetcomm: alltoall_base: the ", side,
              " split sizes add up to ", std::accumulate(splits.begin(), splits.end(), int64_t{0}),
              ", not the tensor's first dimension (", rows, ")");
  return splits;
}

std::vector<at::Tensor> blocks(const at::Tensor& flat, const std::vector<int64_t>& rows, int64_t rowElems) {
  std::vector<at::Tensor> out;
  int64_t at = 0;
  for (int64_t r : rows) {
    out.push_back(flat.narrow(0, at * rowElems, r * rowElems));
    at += r;
  }
  return out;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                  std::vector<int64_t>& outputSplits,
                                                                  std::vector<int64_t>& inputSplits,
                                                                  const c10d::AllToAllOptions&) {
  checkTensor(input, "alltoall_base");
  checkTensor(output, "alltoall_base");
  checkSameKind(input, output, "alltoall_base");
  const hetcommDataType_t type = dataType(input, "alltoall_base");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::ALLTOALL_BASE, "alltoall_base",
                                               std::vector<at::Tensor>{output});
  at::Tensor src = work->readable(input).reshape({-1});
  at::Tensor dst = work->writable(output).reshape({-1});
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0, "hetcomm: alltoall_base: input (",
                input.numel(), " elements) and output (", output.numel(),
                ") must be the same size, divisible by the world size (", size_, ")");
    return launch(work, [&](hetcommStream_t s) {
      return hetcommAlltoAll(src.data_ptr(), dst.data_ptr(), elements(src) / size_, type, comm_, s);
    });
  }
  const auto inRows = splitRows(input, inputSplits, size_, "input");
  const auto outRows = splitRows(output, outputSplits, size_, "output");
  const int64_t inRowElems = input.dim() == 0 || input.size(0) == 0 ? 0 : input.numel() / input.size(0);
  const int64_t outRowElems = output.dim() == 0 || output.size(0) == 0 ? 0 : output.numel() / output.size(0);
  TORCH_CHECK(inRowElems == outRowElems || input.numel() == 0 || output.numel() == 0,
              "hetcomm: alltoall_base: input rows have ", inRowElems, " elements, output rows ", outRowElems);
  TORCH_CHECK(inRows[rank_] == outRows[rank_], "hetcomm: alltoall_base: this rank sends itself ", inRows[rank_],
              " rows but expects ", outRows[rank_]);
  return exchange(work, blocks(src, inRows, inRowElems), blocks(dst, outRows, outRowElems), type);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "hetcomm: alltoall takes one input and one output tensor per rank (", size_, "), got ", inputs.size(),
              " and ", outputs.size());
  for (int p = 0; p < size_; ++p) {
    checkTensor(inputs[p], "alltoall");
    checkTensor(outputs[p], "alltoall");
    checkSameKind(inputs[0], inputs[p], "alltoall");
    checkSameKind(inputs[0], outputs[p], "alltoall");
  }
  TORCH_CHECK(inputs[rank_].numel() == outputs[rank_].numel(), "hetcomm: alltoall: this rank's own input has ",
              inputs[rank_].numel(), " elements, its output ", outputs[rank_].numel());
  const hetcommDataType_t type = dataType(inputs[0], "alltoall");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::ALLTOALL, "alltoall", outputs);
  std::vector<at::Tensor> sendBlocks, recvBlocks;
  for (int p = 0; p < size_; ++p) {
    sendBlocks.push_back(work->readable(inputs[p]).reshape({-1}));
    recvBlocks.push_back(work->writable(outputs[p]).reshape({-1}));
  }
  return exchange(work, sendBlocks, recvBlocks, type);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  const at::Tensor& t = single(tensors, "send");
  checkTensor(t, "send");
  const hetcommDataType_t type = dataType(t, "send");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::SEND, "send", std::vector<at::Tensor>{});
  at::Tensor src = work->readable(t);
  return queuePointToPoint(work, {true, src.data_ptr(), elements(src), type, dstRank});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  const at::Tensor& t = single(tensors, "recv");
  checkTensor(t, "recv");
  const hetcommDataType_t type = dataType(t, "recv");
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::RECV, "recv", tensors);
  at::Tensor dst = work->writable(t);
  return queuePointToPoint(work, {false, dst.data_ptr(), elements(dst), type, srcRank});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "hetcomm: recv from any source is not supported: name the source rank");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHetcomm::barrier(const c10d::BarrierOptions&) {
  auto work = c10::make_intrusive<HetcommWork>(rank_, c10d::OpType::BARRIER, "barrier", std::vector<at::Tensor>{});
  at::Tensor flag = at::zeros({1}, at::kByte);
  work->keep_.push_back(flag);
  return launch(work, [&](hetcommStream_t s) {
    return hetcommAllReduce(flag.data_ptr(), flag.data_ptr(), 1, hetcommUint8, hetcommMax, comm_, s);
  });
}

}  // namespace hetcomm::torch_backend
