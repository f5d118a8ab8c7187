// api.cc: the public C API. Every entry point has one shape: guard() runs a lambda returning Status, maps its
// code to hetcommResult_t, keeps the message for hetcommGetLastError, and turns any stray exception into
// hetcommInternalError. Validation here never touches a communicator's data path.
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "comm/bootstrap/store.h"
#include "comm/communicator.h"
#include "comm/engine.h"
#include "comm/launch_env.h"
#include "comm/unique_id.h"
#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "hetcomm/hetcomm.h"
#include "kernels/datatype.h"
#include "topology/cluster_spec.h"
#include "transports/tcp/tcp_transport.h"

using hetcomm::Code;
using hetcomm::Status;
using hetcomm::comm::Communicator;
using hetcomm::comm::Op;
using hetcomm::comm::Stream;
namespace coll = hetcomm::coll;
namespace kernels = hetcomm::kernels;

struct hetcommComm {};    // opaque handle: points at a Communicator
struct hetcommStream {};  // opaque handle: points at a Stream

namespace hetcomm::comm {

HC_PARAM_INT(timeoutParam, "TIMEOUT", 300)

namespace {

thread_local std::string tLastError;
thread_local int tApiRank = -1;  // the rank of the communicator the current call named, for its log lines
// The error the current call returns is a communicator's sticky error, which the communicator logged when it
// decided it: the boundary must not log it again.
thread_local bool tErrorLogged = false;

Status alreadyLogged(Status st) {
  if (!st.ok()) tErrorLogged = true;
  return st;
}

// ---- live handles: a destroyed or made-up handle is refused, not dereferenced ----
std::mutex gHandlesMu;
std::unordered_set<const void*> gComms, gStreams;

void registerComm(Communicator* c) {
  std::lock_guard<std::mutex> lock(gHandlesMu);
  gComms.insert(c);
}
bool unregisterComm(Communicator* c) {
  std::lock_guard<std::mutex> lock(gHandlesMu);
  return gComms.erase(c) > 0;
}
bool isLiveComm(const void* c) {
  std::lock_guard<std::mutex> lock(gHandlesMu);
  return gComms.count(c) > 0;
}

hetcommResult_t toResult(Code c) { return static_cast<hetcommResult_t>(static_cast<int>(c)); }

template <class F>
hetcommResult_t guard(const char* fn, F&& body) {
  tApiRank = -1;
  tErrorLogged = false;
  try {
    Status st = body();
    log::ScopedRank scope(tApiRank);
    if (st.ok()) return hetcommSuccess;
    if (st.code() != Code::kInProgress) {
      tLastError = std::string(fn) + ": " + std::string(st.message());
      // Operation failures are logged once where they were decided (the communicator); argument and usage errors
      // are decided here.
      if (!tErrorLogged && (st.code() == Code::kInvalidArgument || st.code() == Code::kInvalidUsage))
        HC_WARN("%s", tLastError.c_str());
    }
    return toResult(st.code());
  } catch (const std::exception& e) {
    tLastError = std::string(fn) + ": internal error: " + e.what();
  } catch (...) {
    tLastError = std::string(fn) + ": internal error: unknown exception";
  }
  HC_WARN("%s", tLastError.c_str());
  return hetcommInternalError;
}

Result<Communicator*> liveComm(hetcommComm_t handle, const char* what = "comm") {
  if (!handle) return invalidArgument("%s is NULL", what);
  if (!isLiveComm(handle))
    return invalidUsage("%s %p is not a live communicator (destroyed or never created)", what,
                        static_cast<void*>(handle));
  auto* c = reinterpret_cast<Communicator*>(handle);
  tApiRank = c->rank();
  return c;
}

// A communicator that can take operations now.
Result<Communicator*> readyComm(hetcommComm_t handle) {
  HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(handle));
  switch (c->state()) {
    case Communicator::kInitializing:
      return invalidUsage("the communicator is still initializing; poll hetcommCommGetAsyncError until success");
    case Communicator::kInitFailed:
      return c->initError;
    case Communicator::kFinalized:
      return invalidUsage("the communicator was finalized");
    case Communicator::kReady:
      break;
  }
  HC_TRY(alreadyLogged(c->asyncError()));
  return c;
}

Status checkType(hetcommDataType_t t) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= kernels::kNumDataTypes)
    return invalidArgument("unknown datatype %d (valid: 0..%d)", static_cast<int>(t), kernels::kNumDataTypes - 1);
  return okStatus();
}
Status checkOp(hetcommRedOp_t op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= kernels::kNumRedOps)
    return invalidArgument("unknown reduction op %d (valid: 0..%d)", static_cast<int>(op), kernels::kNumRedOps - 1);
  return okStatus();
}
Status checkBuf(const void* p, size_t count, const char* name) {
  if (!p && count > 0) return invalidArgument("%s is NULL", name);
  return okStatus();
}
Status checkRank(int r, int n, const char* what) {
  if (r < 0 || r >= n) return invalidArgument("%s %d is out of range for a communicator of %d ranks", what, r, n);
  return okStatus();
}
// Sizes in bytes must fit in memory with room to spare: a count near SIZE_MAX (a negative int passed as size_t,
// say) is an argument error here, not an allocation failure later.
Status checkCount(size_t count, size_t elemSize, int blocks) {
  constexpr size_t kMaxBytes = size_t{1} << 46;  // 64 TiB
  if (count > kMaxBytes / elemSize / static_cast<size_t>(blocks))
    return invalidArgument("count %zu is too large (%zu-byte elements, %d block%s; was a negative number passed?)",
                           count, elemSize, blocks, blocks == 1 ? "" : "s");
  return okStatus();
}

Result<Stream*> streamOf(hetcommStream_t s) {
  if (!s) return static_cast<Stream*>(nullptr);
  std::lock_guard<std::mutex> lock(gHandlesMu);
  if (!gStreams.count(s)) return invalidUsage("stream %p is not a live stream (destroyed?)", static_cast<void*>(s));
  return reinterpret_cast<Stream*>(s);
}

// ---- groups: per thread ----
struct Pending {
  Communicator* comm;
  std::shared_ptr<Op> op;
};
struct GroupState {
  int depth = 0;
  std::vector<Pending> pending;
};
thread_local GroupState tGroup;

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
    op->error = st;
    op->state.store(Op::kFailed, std::memory_order_release);
    return st;
  }
  Status st = alreadyLogged(c->enqueue(op));
  if (!st.ok()) {  // never queued: mark it finished
    op->error = st;
    op->state.store(Op::kFailed, std::memory_order_release);
  }
  return st;
}

Status waitOp(const std::shared_ptr<Op>& op) {
  Engine::get().waitUntil([&] { return op->finished(); });
  return alreadyLogged(op->error);
}

Status pairSelf(const Op& op, int me);

// Queues op now, or at GroupEnd inside a group; without a stream, waits for it.
Status launch(Communicator* c, std::shared_ptr<Op> op) {
  op->comm = c;
  if (tGroup.depth > 0) {
    tGroup.pending.push_back({c, std::move(op)});
    return okStatus();
  }
  if (op->args.kind == coll::CollKind::kSendRecv) {
    if (Status st = pairSelf(*op, c->rank()); !st.ok()) {
      c->releaseP2pSeqs(op->args.p2p);
      return st;
    }
  }
  // An asynchronous op that is first in line is started on this thread; behind others, the thread that runs
  // those (the engine, or a caller waiting for them) takes it in turn.
  const bool first = c->idle();
  HC_TRY(submit(c, op));
  if (!op->stream) return waitOp(op);
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
  auto op = std::make_shared<Op>();
  op->args.kind = kind;
  op->args.count = count;
  op->args.dtype = static_cast<kernels::DataType>(dtype);
  op->args.op = reduces ? static_cast<kernels::RedOp>(redop) : kernels::RedOp::kSum;
  op->args.root = rooted ? root : 0;
  const int n = c->nranks(), me = c->rank();
  HC_TRY(checkCount(
      count, kernels::sizeOf(op->args.dtype),
      kind == coll::CollKind::kAllReduce || kind == coll::CollKind::kBroadcast || kind == coll::CollKind::kReduce ? 1
                                                                                                                  : n));
  const size_t sendCount = op->args.sendBytes(n) / kernels::sizeOf(op->args.dtype);
  const size_t recvCount = op->args.recvBytes(n) / kernels::sizeOf(op->args.dtype);
  // Buffers only the root uses may be NULL elsewhere, as in NCCL.
  const bool needSend = kind != coll::CollKind::kBroadcast || me == root;
  const bool needRecv = kind != coll::CollKind::kReduce || me == root;
  if (needSend) HC_TRY(checkBuf(send, sendCount, "sendbuff"));
  if (needRecv) HC_TRY(checkBuf(recv, recvCount, "recvbuff"));
  const size_t esz = kernels::sizeOf(op->args.dtype);
  const auto* sb = static_cast<const std::byte*>(send);
  const auto* rb = static_cast<const std::byte*>(recv);
  switch (kind) {
    case coll::CollKind::kAllGather:
      op->args.inPlace = sb && sb == rb + me * count * esz;
      break;
    case coll::CollKind::kReduceScatter:
      op->args.inPlace = rb && rb == sb + me * count * esz;
      break;
    default:
      op->args.inPlace = sb && sb == rb;
      break;
  }
  op->send = send;
  op->recv = recv;
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
  coll::P2pOp p;
  p.isSend = isSend;
  p.peer = peer;
  p.bytes = count * kernels::sizeOf(static_cast<kernels::DataType>(dtype));
  p.seq = c->nextP2pSeq(peer, isSend);
  auto op = std::make_shared<Op>();
  op->args.kind = coll::CollKind::kSendRecv;
  op->args.dtype = static_cast<kernels::DataType>(dtype);
  op->args.p2p.push_back(p);
  op->extras.push_back(static_cast<std::byte*>(const_cast<void*>(buf)));
  op->stream = s;
  return launch(c, std::move(op));
}

// Sends to self are copies into receives from self of the same group: check they pair up before queueing, so a
// mistake is an argument error and not a failed communicator.
Status pairSelf(const Op& op, int me) {
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

Status groupEnd() {
  if (tGroup.depth == 0) return invalidUsage("hetcommGroupEnd without hetcommGroupStart");
  if (--tGroup.depth > 0) return okStatus();
  std::vector<Pending> pending;
  pending.swap(tGroup.pending);
  // One fused point-to-point op per (communicator, stream), at the place of its first send or receive.
  std::vector<Pending> ops;
  for (auto& p : pending) {
    if (p.op->args.kind != coll::CollKind::kSendRecv) {
      ops.push_back(std::move(p));
      continue;
    }
    auto it = std::find_if(ops.begin(), ops.end(), [&](const Pending& q) {
      return q.comm == p.comm && q.op->stream == p.op->stream && q.op->args.kind == coll::CollKind::kSendRecv;
    });
    if (it == ops.end()) {
      ops.push_back(std::move(p));
    } else {
      it->op->args.p2p.push_back(p.op->args.p2p[0]);
      it->op->extras.push_back(p.op->extras[0]);
    }
  }
  Status first;
  std::vector<std::shared_ptr<Op>> waits, started;
  for (auto& p : ops) {
    Status st;
    if (p.op->args.kind == coll::CollKind::kSendRecv) {
      st = pairSelf(*p.op, p.comm->rank());
      if (!st.ok()) p.comm->releaseP2pSeqs(p.op->args.p2p);
    }
    if (st.ok()) st = submit(p.comm, p.op);
    if (!st.ok()) {
      if (first.ok()) first = st;
      continue;
    }
    (p.op->stream ? started : waits).push_back(p.op);
  }
  if (!started.empty())
    Engine::get().start([&] { return std::all_of(started.begin(), started.end(), [](auto& op) { return op->finished(); }); });
  for (auto& op : waits) {
    Status st = waitOp(op);
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

// ---- communicator creation ----

Result<CommOptions> optionsFrom(const hetcommConfig_t* config) {
  CommOptions o;
  o.timeoutSec = static_cast<double>(timeoutParam());
  if (o.timeoutSec <= 0)
    return invalidArgument("HETCOMM_TIMEOUT=%g must be a positive number of seconds", o.timeoutSec);
  if (!config) return o;
  if (config->magic != HETCOMM_CONFIG_MAGIC || config->size != sizeof(hetcommConfig_t))
    return invalidArgument("config was not initialised with HETCOMM_CONFIG_INITIALIZER");
  if (config->timeoutSec != HETCOMM_CONFIG_UNDEF_INT) {
    if (config->timeoutSec <= 0) return invalidArgument("config timeoutSec %d must be positive", config->timeoutSec);
    o.timeoutSec = config->timeoutSec;
  }
  if (config->commName) o.name = config->commName;
  return o;
}

Result<bool> blockingFrom(const hetcommConfig_t* config) {
  if (!config || config->blocking == HETCOMM_CONFIG_UNDEF_INT) return true;
  if (config->blocking != 0 && config->blocking != 1)
    return invalidArgument("config blocking must be 0 or 1, not %d", config->blocking);
  return config->blocking == 1;
}

// The address other hosts reach this one's store at: HETCOMM_MASTER_ADDR, else the first selected interface.
Result<std::string> localStoreAddress() {
  if (auto a = param::env("HETCOMM_MASTER_ADDR")) return *a;
  HC_ASSIGN_OR_RETURN(auto ifaces, transport::tcp::selectInterfaces(param::env("HETCOMM_SOCKET_IFNAME").value_or("")));
  return ifaces[0].addr;
}

std::mutex gServersMu;
std::vector<std::unique_ptr<StoreServer>>* gServers = new std::vector<std::unique_ptr<StoreServer>>();  // kept

std::unordered_set<uint16_t>* gServedPorts = new std::unordered_set<uint16_t>();  // kept

Status keepServer(std::unique_ptr<StoreServer> s) {
  std::lock_guard<std::mutex> lock(gServersMu);
  gServedPorts->insert(s->port());
  gServers->push_back(std::move(s));
  return okStatus();
}

bool servesStore(uint16_t port) {
  std::lock_guard<std::mutex> lock(gServersMu);
  return gServedPorts->count(port) > 0;
}

Status initRank(hetcommComm_t* out, int nranks, const UniqueIdContent& id, uint64_t commId, int rank,
                const hetcommConfig_t* config) {
  if (!out) return invalidArgument("comm (the output pointer) is NULL");
  if (nranks < 1) return invalidArgument("nranks %d must be at least 1", nranks);
  HC_TRY(checkRank(rank, nranks, "rank"));
  HC_ASSIGN_OR_RETURN(CommOptions options, optionsFrom(config));
  HC_ASSIGN_OR_RETURN(bool blocking, blockingFrom(config));
  auto c = std::make_unique<Communicator>(rank, nranks, options);
  c->setHostsStore(servesStore(id.port));
  if (!blocking) {
    Communicator* raw = c.release();
    registerComm(raw);
    *out = reinterpret_cast<hetcommComm_t>(raw);
    raw->initThread = std::thread([raw, id, commId] {
      Status st = raw->init(id, commId);
      raw->initError = st;
      raw->setState(st.ok() ? Communicator::kReady : Communicator::kInitFailed);
    });
    return Status(Code::kInProgress, "initializing");
  }
  Status st = c->init(id, commId);
  if (!st.ok()) {
    (void)c->destroy();  // the init's error is the one to report
    return st;
  }
  Communicator* raw = c.release();
  registerComm(raw);
  *out = reinterpret_cast<hetcommComm_t>(raw);
  return okStatus();
}

Status getUniqueId(hetcommUniqueId* id) {
  if (!id) return invalidArgument("uniqueId is NULL");
  UniqueIdContent c;
  HC_TRY(crypto::randomBytes(c.secret));
  HC_TRY(crypto::randomBytes({reinterpret_cast<uint8_t*>(&c.commId), sizeof(c.commId)}));
  HC_ASSIGN_OR_RETURN(c.addr, localStoreAddress());
  HC_ASSIGN_OR_RETURN(auto server, StoreServer::start("", 0, c.secret));
  c.port = server->port();
  HC_TRY(keepServer(std::move(server)));
  return encodeUniqueId(c, id);
}

std::atomic<uint64_t> gEnvInits{0};

Status initFromEnv(hetcommComm_t* out) {
  if (!out) return invalidArgument("comm (the output pointer) is NULL");
  HC_ASSIGN_OR_RETURN(LaunchEnv e, readLaunchEnv());
  log::ScopedRank scope(e.rank);
  HC_INFO(Init, "launched by %s: rank %d of %d, store at %s:%u%s", e.launcher.c_str(), e.rank, e.nranks,
          e.masterAddr.c_str(), e.masterPort,
          e.secretDerived ? " (secret derived from the job identity; set HETCOMM_SECRET for a real one)" : "");
  UniqueIdContent id{e.masterAddr, e.masterPort, e.secret, 0};
  if (!e.externalStore && e.rank == 0) {
    auto server = StoreServer::start("", e.masterPort, e.secret);
    if (!server) return server.error();
    HC_TRY(keepServer(std::move(*server)));
  }
  // Every rank derives the same id for its n-th communicator made from the environment.
  uint64_t n = ++gEnvInits;
  crypto::Mac m = crypto::prove(e.secret, crypto::Nonce{}, "env-comm", n);
  uint64_t commId;
  std::memcpy(&commId, m.data(), sizeof(commId));
  return initRank(out, e.nranks, id, commId, e.rank, nullptr);
}

Status initAll(hetcommComm_t* comms, int ndev) {
  if (!comms) return invalidArgument("comms is NULL");
  if (ndev < 1) return invalidArgument("ndev %d must be at least 1", ndev);
  hetcommUniqueId uid;
  HC_TRY(getUniqueId(&uid));
  HC_ASSIGN_OR_RETURN(UniqueIdContent id, decodeUniqueId(uid));
  std::vector<Status> results(ndev);
  std::vector<std::thread> threads;
  for (int r = 0; r < ndev; ++r)
    threads.emplace_back([&, r] { results[r] = initRank(&comms[r], ndev, id, id.commId, r, nullptr); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ndev; ++r) {
    if (results[r].ok()) continue;
    for (int k = 0; k < ndev; ++k)
      if (results[k].ok()) {
        auto* c = reinterpret_cast<Communicator*>(comms[k]);
        unregisterComm(c);
        (void)c->destroy();  // results[r] is the error to report
        delete c;
        comms[k] = nullptr;
      }
    return results[r];
  }
  return okStatus();
}

}  // namespace
}  // namespace hetcomm::comm

using namespace hetcomm::comm;  // NOLINT: the definitions below are the C API

extern "C" {

hetcommResult_t hetcommGetVersion(int* version) {
  return guard("hetcommGetVersion", [&]() -> Status {
    if (!version) return hetcomm::invalidArgument("version is NULL");
    *version = HETCOMM_VERSION_CODE;
    return hetcomm::okStatus();
  });
}

const char* hetcommGetErrorString(hetcommResult_t r) {
  switch (r) {
    case hetcommSuccess:
      return "no error";
    case hetcommUnhandledError:
      return "unhandled error";
    case hetcommSystemError:
      return "unhandled system error (run with HETCOMM_DEBUG=INFO for details)";
    case hetcommInternalError:
      return "internal error - please report this issue to the hetcomm developers";
    case hetcommInvalidArgument:
      return "invalid argument (run with HETCOMM_DEBUG=WARN for details)";
    case hetcommInvalidUsage:
      return "invalid usage (run with HETCOMM_DEBUG=WARN for details)";
    case hetcommRemoteError:
      return "remote process exited or there was a network error";
    case hetcommInProgress:
      return "operation in progress";
    case hetcommTimeout:
      return "operation timed out (HETCOMM_TIMEOUT)";
    default:
      return "unknown result code";
  }
}

const char* hetcommGetLastError(hetcommComm_t comm) {
  if (tLastError.empty() && comm && isLiveComm(comm)) {
    Status st = reinterpret_cast<Communicator*>(comm)->asyncError();
    if (!st.ok()) tLastError = std::string(st.message());
  }
  return tLastError.c_str();
}

hetcommResult_t hetcommGetUniqueId(hetcommUniqueId* uniqueId) {
  return guard("hetcommGetUniqueId", [&] { return getUniqueId(uniqueId); });
}

hetcommResult_t hetcommCommInitRankConfig(hetcommComm_t* comm, int nranks, hetcommUniqueId commId, int rank,
                                          hetcommConfig_t* config) {
  return guard("hetcommCommInitRank", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(UniqueIdContent id, decodeUniqueId(commId));
    return initRank(comm, nranks, id, id.commId, rank, config);
  });
}

hetcommResult_t hetcommCommInitRank(hetcommComm_t* comm, int nranks, hetcommUniqueId commId, int rank) {
  return hetcommCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

hetcommResult_t hetcommCommInitFromEnv(hetcommComm_t* comm) {
  return guard("hetcommCommInitFromEnv", [&] { return initFromEnv(comm); });
}

hetcommResult_t hetcommCommInitModel(hetcommComm_t* comm, const char* clusterJson) {
  return guard("hetcommCommInitModel", [&]() -> Status {
    if (!comm) return hetcomm::invalidArgument("comm (the output pointer) is NULL");
    if (!clusterJson) return hetcomm::invalidArgument("clusterJson is NULL");
    HC_ASSIGN_OR_RETURN(hetcomm::topo::ClusterSpec spec,
                        hetcomm::topo::parseClusterSpec(clusterJson, "(hetcommCommInitModel)"));
    auto c = std::make_unique<Communicator>(0, spec.nranks(), CommOptions{});
    HC_TRY(c->initModel(spec.nodes()));
    Communicator* raw = c.release();
    registerComm(raw);
    *comm = reinterpret_cast<hetcommComm_t>(raw);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommInitAll(hetcommComm_t* comms, int ndev, const int* /*devlist*/) {
  return guard("hetcommCommInitAll", [&] { return initAll(comms, ndev); });
}

hetcommResult_t hetcommCommSplit(hetcommComm_t comm, int color, int key, hetcommComm_t* newcomm,
                                 hetcommConfig_t* config) {
  return guard("hetcommCommSplit", [&]() -> Status {
    if (!newcomm) return hetcomm::invalidArgument("newcomm is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    if (color < 0 && color != HETCOMM_SPLIT_NOCOLOR)
      return hetcomm::invalidArgument("color %d must be >= 0 or HETCOMM_SPLIT_NOCOLOR", color);
    CommOptions options = c->options();
    if (config) {
      HC_ASSIGN_OR_RETURN(options, optionsFrom(config));
    }
    std::unique_ptr<Communicator> child;
    HC_TRY(c->split(color, key, options, &child));
    *newcomm = nullptr;
    if (child) {
      Communicator* raw = child.release();
      registerComm(raw);
      *newcomm = reinterpret_cast<hetcommComm_t>(raw);
    }
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommFinalize(hetcommComm_t comm) {
  return guard("hetcommCommFinalize", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    return c->finalize();
  });
}

hetcommResult_t hetcommCommDestroy(hetcommComm_t comm) {
  return guard("hetcommCommDestroy", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    unregisterComm(c);
    Status st = c->destroy();
    delete c;
    return st;
  });
}

hetcommResult_t hetcommCommAbort(hetcommComm_t comm) {
  return guard("hetcommCommAbort", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    unregisterComm(c);
    c->abort();
    delete c;
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommGetAsyncError(hetcommComm_t comm, hetcommResult_t* asyncError) {
  return guard("hetcommCommGetAsyncError", [&]() -> Status {
    if (!asyncError) return hetcomm::invalidArgument("asyncError is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    switch (c->state()) {
      case Communicator::kInitializing:
        *asyncError = hetcommInProgress;
        break;
      case Communicator::kInitFailed:
        *asyncError = toResult(c->initError.code());
        break;
      default:
        *asyncError = toResult(c->asyncError().code());
    }
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommCount(const hetcommComm_t comm, int* count) {
  return guard("hetcommCommCount", [&]() -> Status {
    if (!count) return hetcomm::invalidArgument("count is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    *count = c->nranks();
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommUserRank(const hetcommComm_t comm, int* rank) {
  return guard("hetcommCommUserRank", [&]() -> Status {
    if (!rank) return hetcomm::invalidArgument("rank is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    *rank = c->rank();
    return hetcomm::okStatus();
  });
}

namespace {
// What hetcommCommGetAlgorithm and hetcommCommPredict ask about, checked.
hetcomm::Result<coll::Args> predictionArgs(hetcommCollective_t coll, size_t count, hetcommDataType_t datatype,
                                           char* name, size_t nameLen, bool sendRecv) {
  if (!name && nameLen) return hetcomm::invalidArgument("name is NULL but nameLen is %zu", nameLen);
  HC_TRY(checkType(datatype));
  const hetcommCollective_t last = sendRecv ? hetcommCollSendRecv : hetcommCollAlltoAll;
  if (coll < hetcommCollAllReduce || coll > last)
    return hetcomm::invalidArgument(
        "collective %d is not a hetcommCollective_t%s", static_cast<int>(coll),
        coll == hetcommCollSendRecv ? " here (only hetcommCommPredict takes sendrecv)" : "");
  coll::Args a;
  a.kind = static_cast<coll::CollKind>(coll);
  a.count = count;
  a.dtype = static_cast<kernels::DataType>(datatype);
  return a;
}

void writeSelection(const coll::Selection& sel, char* name, size_t nameLen, double* predictedUs) {
  if (nameLen) {
    size_t n = std::min(nameLen - 1, sel.algo->name().size());
    std::memcpy(name, sel.algo->name().data(), n);
    name[n] = '\0';
  }
  if (predictedUs) *predictedUs = sel.predictedUs;
}
}  // namespace

hetcommResult_t hetcommCommGetAlgorithm(const hetcommComm_t comm, hetcommCollective_t coll, size_t count,
                                        hetcommDataType_t datatype, char* name, size_t nameLen, double* predictedUs) {
  return guard("hetcommCommGetAlgorithm", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    HC_ASSIGN_OR_RETURN(coll::Args a, predictionArgs(coll, count, datatype, name, nameLen, false));
    HC_ASSIGN_OR_RETURN(coll::Selection sel, c->selectFor(a));
    writeSelection(sel, name, nameLen, predictedUs);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommPredict(const hetcommComm_t comm, hetcommCollective_t coll, size_t count,
                                   hetcommDataType_t datatype, const int* ranks, int nranks, char* name, size_t nameLen,
                                   double* predictedUs) {
  return guard("hetcommCommPredict", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    if (nranks < 1) return hetcomm::invalidArgument("nranks is %d; a group needs 1 rank at least", nranks);
    if (!ranks) return hetcomm::invalidArgument("ranks is NULL but nranks is %d", nranks);
    HC_ASSIGN_OR_RETURN(coll::Args a, predictionArgs(coll, count, datatype, name, nameLen, true));
    HC_ASSIGN_OR_RETURN(coll::Selection sel, c->predictFor(std::vector<int>(ranks, ranks + nranks), a));
    writeSelection(sel, name, nameLen, predictedUs);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommPeerTransport(const hetcommComm_t comm, int peer, char* name, size_t nameLen, char* reason,
                                         size_t reasonLen) {
  return guard("hetcommCommPeerTransport", [&]() -> Status {
    if ((!name && nameLen) || (!reason && reasonLen))
      return hetcomm::invalidArgument("a NULL buffer with a non-zero length (name %zu bytes, reason %zu bytes)",
                                      nameLen, reasonLen);
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    if (c->state() != Communicator::kReady && c->state() != Communicator::kFinalized)
      return hetcomm::invalidUsage("the communicator is not initialized yet");
    if (peer < 0 || peer >= c->nranks() || peer == c->rank())
      return hetcomm::invalidArgument("peer %d: must be another rank of the communicator, in [0, %d)", peer,
                                      c->nranks());
    const hetcomm::comm::PairChoice& choice = c->transportTo(peer);
    auto put = [](char* out, size_t len, std::string_view text) {
      if (!len) return;
      size_t n = std::min(len - 1, text.size());
      std::memcpy(out, text.data(), n);
      out[n] = '\0';
    };
    put(name, nameLen, hetcomm::transport::kindName(choice.kind));
    put(reason, reasonLen, choice.why);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommRankPlacement(const hetcommComm_t comm, int rank, int* host, int* island) {
  return guard("hetcommCommRankPlacement", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    if (c->state() != Communicator::kReady && c->state() != Communicator::kFinalized)
      return hetcomm::invalidUsage("the communicator is not initialized yet");
    if (rank < 0 || rank >= c->nranks())
      return hetcomm::invalidArgument("rank %d: must be a rank of the communicator, in [0, %d)", rank, c->nranks());
    if (host) *host = c->hostOf(rank);
    if (island) *island = c->islandOf(rank);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommRankDevice(const hetcommComm_t comm, int rank, double* peakTflops, size_t* memoryBytes) {
  return guard("hetcommCommRankDevice", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    if (c->state() != Communicator::kReady && c->state() != Communicator::kFinalized)
      return hetcomm::invalidUsage("the communicator is not initialized yet");
    if (rank < 0 || rank >= c->nranks())
      return hetcomm::invalidArgument("rank %d: must be a rank of the communicator, in [0, %d)", rank, c->nranks());
    const hetcomm::topo::Gpu* gpu = c->gpuOf(rank);
    if (peakTflops) *peakTflops = gpu ? gpu->peakTflops : 0;
    if (memoryBytes) *memoryBytes = gpu ? static_cast<size_t>(gpu->memoryBytes) : 0;
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommAllReduce(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                                 hetcommRedOp_t op, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommAllReduce", [&] {
    return collective(coll::CollKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
  });
}

hetcommResult_t hetcommBroadcast(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                                 int root, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommBroadcast", [&] {
    return collective(coll::CollKind::kBroadcast, sendbuff, recvbuff, count, datatype, hetcommSum, root, comm, stream);
  });
}

hetcommResult_t hetcommReduce(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                              hetcommRedOp_t op, int root, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommReduce", [&] {
    return collective(coll::CollKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  });
}

hetcommResult_t hetcommAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, hetcommDataType_t datatype,
                                 hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommAllGather", [&] {
    return collective(coll::CollKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, hetcommSum, 0, comm, stream);
  });
}

hetcommResult_t hetcommReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, hetcommDataType_t datatype,
                                     hetcommRedOp_t op, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommReduceScatter", [&] {
    return collective(coll::CollKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
  });
}

hetcommResult_t hetcommAlltoAll(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                                hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommAlltoAll", [&] {
    return collective(coll::CollKind::kAlltoAll, sendbuff, recvbuff, count, datatype, hetcommSum, 0, comm, stream);
  });
}

hetcommResult_t hetcommSend(const void* sendbuff, size_t count, hetcommDataType_t datatype, int peer,
                            hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommSend", [&] { return p2p(true, sendbuff, count, datatype, peer, comm, stream); });
}

hetcommResult_t hetcommRecv(void* recvbuff, size_t count, hetcommDataType_t datatype, int peer, hetcommComm_t comm,
                            hetcommStream_t stream) {
  return guard("hetcommRecv", [&] { return p2p(false, recvbuff, count, datatype, peer, comm, stream); });
}

hetcommResult_t hetcommGroupStart(void) {
  return guard("hetcommGroupStart", [&] {
    ++tGroup.depth;
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommGroupEnd(void) {
  return guard("hetcommGroupEnd", [&] { return groupEnd(); });
}

hetcommResult_t hetcommStreamCreate(hetcommStream_t* stream) {
  return guard("hetcommStreamCreate", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    auto* s = new Stream();
    std::lock_guard<std::mutex> lock(gHandlesMu);
    gStreams.insert(s);
    *stream = reinterpret_cast<hetcommStream_t>(s);
    return hetcomm::okStatus();
  });
}

namespace {
Status syncStream(Stream* s) {
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
}  // namespace

hetcommResult_t hetcommStreamSynchronize(hetcommStream_t stream) {
  return guard("hetcommStreamSynchronize", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
    return syncStream(s);
  });
}

hetcommResult_t hetcommStreamQuery(hetcommStream_t stream) {
  return guard("hetcommStreamQuery", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->last && !s->last->finished()) return Status(Code::kInProgress, "work pending");
    return s->firstError;
  });
}

hetcommResult_t hetcommStreamDestroy(hetcommStream_t stream) {
  return guard("hetcommStreamDestroy", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
    (void)syncStream(s);  // its errors were the caller's to collect with synchronize
    {
      std::lock_guard<std::mutex> lock(gHandlesMu);
      gStreams.erase(s);
    }
    delete s;
    return hetcomm::okStatus();
  });
}

}  // extern "C"
