// api_ops.cc: operations through the C API: a collective or point-to-point call becomes an Op, queued on its
// communicator (or held until hetcommGroupEnd inside a group), then waited for (no stream: the caller drives it)
// or started (on a stream: Engine::start). Groups are per thread.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "comm/api_internal.h"
#include "comm/engine.h"
#include "kernels/datatype.h"

namespace hetcomm::comm::api {

// ---- groups: per thread ----
struct Pending {
  Communicator* comm;
  std::shared_ptr<Op> op;
  std::shared_ptr<StagedJob> job;  // a staged chunk: the job that feeds it
  int chunk = 0;
};
struct GroupState {
  int depth = 0;
  std::vector<Pending> pending;
  std::vector<std::shared_ptr<StagedJob>> jobs;
};
namespace {
thread_local GroupState tGroup;
}  // namespace

Status submit(Communicator* c, const std::shared_ptr<Op>& op) {
  Stream* s = op->stream;
  if (s) {
    // Held across enqueue: a refused op must not become the stream's last (later ops would not wait for the real
    // last one, and synchronize would return early).
    std::lock_guard<std::mutex> lock(s->mu);
    op->after = s->last;
    Status st = alreadyLogged(c->enqueue(op));
    if (st.ok()) {
      s->last = op;
      return st;
    }
    op->failUnqueued(st);
    return st;
  }
  Status st = alreadyLogged(c->enqueue(op));
  if (!st.ok()) op->failUnqueued(st);
  return st;
}

bool inGroup() { return tGroup.depth > 0; }

void holdForGroup(Communicator* c, std::shared_ptr<Op> op, std::shared_ptr<StagedJob> job, int chunk) {
  if (tGroup.jobs.empty() || tGroup.jobs.back() != job) tGroup.jobs.push_back(job);
  tGroup.pending.push_back({c, std::move(op), std::move(job), chunk});
}

Status waitOp(const std::shared_ptr<Op>& op) {
  Engine::get().waitUntil([&] { return op->finished(); });
  return alreadyLogged(op->error);
}

Status pairSelf(const Op& op, int me);

// A blocking call the communicator took on this thread (Communicator::Here): its status, once done or after
// waiting for what it handed over; nothing when it was not taken (queue an Op).
std::optional<Status> finishHere(Communicator::Here here, const std::shared_ptr<Op>& rest) {
  switch (here) {
    case Communicator::Here::kDone:
      return okStatus();
    case Communicator::Here::kHandedOver:
      return waitOp(rest);
    case Communicator::Here::kNotTaken:
      break;
  }
  return std::nullopt;
}

// Queues op now, or at GroupEnd inside a group; without a stream, waits for it.
Status launch(Communicator* c, std::shared_ptr<Op> op) {
  op->comm = c;
  if (tGroup.depth > 0) {
    tGroup.pending.push_back({c, std::move(op), nullptr, 0});
    return okStatus();
  }
  if (op->args.kind == coll::CollKind::kSendRecv) {
    if (Status st = pairSelf(*op, c->rank()); !st.ok()) {
      c->releaseP2pSeqs(op->args.p2p);
      return st;
    }
  }
  if (!op->stream) {  // the caller drives it, whatever is ahead of it
    HC_TRY(submit(c, op));
    return waitOp(op);
  }
  // An asynchronous op that is first in line is started on this thread; behind others, the thread that runs
  // those (the engine, or a caller waiting for them) takes it in turn.
  const bool first = c->idle();
  HC_TRY(submit(c, op));
  if (first)
    Engine::get().start([&] { return op->finished(); });
  else
    Engine::get().wake();
  return okStatus();
}

Status collective(coll::CollKind kind, const void* send, void* recv, size_t count, hetcommDataType_t dtype,
                  hetcommRedOp_t redop, int root, hetcommComm_t comm, hetcommStream_t stream) {
  HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
  HC_TRY(checkType(dtype));
  const bool reduces =
      kind == coll::CollKind::kAllReduce || kind == coll::CollKind::kReduce || kind == coll::CollKind::kReduceScatter;
  if (reduces) HC_TRY(checkOp(redop));
  const bool rooted = kind == coll::CollKind::kBroadcast || kind == coll::CollKind::kReduce;
  if (rooted) HC_TRY(checkRank(root, c->nranks(), "root"));
  HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
  coll::Args args;
  args.kind = kind;
  args.count = count;
  args.dtype = static_cast<kernels::DataType>(dtype);
  args.op = reduces ? static_cast<kernels::RedOp>(redop) : kernels::RedOp::kSum;
  args.root = rooted ? root : 0;
  const int n = c->nranks(), me = c->rank();
  HC_TRY(checkCount(
      count, kernels::sizeOf(args.dtype),
      kind == coll::CollKind::kAllReduce || kind == coll::CollKind::kBroadcast || kind == coll::CollKind::kReduce ? 1
                                                                                                                  : n));
  const size_t sendCount = args.sendBytes(n) / kernels::sizeOf(args.dtype);
  const size_t recvCount = args.recvBytes(n) / kernels::sizeOf(args.dtype);
  // Buffers only the root uses may be NULL elsewhere, as in NCCL.
  const bool needSend = kind != coll::CollKind::kBroadcast || me == root;
  const bool needRecv = kind != coll::CollKind::kReduce || me == root;
  if (needSend) HC_TRY(checkBuf(send, sendCount, "sendbuff"));
  if (needRecv) HC_TRY(checkBuf(recv, recvCount, "recvbuff"));
  const size_t esz = kernels::sizeOf(args.dtype);
  const auto* sb = static_cast<const std::byte*>(send);
  const auto* rb = static_cast<const std::byte*>(recv);
  switch (kind) {
    case coll::CollKind::kAllGather:
      args.inPlace = sb && sb == rb + me * count * esz;
      break;
    case coll::CollKind::kReduceScatter:
      args.inPlace = rb && rb == sb + me * count * esz;
      break;
    default:
      args.inPlace = sb && sb == rb;
      break;
  }
  HC_ASSIGN_OR_RETURN(Staging how, stagingFor(needSend ? send : nullptr, sendCount * esz, needRecv ? recv : nullptr,
                                              recvCount * esz, s));
  if (kind == coll::CollKind::kAllReduce && !s && !how.staged && !inGroup()) {  // on this thread, when it can
    std::shared_ptr<Op> rest;
    if (auto st = finishHere(c->allReduceHere(args, send, recv, &rest), rest)) return *st;
  }
  auto op = std::make_shared<Op>();
  op->args = std::move(args);
  op->send = send;
  op->recv = recv;
  if (how.staged) return launchStaged(c, *op, how, s);
  op->stream = s;
  op->seq = c->nextCollectiveSeq();
  return launch(c, std::move(op));
}

Status p2p(bool isSend, const void* buf, size_t count, hetcommDataType_t dtype, int peer, hetcommComm_t comm,
           hetcommStream_t stream) {
  HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
  HC_TRY(checkType(dtype));
  HC_TRY(checkRank(peer, c->nranks(), "peer"));
  HC_TRY(checkCount(count, kernels::sizeOf(static_cast<kernels::DataType>(dtype)), 1));
  HC_TRY(checkBuf(buf, count, isSend ? "sendbuff" : "recvbuff"));
  HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
  const size_t bytes = count * kernels::sizeOf(static_cast<kernels::DataType>(dtype));
  HC_ASSIGN_OR_RETURN(Staging how, stagingFor(isSend ? buf : nullptr, bytes, isSend ? nullptr : buf, bytes, s));
  if (!s && !how.staged && !inGroup()) {  // a lone blocking call: on this thread, without an Op, when it can
    std::shared_ptr<Op> rest;
    const auto here = c->sendRecvHere(isSend, static_cast<std::byte*>(const_cast<void*>(buf)), bytes,
                                      static_cast<kernels::DataType>(dtype), peer, &rest);
    if (auto st = finishHere(here, rest)) return *st;
  }
  coll::P2pOp p;
  p.isSend = isSend;
  p.peer = peer;
  p.bytes = bytes;
  p.seq = c->nextP2pSeq(peer, isSend);
  auto op = std::make_shared<Op>();
  op->args.kind = coll::CollKind::kSendRecv;
  op->args.dtype = static_cast<kernels::DataType>(dtype);
  op->args.p2p.push_back(p);
  op->extras.push_back(static_cast<std::byte*>(const_cast<void*>(buf)));
  if (how.staged) {
    Status st = inGroup() ? okStatus() : pairSelf(*op, c->rank());
    if (st.ok()) st = launchStaged(c, *op, how, s);
    if (!st.ok() && !inGroup()) c->releaseP2pSeqs(op->args.p2p);
    return st;
  }
  op->stream = s;
  return launch(c, std::move(op));
}

// Sends to self are copies into receives from self of the same group: check they pair up before queueing, so a
// mistake is an argument error and not a failed communicator.
Status pairSelf(const Op& op, int me) {
  if (std::none_of(op.args.p2p.begin(), op.args.p2p.end(), [me](const coll::P2pOp& p) { return p.peer == me; }))
    return okStatus();
  std::vector<size_t> sends, recvs;
  for (const auto& p : op.args.p2p)
    if (p.peer == me) (p.isSend ? sends : recvs).push_back(p.bytes);
  if (sends.size() != recvs.size())
    return invalidUsage("%zu send(s) to self but %zu receive(s) from self: each needs its partner in the same group",
                        sends.size(), recvs.size());
  for (size_t k = 0; k < sends.size(); ++k)
    if (sends[k] != recvs[k])
      return invalidUsage("a send to self of %zu bytes meets a receive from self of %zu bytes", sends[k], recvs[k]);
  return okStatus();
}

void groupStart() { ++tGroup.depth; }

Status groupEnd() {
  if (tGroup.depth == 0) return invalidUsage("hetcommGroupEnd without hetcommGroupStart");
  if (--tGroup.depth > 0) return okStatus();
  std::vector<Pending> pending;
  pending.swap(tGroup.pending);
  std::vector<std::shared_ptr<StagedJob>> jobs;
  jobs.swap(tGroup.jobs);
  // Ops only asynchronous staging jobs feed: nobody waits for them here.
  auto asyncOnly = [](const Pending& p) { return p.job && jobIsAsync(*p.job); };
  std::vector<bool> noWait;
  // One fused point-to-point op per (communicator, stream), at the place of its first send or receive.
  std::vector<Pending> ops;
  for (auto& p : pending) {
    if (p.op->args.kind != coll::CollKind::kSendRecv) {
      noWait.push_back(asyncOnly(p));
      ops.push_back(std::move(p));
      continue;
    }
    auto it = std::find_if(ops.begin(), ops.end(), [&](const Pending& q) {
      return q.comm == p.comm && q.op->stream == p.op->stream && q.op->args.kind == coll::CollKind::kSendRecv;
    });
    if (it == ops.end()) {
      noWait.push_back(asyncOnly(p));
      ops.push_back(std::move(p));
    } else {
      it->op->args.p2p.push_back(p.op->args.p2p[0]);
      it->op->extras.push_back(p.op->extras[0]);
      it->op->gates.fetch_add(p.op->gates.load(std::memory_order_relaxed), std::memory_order_relaxed);
      if (p.job) retargetJob(*p.job, p.chunk, it->op);
      const size_t i = static_cast<size_t>(it - ops.begin());
      noWait[i] = noWait[i] && asyncOnly(p);
    }
  }
  Status first;
  std::vector<std::shared_ptr<Op>> waits, started;
  for (size_t i = 0; i < ops.size(); ++i) {
    auto& p = ops[i];
    Status st;
    if (p.op->args.kind == coll::CollKind::kSendRecv) {
      st = pairSelf(*p.op, p.comm->rank());
      if (!st.ok()) p.comm->releaseP2pSeqs(p.op->args.p2p);
    }
    if (st.ok()) {
      st = submit(p.comm, p.op);
    } else {  // never queued: finished, so that a staging job feeding it stops
      p.op->failUnqueued(st);
    }
    if (!st.ok()) {
      if (first.ok()) first = st;
      continue;
    }
    if (!noWait[i]) (p.op->stream ? started : waits).push_back(p.op);
  }
  // Staging jobs run on job threads: the sends and receives they feed must all be posted before any finishes.
  if (!jobs.empty())
    if (Status st = startJobs(jobs, /*fromGroup=*/true); !st.ok() && first.ok()) first = st;
  if (!started.empty())
    Engine::get().start(
        [&] { return std::all_of(started.begin(), started.end(), [](auto& op) { return op->finished(); }); });
  for (auto& op : waits) {
    Status st = waitOp(op);
    if (!st.ok() && first.ok()) first = st;
  }
  for (auto& job : jobs)
    if (!jobIsAsync(*job))
      if (Status st = waitJob(*job); !st.ok() && first.ok()) first = st;
  return first;
}

Status syncStream(Stream* s) {
  // Staging jobs of a CUDA stream: done when their copies out are (the stream's own later work is the caller's).
  Engine::get().waitUntil([&] { return s->pending.load(std::memory_order_acquire) == 0; });
  std::shared_ptr<Op> last;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    last = s->last;
  }
  if (last) Engine::get().waitUntil([&] { return last->finished(); });
  std::lock_guard<std::mutex> lock(s->mu);
  Status st = s->firstError;
  s->firstError = Status();
  return alreadyLogged(st);
}

}  // namespace hetcomm::comm::api
