// api_device.cc: calls whose buffers the network cannot read (CUDA device memory), or that are ordered on a CUDA
// stream, run through staging (device_staging.h): the call queues one gated host op per chunk, in order, at once,
// and a staging job copies chunks in and out around them.
//
//   - No stream: the job runs on the calling thread, after the work queued on CUDA's legacy default stream, and
//     the call returns when the results are in the user's buffers.
//   - A stream made by hetcommStreamCreateForCuda: the call returns at once. The job runs on a job thread; its
//     copies in start after the work already queued on the CUDA stream (an event recorded there), and the stream's
//     later work waits for a host-mapped flag the job raises when its copies out are done (cuStreamWaitValue32),
//     so no host thread blocks and no CUDA host callback waits on the network.
//   - Inside a group, jobs start at hetcommGroupEnd, each on a job thread (the sends and receives of a group must
//     all be posted before any of them can finish).
#include <bit>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/api_internal.h"
#include "comm/device_staging.h"
#include "comm/engine.h"
#include "kernels/datatype.h"
#include "transports/cuda/cuda_runtime.h"

namespace hetcomm::comm::api {

namespace cu = transports::cuda;

HC_PARAM_INT(cudaChunkBytesParam, "CUDA_CHUNK_BYTES", 4 << 20)
HC_PARAM_INT(cudaSlotsParam, "CUDA_SLOTS", 3)
// Tests: host buffers take the staging path too, copied by memcpy (no GPU needed to test chunking and ordering).
HC_PARAM_INT(stageHostParam, "STAGE_HOST_BUFFERS", 0)

namespace {

// ---- staging memory: pinned where CUDA runs, kept for the next job of a similar size ----
struct Block {
  std::byte* p = nullptr;
  size_t bytes = 0;
  bool pinned = false;
};

class BlockPool {
 public:
  Result<Block> take(size_t bytes, cu::Runtime* rt) {
    const size_t want = std::bit_ceil(std::max<size_t>(bytes, 4096));  // sizes repeat: blocks are reused
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++out_;
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].bytes == want && free_[i].pinned == (rt != nullptr)) {
          Block b = free_[i];
          free_.erase(free_.begin() + static_cast<long>(i));
          return b;
        }
    }
    Block b;
    b.bytes = want;
    b.pinned = rt != nullptr;
    Status st;
    if (rt) {
      void* p = nullptr;
      st = rt->hostAlloc(&p, b.bytes, false);
      b.p = static_cast<std::byte*>(p);
    } else {
      b.p = static_cast<std::byte*>(::operator new[](b.bytes, std::align_val_t(64), std::nothrow));
      if (!b.p) st = systemError("cannot allocate %zu bytes of staging memory", b.bytes);
    }
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      --out_;
      return st;
    }
    return b;
  }
  // Blocks beyond kKeep are freed only when no job holds one: cudaFreeHost synchronizes the device, which must not
  // wait for a CUDA stream held by a job still running.
  void give(Block b, cu::Runtime* rt) {
    std::vector<Block> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(b);
      if (--out_ == 0)
        while (free_.size() > kKeep) {
          drop.push_back(free_.front());
          free_.erase(free_.begin());
        }
    }
    for (const Block& old : drop)
      if (old.pinned && rt)
        (void)rt->freeHost(old.p);
      else if (!old.pinned)
        ::operator delete[](old.p, std::align_val_t(64));
  }

 private:
  static constexpr size_t kKeep = 16;
  std::mutex mu_;
  std::vector<Block> free_;
  int out_ = 0;  // blocks taken and not given back
};

BlockPool& blocks() {
  static auto* p = new BlockPool;  // never destroyed: job threads may outlive static destruction
  return *p;
}

// ---- completion flags for CUDA streams: 32-bit words in host-mapped memory. A word's value only grows, so a
// stream that already passed its wait is never held by the word's next user. ----
struct Flag {
  uint32_t* host = nullptr;
  void* dev = nullptr;
  uint32_t target = 0;
};

class FlagPool {
 public:
  Result<Flag> take(cu::Runtime& rt) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      void* page = nullptr;
      HC_TRY(rt.hostAlloc(&page, kWords * sizeof(uint32_t), true));
      void* dev = nullptr;
      HC_TRY(rt.hostDevicePointer(&dev, page));
      std::memset(page, 0, kWords * sizeof(uint32_t));
      for (size_t i = 0; i < kWords; ++i)
        free_.push_back({static_cast<uint32_t*>(page) + i, static_cast<uint32_t*>(dev) + i, 0});
    }
    Flag f = free_.back();
    free_.pop_back();
    f.target = __atomic_load_n(f.host, __ATOMIC_ACQUIRE) + 1;
    return f;
  }
  void raise(const Flag& f) {
    __atomic_store_n(f.host, f.target, __ATOMIC_RELEASE);
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(f);
  }

 private:
  static constexpr size_t kWords = 1024;
  std::mutex mu_;
  std::vector<Flag> free_;
};

FlagPool& flags() {
  static auto* p = new FlagPool;
  return *p;
}

// ---- copies: CUDA on two internal streams, or memcpy (tests) ----
class SlotMap {
 public:
  SlotMap(const staging::Layout& l, std::byte* base) : l_(l), base_(base) {}
  std::byte* sendArea(int slot) const { return base_ + stride() * static_cast<size_t>(slot); }
  std::byte* recvArea(int slot) const { return sendArea(slot) + l_.slotSendBytes; }
  size_t stride() const { return l_.slotSendBytes + l_.slotRecvBytes; }

 private:
  const staging::Layout& l_;
  std::byte* base_;
};

class HostCopies final : public staging::CopyEngine {
 public:
  HostCopies(const staging::Layout& l, SlotMap m, const void* send, void* recv)
      : l_(l), m_(m), send_(static_cast<const std::byte*>(send)), recv_(static_cast<std::byte*>(recv)) {}
  Status copyIn(int chunk, int slot) override {
    const auto& c = l_.chunks[chunk].in;
    for (size_t r = 0; r < c.height; ++r)
      std::memcpy(m_.sendArea(slot) + c.stageOffset + r * c.stagePitch, send_ + c.userOffset + r * c.userPitch,
                  c.width);
    return okStatus();
  }
  Status waitIn(int) override { return okStatus(); }
  Status copyOut(int chunk, int slot) override {
    const auto& c = l_.chunks[chunk].out;
    for (size_t r = 0; r < c.height; ++r)
      std::memcpy(recv_ + c.userOffset + r * c.userPitch, m_.recvArea(slot) + c.stageOffset + r * c.stagePitch,
                  c.width);
    return okStatus();
  }
  Status finish() override { return okStatus(); }

 private:
  const staging::Layout& l_;
  SlotMap m_;
  const std::byte* send_;
  std::byte* recv_;
};

// A job's two internal streams and its per-slot events, kept for the next job on the same device: creating them
// would cost every call tens of microseconds. Streams come back idle (the job synchronized them).
struct CopyStreams {
  int device = -1;
  cu::StreamHandle in = nullptr, out = nullptr;
  std::vector<cu::EventHandle> inEv, outEv;
};

class CopyStreamPool {
 public:
  Result<std::unique_ptr<CopyStreams>> take(cu::Runtime& rt, int device, int slots) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i]->device == device && static_cast<int>(free_[i]->inEv.size()) == slots) {
          auto r = std::move(free_[i]);
          free_.erase(free_.begin() + static_cast<long>(i));
          return r;
        }
    }
    auto r = std::make_unique<CopyStreams>();
    r->device = device;
    r->inEv.assign(static_cast<size_t>(slots), nullptr);
    r->outEv.assign(static_cast<size_t>(slots), nullptr);
    Status st = rt.streamCreate(&r->in);
    if (st.ok()) st = rt.streamCreate(&r->out);
    for (auto& e : r->inEv)
      if (st.ok()) st = rt.eventCreate(&e);
    for (auto& e : r->outEv)
      if (st.ok()) st = rt.eventCreate(&e);
    if (!st.ok()) {
      destroy(rt, *r);
      return st;
    }
    return r;
  }
  void give(cu::Runtime& rt, std::unique_ptr<CopyStreams> r, bool healthy) {
    if (!healthy) {  // a failed copy may have left work queued: never reuse
      destroy(rt, *r);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(r));
  }

 private:
  static void destroy(cu::Runtime& rt, CopyStreams& r) {
    for (auto e : r.inEv)
      if (e) (void)rt.eventDestroy(e);
    for (auto e : r.outEv)
      if (e) (void)rt.eventDestroy(e);
    if (r.in) (void)rt.streamDestroy(r.in);
    if (r.out) (void)rt.streamDestroy(r.out);
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<CopyStreams>> free_;
};

CopyStreamPool& copyStreams() {
  static auto* p = new CopyStreamPool;
  return *p;
}

class CudaCopies final : public staging::CopyEngine {
 public:
  CudaCopies(cu::Runtime& rt, const staging::Layout& l, SlotMap m, const void* send, void* recv, int slots)
      : rt_(rt),
        l_(l),
        m_(m),
        send_(static_cast<const std::byte*>(send)),
        recv_(static_cast<std::byte*>(recv)),
        slots_(slots),
        outUsed_(slots, false) {}
  ~CudaCopies() override {
    if (res_) copyStreams().give(rt_, std::move(res_), finished_);
  }
  // Both streams start after `after` (the user's work before the call).
  Status init(int device, cu::EventHandle after) {
    HC_ASSIGN_OR_RETURN(res_, copyStreams().take(rt_, device, slots_));
    in_ = res_->in;
    out_ = res_->out;
    HC_TRY(rt_.streamWaitEvent(in_, after));
    return rt_.streamWaitEvent(out_, after);
  }
  Status copyIn(int chunk, int slot) override {
    if (outUsed_[slot]) HC_TRY(rt_.streamWaitEvent(in_, res_->outEv[slot]));
    const auto& c = l_.chunks[chunk].in;
    if (!c.empty())
      HC_TRY(copy(m_.sendArea(slot) + c.stageOffset, c.stagePitch, send_ + c.userOffset, c.userPitch, c, in_));
    return rt_.eventRecord(res_->inEv[slot], in_);
  }
  Status waitIn(int chunk) override { return rt_.eventSynchronize(res_->inEv[chunk % slots_]); }
  Status copyOut(int chunk, int slot) override {
    const auto& c = l_.chunks[chunk].out;
    if (!c.empty())
      HC_TRY(copy(recv_ + c.userOffset, c.userPitch, m_.recvArea(slot) + c.stageOffset, c.stagePitch, c, out_));
    outUsed_[slot] = true;
    return rt_.eventRecord(res_->outEv[slot], out_);
  }
  Status finish() override {
    Status a = rt_.streamSynchronize(out_);
    Status b = rt_.streamSynchronize(in_);
    finished_ = a.ok() && b.ok();
    return a.ok() ? b : a;
  }

 private:
  Status copy(std::byte* dst, size_t dpitch, const std::byte* src, size_t spitch, const staging::Copy2D& c,
              cu::StreamHandle s) {
    if (c.height == 1) return rt_.memcpyAsync(dst, src, c.width, s);
    return rt_.memcpy2DAsync(dst, dpitch, src, spitch, c.width, c.height, s);
  }
  cu::Runtime& rt_;
  const staging::Layout& l_;
  SlotMap m_;
  const std::byte* send_;
  std::byte* recv_;
  int slots_;
  std::unique_ptr<CopyStreams> res_;
  cu::StreamHandle in_ = nullptr, out_ = nullptr;
  std::vector<bool> outUsed_;
  bool finished_ = false;  // both streams synchronized without error: they may serve another job
};

}  // namespace

// ---- a staging job: its chunks' ops, its copies, its memory ----
struct StagedJob {
  Communicator* comm = nullptr;
  staging::Layout layout;
  std::vector<std::shared_ptr<Op>> ops;  // ops[k] runs chunk k (after group fusion, possibly a fused op)
  const void* send = nullptr;
  void* recv = nullptr;
  int slots = 1;
  int device = -1;
  cu::Runtime* rt = nullptr;  // null: memcpy copies
  Block mem;
  Stream* stream = nullptr;  // null: the caller waits
  // A plain hetcomm stream orders the job after the stream's previous work (waitFor), and the stream's later work
  // after marker, which the job finishes when its copies out are done.
  std::shared_ptr<Op> waitFor, marker;
  cu::EventHandle after = nullptr;
  Flag flag;
  bool hasFlag = false;
  bool blocking = false;  // a CUDA stream without stream memory operations: the call waits for the job

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;

  std::byte* sendArea(int k) { return SlotMap(layout, mem.p).sendArea(k % slots); }
  std::byte* recvArea(int k) { return SlotMap(layout, mem.p).recvArea(k % slots); }
  void run();
  Status wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return result;
  }
};

namespace {

class QueuedChunks final : public staging::ChunkOps {
 public:
  explicit QueuedChunks(StagedJob& j) : j_(j) {}
  void open(int k) override {
    if (j_.ops[k]->gates.fetch_sub(1, std::memory_order_acq_rel) == 1) Engine::get().wake();
  }
  Status wait(int k) override {
    const auto& op = j_.ops[k];
    Engine::get().waitUntil([&] { return op->finished(); });
    return op->error;
  }
  void abandon(int from, const Status& why) override {
    j_.comm->failFromOutside(why);
    for (int k = from; k < static_cast<int>(j_.ops.size()); ++k) open(k);
  }

 private:
  StagedJob& j_;
};

// Job threads: each job gets a thread of its own at once (a job may wait on another job's op, through a peer in
// this process or a fused group op), reused when idle.
class JobThreads {
 public:
  void run(std::shared_ptr<StagedJob> job) {
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    if (static_cast<size_t>(idle_) >= queue_.size()) {  // an idle thread for every queued job
      cv_.notify_one();
      return;
    }
    ++idle_;
    std::thread([this] { loop(); }).detach();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !queue_.empty(); })) {
        --idle_;
        return;
      }
      auto job = std::move(queue_.front());
      queue_.pop_front();
      --idle_;
      lock.unlock();
      job->run();
      job.reset();
      lock.lock();
      ++idle_;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<StagedJob>> queue_;
  int idle_ = 0;
};

JobThreads& jobThreads() {
  static auto* t = new JobThreads;
  return *t;
}

}  // namespace

void StagedJob::run() {
  if (waitFor) Engine::get().waitUntil([&] { return waitFor->finished(); });
  waitFor.reset();
  Status st = okStatus();
  if (rt && device >= 0) st = rt->setDevice(device);
  if (st.ok()) {
    QueuedChunks ops(*this);
    std::unique_ptr<staging::CopyEngine> copies;
    if (rt) {
      auto c = std::make_unique<CudaCopies>(*rt, layout, SlotMap(layout, mem.p), send, recv, slots);
      st = c->init(device, after);
      copies = std::move(c);
    } else {
      copies = std::make_unique<HostCopies>(layout, SlotMap(layout, mem.p), send, recv);
    }
    if (st.ok())
      st = staging::runPipeline(static_cast<int>(layout.chunks.size()), slots, *copies, ops);
    else
      ops.abandon(0, st);
    if (!st.ok())  // every op is finished or failed by now: nothing reads the slots any more
      for (auto& op : this->ops) Engine::get().waitUntil([&] { return op->finished(); });
  }
  if (after) (void)rt->eventDestroy(after);
  if (!st.ok() && stream) {
    std::lock_guard<std::mutex> lock(stream->mu);
    if (stream->firstError.ok()) stream->firstError = st;
  }
  if (hasFlag) flags().raise(flag);  // also on failure: a stream that waits forever would hang the GPU's work
  if (marker) {
    marker->error = st;
    marker->state.store(st.ok() ? Op::kDone : Op::kFailed, std::memory_order_release);
    Engine::get().notifyFinished();
  }
  // After the flag: freeing pinned memory (cudaFreeHost) waits for the whole device, and the user's stream may be
  // waiting for this very flag.
  blocks().give(mem, rt);
  {
    std::lock_guard<std::mutex> lock(mu);
    result = st;
    done = true;
  }
  cv.notify_all();
  if (stream) {
    stream->pending.fetch_sub(1, std::memory_order_acq_rel);
    Engine::get().notifyFinished();  // a stream synchronize waits for this
  }
}

void retargetJob(StagedJob& job, int chunk, const std::shared_ptr<Op>& op) { job.ops[chunk] = op; }

// ---- deciding to stage ----
Result<Staging> stagingFor(const void* send, size_t sendBytes, const void* recv, size_t recvBytes, Stream* s) {
  Staging out;
  int device = -1;
  bool devBuf = false;
  const bool cudaLoaded = cu::cudaInUse();
  for (auto [p, n, name] : {std::tuple{send, sendBytes, "sendbuff"}, std::tuple{recv, recvBytes, "recvbuff"}}) {
    if (!p) continue;
    HC_ASSIGN_OR_RETURN(cu::BufferInfo info, cu::classifyBuffer(p, n, name, cudaLoaded));
    if (info.kind == cu::MemoryKind::kDevice) {
      devBuf = true;
      device = info.device;
    }
  }
  const bool cudaStream = s && s->wrapsCuda;
  if (!devBuf && !cudaStream && !stageHostParam()) return out;
  out.staged = true;
  out.device = device;
  if (devBuf || cudaStream) {
    out.rt = cu::Runtime::get();
    if (!out.rt)
      return invalidArgument("%s needs the CUDA runtime: %s", devBuf ? "a device buffer" : "a CUDA stream",
                             cu::Runtime::unavailable().c_str());
  }
  return out;
}

// ---- queueing a staged call ----
namespace {

Result<std::shared_ptr<StagedJob>> makeJob(Communicator* c, const Staging& how, staging::Layout layout,
                                           const void* send, void* recv, Stream* s) {
  auto job = std::make_shared<StagedJob>();
  job->comm = c;
  job->layout = std::move(layout);
  job->send = send;
  job->recv = recv;
  job->rt = how.rt;
  job->device = how.device;
  job->slots = static_cast<int>(std::clamp<int64_t>(cudaSlotsParam(), 2, 16));
  job->slots = std::max(1, std::min(job->slots, static_cast<int>(job->layout.chunks.size())));
  job->stream = s;
  const size_t stride = job->layout.slotSendBytes + job->layout.slotRecvBytes;
  HC_ASSIGN_OR_RETURN(job->mem, blocks().take(stride * static_cast<size_t>(job->slots), how.rt));
  return job;
}

// Orders the job on its CUDA stream, in two steps so that a group's jobs can take each step together: first the
// copies are put after the work queued so far (an event), then the stream's later work after the job (a wait on
// its flag). Were a job's wait queued before the next job's event, that job's copies would wait for the first job,
// which waits for their shared group op: a deadlock.
Status recordAfter(StagedJob& job) {
  cu::Runtime& rt = *job.rt;
  if (job.device >= 0) HC_TRY(rt.setDevice(job.device));
  HC_TRY(rt.eventCreate(&job.after));
  const bool onCuda = job.stream && job.stream->wrapsCuda;
  return rt.eventRecord(job.after, onCuda ? job.stream->cuda : nullptr);  // otherwise the legacy default stream
}

Status holdStream(StagedJob& job) {
  cu::Runtime& rt = *job.rt;
  if (!job.stream || !job.stream->wrapsCuda) return okStatus();
  if (rt.canWaitValue()) {
    HC_ASSIGN_OR_RETURN(job.flag, flags().take(rt));
    Status st = rt.streamWaitValue32(job.stream->cuda, job.flag.dev, job.flag.target);
    if (st.ok()) {
      job.hasFlag = true;
      return st;
    }
    flags().raise(job.flag);  // gives the word back; nothing waits on it
    static std::once_flag warned;
    std::call_once(warned, [&] {
      HC_WARN("CUDA streams: %s; calls on a CUDA stream block until done instead", std::string(st.message()).c_str());
    });
  }
  job.blocking = true;  // no stream memory operations: later work is ordered by returning only when done
  return okStatus();
}

}  // namespace

Status startJobs(const std::vector<std::shared_ptr<StagedJob>>& jobs, bool fromGroup) {
  Status first;
  std::vector<bool> ordered(jobs.size(), true);
  for (int step = 0; step < 2; ++step)
    for (size_t i = 0; i < jobs.size(); ++i) {
      StagedJob& job = *jobs[i];
      if (!job.rt || !ordered[i]) continue;
      Status st = step == 0 ? recordAfter(job) : holdStream(job);
      if (st.ok()) continue;
      ordered[i] = false;
      if (first.ok()) first = st;
    }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto& job = jobs[i];
    if (job->stream) job->stream->pending.fetch_add(1, std::memory_order_acq_rel);
    if (!ordered[i]) {
      QueuedChunks(*job).abandon(0, first);
      job->run();  // releases what was taken; the chunks fail
      continue;
    }
    // A group's jobs all run at once on job threads (GroupEnd waits for the blocking ones); a lone blocking call
    // runs its job on the calling thread.
    if (!fromGroup && (!job->stream || job->blocking)) {
      job->run();
      if (first.ok()) first = job->result;
      continue;
    }
    jobThreads().run(job);
  }
  return first;
}

bool jobIsAsync(const StagedJob& job) { return job.stream != nullptr && !job.blocking; }
Status waitJob(StagedJob& job) { return job.wait(); }

Status launchStaged(Communicator* c, const Op& proto, const Staging& how, Stream* s) {
  staging::Layout layout;
  const bool p2p = proto.args.kind == coll::CollKind::kSendRecv;
  if (p2p) {
    const auto& p = proto.args.p2p[0];
    staging::Chunk ch;
    ch.count = p.bytes / kernels::sizeOf(proto.args.dtype);
    (p.isSend ? ch.in : ch.out) = staging::Copy2D{0, p.bytes, 0, p.bytes, p.bytes, 1};
    (p.isSend ? layout.slotSendBytes : layout.slotRecvBytes) = p.bytes;
    layout.chunks.push_back(ch);
  } else {
    layout = staging::planCollective(proto.args, c->nranks(), c->rank(),
                                     static_cast<size_t>(std::max<int64_t>(cudaChunkBytesParam(), 1)));
    if (layout.chunks.empty()) return okStatus();  // count 0 on every rank: nothing to do anywhere
  }
  const void* userSend = p2p ? (proto.args.p2p[0].isSend ? proto.extras[0] : nullptr) : proto.send;
  void* userRecv = p2p ? (proto.args.p2p[0].isSend ? nullptr : proto.extras[0]) : proto.recv;
  HC_ASSIGN_OR_RETURN(auto job, makeJob(c, how, std::move(layout), userSend, userRecv, s));
  const int chunks = static_cast<int>(job->layout.chunks.size());
  for (int k = 0; k < chunks; ++k) {
    auto op = std::make_shared<Op>();
    op->args = proto.args;
    op->comm = c;
    op->gates.store(1, std::memory_order_relaxed);
    if (p2p) {
      op->extras.push_back(proto.args.p2p[0].isSend ? job->sendArea(k) : job->recvArea(k));
    } else {
      op->args.count = job->layout.chunks[k].count;
      op->args.inPlace = false;
      op->send = job->sendArea(k);
      op->recv = job->recvArea(k);
      op->seq = c->nextCollectiveSeq();
    }
    job->ops.push_back(std::move(op));
  }
  if (s && !s->wrapsCuda) {
    job->marker = std::make_shared<Op>();
    std::lock_guard<std::mutex> lock(s->mu);
    job->waitFor = std::exchange(s->last, job->marker);
  }
  if (inGroup()) {
    for (int k = 0; k < chunks; ++k) holdForGroup(c, job->ops[k], job, k);
    return okStatus();
  }
  for (int k = 0; k < chunks; ++k)
    if (Status st = submit(c, job->ops[k]); !st.ok()) {
      // The communicator failed (its sticky error): what was queued is failed with it.
      job->ops.resize(static_cast<size_t>(k));
      job->layout.chunks.resize(static_cast<size_t>(k));
      QueuedChunks(*job).abandon(0, st);
      for (auto& op : job->ops) Engine::get().waitUntil([&] { return op->finished(); });
      job->stream = nullptr;
      job->waitFor.reset();
      job->run();  // nothing left to copy: releases the memory, finishes the marker, reports to the stream
      return st;
    }
  return startJobs({job}, /*fromGroup=*/false);
}

}  // namespace hetcomm::comm::api
