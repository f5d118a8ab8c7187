#include "transports/shm/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "transports/blob.h"
#include "transports/buffer_pool.h"
#include "transports/inbound.h"

namespace hetcomm::transport::shm {

HC_PARAM_INT(cmaBytesParam, "SHM_CMA_BYTES", 256 << 10)
// Messages up to this size use cross-memory attach; larger ones go through the ring. Measured here (2 ranks,
// 2 cores): a collective's chunks (512 KiB) are 2x faster by attach, since every rank is busy reducing and one copy
// beats two; a lone large stream is 1.6x faster through the ring, where the sender's copy in and the receiver's
// copy out run on both cores at once, while one process_vm_readv copies on one core only.
HC_PARAM_INT(cmaMaxBytesParam, "SHM_CMA_MAX_BYTES", 1 << 20)

namespace {

constexpr uint32_t kSegMagic = 0x32534348;    // "HCS2": the layout with abort texts
constexpr size_t kRingBytes = 1 << 20;        // per direction
constexpr size_t kMaxChunk = kRingBytes / 4;  // a frame's payload: a frame is written only when it fits whole
// Frames are made visible to the other side (a store, a fence and a look at its wake-up flag) once this many bytes
// are written or read, and at the end of a pass: small frames of one pass share one fence.
constexpr size_t kPublishBytes = 16 << 10;
// How often a pass looks for peers that exited (a system call); the engine also looks before every sleep.
constexpr auto kExitCheckEvery = std::chrono::milliseconds(1);
constexpr uint64_t kClockEvery = 64;

// ---- shared layout ----
struct alignas(64) Ring {
  std::atomic<uint64_t> head;  // bytes produced (sender)
  char pad0[56];
  std::atomic<uint64_t> tail;  // bytes consumed (receiver)
  char pad1[56];
  std::atomic<uint32_t> receiverWaiting;  // the receiver may sleep: wake it after producing
  std::atomic<uint32_t> senderWaiting;    // the sender waits for space: wake it after consuming
  char pad2[56];
  std::byte data[kRingBytes];
};
struct alignas(64) Segment {
  uint32_t magic;
  uint32_t reserved;
  std::atomic<int32_t> canRead[2];  // side s can process_vm_readv from the other side (-1 not known yet)
  std::atomic<uint32_t> closed[2];  // side s closed: its buffers announced by attach frames may be gone
  // Why side s aborted, written before aborted[s] is raised. The ring's abort frame waits behind the data queued
  // before it, which a peer that exits next may never send: this copy reaches the peer whatever the ring holds, so
  // it blames the rank that caused the abort, not the one that aborted.
  std::atomic<uint32_t> aborted[2];
  char abortText[2][512];
  Ring ring[2];  // ring[0]: lower -> higher, ring[1]: higher -> lower
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

struct FrameHeader {
  enum Kind : uint32_t { kData = 1, kCma = 2, kAck = 3, kAbort = 4 };
  uint32_t kind;
  uint32_t len;  // payload bytes following (kData, kAbort)
  uint64_t tag;
  uint64_t total;   // message bytes
  uint64_t offset;  // kData: of this chunk; kCma: the sender's address
};
static_assert(sizeof(FrameHeader) == 32);

// ---- blob ----
struct Blob {
  std::string host;
  int pid = 0;
  uint64_t nonce = 0;      // names this rank's segments and socket
  uint64_t probeAddr = 0;  // a word peers read to test cross-memory attach
};

std::vector<std::byte> encode(const Blob& b) {
  return TextBlob("hcshm", 1)
      .put("host", b.host)
      .put("pid", std::to_string(b.pid))
      .put("nonce", format("%llx", (unsigned long long)b.nonce))
      .put("probe", format("%llx", (unsigned long long)b.probeAddr))
      .bytes();
}

Result<Blob> decode(std::span<const std::byte> raw, int peer) {
  const TextBlob t = TextBlob::parse(raw, "hcshm", 1);
  Blob b;
  if (const std::string* v = t.find("host")) b.host = *v;
  if (const std::string* v = t.find("pid")) b.pid = std::atoi(v->c_str());
  if (const std::string* v = t.find("nonce")) b.nonce = std::strtoull(v->c_str(), nullptr, 16);
  if (const std::string* v = t.find("probe")) b.probeAddr = std::strtoull(v->c_str(), nullptr, 16);
  if (!t.ok() || b.pid <= 0) return remoteError("rank %d's shm blob is malformed", peer);
  return b;
}

sockaddr_un notifyAddress(uint64_t nonce, int rank, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // Abstract namespace (leading NUL): vanishes with the socket, nothing on the file system to clean up.
  int n =
      std::snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "hetcomm-shm-%016llx-%d", (unsigned long long)nonce, rank);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

}  // namespace

// ---- one peer ----

class ShmConnection final : public Connection {
 public:
  ShmConnection(ShmTransport::Impl* t, int me, int peer, int side, Segment* seg, size_t segBytes, int peerPid,
                bool cmaOut, bool cmaIn, sockaddr_un peerAddr, socklen_t peerAddrLen, int pidfd)
      : t_(t),
        me_(me),
        peer_(peer),
        side_(side),
        seg_(seg),
        segBytes_(segBytes),
        peerPid_(peerPid),
        cmaOut_(cmaOut),
        cmaIn_(cmaIn),
        peerAddr_(peerAddr),
        peerAddrLen_(peerAddrLen),
        pidfd_(pidfd),
        out_(seg->ring[side]),
        in_(seg->ring[1 - side]),
        inbound_("shm", me, peer) {}
  ~ShmConnection() override;

  int peer() const override { return peer_; }
  int pidfd() const { return pidfd_; }
  bool lateReceiveIsFree(size_t bytes) const override;
  Status health() const override { return !broken_.ok() ? broken_ : peerExited_ ? gone() : okStatus(); }
  std::string describe() const override {
    return format("r%d->r%d/shm(%s)", me_, peer_, cmaOut_ ? "ring + cross-memory attach" : "ring");
  }

  Status isend(Request& req, std::span<const std::byte> buf, uint64_t tag) override;
  Status irecv(Request& req, std::span<std::byte> buf, uint64_t tag) override;
  void sendAbort(std::string_view reason) noexcept override;
  void close(const Status& why) noexcept override { fail(why); }

  // Moves what can move; true when anything did.
  bool progress();
  bool hasInput() const {
    return broken_.ok() && in_.head.load(std::memory_order_acquire) != in_.tail.load(std::memory_order_relaxed);
  }
  // About to sleep: raise the wake-up flag, then look once more (a peer that wrote before seeing the flag).
  bool armAndRecheck();
  void peerExited();
  void wake() { notifyPeer(); }

 private:
  struct Out {
    FrameHeader::Kind kind;
    Request* req;  // null for acks and aborts
    uint64_t tag, total;
    const std::byte* data;
    size_t sent = 0;   // payload bytes framed so far
    std::string text;  // abort reason
  };
  using Inbound = InboundMessages::Message;

  bool flushOut();
  bool readIn();
  void publishHead(uint64_t head);
  void publishTail(uint64_t tail);
  void handleData(const FrameHeader& h, uint64_t payloadPos);
  void pull(uint64_t tag, Inbound& in);  // cross-memory attach into the posted buffer, then ack
  void copyOutOfRing(std::byte* dst, uint64_t pos, size_t n);
  void copyIntoRing(uint64_t pos, const void* src, size_t n);
  void notifyPeer();
  void fail(const Status& why);
  Status gone() const;

  ShmTransport::Impl* t_;
  int me_, peer_, side_;
  Segment* seg_;
  size_t segBytes_;
  int peerPid_;
  bool cmaOut_, cmaIn_;  // the peer may pull from us / we may pull from the peer
  sockaddr_un peerAddr_;
  socklen_t peerAddrLen_;
  int pidfd_;
  Ring& out_;
  Ring& in_;
  uint64_t knownTail_ = 0;  // out_.tail as last read: the room known to be free up to there
  std::deque<Out> outq_;
  std::unordered_map<uint64_t, Request*> awaitingAck_;
  InboundMessages inbound_;
  Status broken_;
  bool peerExited_ = false;
  std::string abortReason_;
};

struct ShmTransport::Impl {
  Config cfg;
  int epollFd = -1;
  int notifyFd = -1;
  uint64_t nonce = 0;
  size_t cmaBytes = 0;     // smallest message sent by cross-memory attach (0: never)
  size_t cmaMaxBytes = 0;  // largest
  bool useCma(size_t bytes) const { return cmaBytes > 0 && bytes >= cmaBytes && bytes <= cmaMaxBytes; }
  alignas(64) volatile uint64_t probeWord = 0x6865746361726d21ull;  // peers read it to test cross-memory attach
  std::vector<ShmConnection*> conns;                                // owned by the communicator
  std::chrono::steady_clock::time_point nextExitCheck{};
  uint64_t passes = 0;  // progress() calls: the clock is read on every kClockEvery-th only
  // Fails the connections whose peer process is gone (its pidfd became readable); true when there was one.
  bool checkExits();
};

bool ShmConnection::lateReceiveIsFree(size_t bytes) const { return cmaIn_ && t_->useCma(bytes); }

ShmConnection::~ShmConnection() {
  close(invalidUsage("connection to rank %d closed", peer_));
  std::erase(t_->conns, this);
  if (pidfd_ >= 0) {
    epoll_ctl(t_->epollFd, EPOLL_CTL_DEL, pidfd_, nullptr);
    ::close(pidfd_);
  }
  munmap(seg_, segBytes_);
}

// ---- ring I/O ----

void ShmConnection::copyIntoRing(uint64_t pos, const void* src, size_t n) {
  size_t at = pos % kRingBytes, first = std::min(n, kRingBytes - at);
  std::memcpy(out_.data + at, src, first);
  if (n > first) std::memcpy(out_.data, static_cast<const std::byte*>(src) + first, n - first);
}

void ShmConnection::copyOutOfRing(std::byte* dst, uint64_t pos, size_t n) {
  size_t at = pos % kRingBytes, first = std::min(n, kRingBytes - at);
  std::memcpy(dst, in_.data + at, first);
  if (n > first) std::memcpy(dst + first, in_.data, n - first);
}

void ShmConnection::notifyPeer() {
  char b = 1;
  // A full socket buffer means the peer has wake-ups pending already.
  ::sendto(t_->notifyFd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&peerAddr_),
           peerAddrLen_);
}

// Makes the frames written up to head visible to the receiver, and wakes it if it sleeps. The fence orders the
// head store before the flag load, against the receiver's flag store and head load (armAndRecheck): one of the
// two sides sees the other's write, so a frame never waits for a receiver that went to sleep unseen.
void ShmConnection::publishHead(uint64_t head) {
  out_.head.store(head, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (out_.receiverWaiting.load(std::memory_order_relaxed) &&
      out_.receiverWaiting.exchange(0, std::memory_order_seq_cst))
    notifyPeer();
}

bool ShmConnection::flushOut() {
  bool moved = false;
  uint64_t head = out_.head.load(std::memory_order_relaxed);
  uint64_t published = head;
  while (!outq_.empty() && broken_.ok()) {
    Out& o = outq_.front();
    size_t payload = o.kind == FrameHeader::kData    ? std::min<size_t>(o.total - o.sent, kMaxChunk)
                     : o.kind == FrameHeader::kAbort ? o.text.size()
                                                     : 0;
    // The receiver's tail is read only when the room last seen is not enough: reading it is a cache line that the
    // receiver writes on every pass.
    uint64_t tail = knownTail_;
    if (kRingBytes - (head - tail) < sizeof(FrameHeader) + payload)
      tail = knownTail_ = out_.tail.load(std::memory_order_acquire);
    if (kRingBytes - (head - tail) < sizeof(FrameHeader) + payload) {
      // Full: what is written goes out first (the receiver makes room by reading it), then ask to be woken when
      // the peer consumes, and look again (it may have consumed meanwhile).
      if (head != published) publishHead(published = head);
      out_.senderWaiting.store(1, std::memory_order_seq_cst);
      tail = knownTail_ = out_.tail.load(std::memory_order_seq_cst);
      if (kRingBytes - (head - tail) < sizeof(FrameHeader) + payload) break;
      out_.senderWaiting.store(0, std::memory_order_relaxed);
    }
    FrameHeader h{static_cast<uint32_t>(o.kind), static_cast<uint32_t>(payload), o.tag, o.total, 0};
    if (o.kind == FrameHeader::kData) h.offset = o.sent;
    if (o.kind == FrameHeader::kCma) h.offset = reinterpret_cast<uint64_t>(o.data);
    copyIntoRing(head, &h, sizeof(h));
    if (o.kind == FrameHeader::kData && payload) copyIntoRing(head + sizeof(h), o.data + o.sent, payload);
    if (o.kind == FrameHeader::kAbort) copyIntoRing(head + sizeof(h), o.text.data(), payload);
    head += sizeof(h) + payload;
    // Small frames go out together (one fence for all); a large one at once, so the receiver copies it out while
    // this side writes the next.
    if (head - published >= kPublishBytes) publishHead(published = head);
    moved = true;
    o.sent += payload;
    if (o.kind == FrameHeader::kData && o.sent < o.total) continue;
    if (o.kind == FrameHeader::kData) o.req->succeed(o.total);  // copied out of the caller's buffer
    if (o.kind == FrameHeader::kCma) {
      o.req->bytes = o.total;  // reported when the receiver's acknowledgement completes it
      awaitingAck_[o.tag] = o.req;
    }
    outq_.pop_front();
  }
  if (head != published) publishHead(head);
  return moved;
}

Status ShmConnection::isend(Request& req, std::span<const std::byte> buf, uint64_t tag) {
  req.state = Request::State::kPending;
  req.bytes = 0;
  if (!broken_.ok() || peerExited_) {
    req.fail(broken_.ok() ? gone() : broken_);
    return okStatus();
  }
  // Chunk-sized messages go by attach. Larger ones stream through the ring when traffic flows one way (both cores
  // copy at once: 1.6x faster here), but by attach when this rank also waits for data from the peer: then both
  // directions' copies compete, and one copy per direction beats two (4x faster here).
  const bool twoWay = buf.size() > t_->cmaMaxBytes && inbound_.anyWaiting();  // traffic flows both ways
  bool cma = cmaOut_ && (t_->useCma(buf.size()) || (t_->cmaBytes > 0 && twoWay));
  outq_.push_back({cma ? FrameHeader::kCma : FrameHeader::kData, &req, tag, buf.size(), buf.data()});
  flushOut();
  return okStatus();
}

void ShmConnection::sendAbort(std::string_view reason) noexcept {
  if (!broken_.ok() || peerExited_) return;
  const size_t n = std::min(reason.size(), sizeof(seg_->abortText[side_]) - 1);
  std::memcpy(seg_->abortText[side_], reason.data(), n);
  seg_->abortText[side_][n] = '\0';
  seg_->aborted[side_].store(1, std::memory_order_release);
  // Behind frames already queued, so it never cuts one in half.
  Out o{FrameHeader::kAbort, nullptr, 0, 0, nullptr};
  o.text = std::string(reason.substr(0, 1024));
  outq_.push_back(std::move(o));
  flushOut();
}

// ---- receiving ----

Status ShmConnection::irecv(Request& req, std::span<std::byte> buf, uint64_t tag) {
  Inbound* in = nullptr;
  HC_ASSIGN_OR_RETURN(InboundMessages::Posted posted, inbound_.post(req, buf, tag,
                                                                    !broken_.ok() ? broken_
                                                                    : peerExited_ ? gone()
                                                                                  : okStatus(),
                                                                    &in));
  if (posted == InboundMessages::Posted::kPull) {
    pull(tag, *in);
  } else if (posted == InboundMessages::Posted::kRefusedRendezvous) {  // let the sender go: its buffer is not read
    outq_.push_back({FrameHeader::kAck, nullptr, tag, 0, nullptr});
    flushOut();
  }
  return okStatus();
}

void ShmConnection::pull(uint64_t tag, Inbound& in) {
  size_t done = 0;
  while (done < in.total) {
    iovec local{in.user.data() + done, in.total - done};
    iovec remote{reinterpret_cast<void*>(in.remote + done), in.total - done};
    ssize_t n = process_vm_readv(peerPid_, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == ESRCH) {  // the peer is gone: say so, as the pidfd path does
      fail(gone());
      return;
    }
    // EFAULT on a buffer the sender promised to keep until our ack: its address space is being torn down (it is
    // exiting) or it abandoned the send (abort). Either way the cause is on the peer's side, so it is a remote error.
    if (n < 0 && errno == EFAULT) {
      if (seg_->aborted[1 - side_].load()) {  // it aborted: its reason names the cause
        fail(gone());
        return;
      }
      fail(
          remoteError("shm: rank %d (pid %d) no longer has the %llu-byte buffer it was sending (it exited or "
                      "aborted) while rank %d read it by cross-memory attach",
                      peer_, peerPid_, (unsigned long long)in.total, me_));
      return;
    }
    if (n <= 0) {
      fail(n < 0 ? errnoStatus(errno, "shm: reading %llu bytes from rank %d (pid %d) by cross-memory attach",
                               (unsigned long long)in.total, peer_, peerPid_)
                 : remoteError("shm: rank %d's buffer vanished during cross-memory attach", peer_));
      return;
    }
    done += static_cast<size_t>(n);
  }
  // The sender closed before or during the pull: its buffer may have been released or reused; the bytes are void.
  // Closed because it aborted: its reason names the cause.
  if (seg_->closed[1 - side_].load(std::memory_order_seq_cst) && seg_->aborted[1 - side_].load()) {
    fail(gone());
    return;
  }
  if (seg_->closed[1 - side_].load(std::memory_order_seq_cst)) {
    fail(remoteError("rank %d closed its connection before rank %d read its %llu-byte message (tag %#llx)", peer_, me_,
                     (unsigned long long)in.total, (unsigned long long)tag));
    return;
  }
  inbound_.finish(tag, in);
  outq_.push_back({FrameHeader::kAck, nullptr, tag, 0, nullptr});
  flushOut();
}

void ShmConnection::handleData(const FrameHeader& h, uint64_t payloadPos) {
  Result<Inbound*> in = inbound_.frame(h.tag, h.total, h.offset, h.len);
  if (!in) {
    fail(in.error());
    return;
  }
  if (h.len) copyOutOfRing((*in)->base() + h.offset, payloadPos, h.len);
  inbound_.landed(h.tag, **in, h.len);
}

bool ShmConnection::readIn() {
  bool moved = false;
  uint64_t tail = in_.tail.load(std::memory_order_relaxed);
  uint64_t published = tail;
  const uint64_t head = in_.head.load(std::memory_order_acquire);
  // The next frame's first line, fetched beside the head's rather than after it: the loop's test waits on the head
  // (mispredicted when a frame comes after many empty looks), and only then would the header's load start, a
  // second trip between the cores. A hint: stale or early, the header is read below in order.
  __builtin_prefetch(in_.data + tail % kRingBytes);
  while (tail < head && broken_.ok()) {
    FrameHeader h;
    copyOutOfRing(reinterpret_cast<std::byte*>(&h), tail, sizeof(h));
    if (h.len > kMaxChunk || head - tail < sizeof(h) + h.len) {
      fail(remoteError("rank %d wrote a malformed shm frame", peer_));
      return true;
    }
    switch (h.kind) {
      case FrameHeader::kData:
        handleData(h, tail + sizeof(h));
        break;
      case FrameHeader::kCma: {
        Inbound* in = inbound_.announce(h.tag, h.total, h.offset);
        if (!in)  // its receive wanted another size: let the sender go
          outq_.push_back({FrameHeader::kAck, nullptr, h.tag, 0, nullptr});
        else if (in->req)
          pull(h.tag, *in);
        break;
      }
      case FrameHeader::kAck: {
        auto it = awaitingAck_.find(h.tag);
        if (it != awaitingAck_.end()) {
          it->second->succeed(it->second->bytes);
          awaitingAck_.erase(it);
        }
        break;
      }
      case FrameHeader::kAbort: {
        abortReason_.resize(h.len);
        copyOutOfRing(reinterpret_cast<std::byte*>(abortReason_.data()), tail + sizeof(h), h.len);
        if (abortReason_.empty()) abortReason_ = "no reason given";
        in_.tail.store(tail + sizeof(h) + h.len, std::memory_order_release);
        fail(gone());
        return true;
      }
      default:
        fail(remoteError("rank %d wrote an unknown shm frame kind %u", peer_, h.kind));
        return true;
    }
    tail += sizeof(h) + h.len;
    if (tail - published >= kPublishBytes) publishTail(published = tail);
    moved = true;
  }
  if (tail != published) publishTail(tail);
  return moved;
}

// As publishHead, for the room this side made: the sender may wait for it.
void ShmConnection::publishTail(uint64_t tail) {
  in_.tail.store(tail, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (in_.senderWaiting.load(std::memory_order_relaxed) && in_.senderWaiting.exchange(0, std::memory_order_seq_cst))
    notifyPeer();
}

bool ShmConnection::progress() {
  if (!broken_.ok()) return false;
  // Cleared only when set: a store, even of the same value, takes the line from the sender, whose publishHead
  // reads it on every publish (a cache miss per message: 8 B ping-pong 1.17 -> 0.98 us here).
  if (in_.receiverWaiting.load(std::memory_order_relaxed)) in_.receiverWaiting.store(0, std::memory_order_relaxed);
  bool any = false;
  for (bool moved = true; moved && broken_.ok();) {
    moved = readIn();
    moved = flushOut() || moved;
    any = any || moved;
  }
  return any;
}

bool ShmConnection::armAndRecheck() {
  if (!broken_.ok()) return false;
  in_.receiverWaiting.store(1, std::memory_order_seq_cst);
  return in_.head.load(std::memory_order_seq_cst) != in_.tail.load(std::memory_order_relaxed);
}

Status ShmConnection::gone() const {
  if (!abortReason_.empty()) return remoteError("rank %d aborted: %s", peer_, abortReason_.c_str());
  if (seg_->aborted[1 - side_].load(std::memory_order_acquire)) {
    const char* text = seg_->abortText[1 - side_];
    return remoteError("rank %d aborted: %.*s", peer_, static_cast<int>(strnlen(text, sizeof(seg_->abortText[0]))),
                       text);
  }
  return remoteError("rank %d (pid %d, same host) exited while rank %d still needed it", peer_, peerPid_, me_);
}

void ShmConnection::peerExited() {
  if (peerExited_) return;
  // A pidfd stays readable once its process is gone: stop watching it, or the engine would never sleep.
  epoll_ctl(t_->epollFd, EPOLL_CTL_DEL, pidfd_, nullptr);
  // Everything it wrote before exiting is in the ring: take that first.
  progress();
  peerExited_ = true;
  Status why = gone();
  inbound_.failAll(why, /*keepEarly=*/true);
  for (auto& o : outq_)
    if (o.req) o.req->fail(why);
  outq_.clear();
  for (auto& [tag, req] : awaitingAck_) req->fail(why);
  awaitingAck_.clear();
}

void ShmConnection::fail(const Status& why) {
  if (!broken_.ok()) return;
  broken_ = why;
  seg_->closed[side_].store(1, std::memory_order_seq_cst);  // before any caller can release a buffer
  inbound_.failAll(why, /*keepEarly=*/false);
  for (auto& o : outq_)
    if (o.req) o.req->fail(why);
  outq_.clear();
  for (auto& [tag, req] : awaitingAck_) req->fail(why);
  awaitingAck_.clear();
}

// ---- transport ----

// Why measure: on the Intel Xeon of 2026-11-28 a profile of a 2-rank 64 MiB allreduce put attach at 4.0 GB/s against
// memcpy's 5.2 (chunks 2x faster by attach there); on an AMD EPYC VM (kernel 6.18, 2026-11-29) this function
// measures attach at 6-15 GB/s against memcpy's 15-64, and a 2-rank allreduce ran 1.1-4x faster through the ring
// (docs/results.md). Not run on the Xeon: its verdict there is not known.
Result<AttachMeasure> measureAttach(size_t regionBytes, size_t chunkBytes) {
  if (chunkBytes == 0 || regionBytes < chunkBytes)
    return invalidArgument("measureAttach: a region of %zu bytes holds no chunk of %zu", regionBytes, chunkBytes);
  std::vector<std::byte> from(regionBytes, std::byte{1}), to(regionBytes, std::byte{2});
  const size_t chunks = regionBytes / chunkBytes;
  const pid_t self = getpid();
  auto timed = [&](auto&& copyChunk) -> Result<double> {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t c = 0; c < chunks; ++c) HC_TRY(copyChunk(c * chunkBytes));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto byMemcpy = [&](size_t at) -> Status {
    std::memcpy(to.data() + at, from.data() + at, chunkBytes);
    return okStatus();
  };
  auto byAttach = [&](size_t at) -> Status {
    iovec local{to.data() + at, chunkBytes}, remote{from.data() + at, chunkBytes};
    if (process_vm_readv(self, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(chunkBytes))
      return errnoStatus(errno, "measureAttach: process_vm_readv of this process's own memory");
    return okStatus();
  };
  double bestMemcpy = 1e30, bestAttach = 1e30;
  for (int pass = 0; pass < 3; ++pass) {
    HC_ASSIGN_OR_RETURN(double m, timed(byMemcpy));
    HC_ASSIGN_OR_RETURN(double a, timed(byAttach));
    bestMemcpy = std::min(bestMemcpy, m);
    bestAttach = std::min(bestAttach, a);
  }
  const double bytes = static_cast<double>(chunks * chunkBytes);
  AttachMeasure m;
  m.memcpyGBps = bytes / std::max(bestMemcpy, 1e-9) / 1e9;
  m.attachGBps = bytes / std::max(bestAttach, 1e-9) / 1e9;
  m.pays = bestAttach < 2 * bestMemcpy;
  return m;
}

bool attachChosen() {
  static const bool pays = [] {
    if (param::env("HETCOMM_SHM_CMA_BYTES")) return true;
    auto m = measureAttach();
    if (!m.has_value()) {
      HC_INFO(Shm, "shm: cross-memory attach not measured (%s); reading through the ring",
              std::string(m.error().message()).c_str());
      return false;
    }
    HC_INFO(Shm, "shm: cross-memory attach %.1f GB/s, memcpy %.1f GB/s: %s", m->attachGBps, m->memcpyGBps,
            m->pays ? "chunks by attach" : "everything through the ring (attach slower than two copies)");
    return m->pays;
  }();
  return pays;
}

Result<std::unique_ptr<ShmTransport>> ShmTransport::create(const Config& config) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  int64_t cma = cmaBytesParam();
  if (cma < 0) return invalidArgument("HETCOMM_SHM_CMA_BYTES=%lld must be >= 0", (long long)cma);
  impl->cmaBytes = static_cast<size_t>(cma);
  int64_t cmaMax = cmaMaxBytesParam();
  if (cmaMax < 0) return invalidArgument("HETCOMM_SHM_CMA_MAX_BYTES=%lld must be >= 0", (long long)cmaMax);
  impl->cmaMaxBytes = static_cast<size_t>(cmaMax);
  HC_TRY(crypto::randomBytes({reinterpret_cast<uint8_t*>(&impl->nonce), sizeof(impl->nonce)}));
  impl->notifyFd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (impl->notifyFd < 0) return errnoStatus(errno, "shm: socket(AF_UNIX)");
  socklen_t len;
  sockaddr_un addr = notifyAddress(impl->nonce, config.rank, &len);
  if (::bind(impl->notifyFd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    Status st = errnoStatus(errno, "shm: bind of the wake-up socket");
    ::close(impl->notifyFd);
    return st;
  }
  auto t = std::unique_ptr<ShmTransport>(new ShmTransport(std::move(impl)));
  if (t->epollFd_ < 0) return errnoStatus(errno, "shm: epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up socket
  if (epoll_ctl(t->epollFd_, EPOLL_CTL_ADD, t->impl_->notifyFd, &ev) != 0) return errnoStatus(errno, "shm: epoll_ctl");
  return t;
}

ShmTransport::ShmTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  props_.kind = Kind::kShm;
  props_.name = "shm";
  props_.latencyUs = 1;
  props_.bandwidthGBps = 10;
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  impl_->epollFd = epollFd_;
}

ShmTransport::~ShmTransport() {
  if (region_) munmap(region_, regionBytes_);
  if (impl_->notifyFd >= 0) ::close(impl_->notifyFd);
  if (epollFd_ >= 0) ::close(epollFd_);
}

void ShmTransport::wakePeer(int peer) {
  for (ShmConnection* c : impl_->conns)
    if (c->peer() == peer) c->wake();
}

Result<std::vector<std::byte>> ShmTransport::listen() {
  Blob b{impl_->cfg.hostId, static_cast<int>(getpid()), impl_->nonce,
         reinterpret_cast<uint64_t>(const_cast<uint64_t*>(&impl_->probeWord))};
  return encode(b);
}

namespace {

// Can this process read the peer's memory? (ptrace rules: same user, and Yama's ptrace_scope allows it.)
bool probeCrossMemoryAttach(int pid, uint64_t addr) {
  uint64_t word = 0;
  iovec local{&word, sizeof(word)}, remote{reinterpret_cast<void*>(addr), sizeof(word)};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof(word) && word == 0x6865746361726d21ull;
}

}  // namespace

Result<std::vector<std::unique_ptr<Connection>>> ShmTransport::connectAll(
    const std::vector<std::vector<std::byte>>& blobs, Deadline deadline) {
  const Config& cfg = impl_->cfg;
  const int n = cfg.nranks, me = cfg.rank;
  std::vector<std::unique_ptr<Connection>> conns(n);
  struct Pair {
    int peer;
    Blob blob;
    Segment* seg = nullptr;
  };
  std::vector<Pair> pairs;
  for (int p = 0; p < n; ++p) {
    if (p == me || blobs[p].empty()) continue;
    HC_ASSIGN_OR_RETURN(Blob b, decode(blobs[p], p));
    if (b.host != cfg.hostId)
      return invalidUsage("shm: rank %d is on host %s, not this host (%s)", p, b.host.c_str(), cfg.hostId.c_str());
    pairs.push_back({p, b});
  }
  const size_t segBytes = sizeof(Segment);
  // The lower rank creates each pair's segment as an anonymous memfd and hands the descriptor to the higher rank
  // over its wake-up socket (SCM_RIGHTS). The segment has no name, so nothing can be left in /dev/shm: it goes
  // away with the last mapping, whatever way the processes end.
  struct SegMsg {
    uint64_t commId;
    int32_t lo, hi;
  };
  // The host region, if asked for: created by the lowest rank, handed on with each of its pairs' segments.
  int lowest = me;
  for (const auto& pr : pairs) lowest = std::min(lowest, pr.peer);
  const bool wantRegion = regionBytes_ > 0 && !pairs.empty();
  int regionFd = -1;
  if (wantRegion && lowest == me) {
    regionFd = memfd_create("hetcomm-shm-host", MFD_CLOEXEC);
    if (regionFd < 0) return errnoStatus(errno, "shm: memfd_create for the host region");
    void* m = ftruncate(regionFd, static_cast<off_t>(regionBytes_)) == 0
                  ? mmap(nullptr, regionBytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, regionFd, 0)
                  : MAP_FAILED;
    if (m == MAP_FAILED) {
      Status st = errnoStatus(errno, "shm: a %s host region", humanBytes(regionBytes_).c_str());
      ::close(regionFd);
      return st;
    }
    region_ = m;
  }
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) ::close(fd);
    }
  } regionFdCloser{regionFd};  // the messages in flight hold their own references
  for (auto& pr : pairs) {
    if (me > pr.peer) continue;
    int fd = memfd_create("hetcomm-shm", MFD_CLOEXEC);
    if (fd < 0) return errnoStatus(errno, "shm: memfd_create");
    if (ftruncate(fd, static_cast<off_t>(segBytes)) != 0) {
      Status st = errnoStatus(errno, "shm: cannot size a segment to %s", humanBytes(segBytes).c_str());
      ::close(fd);
      return st;
    }
    // Populated now, at init: a page first touched by a message costs a fault (tens of microseconds on a
    // paravirtualised guest), and the first trip of small messages around the rings would pay hundreds of them.
    void* m = mmap(nullptr, segBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) {
      Status st = errnoStatus(errno, "shm: mmap of a %s segment", humanBytes(segBytes).c_str());
      ::close(fd);
      return st;
    }
    pr.seg = new (m) Segment();
    pr.seg->canRead[0].store(-1);
    pr.seg->canRead[1].store(-1);
    pr.seg->magic = kSegMagic;
    SegMsg msg{cfg.commId, me, pr.peer};
    iovec iov{&msg, sizeof(msg)};
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
    const int fds[2] = {fd, regionFd};
    const size_t nfds = regionFd >= 0 ? 2 : 1;
    socklen_t len;
    sockaddr_un to = notifyAddress(pr.blob.nonce, pr.peer, &len);
    msghdr mh{};
    mh.msg_name = &to;
    mh.msg_namelen = len;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    while (::sendmsg(impl_->notifyFd, &mh, MSG_NOSIGNAL) < 0) {
      if ((errno != EAGAIN && errno != EINTR) || deadline.expired()) {
        Status st = errnoStatus(errno, "shm: handing rank %d its segment", pr.peer);
        ::close(fd);
        return st;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ::close(fd);  // the message in flight holds its own reference
  }
  // Receive the segments of our lower peers (they may still be creating them).
  size_t missing = 0;
  for (auto& pr : pairs) missing += me > pr.peer;
  while (missing > 0) {
    SegMsg msg{};
    iovec iov{&msg, sizeof(msg)};
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(impl_->notifyFd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) return errnoStatus(errno, "shm: receiving segments");
      if (deadline.expired()) {
        std::string who;
        for (const auto& pr : pairs)
          if (pr.peer < me && !pr.seg) who += (who.empty() ? "rank " : ", rank ") + std::to_string(pr.peer);
        return timeoutError("shm: %s did not hand rank %d the shared segment in time (HETCOMM_TIMEOUT)", who.c_str(),
                            me);
      }
      pollfd p{impl_->notifyFd, POLLIN, 0};
      ::poll(&p, 1, std::min(100, std::max(0, deadline.msLeft())));
      continue;
    }
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    if (!cm || cm->cmsg_type != SCM_RIGHTS) continue;  // a wake-up, not a segment
    int fds[2] = {-1, -1};
    const size_t nfds = std::min<size_t>(2, (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    std::memcpy(fds, CMSG_DATA(cm), nfds * sizeof(int));
    const int fd = fds[0];
    CloseFd extra{fds[1]};
    if (n != sizeof(msg) || nfds == 0) {
      if (fd >= 0) ::close(fd);
      continue;
    }
    auto it = std::find_if(pairs.begin(), pairs.end(), [&](const Pair& q) {
      return q.peer == msg.lo && msg.hi == me && msg.commId == cfg.commId && !q.seg;
    });
    struct stat st {};
    if (it == pairs.end() || fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != segBytes) {
      ::close(fd);  // not ours (another communicator's, or malformed)
      continue;
    }
    void* m = mmap(nullptr, segBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);  // as above
    ::close(fd);
    if (m == MAP_FAILED) return errnoStatus(errno, "shm: mmap of the segment from rank %d", msg.lo);
    it->seg = static_cast<Segment*>(m);
    if (it->seg->magic != kSegMagic) return remoteError("shm: rank %d sent a malformed segment", msg.lo);
    if (wantRegion && msg.lo == lowest && extra.fd >= 0 && !region_) {
      struct stat rs {};
      if (fstat(extra.fd, &rs) != 0 || static_cast<size_t>(rs.st_size) != regionBytes_)
        return remoteError("shm: rank %d's host region is not the %s this rank expects (do all ranks run the same "
                           "hetcomm?)",
                           lowest, humanBytes(regionBytes_).c_str());
      void* r = mmap(nullptr, regionBytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, extra.fd, 0);
      if (r == MAP_FAILED) return errnoStatus(errno, "shm: mmap of the host region from rank %d", lowest);
      region_ = r;
    }
    --missing;
  }
  if (wantRegion && !region_)
    return remoteError("shm: rank %d handed rank %d its segment without the host region both were to share", lowest,
                       me);
  // Each side tests whether it can read the other's memory (cross-memory attach), and whether that pays on this
  // machine, and publishes the answer: the reader does the copy, so its answer decides how the peer sends.
  for (auto& pr : pairs) {
    const int side = me < pr.peer ? 0 : 1;
    const bool read = attachChosen() && probeCrossMemoryAttach(pr.blob.pid, pr.blob.probeAddr);
    pr.seg->canRead[side].store(read ? 1 : 0);
  }
  for (auto& pr : pairs) {
    const int other = me < pr.peer ? 1 : 0;
    while (pr.seg->canRead[other].load(std::memory_order_acquire) < 0) {
      if (deadline.expired()) return timeoutError("shm: rank %d did not map its segment in time", pr.peer);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  for (auto& pr : pairs) {
    const int side = me < pr.peer ? 0 : 1;
    int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pr.blob.pid, 0));
    socklen_t len;
    sockaddr_un peerAddr = notifyAddress(pr.blob.nonce, pr.peer, &len);
    auto c = std::make_unique<ShmConnection>(impl_.get(), me, pr.peer, side, pr.seg, segBytes, pr.blob.pid,
                                             /*cmaOut=*/pr.seg->canRead[1 - side].load() == 1,
                                             /*cmaIn=*/pr.seg->canRead[side].load() == 1, peerAddr, len, pidfd);
    if (pidfd >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = c.get();
      epoll_ctl(epollFd_, EPOLL_CTL_ADD, pidfd, &ev);
    }
    impl_->conns.push_back(c.get());
    HC_TRACE(Shm, "shm: %s", c->describe().c_str());
    conns[pr.peer] = std::move(c);
  }
  return conns;
}

Status ShmTransport::progress() {
  // A peer that exits makes its pidfd readable: look now and then (a system call), not on every pass. The engine
  // also looks before it sleeps, and its sleep ends when one becomes readable.
  if (++impl_->passes % kClockEvery == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= impl_->nextExitCheck) {
      impl_->nextExitCheck = now + kExitCheckEvery;
      impl_->checkExits();
    }
  }
  bool moved = true;
  while (moved) {
    moved = false;
    for (ShmConnection* c : impl_->conns) moved = c->progress() || moved;
  }
  return okStatus();
}

bool ShmTransport::Impl::checkExits() {
  epoll_event evs[16];
  int n = epoll_wait(epollFd, evs, 16, 0);
  bool any = false;
  for (int i = 0; i < n; ++i)
    if (evs[i].data.ptr) {
      static_cast<ShmConnection*>(evs[i].data.ptr)->peerExited();
      any = true;
    }
  return any;
}

bool ShmTransport::armForSleep() {
  // Take the wake-up datagrams, or one left behind would end the next sleep at once. One that came means a peer
  // made progress possible since the last pass (it read from a ring this side found full, say): not ready to
  // sleep, pass again. Dropping it and sleeping would lose that wake-up.
  char buf[64];
  bool woken = false;
  while (::recv(impl_->notifyFd, buf, sizeof(buf), MSG_DONTWAIT) > 0) woken = true;
  if (woken) return false;
  // A peer found gone failed its connection's requests just now: a pass must see that before the engine sleeps
  // (else the operation waiting on it fails only when the sleep times out, up to a second later).
  if (impl_->checkExits()) return false;
  // Raise the wake-up flags, then look once more: a peer may have written before it saw them.
  bool ready = true;
  for (ShmConnection* c : impl_->conns)
    if (c->armAndRecheck()) ready = false;
  return ready;
}

Status readPeerFramesForTesting(std::span<const std::byte> ring, std::span<const size_t> receives) {
  if (ring.size() > kRingBytes)
    return invalidArgument("shm: %zu bytes do not fit a ring (%zu)", ring.size(), kRingBytes);
  void* mem = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return errnoStatus(errno, "shm: mmap of a test segment");
  auto* seg = new (mem) Segment;  // fresh anonymous memory is zero: touch only the pages the input uses
  seg->magic = kSegMagic;
  Ring& in = seg->ring[1];  // side 0 reads ring[1]
  std::memcpy(in.data, ring.data(), ring.size());
  in.head.store(ring.size());
  // Before the connection: on every way out it fails what is still pending in them.
  std::vector<std::vector<std::byte>> bufs;
  std::deque<Request> reqs;
  ShmTransport::Impl impl;  // no epoll set, no wake-up socket: a lone connection
  sockaddr_un nowhere{};
  // The peer is this process: a cross-memory attach frame reads this process's memory, which the kernel checks.
  auto conn = std::make_unique<ShmConnection>(&impl, 0, 1, 0, seg, sizeof(Segment), ::getpid(), false, true, nowhere,
                                              socklen_t{0}, -1);
  for (size_t i = 0; i < receives.size(); ++i) {
    bufs.emplace_back(receives[i]);
    HC_TRY(conn->irecv(reqs.emplace_back(), bufs.back(), i));
  }
  while (conn->progress()) {
  }
  // A receive for a tag nobody sent fails at once on a broken connection, with its reason.
  Request& probe = reqs.emplace_back();
  HC_TRY(conn->irecv(probe, {}, ~uint64_t{0}));
  Status why = probe.failed() ? probe.error : okStatus();
  conn.reset();  // fails what is pending; unmaps the segment
  return why;
}

}  // namespace hetcomm::transport::shm
