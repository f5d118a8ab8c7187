// verbs_connection.h: one peer over one reliable-connected queue pair.
//
// Protocol (every SEND carries a 40-byte MsgHeader, verbs_wire.h):
//   eager   size <= the eager limit: header + payload copied through a registered bounce buffer; the send
//           completes once copied. The receiver copies it into the posted buffer, or keeps it until the receive
//           is posted.
//   rts     larger: the sender registers its buffer (registration cache) and announces addr, rkey, size and an
//           id. The receiver, once its receive is posted, RDMA READs straight into it and answers fin(id): the
//           data waits in the sender's memory, so a late receive is free (lateReceiveIsFree).
//   fin     ends a rendezvous: ok, size mismatch (the sender's request still succeeds, as with tcp) or failed.
//   credit  only returns receive buffers (below).
//   abort   the reason this rank gives up; the peer fails everything with it.
//
// Flow control: each side posts R receive buffers and starts with R credits toward its peer (the peer's R). A
// SEND spends a credit; every header returns the buffers its sender re-posted since its previous message. Data,
// rts and fin need 2 credits and an explicit credit message 1, sent when max(2, R/2) returns are owed: the last
// credit is kept for returning credits, so two ranks that both ran out can always tell each other, and a credit
// message alone never triggers another (the peer then owes one buffer, below its threshold). So a SEND always
// finds a posted buffer and receiver-not-ready never happens. RDMA READs consume no receive buffer. (The unit
// tests check all of this over a software QueuePair, under adversarial schedules.)
//
// Send queue: SENDs are bounded by the bounce buffers, RDMA READs by the read depth both sides agreed on (rdAtomic:
// more would stall the send queue, and every SEND behind them) and by the room the bounce buffers leave, so a SEND
// always finds room however many reads wait. The last kControlSlots bounce buffers are kept for control messages
// (fin, credit, abort), and fins go before queued data: a receiver's fins and credits are not stuck behind its own
// eager data. A read moves at most readChunk bytes per work request: the smaller of both ports' max_msg_sz and
// maxReadChunk.
//
// Failures: a completion with an error status, or an asynchronous event about the queue pair, its port or its
// device, fails the connection, naming the peer, the ports and the reason. Failing moves the queue pair to the
// error state, then waits (polling, at most kFenceLimit) until every work request of its send queue has come back,
// flushed or done: only then are the RDMA READs that write into callers' buffers over, and only then are requests
// failed and registrations dropped.
#pragma once

#include <infiniband/verbs.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transports/transport.h"
#include "transports/verbs/mr_cache.h"
#include "transports/verbs/verbs_device.h"
#include "transports/verbs/verbs_wire.h"

namespace hetcomm::transport::verbs {

struct ConnectionOptions {
  uint32_t recvSlots = 32;                    // receive buffers posted for the peer
  uint32_t sendSlots = 32;                    // bounce buffers for outgoing messages
  uint32_t slotPayload = 8192;                // bytes after the header in each buffer
  uint32_t eagerMax = 8192;                   // largest message sent eagerly (<= slotPayload)
  uint32_t sqDepth = 64;                      // send-queue work requests: messages and read chunks
  uint32_t rdAtomic = 16;                     // RDMA READs this side serves at once and may issue (the device's limits)
  // One RDMA READ moves at most this, and at most both ports' max_msg_sz. 8 MiB: rxe's max_msg_sz (mlx5 allows
  // 1 GiB, but a chunk is already ~0.3 ms at 200 Gb/s, so the per-request cost is noise), and a message the
  // responder must stream before it answers a SEND queued behind it, so smaller keeps fins and credits prompt.
  uint64_t maxReadChunk = uint64_t{8} << 20;
  int sl = 0, trafficClass = 0, timeout = 18, retryCnt = 7;
};

// The queue-pair operations the data path needs. VerbsQp (verbs_connection.cc) drives an ibv_qp; the unit tests
// plug in a software loopback, so the protocol (credits, tag matching, rendezvous, aborts) runs without a device.
class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual uint32_t qpn() const = 0;
  // 0 or an errno value, as ibv_post_recv / ibv_post_send.
  virtual int postRecv(ibv_recv_wr& wr) = 0;
  virtual int postSend(ibv_send_wr& wr) = 0;
  // INIT -> RTR -> RTS towards the peer's queue pair. rdAtomic: reads in flight each way.
  virtual Status connect(const PortInfo& local, const QpInfo& remote, uint32_t psn, uint32_t rdAtomic,
                         const ConnectionOptions& opts) = 0;
  // To the error state: the hardware stops touching registered memory; outstanding work comes back flushed.
  virtual void setError() = 0;
};

// The connection's registered bounce buffers: receive slots, then send slots.
struct BounceBuffers {
  std::byte* base = nullptr;
  size_t bytes = 0;
  uint32_t lkey = 0;
  std::function<void()> release;  // deregisters and frees
};

class VerbsConnection final : public Connection {
 public:
  using Options = ConnectionOptions;

  // A queue pair in INIT with its receive buffers posted, ready for localInfo() and connect().
  static Result<std::unique_ptr<VerbsConnection>> create(std::shared_ptr<Shared> shared, Device* dev, ibv_cq* cq,
                                                         int me, int peer, const PortInfo& localPort,
                                                         uint32_t localPortIndex, const Options& opts);
  // The same from parts (tests: a fake queue pair and registration cache). Posts the receive buffers.
  static Result<std::unique_ptr<VerbsConnection>> assemble(std::shared_ptr<Shared> shared, MrCache* mrCache,
                                                           std::unique_ptr<QueuePair> qp, BounceBuffers bounce, int me,
                                                           int peer, const PortInfo& localPort, uint32_t localPortIndex,
                                                           const Options& opts);
  static size_t slotBytes(const Options& opts) { return (kHeaderBytes + opts.slotPayload + 63) & ~size_t{63}; }
  static size_t bounceBytes(const Options& opts) {
    return ((static_cast<size_t>(opts.recvSlots) + opts.sendSlots) * slotBytes(opts) + 4095) & ~size_t{4095};
  }
  ~VerbsConnection() override;

  // What the peer needs to connect to this queue pair; remotePortIndex: the peer's port as this side chose it.
  QpInfo localInfo(uint64_t commId, uint32_t remotePortIndex) const;
  // INIT -> RTR -> RTS towards the peer's queue pair.
  Status connect(const QpInfo& remote, const PortInfo& remotePort);
  // Called by Shared::poll for every completion of this connection's work requests.
  void onCompletion(const ibv_wc& wc);
  // An asynchronous event (its queue pair, port or device) broke the connection: fails it with why.
  void onAsyncError(const Status& why) noexcept;
  uint32_t id() const { return id_; }
  const PortInfo& localPort() const { return localPort_; }
  uint32_t qpn() const { return qp_ ? qp_->qpn() : 0; }
  ibv_cq* cq() const { return cq_; }
  uint64_t readChunk() const { return readChunk_; }    // after connect()
  uint32_t readDepth() const { return readDepth_; }    // reads in flight at most, after connect()

  int peer() const override { return peer_; }
  Status isend(Request& req, std::span<const std::byte> buf, uint64_t tag) override;
  Status irecv(Request& req, std::span<std::byte> buf, uint64_t tag) override;
  void sendAbort(std::string_view reason) noexcept override;
  void close(const Status& why) noexcept override;
  std::string describe() const override;
  bool lateReceiveIsFree(size_t bytes) const override { return bytes > recvEagerMax_; }

 private:
  // A message waiting for credits, a bounce buffer and send-queue room.
  struct Out {
    MsgHeader::Type type;
    Request* req = nullptr;  // eager: completed when copied; rts: completed by the fin
    uint64_t tag = 0;
    const std::byte* data = nullptr;
    uint64_t size = 0;
    uint32_t id = 0;     // rts, fin
    uint8_t status = 0;  // fin
  };
  // A rendezvous send waiting for the receiver's fin.
  struct RndvSend {
    Request* req;
    MrCache::Handle mr;
    uint64_t size;
    uint64_t tag;
  };
  // By tag: a posted receive (req set), or what arrived before it (eager data, or a rendezvous announcement).
  struct Inbound {
    Request* req = nullptr;
    std::span<std::byte> user;
    bool eager = false, rts = false;
    std::vector<std::byte> data;  // eager payload that came early
    uint64_t size = 0;            // rts: bytes to read
    uint64_t addr = 0;
    uint32_t rkey = 0, id = 0;
  };
  // A rendezvous receive: RDMA READs into the posted buffer, in chunks of at most readChunk_.
  struct Read {
    bool live = false;  // false once finished or failed; the slot is reused when no chunk is in flight
    bool free = true;   // in freeReads_
    Request* req = nullptr;
    uint64_t tag = 0;
    std::byte* dst = nullptr;
    uint64_t remote = 0;
    uint32_t rkey = 0, id = 0;
    uint64_t total = 0, posted = 0;
    uint32_t inFlight = 0;  // chunks posted, not completed
    MrCache::Handle mr;
  };

  VerbsConnection(std::shared_ptr<Shared> shared, MrCache* mrCache, std::unique_ptr<QueuePair> qp, BounceBuffers bounce,
                  int me, int peer, PortInfo localPort, uint32_t localPortIndex, const Options& opts);
  Status start();

  std::byte* recvSlot(uint32_t i) const { return bounce_.base + static_cast<size_t>(i) * slotBytes_; }
  std::byte* sendSlot(uint32_t i) const {
    return bounce_.base + (static_cast<size_t>(opts_.recvSlots) + i) * slotBytes_;
  }
  Status postRecv(uint32_t slot);
  // Fills a bounce buffer with the header (returning owed credits) and payload, and posts the SEND.
  Status postMessage(MsgHeader h, const void* payload);
  // A SEND of a message needing `credits` may go now, leaving `keepSlots` bounce buffers free.
  bool canPost(uint32_t credits, uint32_t keepSlots = 0) const {
    return credits_ >= credits && freeSend_.size() > keepSlots && sqUsed_ < opts_.sqDepth;
  }
  // Posts what waits, as far as credits, bounce buffers and the send queue allow: fins, then data, then reads.
  void flush();
  bool postQueued(Out& o);  // one of outq_/finq_; false when the connection failed
  void startRead(Request* req, std::span<std::byte> user, uint64_t tag, uint64_t addr, uint32_t rkey, uint64_t size,
                 uint32_t id);
  void finishRead(uint32_t index);
  void recycleRead(uint32_t index);  // back to freeReads_ once dead with nothing in flight

  void handleMessage(uint32_t slot, uint32_t bytes);
  void onEager(const MsgHeader& h, const std::byte* payload);
  void onRts(const MsgHeader& h);
  void onFin(const MsgHeader& h);

  void failCompletion(const ibv_wc& wc, const char* what);
  void fail(const Status& why);
  // After the queue pair went to the error state: polls until no work request of this send queue is outstanding.
  void fence();
  Status gone() const;

  std::shared_ptr<Shared> shared_;
  MrCache* mrCache_;
  std::unique_ptr<QueuePair> qp_;
  BounceBuffers bounce_;  // recvSlots then sendSlots buffers of slotBytes_ each
  size_t slotBytes_;
  int me_, peer_;
  PortInfo localPort_, remotePort_;
  uint32_t localPortIndex_;
  Options opts_;
  Device* device_ = nullptr;  // null for assembled (test) connections
  ibv_cq* cq_ = nullptr;
  uint32_t id_ = 0;
  uint32_t psn_ = 0;
  uint32_t rdAtomic_ = 1;     // reads this side may have in flight, and serves at once (agreed with the peer)
  uint32_t readDepth_ = 1;    // reads in flight at most: rdAtomic_, within the send queue's room beside the SENDs
  uint64_t readChunk_ = 0;    // bytes per RDMA READ at most (both ports' max_msg_sz, maxReadChunk)
  uint32_t readsInFlight_ = 0;

  uint32_t peerRecvSlots_ = 0;  // the peer's receive buffers: credits never exceed it
  uint32_t credits_ = 0;        // SENDs the peer has buffers for
  uint32_t owed_ = 0;           // buffers re-posted and not yet reported to the peer
  uint32_t sqUsed_ = 0;
  std::vector<uint32_t> freeSend_;
  size_t sendEagerMax_ = 0;  // eager limit of messages to the peer
  size_t recvEagerMax_ = 0;  // and of messages from it

  std::deque<Out> finq_;  // fins: before data, on the control slots if need be
  std::deque<Out> outq_;  // eager data and rendezvous announcements, in order
  std::unordered_map<uint32_t, RndvSend> rndvSends_;
  uint32_t nextRndvId_ = 1;
  std::unordered_map<uint64_t, Inbound> inbound_;
  std::vector<Read> reads_;
  std::vector<uint32_t> freeReads_;
  std::deque<uint32_t> readq_;  // reads with chunks still to post

  Status broken_;
  std::string abortReason_;
  bool abortSent_ = false;
  int abortSlot_ = -1;  // the send slot of an abort still in flight
};

}  // namespace hetcomm::transport::verbs
