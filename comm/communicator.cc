#include "comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "collectives/algorithm_list.h"
#include "collectives/synth/synth.h"
#include "comm/comm_params.h"
#include "comm/engine.h"
#include "comm/link_probe.h"
#include "comm/transport_select.h"
#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "hetcomm/hetcomm.h"
#include "topology/cluster.h"
#include "topology/host_identity.h"
#include "topology/link_graph.h"
#include "topology/link_matrix.h"
#include "topology/node.h"
#include "topology/node_json.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/ucx/ucx_transport.h"
#include "transports/verbs/verbs_transport.h"

namespace hetcomm::comm {

HC_PARAM_STR(algoName, "ALGO", "")
HC_PARAM_INT(chunkBytesParam, "CHUNK_BYTES", 512 << 10)

namespace {

constexpr size_t kMaxCachedPlans = 256;
constexpr uint32_t kDeadlineCheckEvery = 16;
// Groups whose views predictFor keeps: a planner asks about each candidate group at a few sizes, and comes back
// to it while it weighs other plans (a 1024-rank plan search asks about some hundreds of groups).
constexpr size_t kPredictedGroups = 1024;

struct Descriptor {
  uint8_t kind, dtype, op, pad;
  int32_t root;
  uint64_t count;
  uint64_t seq;
};

coll::Args argsOf(const Descriptor& d) {
  coll::Args a;
  a.kind = static_cast<coll::CollKind>(d.kind);
  a.dtype = static_cast<kernels::DataType>(d.dtype);
  a.op = static_cast<kernels::RedOp>(d.op);
  a.root = d.root;
  a.count = d.count;
  return a;
}

bool isReduction(coll::CollKind k) {
  return k == coll::CollKind::kAllReduce || k == coll::CollKind::kReduce || k == coll::CollKind::kReduceScatter;
}

}  // namespace

uint64_t childCommId(uint64_t parent, uint64_t seq, int64_t color) {
  uint64_t x = parent ^ (seq * 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(color) * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return x ? x : 1;
}

Communicator::Communicator(int rank, int nranks, CommOptions options)
    : rank_(rank), nranks_(nranks), options_(std::move(options)) {
  forcedAlgo_ = algoName();
  chunkBytes_ = static_cast<size_t>(std::max<int64_t>(4096, chunkBytesParam()));
}

Communicator::~Communicator() {
  if (initThread.joinable()) initThread.join();
  saveEfficiency();
}

std::string Communicator::sharedSettings() const {
  return format("HETCOMM_TRANSPORT=%s HETCOMM_ALGO=%s HETCOMM_CHUNK_BYTES=%zu HETCOMM_MULTIRAIL=%lld",
                transportName().empty() ? "auto" : transportName().c_str(),
                forcedAlgo_.empty() ? "auto" : forcedAlgo_.c_str(), chunkBytes_, static_cast<long long>(multiRail()));
}

std::string Communicator::keyPrefix() const { return format("c%016llx", static_cast<unsigned long long>(commId_)); }

const topo::Gpu* Communicator::gpuOf(int r) const { return cluster_ ? cluster_->gpuOf(r) : nullptr; }

// What the planners and the cost model see of this communicator: the cluster as a link graph (hosts, islands,
// NICs, routes, each host's memory rates), the link matrix's alpha and bandwidth per pair, and per peer whether
// late receives are free. Prepared: what is derived from it is kept for the communicator's life.
coll::GroupView Communicator::groupView(int rank, const topo::ClusterView& view, const topo::LinkMatrix& links,
                                        const std::vector<int>& parentHost) const {
  const size_t nh = static_cast<size_t>(cluster_->nhosts());
  auto graph = std::make_shared<topo::LinkGraph>(topo::buildLinkGraph(view, links, multiRail() != 0, [&](int a, int b) {
    return tcpBetweenHosts_[static_cast<size_t>(parentHost[a]) * nh + parentHost[b]] != 0;
  }));
  for (size_t h = 0; h < graph->hosts.size(); ++h) {
    const size_t from = static_cast<size_t>(parentHost[h]);
    if (from >= memoryRates_.size()) continue;
    graph->hosts[h].memory = memoryRates_[from].bySize;
  }
  coll::GroupView g = coll::GroupView::fromGraph(rank, std::move(graph), chunkBytes_);
  g.learnedTreeEfficiency = learnedEfficiency_;
  g.prepare();
  return g;
}

Result<coll::Selection> Communicator::predictFor(const std::vector<int>& ranks, coll::Args args) {
  if (ranks.empty()) return invalidArgument("the group is empty");
  std::vector<char> listed(nranks_, 0);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= nranks_)
      return invalidArgument("ranks[%zu] = %d is not a rank of this communicator (0..%d)", i, r, nranks_ - 1);
    if (listed[r]++) return invalidArgument("ranks[%zu] = %d is listed twice", i, r);
  }
  if (args.kind == coll::CollKind::kSendRecv && args.p2p.empty()) {
    if (ranks.size() < 2) return invalidArgument("a send needs a group of 2 ranks at least, got 1");
    args.p2p.push_back({true, 1, args.count * kernels::sizeOf(args.dtype), 0});
  }
  std::shared_ptr<coll::GroupView> g;
  {
    std::lock_guard<std::mutex> lock(predictMu_);
    if (auto it = predictedAt_.find(ranks); it != predictedAt_.end()) {
      g = it->second->second;
      predicted_.splice(predicted_.end(), predicted_, it->second);  // most recent last
    }
  }
  if (!g) {
    // The group's own view: its ranks' nodes, this communicator's link figures between them, and the hosts'
    // memory rates and transports as this communicator found them.
    std::vector<topo::NodeDescription> nodes;
    for (int r : ranks) nodes.push_back(cluster_->node(r));
    HC_ASSIGN_OR_RETURN(topo::ClusterView view, topo::ClusterView::build(std::move(nodes)));
    topo::LinkMatrix links = topo::LinkMatrix::nominal(view, multiRail() != 0);
    const int n = static_cast<int>(ranks.size());
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (const topo::Link& l = links_->at(ranks[i], ranks[j]); i != j && l.measured)
          HC_TRY(links.setMeasured(i, j, l.alphaUs, l.bwGBps));
    std::vector<int> parentHost(view.nhosts());
    for (int i = 0; i < n; ++i) parentHost[view.hostOf(i)] = cluster_->hostOf(ranks[i]);
    // Seen from this rank when it is in the group, else from the group's rank 0.
    const int me = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
    g = std::make_shared<coll::GroupView>(groupView(me < n ? me : 0, view, links, parentHost));
    // Its own communicator would share host slots where this one does, or where the group is on this rank's host
    // and this rank reaches those peers over shm (the rule of shareHostSlots).
    const auto overShm = [&](int r) {
      return r == rank_ || (cluster_->hostOf(r) == cluster_->hostOf(rank_) && choices_[r].kind == transport::Kind::kShm);
    };
    if (view.nhosts() == 1 && n >= 2 && n <= HostSlots::kMaxRanks &&
        (slots_ || std::all_of(ranks.begin(), ranks.end(), overShm)))
      g->hostSlotBytes = HostSlots::kSlotBytes;
    std::lock_guard<std::mutex> lock(predictMu_);
    if (!predictedAt_.count(ranks)) {
      predicted_.push_back({ranks, g});
      predictedAt_[ranks] = std::prev(predicted_.end());
      if (predicted_.size() > kPredictedGroups) {
        predictedAt_.erase(predicted_.front().first);
        predicted_.pop_front();
      }
    }
  }
  return coll::selectAlgorithm(args, *g, forcedAlgo_);
}

// Engine thread, before it sleeps: every transport re-arms its wake-up; false when one has work already.
bool Communicator::readyToSleep() {
  // The timeout starts at the latest here: the engine's sleep is bounded by it, and an operation whose peer
  // stalls would otherwise count its idle passes at one per (up to a second long) sleep before starting it.
  if (current_ && currentDeadline_.isNever()) currentDeadline_ = Deadline::afterSec(options_.timeoutSec);
  if (current_ && runner_ == Runner::kSlots && !slots_->armForSleep()) return false;
  for (auto& t : transports_)
    if (!t->armForSleep()) return false;
  return true;
}

Status Communicator::split(int color, int key, const CommOptions& options, std::unique_ptr<Communicator>* out) {
  log::ScopedRank scope(rank_, name());
  if (model_) return invalidUsage("a model communicator (hetcommCommInitModel) cannot be split");
  HC_TRY(asyncError());
  const uint64_t seq = ++splitSeq_;
  const Deadline deadline = Deadline::afterSec(options_.timeoutSec);
  std::vector<std::byte> mine(8);
  int32_t ck[2] = {color, key};
  std::memcpy(mine.data(), ck, 8);
  HC_ASSIGN_OR_RETURN(auto all, store_->allGather(keyPrefix() + format("/split%llu", (unsigned long long)seq), rank_,
                                                  nranks_, mine, deadline));
  out->reset();
  if (color == HETCOMM_SPLIT_NOCOLOR) return okStatus();
  std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, old rank), old rank)
  for (int p = 0; p < nranks_; ++p) {
    int32_t v[2];
    if (all[p].size() != 8) return remoteError("rank %d sent a malformed split record", p);
    std::memcpy(v, all[p].data(), 8);
    if (v[0] == color) members.push_back({{v[1], p}, p});
  }
  std::sort(members.begin(), members.end());
  int newRank = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank_) newRank = static_cast<int>(i);
  auto child = std::make_unique<Communicator>(newRank, static_cast<int>(members.size()), options);
  child->setHostsStore(hostsStore_);
  HC_INFO(Init, "split #%llu: color %d key %d -> rank %d of %zu", (unsigned long long)seq, color, key, newRank,
          members.size());
  HC_TRY(child->init(id_, childCommId(commId_, seq, color)));
  *out = std::move(child);
  return okStatus();
}

Status Communicator::asyncError() const {
  if (!failed_.load(std::memory_order_acquire)) return okStatus();
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return error_;
}

uint64_t Communicator::nextCollectiveSeq() {
  std::lock_guard<std::mutex> lock(mu_);
  return stepCollectiveSeq();
}

uint64_t Communicator::stepCollectiveSeq() {
  collSeq_ = collSeq_ >= 0x7fffffffull ? 1 : collSeq_ + 1;
  return collSeq_;
}

void Communicator::releaseP2pSeqs(const std::vector<coll::P2pOp>& ops) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& p : ops) --(p.isSend ? sendSeq_ : recvSeq_)[p.peer];
}

uint32_t Communicator::nextP2pSeq(int peer, bool send) {
  std::lock_guard<std::mutex> lock(mu_);
  return send ? sendSeq_[peer]++ : recvSeq_[peer]++;
}

Status Communicator::enqueue(std::shared_ptr<Op> op) {
  if (model_)
    return invalidUsage(
        "a model communicator (hetcommCommInitModel) only answers planning calls; it runs no "
        "operations");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    if (op->stream) op->stream->pending.fetch_add(1);
    queue_.push_back(std::move(op));
  }
  // No wake-up here: the caller either waits for the op (and drives it) or starts it (Engine::start).
  return okStatus();
}

bool Communicator::idle() {
  // A failure from outside (revoke, a staging copy) is work too: the engine must pass over the communicator to
  // fail it, and whoever waits for it to be idle waits for that.
  if (outsideFailure_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && !busy_;
}

void Communicator::finishOp(const std::shared_ptr<Op>& op, Status st) {
  op->error = st;
  if (op->stream) {
    std::lock_guard<std::mutex> lock(op->stream->mu);
    if (!st.ok() && op->stream->firstError.ok()) op->stream->firstError = st;
    op->stream->pending.fetch_sub(1);
  }
  op->state.store(st.ok() ? Op::kDone : Op::kFailed, std::memory_order_release);
  Engine::get().notifyFinished();
}

Result<std::shared_ptr<const coll::Schedule>> Communicator::planFor(Op& op) {
  const coll::GroupView& g = group_;
  const coll::Args& a = op.args;
  if (a.kind == coll::CollKind::kSendRecv) {
    // One way to run them, and nothing compares their time with a prediction: no selection on this path, whose
    // cost is every small message's latency.
    HC_ASSIGN_OR_RETURN(coll::Schedule s, coll::directSendRecv().plan(a, g));
    return std::make_shared<const coll::Schedule>(std::move(s));
  }
  // The choice and the schedule depend only on these arguments: a repeated call (the common case, and the one
  // whose latency matters) costs one lookup, not a pass over the cost model.
  const PlanKey key{
      a.count, static_cast<uint8_t>(a.kind), static_cast<uint8_t>(a.dtype), static_cast<uint8_t>(a.op), a.inPlace,
      a.root};
  if (auto it = plans_.find(key); it != plans_.end()) {
    op.predictedUs = it->second.predictedUs;
    op.algorithm = it->second.algorithm;
    return it->second.plan;
  }
  HC_ASSIGN_OR_RETURN(coll::Selection sel, coll::selectAlgorithm(a, g, forcedAlgo_));
  op.predictedUs = sel.predictedUs;
  op.algorithm = sel.algo->name();
  HC_ASSIGN_OR_RETURN(coll::Schedule s, sel.algo->plan(a, g));
  auto plan = std::make_shared<const coll::Schedule>(std::move(s));
  if (plans_.size() >= kMaxCachedPlans) plans_.clear();
  plans_.emplace(key, CachedPlan{plan, sel.predictedUs, sel.algo->name()});
  HC_TRACE(Coll, "%s: algorithm %.*s, %zu steps, %s scratch", a.describe().c_str(), (int)sel.algo->name().size(),
           sel.algo->name().data(), plan->steps.size(), humanBytes(plan->scratchBytes).c_str());
  return plan;
}

Communicator::DescriptorBytes Communicator::descriptor(const Op& op) const {
  Descriptor d{};
  d.kind = static_cast<uint8_t>(op.args.kind);
  d.dtype = static_cast<uint8_t>(op.args.dtype);
  d.op = static_cast<uint8_t>(op.args.op);
  d.root = op.args.root;
  d.count = op.args.count;
  d.seq = op.seq;
  static_assert(sizeof(d) == std::tuple_size_v<DescriptorBytes>);
  DescriptorBytes out;
  std::memcpy(out.data(), &d, sizeof(d));
  return out;
}

Status Communicator::checkDescriptor(const Op& mine, std::span<const std::byte> theirs, int from) const {
  Descriptor d{}, m{};
  std::memcpy(&d, theirs.data(), std::min(theirs.size(), sizeof(d)));
  auto own = descriptor(mine);
  std::memcpy(&m, own.data(), sizeof(m));
  bool same = d.kind == m.kind && d.dtype == m.dtype && d.count == m.count && d.seq == m.seq;
  auto kind = static_cast<coll::CollKind>(m.kind);
  if (same && isReduction(kind)) same = d.op == m.op;
  if (same && (kind == coll::CollKind::kBroadcast || kind == coll::CollKind::kReduce)) same = d.root == m.root;
  if (same) return okStatus();
  if (d.kind > static_cast<uint8_t>(coll::CollKind::kSendRecv) || d.dtype >= kernels::kNumDataTypes ||
      d.op >= kernels::kNumRedOps)
    return remoteError("rank %d sent a garbled operation descriptor", from);
  return invalidUsage(
      "collective mismatch at operation #%llu: rank %d called %s but rank %d called %s (operation "
      "#%llu there)",
      (unsigned long long)m.seq, rank_, mine.args.describe().c_str(), from, argsOf(d).describe().c_str(),
      (unsigned long long)d.seq);
}

Status Communicator::startOp(const std::shared_ptr<Op>& op) {
  if (Status st; startOne(*op, &st)) {
    if (st.ok()) markRunning(*op);
    return st;
  }
  HC_ASSIGN_OR_RETURN(auto plan, planFor(*op));
  const bool collective = op->args.kind != coll::CollKind::kSendRecv && nranks_ > 1;
  if (plan->hostSlots) {  // its slot carries its descriptor
    runner_ = Runner::kSlots;
    slots_->startAllReduce(op->seq, descriptor(*op), op->send, op->recv, op->args.count, op->args.dtype,
                           op->args.op);
    markRunning(*op);
    return okStatus();
  }
  // A peer waiting in its slots under this sequence number compares the descriptor with its own.
  if (slots_ && collective) slots_->announce(op->seq, descriptor(*op));
  runner_ = Runner::kSchedule;
  if (plan->scratchBytes > scratchBytes_) {
    scratch_ = ScratchPtr(static_cast<std::byte*>(::operator new[](plan->scratchBytes, std::align_val_t(64))));
    scratchBytes_ = plan->scratchBytes;
  }
  bufs_.assign(
      {static_cast<std::byte*>(const_cast<void*>(op->send)), static_cast<std::byte*>(op->recv), scratch_.get()});
  bufs_.insert(bufs_.end(), op->extras.begin(), op->extras.end());
  // The last operation's executor runs this one: its arrays keep their memory (it is done, and nothing refers to
  // its requests any more).
  if (!exec_) exec_ = std::make_unique<coll::Executor>();
  exec_->reset(plan, bufs_, connPtrs_, op->seq);
  if (collective) {
    const int next = (rank_ + 1) % nranks_;
    exec_->addConsistencyCheck(next, (rank_ + nranks_ - 1) % nranks_, descriptor(*op),
                               [this](std::span<const std::byte> theirs) {
                                 return checkDescriptor(*current_, theirs, (rank_ + nranks_ - 1) % nranks_);
                               });
  }
  markRunning(*op);
  return okStatus();
}

// A send or receive alone (not in a group with others) to another rank goes straight to its connection, with the
// tag the executor would give it: a group of one and a lone call meet on the wire.
bool Communicator::startOne(const Op& op, Status* st) {
  if (op.args.kind != coll::CollKind::kSendRecv || op.args.p2p.size() != 1 || op.extras.size() != 1) return false;
  const coll::P2pOp& p = op.args.p2p[0];
  if (p.peer == rank_ || p.peer < 0 || p.peer >= nranks_ || !connPtrs_[p.peer]) return false;
  runner_ = Runner::kOne;
  one_ = transport::Request{};
  transport::Connection* c = connPtrs_[p.peer];
  const uint64_t tag = coll::Executor::p2pWireTag(p.seq);
  *st = p.isSend ? c->isend(one_, {op.extras[0], p.bytes}, tag) : c->irecv(one_, {op.extras[0], p.bytes}, tag);
  return true;
}

template <class Take>
bool Communicator::claimIdle(Take&& take) {
  // Under the pass lock nothing else runs this communicator; under mu_ nothing is queued ahead of this call.
  if (current_ || failed_.load(std::memory_order_acquire) || outsideFailure_.load(std::memory_order_acquire))
    return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty() || busy_ || !error_.ok()) return false;
  busy_ = true;
  take();
  return true;
}

Communicator::Here Communicator::handOver(std::shared_ptr<Op> rest, Runner runner, const Status& failure,
                                          std::shared_ptr<Op>* op) {
  current_ = rest;
  runner_ = runner;
  markRunning(*rest);
  if (!failure.ok()) fail(opFailed(*rest, failure));
  *op = std::move(rest);
  return Here::kHandedOver;
}

Status Communicator::opFailed(const Op& op, const Status& why) const {
  return Status(why.code(), format("rank %d: %s #%llu failed: %s", rank_, op.args.describe().c_str(),
                                   (unsigned long long)op.seq, std::string(why.message()).c_str()));
}

Communicator::Here Communicator::sendRecvHere(bool isSend, std::byte* buf, size_t bytes, kernels::DataType dtype,
                                              int peer, std::shared_ptr<Op>* op) {
  if (peer == rank_ || peer < 0 || peer >= nranks_ || model_) return Here::kNotTaken;
  Here here = Here::kNotTaken;
  Engine::get().runExclusive(this, [&](unsigned polls) {
    coll::P2pOp p;
    p.isSend = isSend;
    p.peer = peer;
    p.bytes = bytes;
    if (!connPtrs_[peer] || !claimIdle([&] { p.seq = isSend ? sendSeq_[peer]++ : recvSeq_[peer]++; })) return;
    log::ScopedRank scope(rank_, name());
    Status st;
    try {
      one_ = transport::Request{};
      transport::Connection* c = connPtrs_[peer];
      const uint64_t tag = coll::Executor::p2pWireTag(p.seq);
      st = isSend ? c->isend(one_, {buf, bytes}, tag) : c->irecv(one_, {buf, bytes}, tag);
      // A few polls: a send into a ring is done at once, and a reply from a peer inside its call comes within them.
      for (unsigned i = 0; st.ok() && !one_.finished() && i < polls; ++i) st = progressTransports();
    } catch (const std::exception& e) {  // bad_alloc: fail the communicator, not the process
      st = systemError("%s", e.what());
    }
    if (st.ok() && one_.done()) {
      setBusy(false);
      here = Here::kDone;
      return;
    }
    // Longer, or failed: the same operation as the queue would have run (its request is one_), now current; the
    // next pass finishes it, or fails it and the communicator as any operation.
    auto rest = std::make_shared<Op>();
    rest->args.kind = coll::CollKind::kSendRecv;
    rest->args.dtype = dtype;
    rest->args.p2p.push_back(p);
    rest->extras.push_back(buf);
    rest->comm = this;
    here = handOver(std::move(rest), Runner::kOne, st, op);
  });
  return here;
}

Communicator::Here Communicator::allReduceHere(const coll::Args& args, const void* send, void* recv,
                                               std::shared_ptr<Op>* op) {
  if (!slots_ || args.kind != coll::CollKind::kAllReduce ||
      args.count * kernels::sizeOf(args.dtype) > HostSlots::kSlotBytes)
    return Here::kNotTaken;
  Here here = Here::kNotTaken;
  Engine::get().runExclusive(this, [&](unsigned polls) {
    // The operation as the queue would hold it, on this stack until it must outlive this call.
    Op local;
    local.args = args;
    local.send = send;
    local.recv = recv;
    local.comm = this;
    // Slots only where the cost model (or HETCOMM_ALGO) chooses them; the plan is cached after the first call.
    auto plan = planFor(local);
    if (!plan || !(*plan)->hostSlots || !claimIdle([&] { local.seq = stepCollectiveSeq(); })) return;
    log::ScopedRank scope(rank_, name());
    slots_->startAllReduce(local.seq, descriptor(local), send, recv, args.count, args.dtype, args.op);
    auto verify = [&](std::span<const std::byte> theirs, int from) { return checkDescriptor(local, theirs, from); };
    Result<bool> done = false;
    for (unsigned i = 0; i < polls && done && !*done; ++i) {
      bool moved = false;
      const Status st = progressTransports();
      done = st.ok() ? slots_->advance(connPtrs_, verify, &moved) : Result<bool>(st);
    }
    if (done && *done) {
      setBusy(false);
      here = Here::kDone;
      return;
    }
    auto rest = std::make_shared<Op>();
    rest->args = args;
    rest->send = send;
    rest->recv = recv;
    rest->comm = this;
    rest->seq = local.seq;
    rest->predictedUs = local.predictedUs;
    here = handOver(std::move(rest), Runner::kSlots, done.status(), op);
  });
  return here;
}

// No clock read for a small operation: on virtual machines a read costs as much as a small message's work. The
// timeout's clock starts at the first stretch of idle passes (microseconds in, for an operation that waits at
// all); the start time is taken only for the collectives checkPrediction looks at.
void Communicator::markRunning(Op& op) {
  currentDeadline_ = Deadline::never();
  if (checksPrediction(op)) currentStartSec_ = nowSec();
  op.state.store(Op::kRunning, std::memory_order_release);
}

Result<bool> Communicator::advanceCurrent(bool* moved) {
  switch (runner_) {
    case Runner::kSlots:
      return slots_->advance(
          connPtrs_,
          [this](std::span<const std::byte> theirs, int from) { return checkDescriptor(*current_, theirs, from); },
          moved);
    case Runner::kOne:
      if (one_.failed()) return one_.error;
      if (one_.done()) *moved = true;
      return one_.done();
    case Runner::kSchedule:
      break;
  }
  return exec_->advance(moved);
}

std::string Communicator::waitingOn() const {
  switch (runner_) {
    case Runner::kSlots:
      return slots_->waitingOn();
    case Runner::kOne: {
      const coll::P2pOp& p = current_->args.p2p[0];
      return format("%s rank %d", p.isSend ? "send to" : "recv from", p.peer);
    }
    case Runner::kSchedule:
      break;
  }
  return exec_->waitingOn();
}

bool timesWholeCall(const coll::Args& a, const coll::GroupView& g, int rank) {
  switch (a.kind) {
    case coll::CollKind::kAllReduce:
    case coll::CollKind::kAllGather:
    case coll::CollKind::kReduceScatter:
    case coll::CollKind::kAlltoAll:
      return true;
    case coll::CollKind::kReduce:
      return a.root == rank;
    case coll::CollKind::kBroadcast:
      return g.hostOf(a.root) != g.hostOf(rank);
    case coll::CollKind::kSendRecv:
      break;
  }
  return false;
}

// Collectives of 1 MiB or more (where the link figures, not latency, set the time) that take under a third or
// over three times their prediction, three in a row, mean the cached figures describe another machine state (a
// probe taken under load, say): the cache goes, and the next communicator measures again.
bool Communicator::checksPrediction(const Op& op) const {
  constexpr size_t kMinBytes = 1 << 20;
  return rank_ == 0 && !probeCacheFile_.empty() && op.predictedUs > 0 && timesWholeCall(op.args, group_, rank_) &&
         op.args.count * kernels::sizeOf(op.args.dtype) >= kMinBytes;
}

void Communicator::checkPrediction(const Op& op) {
  constexpr double kMargin = 3;
  constexpr int kStrikes = 3;
  if (!checksPrediction(op)) return;
  const double seconds = nowSec() - currentStartSec_;
  const double ratio = seconds * 1e6 / op.predictedUs;
  if (ratio > 1 / kMargin && ratio < kMargin) {
    contradictions_ = 0;
    return;
  }
  if (++contradictions_ < kStrikes) return;
  Status st = dropProbeCache(probeCacheFile_);
  HC_INFO(Init,
          "%s took %.0f us against the %.0f us predicted from the link figures cached in %s, %d times in a row: "
          "%s; the next communicator init measures the links again",
          op.args.describe().c_str(), seconds * 1e6, op.predictedUs, probeCacheFile_.c_str(), kStrikes,
          st.ok() ? "dropped the cache" : std::string(st.message()).c_str());
  probeCacheFile_.clear();
  efficiencyFile_.clear();  // learned against the figures just dropped (dropProbeCache removed its file)
}

// Rank 0's large synthesised calls that it times whole (checksPrediction): each one's share of its packing's rate.
void Communicator::learnEfficiency(const Op& op) {
  constexpr size_t kMinBytes = 4 << 20;  // smaller calls are priced by their pipeline's fill as much as the rate
  constexpr double kWriteEverySec = 1;
  const coll::Args& a = op.args;
  if (efficiencyFile_.empty() || op.algorithm != "synth" || !checksPrediction(op) ||
      a.count * kernels::sizeOf(a.dtype) < kMinBytes)
    return;
  const double measuredUs = (nowSec() - currentStartSec_) * 1e6;
  if (measuredUs <= 0) return;
  efficiency_.add(a.kind, coll::synth::treeEfficiency(group_, a.kind) * op.predictedUs / measuredUs);
  efficiencyDirty_ = true;
  if (nowSec() - efficiencyWrittenSec_ >= kWriteEverySec) saveEfficiency();
}

void Communicator::saveEfficiency() {
  if (!efficiencyDirty_ || efficiencyFile_.empty()) return;
  efficiencyDirty_ = false;
  efficiencyWrittenSec_ = nowSec();
  if (Status st = writeSynthEfficiency(efficiencyFile_, efficiency_); !st.ok()) {
    HC_INFO(Init, "%s: the synthesised schedules' efficiency is not kept", std::string(st.message()).c_str());
    efficiencyFile_.clear();
  }
}

void Communicator::failFromOutside(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (outsideError_.ok()) outsideError_ = why;
  }
  outsideFailure_.store(true, std::memory_order_release);
  Engine::get().wake();
}

bool Communicator::progressOnce() {
  log::ScopedRank scope(rank_, name());
  if (outsideFailure_.load(std::memory_order_acquire)) {
    Status why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      why = outsideError_;
    }
    fail(why);
    outsideFailure_.store(false, std::memory_order_release);  // after fail(): idle() stays false until it took
  }
  if (failed_.load(std::memory_order_acquire)) {
    std::deque<std::shared_ptr<Op>> drop;
    Status why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop.swap(queue_);
      why = error_;
    }
    bool moved = !drop.empty() || current_;
    if (current_) drop.push_front(current_);
    current_.reset();
    exec_.reset();
    runner_ = Runner::kSchedule;
    for (auto& op : drop) finishOp(op, why);
    setBusy(false);
    return moved;
  }
  bool moved = false;
  if (!current_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queue_.empty() && queue_.front()->startable()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
        current_->after.reset();  // ordering done: keeping it would chain every op of the stream alive
        busy_ = true;
      }
    }
    if (!current_) {
      // Nothing to run, but peers may already be sending for the next operation: drain the sockets into
      // early-arrival buffers, or their readiness would wake the engine forever.
      if (Status st = progressTransports(); !st.ok()) fail(st);
      return false;
    }
    moved = true;
    Status st;
    try {
      st = startOp(current_);
    } catch (const std::exception& e) {  // bad_alloc for an absurd size: fail the communicator, not the process
      st = systemError("cannot start the operation: %s", e.what());
    }
    if (!st.ok()) {
      fail(Status(st.code(), format("rank %d: %s: %s", rank_, current_->args.describe().c_str(),
                                    std::string(st.message()).c_str())));
      return true;
    }
  }
  if (Status st = progressTransports(); !st.ok()) {
    fail(st);
    return true;
  }
  Result<bool> done = false;
  try {
    done = advanceCurrent(&moved);
  } catch (const std::exception& e) {
    done = systemError("%s", e.what());
  }
  if (moved)  // what this pass queued leaves now, messages to one peer together
    for (auto& t : transports_) t->flush();
  const Op& op = *current_;
  if (!done) {
    fail(opFailed(op, done.error()));
    return true;
  }
  if (*done) {
    auto finished = std::move(current_);
    runner_ = Runner::kSchedule;
    checkPrediction(*finished);
    learnEfficiency(*finished);
    currentDeadline_ = Deadline::never();
    setBusy(false);
    finishOp(finished, okStatus());
    return true;
  }
  // The clock is read every few idle passes only (see Engine::drive); the first such read starts the timeout.
  if (!moved && ++idlePasses_ % kDeadlineCheckEvery == 0) {
    if (currentDeadline_.isNever()) {
      currentDeadline_ = Deadline::afterSec(options_.timeoutSec);
    } else if (currentDeadline_.expired()) {
      fail(timeoutError("rank %d: %s #%llu timed out after %g s (HETCOMM_TIMEOUT), still waiting for %s", rank_,
                        op.args.describe().c_str(), (unsigned long long)op.seq, options_.timeoutSec,
                        waitingOn().c_str()));
      return true;
    }
  }
  return moved;
}

void Communicator::setBusy(bool busy) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = busy;
}

Deadline Communicator::deadline() const { return current_ ? currentDeadline_ : Deadline::never(); }

Status Communicator::progressTransports() {
  for (auto& t : transports_) HC_TRY(t->progress());
  return okStatus();
}

void Communicator::closeConnections(const Status& why) {
  for (auto& c : conns_)
    if (c) c->close(why);
}

void Communicator::fail(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    error_ = why;
  }
  failed_.store(true, std::memory_order_release);
  HC_WARN("%s", std::string(why.message()).c_str());
  // Tell every peer why, so their pending operations fail now with this reason rather than at their timeout.
  std::string reason(why.message());
  for (auto& c : conns_)
    if (c) c->sendAbort(reason);
  closeConnections(why);
  Engine::get().wake();
}

Status Communicator::finalize() {
  if (model_) return invalidUsage("a model communicator (hetcommCommInitModel) has nothing to finalize: destroy it");
  Engine::get().waitUntil([this] { return idle(); });
  HC_TRY(asyncError());
  const Deadline deadline = Deadline::afterSec(options_.timeoutSec);
  HC_TRY(barrierOfTheLiving(keyPrefix() + "/finalize", "it reached finalize", deadline));
  // Second phase: everyone says it is through; the store's host waits for all of them before it may exit.
  HC_ASSIGN_OR_RETURN(int64_t left, store_->add(keyPrefix() + "/finalize/left", 1));
  if (left == nranks_) HC_TRY(store_->set(keyPrefix() + "/finalize/gone", {}));
  if (hostsStore_) HC_TRY(store_->get(keyPrefix() + "/finalize/gone", deadline).status());
  setState(kFinalized);
  return okStatus();
}

Status Communicator::destroy() {
  if (initThread.joinable()) initThread.join();
  if (attached_) {
    Engine::get().waitUntil([this] { return idle(); });
    Engine::get().detach(this, waitFds_);
    attached_ = false;
  }
  closeConnections(invalidUsage("rank %d destroyed the communicator", rank_));
  conns_.clear();
  connPtrs_.clear();
  transports_.clear();
  store_.reset();
  return okStatus();
}

void Communicator::abort() {
  if (initThread.joinable()) initThread.join();
  if (attached_) {
    Engine::get().detach(this, waitFds_);
    attached_ = false;
  }
  // The engine no longer runs this communicator: this thread fails what is left.
  fail(remoteError("rank %d aborted the communicator (hetcommCommAbort)", rank_));
  std::deque<std::shared_ptr<Op>> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drop.swap(queue_);
    busy_ = false;
  }
  if (current_) drop.push_front(std::move(current_));
  exec_.reset();
  runner_ = Runner::kSchedule;
  Status why = asyncError();
  for (auto& op : drop) finishOp(op, why);
  Engine::get().wake();  // ops of other communicators may have waited on these (stream order)
  conns_.clear();
  connPtrs_.clear();
  transports_.clear();
  store_.reset();
}

}  // namespace hetcomm::comm
