// verbs_connection.cc: the data path of one queue pair (protocol and flow control: verbs_connection.h).
#include "transports/verbs/verbs_connection.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/crypto.h"
#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::transport::verbs {

namespace {

// One RDMA READ moves at most this much whatever the ports say (a work request's length is 32 bits, and ports cap
// max_msg_sz at 2 GiB).
constexpr uint64_t kMaxReadChunk = uint64_t{1} << 30;
// close() gives aborts this long to leave before the queue pairs go to the error state and flush them: from the
// transport's first abort on, for all its connections together (Shared::abortLingerUntil).
constexpr auto kAbortLinger = std::chrono::milliseconds(100);
// A failing connection waits this long at most for its send queue's work requests to come back (fence()).
constexpr auto kFenceLimit = std::chrono::milliseconds(100);
// RDMA READs in flight per queue pair, at most; devices offer 16 or more.
constexpr uint32_t kMaxRdAtomic = 16;
// Bounce buffers that eager data and rendezvous announcements leave to fins, credits and aborts (fewer when there
// are only a few).
constexpr uint32_t kControlSlots = 2;

ibv_mtu mtuEnum(int bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    default:
      return IBV_MTU_4096;
  }
}

std::string shortPort(const PortInfo& p) { return format("%s:%d", p.device.c_str(), p.port); }

}  // namespace

// ---- the hardware queue pair ----

namespace {

class VerbsQp final : public QueuePair {
 public:
  VerbsQp(ibv_qp* qp, int peer) : qp_(qp), peer_(peer) {}
  ~VerbsQp() override {
    if (int rc = ibv_destroy_qp(qp_); rc != 0)
      HC_WARN("verbs: ibv_destroy_qp for rank %d failed: %s", peer_, std::strerror(rc));
  }

  // RESET -> INIT on the port, allowing the peer's RDMA READs.
  static Result<std::unique_ptr<VerbsQp>> create(Device* dev, ibv_cq* cq, int peer, const PortInfo& port,
                                                 const ConnectionOptions& opts) {
    ibv_qp_init_attr qa{};
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 0;
    qa.cap.max_send_wr = opts.sqDepth;
    qa.cap.max_recv_wr = opts.recvSlots;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    // The caller clamped the work requests to the device's max_qp_wr (connectAll); one scatter-gather entry is all
    // any work request here uses, and every device offers it.
    ibv_qp* raw = ibv_create_qp(dev->pd, &qa);
    if (!raw)
      return errnoStatus(errno, "verbs: ibv_create_qp on %s for rank %d (%u send, %u receive work requests)",
                         port.device.c_str(), peer, opts.sqDepth, opts.recvSlots);
    auto qp = std::make_unique<VerbsQp>(raw, peer);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(port.port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
    if (int rc = ibv_modify_qp(raw, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS); rc != 0)
      return errnoStatus(rc, "verbs: queue pair to rank %d on %s: RESET -> INIT", peer, shortPort(port).c_str());
    return qp;
  }

  uint32_t qpn() const override { return qp_->qp_num; }
  int postRecv(ibv_recv_wr& wr) override {
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp_, &wr, &bad);
  }
  int postSend(ibv_send_wr& wr) override {
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp_, &wr, &bad);
  }
  void setError() override {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE); rc != 0)
      HC_WARN("verbs: moving the queue pair to rank %d to the error state failed: %s", peer_, std::strerror(rc));
  }

  Status connect(const PortInfo& local, const QpInfo& remote, uint32_t psn, uint32_t rdAtomic,
                 const ConnectionOptions& opts) override {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtuEnum(std::min<int>(local.mtu, static_cast<int>(remote.mtu)));
    a.dest_qp_num = remote.qpn;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = static_cast<uint8_t>(rdAtomic);  // reads the peer may have in flight towards us
    a.min_rnr_timer = 12;                                   // 0.64 ms; never needed while credits hold
    a.ah_attr.port_num = static_cast<uint8_t>(local.port);
    a.ah_attr.sl = static_cast<uint8_t>(opts.sl);
    if (local.roce) {
      // RoCE addresses by GID (routable RoCE v2 with the default GID choice).
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(local.gidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(opts.trafficClass);
    } else {
      a.ah_attr.dlid = remote.lid;  // same subnet (choosePortPair): no global route header needed
    }
    if (int rc = ibv_modify_qp(qp_, &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        rc != 0)
      return errnoStatus(rc, "verbs: queue pair %s -> rank %d (qpn %#x): INIT -> RTR", shortPort(local).c_str(), peer_,
                         remote.qpn);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<uint8_t>(opts.timeout);
    a.retry_cnt = static_cast<uint8_t>(opts.retryCnt);
    a.rnr_retry = 7;  // "infinite": a safety net only, the credits keep a buffer posted for every SEND
    a.sq_psn = psn;
    a.max_rd_atomic = static_cast<uint8_t>(rdAtomic);
    if (int rc = ibv_modify_qp(qp_, &a,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                   IBV_QP_MAX_QP_RD_ATOMIC);
        rc != 0)
      return errnoStatus(rc, "verbs: queue pair %s -> rank %d: RTR -> RTS", shortPort(local).c_str(), peer_);
    return okStatus();
  }

 private:
  ibv_qp* qp_;
  int peer_;
};

}  // namespace

// ---- set-up ----

Result<std::unique_ptr<VerbsConnection>> VerbsConnection::create(std::shared_ptr<Shared> shared, Device* dev,
                                                                 ibv_cq* cq, int me, int peer,
                                                                 const PortInfo& localPort, uint32_t localPortIndex,
                                                                 const Options& opts) {
  BounceBuffers bounce;
  bounce.bytes = bounceBytes(opts);
  bounce.base = static_cast<std::byte*>(std::aligned_alloc(4096, bounce.bytes));
  if (!bounce.base) return systemError("verbs: cannot allocate %s of bounce buffers", humanBytes(bounce.bytes).c_str());
  std::memset(bounce.base, 0, bounce.bytes);
  ibv_mr* mr = ibv_reg_mr(dev->pd, bounce.base, bounce.bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) {
    Status st = registrationError(errno, bounce.base, bounce.bytes);
    std::free(bounce.base);
    return st;
  }
  bounce.lkey = mr->lkey;
  bounce.release = [mr, base = bounce.base, peer] {
    if (int rc = ibv_dereg_mr(mr); rc != 0)
      HC_WARN("verbs: ibv_dereg_mr of the bounce buffers for rank %d failed: %s", peer, std::strerror(rc));
    std::free(base);
  };
  auto qp = VerbsQp::create(dev, cq, peer, localPort, opts);
  if (!qp) {
    bounce.release();
    return qp.error();
  }
  auto c = assemble(std::move(shared), dev->mrCache.get(), std::move(*qp), std::move(bounce), me, peer, localPort,
                    localPortIndex, opts);
  if (c) {
    (*c)->device_ = dev;
    (*c)->cq_ = cq;
  }
  return c;
}

Result<std::unique_ptr<VerbsConnection>> VerbsConnection::assemble(std::shared_ptr<Shared> shared, MrCache* mrCache,
                                                                   std::unique_ptr<QueuePair> qp, BounceBuffers bounce,
                                                                   int me, int peer, const PortInfo& localPort,
                                                                   uint32_t localPortIndex, const Options& opts) {
  std::unique_ptr<VerbsConnection> c(new VerbsConnection(std::move(shared), mrCache, std::move(qp), std::move(bounce),
                                                         me, peer, localPort, localPortIndex, opts));
  HC_TRY(c->start());
  return c;
}

VerbsConnection::VerbsConnection(std::shared_ptr<Shared> shared, MrCache* mrCache, std::unique_ptr<QueuePair> qp,
                                 BounceBuffers bounce, int me, int peer, PortInfo localPort, uint32_t localPortIndex,
                                 const Options& opts)
    : shared_(std::move(shared)),
      mrCache_(mrCache),
      qp_(std::move(qp)),
      bounce_(std::move(bounce)),
      slotBytes_(slotBytes(opts)),
      me_(me),
      peer_(peer),
      localPort_(std::move(localPort)),
      localPortIndex_(localPortIndex),
      opts_(opts) {
  // In the table from the start: the destructor, which runs if start() fails, takes it out again.
  id_ = shared_->nextConnId++;
  shared_->conns[id_] = this;
  rdAtomic_ = std::clamp<uint32_t>(opts_.rdAtomic, 1, kMaxRdAtomic);
}

Status VerbsConnection::start() {
  if (bounce_.bytes < bounceBytes(opts_))
    return internalError("verbs: %zu bytes of bounce buffers, %zu needed", bounce_.bytes, bounceBytes(opts_));
  if (opts_.maxReadChunk == 0 || opts_.recvSlots < kMinRecvSlots || opts_.sendSlots == 0 ||
      opts_.eagerMax > opts_.slotPayload || opts_.sqDepth <= opts_.sendSlots)
    return internalError("verbs: inconsistent connection options");
  readChunk_ = std::min(opts_.maxReadChunk, kMaxReadChunk);
  if (localPort_.maxMsgSize > 0) readChunk_ = std::min<uint64_t>(readChunk_, localPort_.maxMsgSize);
  // Receives may be posted from INIT on, so the buffers are there before the peer can send.
  for (uint32_t i = 0; i < opts_.recvSlots; ++i) HC_TRY(postRecv(i));
  freeSend_.reserve(opts_.sendSlots);
  for (uint32_t i = opts_.sendSlots; i-- > 0;) freeSend_.push_back(i);
  HC_TRY(crypto::randomBytes({reinterpret_cast<uint8_t*>(&psn_), sizeof(psn_)}));
  psn_ &= 0xffffff;
  return okStatus();
}

VerbsConnection::~VerbsConnection() {
  close(invalidUsage("connection to rank %d closed", peer_));
  shared_->conns.erase(id_);
  qp_.reset();  // the hardware lets go of the bounce buffers
  if (bounce_.release) bounce_.release();
}

QpInfo VerbsConnection::localInfo(uint64_t commId, uint32_t remotePortIndex) const {
  QpInfo q;
  q.rank = static_cast<uint32_t>(me_);
  q.commId = commId;
  q.qpn = qp_->qpn();
  q.psn = psn_;
  q.lid = localPort_.lid;
  q.gid = localPort_.gid;
  q.mtu = static_cast<uint32_t>(localPort_.mtu);
  q.senderPort = localPortIndex_;
  q.receiverPort = remotePortIndex;
  q.recvSlots = opts_.recvSlots;
  q.slotPayload = opts_.slotPayload;
  q.eagerMax = opts_.eagerMax;
  q.rdAtomic = rdAtomic_;
  q.maxMsgSize = localPort_.maxMsgSize;
  return q;
}

Status VerbsConnection::connect(const QpInfo& remote, const PortInfo& remotePort) {
  remotePort_ = remotePort;
  peerRecvSlots_ = remote.recvSlots;
  credits_ = remote.recvSlots;
  sendEagerMax_ = std::min<size_t>(opts_.eagerMax, remote.slotPayload);
  recvEagerMax_ = std::min<size_t>(remote.eagerMax, opts_.slotPayload);
  // Reads in flight: what this side may issue and what the peer serves, whichever is less (NICs may differ); the
  // same number bounds what we serve, so both directions agree on one value. Posting more would not fail but
  // stall the send queue, SENDs behind them included; and reads leave the bounce buffers' worth of it to SENDs.
  rdAtomic_ = std::min(rdAtomic_, remote.rdAtomic);
  readDepth_ = std::max<uint32_t>(1, std::min(rdAtomic_, opts_.sqDepth - opts_.sendSlots));
  // A read is one message for both ports: neither's max_msg_sz may be exceeded.
  if (remote.maxMsgSize > 0) readChunk_ = std::min<uint64_t>(readChunk_, remote.maxMsgSize);
  return qp_->connect(localPort_, remote, psn_, rdAtomic_, opts_);
}

std::string VerbsConnection::describe() const {
  return format("r%d->r%d/verbs(%s -> %s, %s, qp %#x)", me_, peer_, shortPort(localPort_).c_str(),
                remotePort_.device.empty() ? "?" : shortPort(remotePort_).c_str(), localPort_.roce ? "RoCE" : "IB",
                qp_ ? qp_->qpn() : 0);
}

Status VerbsConnection::gone() const {
  if (!abortReason_.empty()) return remoteError("rank %d aborted: %s", peer_, abortReason_.c_str());
  return remoteError("the verbs connection to rank %d is closed", peer_);
}

// ---- posting ----

Status VerbsConnection::postRecv(uint32_t slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(recvSlot(slot));
  sge.length = static_cast<uint32_t>(slotBytes_);
  sge.lkey = bounce_.lkey;
  ibv_recv_wr wr{};
  wr.wr_id = makeWrId(id_, WrKind::kRecv, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (int rc = qp_->postRecv(wr); rc != 0) return errnoStatus(rc, "verbs: ibv_post_recv for rank %d", peer_);
  return okStatus();
}

Status VerbsConnection::postMessage(MsgHeader h, const void* payload) {
  const uint32_t slot = freeSend_.back();
  const uint32_t give = std::min<uint32_t>(owed_, UINT16_MAX);
  h.credits = static_cast<uint16_t>(give);
  std::byte* buf = sendSlot(slot);
  std::memcpy(buf, &h, sizeof(h));
  if (h.len) std::memcpy(buf + sizeof(h), payload, h.len);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(buf);
  sge.length = static_cast<uint32_t>(sizeof(h) + h.len);
  sge.lkey = bounce_.lkey;
  ibv_send_wr wr{};
  wr.wr_id = makeWrId(id_, WrKind::kSend, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (int rc = qp_->postSend(wr); rc != 0)
    return errnoStatus(rc, "verbs: ibv_post_send (%s) to rank %d", msgTypeName(h.type), peer_);
  freeSend_.pop_back();
  owed_ -= give;
  --credits_;
  ++sqUsed_;
  return okStatus();
}

bool VerbsConnection::postQueued(Out& o) {
  MsgHeader h;
  h.type = o.type;
  h.tag = o.tag;
  h.id = o.id;
  h.status = o.status;
  const void* payload = nullptr;
  if (o.type == MsgHeader::kEager) {
    h.len = static_cast<uint32_t>(o.size);
    h.size = o.size;
    payload = o.data;
  } else if (o.type == MsgHeader::kRts) {
    auto it = rndvSends_.find(o.id);
    HC_CHECK(it != rndvSends_.end());
    h.size = o.size;
    h.addr = reinterpret_cast<uintptr_t>(o.data);
    h.rkey = it->second.mr.rkey();
  }
  if (Status st = postMessage(h, payload); !st.ok()) {
    fail(st);  // clears the queues: o is gone
    return false;
  }
  if (o.type == MsgHeader::kEager) o.req->succeed(o.size);  // copied out of the caller's buffer
  return true;
}

void VerbsConnection::flush() {
  // Fins first, on the control slots if need be: they finish the peer's sends and release its registrations.
  while (broken_.ok() && !finq_.empty() && canPost(2)) {
    if (!postQueued(finq_.front())) return;
    finq_.pop_front();
  }
  const uint32_t keep = std::min(kControlSlots, opts_.sendSlots - 1);
  while (broken_.ok() && !outq_.empty() && canPost(2, keep)) {
    if (!postQueued(outq_.front())) return;
    outq_.pop_front();
  }
  while (broken_.ok() && !readq_.empty() && readsInFlight_ < readDepth_ && sqUsed_ < opts_.sqDepth) {
    const uint32_t index = readq_.front();
    Read& r = reads_[index];
    const uint64_t len = std::min(readChunk_, r.total - r.posted);
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(r.dst + r.posted);
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = r.mr.lkey();
    ibv_send_wr wr{};
    wr.wr_id = makeWrId(id_, WrKind::kRead, index);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = r.remote + r.posted;
    wr.wr.rdma.rkey = r.rkey;
    if (int rc = qp_->postSend(wr); rc != 0) {
      fail(errnoStatus(rc, "verbs: ibv_post_send (rdma read) to rank %d", peer_));
      return;
    }
    ++sqUsed_;
    ++readsInFlight_;
    ++r.inFlight;
    r.posted += len;
    if (r.posted == r.total) readq_.pop_front();
  }
  // Return receive buffers explicitly when half are owed and nothing else carried them back: with the last
  // credit if need be (see the header).
  if (broken_.ok() && owed_ >= std::max<uint32_t>(2, opts_.recvSlots / 2) && canPost(1)) {
    MsgHeader h;
    h.type = MsgHeader::kCredit;
    if (Status st = postMessage(h, nullptr); !st.ok()) fail(st);
  }
}

// ---- sending ----

Status VerbsConnection::isend(Request& req, std::span<const std::byte> buf, uint64_t tag) {
  req.state = Request::State::kPending;
  req.bytes = 0;
  if (!broken_.ok()) {
    req.fail(broken_);
    return okStatus();
  }
  if (buf.size() <= sendEagerMax_) {
    outq_.push_back({MsgHeader::kEager, &req, tag, buf.data(), buf.size()});
  } else {
    auto mr = mrCache_->acquire(buf.data(), buf.size(), MrCache::Use::kSend);
    if (!mr) {
      req.fail(
          Status(mr.error().code(), format("rank %d: sending %s to rank %d: %s", me_, humanBytes(buf.size()).c_str(),
                                           peer_, std::string(mr.error().message()).c_str())));
      return okStatus();
    }
    const uint32_t id = nextRndvId_++;
    rndvSends_.emplace(id, RndvSend{&req, std::move(*mr), buf.size(), tag});
    outq_.push_back({MsgHeader::kRts, &req, tag, buf.data(), buf.size(), id});
  }
  flush();
  return okStatus();
}

void VerbsConnection::sendAbort(std::string_view reason) noexcept {
  // Best effort, ahead of whatever waits (the peer fails all of it anyway); the last credit may go for it.
  if (!broken_.ok() || abortSent_ || !canPost(1)) return;
  MsgHeader h;
  h.type = MsgHeader::kAbort;
  // It must fit the peer's receive buffer, whose payload is at least sendEagerMax_.
  std::string text(reason.empty() ? std::string_view("no reason given") : reason);
  text.resize(std::min({text.size(), kMaxAbortReason, sendEagerMax_}));
  h.len = static_cast<uint32_t>(text.size());
  const int slot = static_cast<int>(freeSend_.back());
  if (postMessage(h, text.data()).ok()) {
    abortSent_ = true;
    abortSlot_ = slot;
    if (!shared_->abortLingerUntil) shared_->abortLingerUntil = std::chrono::steady_clock::now() + kAbortLinger;
  }
}

// ---- receiving ----

Status VerbsConnection::irecv(Request& req, std::span<std::byte> buf, uint64_t tag) {
  req.state = Request::State::kPending;
  req.bytes = 0;
  auto it = inbound_.find(tag);
  if (it != inbound_.end()) {
    Inbound& in = it->second;
    if (in.req)
      return internalError("verbs: a receive with tag %#llx from rank %d is already posted", (unsigned long long)tag,
                           peer_);
    if (in.eager) {
      if (in.data.size() != buf.size()) {
        req.fail(sizeMismatch(peer_, in.data.size(), tag, me_, buf.size()));
      } else {
        if (!buf.empty()) std::memcpy(buf.data(), in.data.data(), buf.size());
        req.succeed(buf.size());
      }
      inbound_.erase(it);
      return okStatus();
    }
    // A rendezvous announcement: read it now (or refuse it).
    const Inbound rts = std::move(in);
    inbound_.erase(it);
    if (rts.size != buf.size()) {
      req.fail(sizeMismatch(peer_, rts.size, tag, me_, buf.size()));
      finq_.push_back({MsgHeader::kFin, nullptr, tag, nullptr, 0, rts.id, MsgHeader::kFinSizeMismatch});
      flush();
    } else {
      startRead(&req, buf, tag, rts.addr, rts.rkey, rts.size, rts.id);
    }
    return okStatus();
  }
  if (!broken_.ok()) {
    req.fail(broken_);
    return okStatus();
  }
  Inbound& in = inbound_[tag];
  in.req = &req;
  in.user = buf;
  return okStatus();
}

void VerbsConnection::startRead(Request* req, std::span<std::byte> user, uint64_t tag, uint64_t addr, uint32_t rkey,
                                uint64_t size, uint32_t id) {
  if (!broken_.ok()) {
    req->fail(broken_);
    return;
  }
  auto mr = mrCache_->acquire(user.data(), user.size(), MrCache::Use::kRecv);
  if (!mr) {
    req->fail(Status(mr.error().code(), format("rank %d: receiving %s from rank %d: %s", me_, humanBytes(size).c_str(),
                                               peer_, std::string(mr.error().message()).c_str())));
    finq_.push_back({MsgHeader::kFin, nullptr, tag, nullptr, 0, id, MsgHeader::kFinFailed});
    flush();
    return;
  }
  uint32_t index;
  if (!freeReads_.empty()) {
    index = freeReads_.back();
    freeReads_.pop_back();
  } else {
    if (reads_.size() > kMaxWrIndex) {
      req->fail(internalError("verbs: more than %u reads in flight to rank %d", kMaxWrIndex, peer_));
      return;
    }
    index = static_cast<uint32_t>(reads_.size());
    reads_.emplace_back();
  }
  Read& r = reads_[index];
  r.live = true;
  r.free = false;
  r.req = req;
  r.tag = tag;
  r.dst = user.data();
  r.remote = addr;
  r.rkey = rkey;
  r.id = id;
  r.total = size;
  r.posted = 0;
  r.inFlight = 0;
  r.mr = std::move(*mr);
  readq_.push_back(index);
  flush();
}

void VerbsConnection::finishRead(uint32_t index) {
  Read& r = reads_[index];
  r.live = false;
  r.mr.reset();
  Request* req = r.req;
  r.req = nullptr;
  finq_.push_back({MsgHeader::kFin, nullptr, r.tag, nullptr, 0, r.id, MsgHeader::kFinOk});
  req->succeed(r.total);
  recycleRead(index);
}

void VerbsConnection::recycleRead(uint32_t index) {
  Read& r = reads_[index];
  if (r.live || r.free || r.inFlight > 0) return;
  r.free = true;
  r.req = nullptr;
  freeReads_.push_back(index);
}

namespace {

// h, an eager message or a rendezvous announcement, arrived for a tag that already has the entry `it` in
// `inbound` (VerbsConnection::inbound_: a template only because its type is private). When the entry is a posted
// receive of h's size, takes it out of the map and returns it, with its buffer in *user. Otherwise returns null:
// either the entry is an earlier message of that tag, still unclaimed (a protocol error, in *broken, that fails
// the connection), or the receive expects another size (the entry is gone and the receive has failed).
template <class Map>
Request* claimReceive(Map& inbound, typename Map::iterator it, const MsgHeader& h, int me, int peer,
                      std::span<std::byte>* user, Status* broken) {
  if (!it->second.req) {
    *broken = remoteError("rank %d sent a second message with tag %#llx before the first was received", peer,
                          (unsigned long long)h.tag);
    return nullptr;
  }
  Request* req = it->second.req;
  *user = it->second.user;
  inbound.erase(it);
  if (user->size() != h.size) {
    req->fail(sizeMismatch(peer, h.size, h.tag, me, user->size()));
    return nullptr;
  }
  return req;
}

}  // namespace

void VerbsConnection::onEager(const MsgHeader& h, const std::byte* payload) {
  auto it = inbound_.find(h.tag);
  if (it == inbound_.end()) {
    Inbound& in = inbound_[h.tag];
    in.eager = true;
    in.data.assign(payload, payload + h.len);
    return;
  }
  std::span<std::byte> user;
  Status broken;
  Request* req = claimReceive(inbound_, it, h, me_, peer_, &user, &broken);
  if (!req) {
    if (!broken.ok()) fail(broken);
    return;
  }
  if (h.len) std::memcpy(user.data(), payload, h.len);
  req->succeed(h.len);
}

void VerbsConnection::onRts(const MsgHeader& h) {
  auto it = inbound_.find(h.tag);
  if (it == inbound_.end()) {
    Inbound& in = inbound_[h.tag];
    in.rts = true;
    in.size = h.size;
    in.addr = h.addr;
    in.rkey = h.rkey;
    in.id = h.id;
    return;
  }
  std::span<std::byte> user;
  Status broken;
  Request* req = claimReceive(inbound_, it, h, me_, peer_, &user, &broken);
  if (!req) {
    if (!broken.ok()) {
      fail(broken);
    } else {  // a size mismatch: the fin tells the sender, which releases its buffer
      finq_.push_back({MsgHeader::kFin, nullptr, h.tag, nullptr, 0, h.id, MsgHeader::kFinSizeMismatch});
    }
    return;  // handleMessage flushes
  }
  startRead(req, user, h.tag, h.addr, h.rkey, h.size, h.id);
}

void VerbsConnection::onFin(const MsgHeader& h) {
  auto it = rndvSends_.find(h.id);
  if (it == rndvSends_.end() || it->second.tag != h.tag) {
    fail(remoteError("rank %d finished a rendezvous (id %u, tag %#llx) that rank %d never announced", peer_, h.id,
                     (unsigned long long)h.tag, me_));
    return;
  }
  Request* req = it->second.req;
  const uint64_t size = it->second.size;
  rndvSends_.erase(it);  // releases the registration back to the cache
  if (h.status == MsgHeader::kFinFailed)
    req->fail(remoteError("rank %d could not receive the %s message with tag %#llx from rank %d", peer_,
                          humanBytes(size).c_str(), (unsigned long long)h.tag, me_));
  else
    req->succeed(size);  // a size mismatch fails the receive; the send did its part, as with tcp
}

void VerbsConnection::handleMessage(uint32_t slot, uint32_t bytes) {
  const std::byte* buf = recvSlot(slot);
  auto h = parseMessage(std::span<const std::byte>(buf, std::min<size_t>(bytes, slotBytes_)), opts_.slotPayload, peer_);
  if (!h) {
    fail(h.error());
    return;
  }
  if (static_cast<uint64_t>(credits_) + h->credits > peerRecvSlots_) {
    fail(remoteError("rank %d returned %u receive buffers, more than it lent (%u held, %u in all)", peer_, h->credits,
                     credits_, peerRecvSlots_));
    return;
  }
  credits_ += h->credits;
  switch (h->type) {
    case MsgHeader::kEager:
      onEager(*h, buf + kHeaderBytes);
      break;
    case MsgHeader::kRts:
      onRts(*h);
      break;
    case MsgHeader::kFin:
      onFin(*h);
      break;
    case MsgHeader::kCredit:
      break;
    case MsgHeader::kAbort:
      abortReason_.assign(reinterpret_cast<const char*>(buf + kHeaderBytes), h->len);
      if (abortReason_.empty()) abortReason_ = "no reason given";
      fail(gone());
      break;
  }
}

// ---- completions ----

void VerbsConnection::onCompletion(const ibv_wc& wc) {
  const uint32_t index = wrIndex(wc.wr_id);
  switch (wrKind(wc.wr_id)) {
    case WrKind::kRecv:
      if (!broken_.ok()) return;
      if (wc.status != IBV_WC_SUCCESS) {
        failCompletion(wc, "receive from");
        return;
      }
      if (index >= opts_.recvSlots) {
        fail(internalError("verbs: completion for receive slot %u of %u", index, opts_.recvSlots));
        return;
      }
      handleMessage(index, wc.byte_len);
      if (!broken_.ok()) return;
      // The message is consumed (copied out or kept elsewhere): the buffer goes back, and is owed to the peer.
      if (Status st = postRecv(index); !st.ok()) {
        fail(st);
        return;
      }
      ++owed_;
      flush();
      return;
    case WrKind::kSend:
      --sqUsed_;
      freeSend_.push_back(index);
      if (static_cast<int>(index) == abortSlot_) abortSlot_ = -1;
      if (wc.status != IBV_WC_SUCCESS) {
        failCompletion(wc, "send to");
        return;
      }
      flush();
      return;
    case WrKind::kRead: {
      --sqUsed_;
      --readsInFlight_;
      if (index >= reads_.size() || reads_[index].inFlight == 0) return;
      --reads_[index].inFlight;
      if (wc.status != IBV_WC_SUCCESS) {
        failCompletion(wc, "rdma read from");  // a no-op once broken
      } else if (broken_.ok() && reads_[index].live && reads_[index].inFlight == 0 &&
                 reads_[index].posted == reads_[index].total) {
        finishRead(index);  // (not while failing: fail() fails it, whatever arrived during the fence)
      }
      recycleRead(index);  // a read that failed while chunks were in flight frees its slot with the last one
      flush();
      return;
    }
  }
}

void VerbsConnection::failCompletion(const ibv_wc& wc, const char* what) {
  if (!broken_.ok()) return;
  if (!abortReason_.empty()) {
    fail(gone());
    return;
  }
  const bool remote = wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR ||
                      wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_REM_INV_REQ_ERR ||
                      wc.status == IBV_WC_REM_OP_ERR || wc.status == IBV_WC_REM_ABORT_ERR ||
                      wc.status == IBV_WC_REM_INV_RD_REQ_ERR || wc.status == IBV_WC_RESP_TIMEOUT_ERR;
  const char* hint = "";
  if (wc.status == IBV_WC_RETRY_EXC_ERR)
    hint = ": the peer stopped answering (it exited, or the path between the ports is down)";
  else if (wc.status == IBV_WC_WR_FLUSH_ERR)
    hint = ": the queue pair had gone into the error state";
  else if (wc.status == IBV_WC_REM_ACCESS_ERR)
    hint = ": the peer's buffer is no longer registered (it closed or aborted)";
  fail(Status(
      remote ? Code::kRemote : Code::kSystem,
      format("rank %d: verbs %s rank %d failed on %s: %s (status %d, vendor error %#x)%s", me_, what, peer_,
             describe().c_str(), ibv_wc_status_str(wc.status), static_cast<int>(wc.status), wc.vendor_err, hint)));
}

void VerbsConnection::onAsyncError(const Status& why) noexcept {
  if (!broken_.ok()) return;
  fail(Status(why.code(), format("rank %d: verbs connection to rank %d failed on %s: %s", me_, peer_,
                                 describe().c_str(), std::string(why.message()).c_str())));
}

void VerbsConnection::fail(const Status& why) {
  if (!broken_.ok()) return;
  broken_ = why;
  HC_TRACE(Ib, "verbs: %s failed: %s", describe().c_str(), why.toString().c_str());
  // First stop the hardware: a queue pair in the error state starts no new work on callers' buffers and answers
  // no reads of the peer; its outstanding work comes back flushed. But a read already under way may still be
  // writing into its buffer until its completion comes back: wait for every one before letting go of anything.
  if (qp_ && !(device_ && device_->fatal)) qp_->setError();  // (a dead device refuses every verb)
  fence();
  for (auto& [tag, in] : inbound_)
    if (in.req) in.req->fail(why);
  inbound_.clear();
  for (uint32_t i = 0; i < reads_.size(); ++i) {
    Read& r = reads_[i];
    if (!r.live) continue;
    r.live = false;
    r.req->fail(why);
    r.mr.reset(/*dropNow=*/true);
    recycleRead(i);
  }
  readq_.clear();
  for (auto& o : outq_)
    if (o.req) o.req->fail(why);
  outq_.clear();
  finq_.clear();
  for (auto& [id, s] : rndvSends_) {
    s.req->fail(why);
    s.mr.reset(/*dropNow=*/true);  // the peer knows its rkey
  }
  rndvSends_.clear();
}

void VerbsConnection::fence() {
  if (sqUsed_ == 0) return;
  if ((device_ && device_->fatal) || shared_->fenceTimedOut) {
    // A device that completes no work also does no DMA any more (or a fence already waited for it in vain).
    HC_TRACE(Ib, "verbs: %s: not waiting for %u work requests: the device is gone", describe().c_str(), sqUsed_);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  while (sqUsed_ > 0) {
    if (Status st = shared_->pollFor(id_); !st.ok()) {
      HC_TRACE(Ib, "verbs: %s: polling for flushed work requests: %s", describe().c_str(), st.toString().c_str());
      return;
    }
    if (sqUsed_ == 0) return;
    if (std::chrono::steady_clock::now() - start >= kFenceLimit) {
      shared_->fenceTimedOut = true;
      HC_WARN("verbs: %s: %u work requests still outstanding %lld ms after the queue pair went to the error state; "
              "releasing their buffers anyway",
              describe().c_str(), sqUsed_,
              (long long)std::chrono::duration_cast<std::chrono::milliseconds>(kFenceLimit).count());
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void VerbsConnection::close(const Status& why) noexcept {
  // An abort still in the send queue would be flushed by the error state: give it until the transport's linger
  // deadline (set by its first abort, so closing many connections lingers once) to leave.
  if (broken_.ok() && abortSlot_ >= 0 && shared_->abortLingerUntil) {
    const auto until = *shared_->abortLingerUntil;
    while (broken_.ok() && abortSlot_ >= 0 && std::chrono::steady_clock::now() < until) {
      if (!shared_->pollFor(id_).ok()) break;
      if (abortSlot_ >= 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  fail(why);
}

}  // namespace hetcomm::transport::verbs
