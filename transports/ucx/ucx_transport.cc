#include "transports/ucx/ucx_transport.h"

#include <sys/epoll.h>
#include <sys/syscall.h>
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "common/strings.h"
#include "transports/blob.h"

namespace hetcomm::transport::ucx {

namespace {

constexpr unsigned kAmId = 0x4843;  // one handler for every message; the header's kind tells them apart
// Above this size UCX uses rendezvous on every transport it has (its own thresholds are lower), so the message
// waits in the sender's memory until the receive is posted.
constexpr size_t kSurelyRendezvousBytes = 256 << 10;
// How long the destructor waits for endpoints to flush what was sent before it tears the worker down.
constexpr double kCloseFlushSec = 2;

struct AmHeader {
  static constexpr uint32_t kMagic = 0x41554348;  // "HCUA"
  enum Kind : uint16_t { kData = 0, kAbort = 1, kHello = 2 };
  uint32_t magic = kMagic;
  uint16_t kind = kData;
  uint16_t reserved = 0;
  uint32_t src = 0;
  uint32_t dst = 0;
  uint64_t commId = 0;
  uint64_t tag = 0;
};
static_assert(sizeof(AmHeader) == 32);

std::string ucsError(ucs_status_t s) { return ucs_status_string(s); }

// ---- the process-wide UCP context: slow to create (it loads every UCT component), shared by every worker ----
// UCX's own warnings and errors ("Endpoint timeout", "Input/output error" when a peer dies) go to hetcomm's log at
// INFO, as hetcomm's own message already says what failed and why: a dead peer costs the user one clear line, not
// ten of UCX's. UCX_LOG_LEVEL set by the user keeps UCX's own printing.
ucs_log_func_rc_t ucxLogToHetcomm(const char* file, unsigned line, const char* function, ucs_log_level_t level,
                                  const ucs_log_component_config_t*, const char* message, va_list ap) {
  if (level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE;  // UCX prints these only when asked to
  char text[512];
  std::vsnprintf(text, sizeof(text), message, ap);
  HC_INFO(Net, "ucx %s (%s:%u %s): %s", level <= UCS_LOG_LEVEL_ERROR ? "error" : "warning", file, line, function, text);
  return UCS_LOG_FUNC_RC_STOP;
}

void routeUcxLogs() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!std::getenv("UCX_LOG_LEVEL")) ucs_log_push_handler(ucxLogToHetcomm);
  });
}

class SharedContext {
 public:
  static Result<std::shared_ptr<SharedContext>> get() {
    static std::mutex mu;
    static std::weak_ptr<SharedContext> current;
    std::lock_guard<std::mutex> lock(mu);
    if (auto c = current.lock()) return c;
    ucp_config_t* cfg = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &cfg);
    if (s != UCS_OK) return systemError("ucx: reading UCX's configuration (UCX_* variables): %s", ucsError(s).c_str());
    // UCX's keep-alive declares a peer dead when its worker has not been progressed for a while, which an
    // oversubscribed rank (several ranks per core) easily fails while it is healthy. A dead process still fails
    // its endpoints at once (its sockets close; same-host peers are watched through their pidfd) and a hung one
    // meets HETCOMM_TIMEOUT, as with the tcp transport. UCX_KEEPALIVE_INTERVAL set by the user wins.
    if (!std::getenv("UCX_KEEPALIVE_INTERVAL")) ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", "inf");
    routeUcxLogs();
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1;  // workers of several communicators may be created from several threads
    params.name = "hetcomm";
    ucp_context_h ctx = nullptr;
    s = ucp_init(&params, cfg, &ctx);
    ucp_config_release(cfg);
    if (s != UCS_OK)
      return systemError("ucx: ucp_init failed: %s (UCX_TLS=%s)", ucsError(s).c_str(), allowedTransports().c_str());
    auto c = std::shared_ptr<SharedContext>(new SharedContext(ctx, transportsOf(ctx)));
    current = c;
    return c;
  }
  ~SharedContext() { ucp_cleanup(ctx_); }
  ucp_context_h handle() const { return ctx_; }
  // The UCT transports UCX opened ("tcp", "posix", "rc_mlx5"), each once.
  const std::vector<std::string>& transports() const { return tls_; }
  // Shared memory cannot report a dead peer, so UCX refuses peer-failure handling over it; with nothing else,
  // endpoints go without (and the transport watches same-host peers through their pidfd).
  bool sharedMemoryOnly() const {
    return std::all_of(tls_.begin(), tls_.end(), [](const std::string& t) {
      return t == "self" || t == "posix" || t == "sysv" || t == "cma" || t == "knem" || t == "xpmem";
    });
  }

 private:
  SharedContext(ucp_context_h ctx, std::vector<std::string> tls) : ctx_(ctx), tls_(std::move(tls)) {}

  // UCX has no query for them; its info dump lists one "resource N : md M dev D flags -- tl/device" line each.
  static std::vector<std::string> transportsOf(ucp_context_h ctx) {
    char* text = nullptr;
    size_t size = 0;
    FILE* f = open_memstream(&text, &size);
    if (!f) return {};
    ucp_context_print_info(ctx, f);
    std::fclose(f);
    std::vector<std::string> tls;
    for (const auto& line : split(std::string_view(text, size), '\n')) {
      auto dash = line.find("-- ");
      if (line.find("resource") == std::string::npos || dash == std::string::npos) continue;
      std::string tl = line.substr(dash + 3, line.find('/', dash) - dash - 3);
      if (!tl.empty() && std::find(tls.begin(), tls.end(), tl) == tls.end()) tls.push_back(tl);
    }
    std::free(text);
    return tls;
  }

  ucp_context_h ctx_;
  std::vector<std::string> tls_;
};

// ---- blob: "key=value" lines, as the TCP transport's ----
struct Blob {
  std::string host;
  int pid = 0;
  crypto::Nonce nonce{};
  std::vector<uint8_t> address;  // the UCP worker address
  crypto::Mac addressMac{};      // addressMac() of it
};

// UCX trusts a worker address completely: a garbled one makes ucp_ep_create read past its end or assert. The
// address therefore travels with an HMAC under the job secret, checked before UCX sees it.
crypto::Mac addressMac(const crypto::Secret& secret, const crypto::Nonce& nonce, std::span<const uint8_t> address) {
  std::vector<uint8_t> msg(nonce.begin(), nonce.end());
  static constexpr std::string_view kLabel = "ucx-address";
  msg.insert(msg.end(), kLabel.begin(), kLabel.end());
  msg.insert(msg.end(), address.begin(), address.end());
  return crypto::hmacSha256(secret, msg);
}

std::vector<std::byte> encodeBlob(const Blob& b) {
  return TextBlob("hcucx", 1)
      .put("host", b.host)
      .put("pid", std::to_string(b.pid))
      .put("nonce", toHex(b.nonce.data(), b.nonce.size()))
      .put("addr", toHex(b.address.data(), b.address.size()))
      .put("addrmac", toHex(b.addressMac.data(), b.addressMac.size()))
      .bytes();
}

Result<Blob> decodeBlob(std::span<const std::byte> raw, int peer) {
  const TextBlob t = TextBlob::parse(raw, "hcucx", 1);
  Blob b;
  bool nonce = false, addr = false, mac = false;
  if (const std::string* v = t.find("host")) b.host = *v;
  if (const std::string* v = t.find("pid")) b.pid = std::atoi(v->c_str());
  if (const std::string* v = t.find("nonce")) nonce = fromHex(*v, b.nonce.data(), b.nonce.size());
  if (const std::string* v = t.find("addrmac")) mac = fromHex(*v, b.addressMac.data(), b.addressMac.size());
  if (const std::string* v = t.find("addr"); v && !v->empty() && v->size() % 2 == 0 && v->size() <= (1 << 20)) {
    b.address.resize(v->size() / 2);
    addr = fromHex(*v, b.address.data(), b.address.size());
  }
  if (!t.ok() || !nonce || !addr || !mac || b.host.empty())
    return remoteError("ucx: rank %d's address blob is malformed (%zu bytes)", peer, raw.size());
  return b;
}

int openPidfd(int pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

class UcxConnection;

// One UCX operation of ours in flight; the callback that ends it frees it. `req` goes null when the connection
// is closed first, so a late callback touches nothing of the caller's.
struct PendingOp {
  UcxConnection* conn = nullptr;
  Request* req = nullptr;
  void* ucxRequest = nullptr;
  UcxTransport::Impl* transport = nullptr;
  bool isRecv = false;
  size_t bytes = 0;
  AmHeader hdr;      // a send's header must live until the send completes
  std::string text;  // an abort's reason, likewise
};

struct UcxTransport::Impl {
  Config cfg;
  std::shared_ptr<SharedContext> context;
  ucp_worker_h worker = nullptr;
  int efd = -1;      // the worker's event fd
  int epollFd = -1;  // efd plus the pidfds of peers on this host: what the engine sleeps on
  crypto::Nonce nonce{};
  std::vector<UcxConnection*> byRank;    // live connections, for dispatching arrivals
  std::vector<UcxConnection*> deferred;  // connections with work that may not run inside a UCX callback
  std::vector<void*> closing;            // endpoint close requests in flight
  int opsInFlight = 0;                   // PendingOps UCX still holds; the worker may not go before them
  bool setupFailed = false;              // connectAll failed: UCX may still hold half-made endpoints
  // connectAll's hello bookkeeping
  std::vector<char> helloOk;
  std::string helloError;

  ~Impl();
  void progressWorker();
  void runDeferred();
  // Fails the connections of peers on this host whose process is gone; true when it failed any.
  bool checkPeersAlive();
  void defer(UcxConnection* c);
};

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<UcxTransport::Impl> t, int peer, int pidfd, int peerPid)
      : t_(std::move(t)), peer_(peer), pidfd_(pidfd), peerPid_(peerPid) {}
  ~UcxConnection() override {
    close(invalidUsage("rank %d closed its UCX connection to rank %d", t_->cfg.rank, peer_));
  }

  int peer() const override { return peer_; }
  Status isend(Request& req, std::span<const std::byte> buf, uint64_t tag) override;
  Status irecv(Request& req, std::span<std::byte> buf, uint64_t tag) override;
  void sendAbort(std::string_view reason) noexcept override;
  void close(const Status& why) noexcept override;
  std::string describe() const override {
    return format("r%d->r%d/ucx(%s)", t_->cfg.rank, peer_, allowedTransports().c_str());
  }
  bool lateReceiveIsFree(size_t bytes) const override { return bytes >= kSurelyRendezvousBytes; }

  // From the active-message callback (inside ucp_worker_progress).
  ucs_status_t onData(uint64_t tag, void* data, size_t length, uint64_t attrs);
  void onAbort(std::string reason) { failLater(remoteError("rank %d aborted: %s", peer_, reason.c_str())); }
  void onEndpointError(ucs_status_t s) {
    endpointFailed_ = true;
    failLater(remoteError("rank %d: the UCX endpoint to it failed (%s): it exited or its host is unreachable", peer_,
                          ucsError(s).c_str()));
  }
  void onPeerExited() {
    endpointFailed_ = true;
    failLater(
        remoteError("rank %d (pid %d, same host) exited while rank %d still needed it", peer_, peerPid_, t_->cfg.rank));
  }
  // After ucp_worker_progress: start rendezvous fetches and apply failures noted in callbacks.
  void runDeferred();
  void opDone(PendingOp* op, ucs_status_t s, size_t length);
  int pidfd() const { return pidfd_; }
  void setEndpoint(ucp_ep_h ep, bool peerFailureMode) {
    ep_ = ep;
    peerFailureMode_ = peerFailureMode;
  }
  // connectAll succeeded: the endpoint carried both hellos (see close() for why this matters).
  void setEstablished() { established_ = true; }
  // connectAll's proof of the secret, sent like data but with its own kind.
  void sendHello(Request& req, const crypto::Mac& mac);

 private:
  struct Posted {
    Request* req;
    std::span<std::byte> buf;
  };
  struct Early {
    size_t total = 0;
    void* desc = nullptr;  // UCX's descriptor: rendezvous, or eager data UCX keeps for us
    bool rndv = false;
    std::vector<std::byte> copy;  // eager data UCX could not keep
  };
  struct Fetch {
    Request* req;
    std::span<std::byte> buf;
    void* desc;
  };

  void failLater(Status why) {
    if (!pendingFailure_.ok() || closed_) return;
    pendingFailure_ = std::move(why);
    t_->defer(this);
  }
  void startFetch(Request& req, std::span<std::byte> buf, void* desc);
  void release(Early& e) {
    if (e.desc) ucp_am_data_release(t_->worker, e.desc);
    e.desc = nullptr;
  }
  // Starts an active message; the request finishes now, later through onSendDone, or fails.
  void send(PendingOp* op, uint16_t kind, uint64_t tag, const void* data, size_t bytes, uint32_t flags = 0);

  std::shared_ptr<UcxTransport::Impl> t_;
  int peer_;
  ucp_ep_h ep_ = nullptr;
  bool peerFailureMode_ = false;  // the endpoint has UCP_ERR_HANDLING_MODE_PEER
  bool established_ = false;      // connectAll succeeded (see close())
  int pidfd_;
  int peerPid_;
  bool closed_ = false;
  bool endpointFailed_ = false;  // UCX reported the endpoint failed, or the peer's process is gone
  Status broken_;          // why the connection is unusable (closed_ set with it)
  Status pendingFailure_;  // noted inside a callback, applied by runDeferred()
  std::unordered_map<uint64_t, Posted> posted_;
  std::unordered_map<uint64_t, Early> early_;
  std::vector<Fetch> fetches_;  // rendezvous arrivals whose receive is posted, to start outside the callback
  std::unordered_set<PendingOp*> ops_;
};

namespace {

PendingOp* newOp(UcxTransport::Impl* t, UcxConnection* conn, Request* req, bool isRecv, size_t bytes) {
  auto* op = new PendingOp;
  op->transport = t;
  op->conn = conn;
  op->req = req;
  op->isRecv = isRecv;
  op->bytes = bytes;
  return op;
}

// Completion of sends and rendezvous receives alike. The request handle is UCX's; op is ours.
void onSendDone(void* request, ucs_status_t status, void* user) {
  auto* op = static_cast<PendingOp*>(user);
  --op->transport->opsInFlight;
  if (op->conn) op->conn->opDone(op, status, op->bytes);
  ucp_request_free(request);
  delete op;
}

void onRecvDone(void* request, ucs_status_t status, size_t length, void* user) {
  auto* op = static_cast<PendingOp*>(user);
  --op->transport->opsInFlight;
  if (op->conn) op->conn->opDone(op, status, length);
  ucp_request_free(request);
  delete op;
}

ucs_status_t onActiveMessage(void* arg, const void* header, size_t headerLength, void* data, size_t length,
                             const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport::Impl*>(arg);
  AmHeader h;
  if (headerLength != sizeof(h)) return UCS_OK;  // not ours: drop it (a rendezvous is dropped too)
  std::memcpy(&h, header, sizeof(h));
  if (h.magic != AmHeader::kMagic || h.commId != t->cfg.commId || h.dst != static_cast<uint32_t>(t->cfg.rank) ||
      h.src >= t->byRank.size())
    return UCS_OK;
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  if (h.kind == AmHeader::kHello) {
    if (rndv || length != crypto::kMacBytes || t->helloOk.empty()) return UCS_OK;
    crypto::Mac mac;
    std::memcpy(mac.data(), data, mac.size());
    crypto::Mac want = crypto::prove(t->cfg.secret, t->nonce, "ucx-hello", h.src, h.dst, t->cfg.commId);
    if (crypto::macEqual(mac, want))
      t->helloOk[h.src] = 1;
    else if (t->helloError.empty())
      t->helloError =
          format("ucx: rank %u's hello failed authentication: is HETCOMM_SECRET the same everywhere?", h.src);
    return UCS_OK;
  }
  UcxConnection* c = t->byRank[h.src];
  if (!c) return UCS_OK;
  if (h.kind == AmHeader::kAbort) {
    if (!rndv) c->onAbort(std::string(static_cast<const char*>(data), std::min<size_t>(length, 4096)));
    return UCS_OK;
  }
  return c->onData(h.tag, data, length, param->recv_attr);
}

void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<UcxConnection*>(arg)->onEndpointError(status);
}

ucp_request_param_t sendParams(PendingOp* op) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = onSendDone;
  p.user_data = op;
  return p;
}

}  // namespace

// ---- connection ----

Status UcxConnection::isend(Request& req, std::span<const std::byte> buf, uint64_t tag) {
  req.state = Request::State::kPending;
  if (closed_) {
    req.fail(broken_);
    return okStatus();
  }
  send(newOp(t_.get(), this, &req, false, buf.size()), AmHeader::kData, tag, buf.data(), buf.size());
  return okStatus();
}

void UcxConnection::sendHello(Request& req, const crypto::Mac& mac) {
  req.state = Request::State::kPending;
  PendingOp* op = newOp(t_.get(), this, &req, false, mac.size());
  op->text.assign(reinterpret_cast<const char*>(mac.data()), mac.size());
  send(op, AmHeader::kHello, 0, op->text.data(), op->text.size(), UCP_AM_SEND_FLAG_EAGER);
}

void UcxConnection::send(PendingOp* op, uint16_t kind, uint64_t tag, const void* data, size_t bytes, uint32_t flags) {
  op->hdr.kind = kind;
  op->hdr.src = static_cast<uint32_t>(t_->cfg.rank);
  op->hdr.dst = static_cast<uint32_t>(peer_);
  op->hdr.commId = t_->cfg.commId;
  op->hdr.tag = tag;
  ucp_request_param_t p = sendParams(op);
  if (flags) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flags;
  }
  ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kAmId, &op->hdr, sizeof(op->hdr), data, bytes, &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
    op->ucxRequest = r;
    ++t_->opsInFlight;
    if (op->conn) ops_.insert(op);
    return;
  }
  if (op->req) {
    if (r == nullptr)
      op->req->succeed(bytes);
    else
      op->req->fail(remoteError("ucx: sending %zu bytes to rank %d failed: %s", bytes, peer_,
                                ucsError(UCS_PTR_STATUS(r)).c_str()));
  }
  delete op;
}

Status UcxConnection::irecv(Request& req, std::span<std::byte> buf, uint64_t tag) {
  req.state = Request::State::kPending;
  if (closed_) {
    req.fail(broken_);
    return okStatus();
  }
  auto it = early_.find(tag);
  if (it == early_.end()) {
    // A second receive would replace the first, which would then never complete.
    if (posted_.count(tag))
      return internalError("ucx: a receive with tag %#llx from rank %d is already posted", (unsigned long long)tag,
                           peer_);
    posted_[tag] = Posted{&req, buf};
    return okStatus();
  }
  Early e = std::move(it->second);
  early_.erase(it);
  if (e.total != buf.size()) {
    release(e);
    req.fail(sizeMismatch(peer_, e.total, tag, t_->cfg.rank, buf.size()));
  } else if (e.rndv) {
    startFetch(req, buf, e.desc);
  } else {
    if (e.total) std::memcpy(buf.data(), e.desc ? e.desc : e.copy.data(), e.total);
    release(e);
    req.succeed(e.total);
  }
  return okStatus();
}

ucs_status_t UcxConnection::onData(uint64_t tag, void* data, size_t length, uint64_t attrs) {
  if (closed_) return UCS_OK;
  const bool rndv = attrs & UCP_AM_RECV_ATTR_FLAG_RNDV;
  auto it = posted_.find(tag);
  if (it != posted_.end()) {
    Posted p = it->second;
    posted_.erase(it);
    if (length != p.buf.size()) {
      p.req->fail(sizeMismatch(peer_, length, tag, t_->cfg.rank, p.buf.size()));
      return UCS_OK;  // a rendezvous is dropped: the sender's send completes
    }
    if (rndv) {
      fetches_.push_back(Fetch{p.req, p.buf, data});
      t_->defer(this);
      return UCS_INPROGRESS;
    }
    if (length) std::memcpy(p.buf.data(), data, length);
    p.req->succeed(length);
    return UCS_OK;
  }
  auto [at, fresh] = early_.try_emplace(tag);
  if (!fresh) {  // tags are unique until received: a second message would replace the first, which was never read
    failLater(remoteError("rank %d sent a second message with tag %#llx before the first was received", peer_,
                          (unsigned long long)tag));
    return UCS_OK;  // UCX frees this one; close() releases the first
  }
  Early& e = at->second;
  e.total = length;
  if (rndv || (attrs & UCP_AM_RECV_ATTR_FLAG_DATA)) {
    e.desc = data;
    e.rndv = rndv;
    return UCS_INPROGRESS;
  }
  const auto* bytes = static_cast<const std::byte*>(data);
  e.copy.assign(bytes, bytes + length);
  return UCS_OK;
}

void UcxConnection::startFetch(Request& req, std::span<std::byte> buf, void* desc) {
  PendingOp* op = newOp(t_.get(), this, &req, true, buf.size());
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = onRecvDone;
  p.user_data = op;
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(t_->worker, desc, buf.data(), buf.size(), &p);
  if (r == nullptr) {
    req.succeed(buf.size());
    delete op;
  } else if (UCS_PTR_IS_ERR(r)) {
    req.fail(remoteError("ucx: receiving %zu bytes from rank %d failed: %s", buf.size(), peer_,
                         ucsError(UCS_PTR_STATUS(r)).c_str()));
    delete op;
  } else {
    op->ucxRequest = r;
    ++t_->opsInFlight;
    ops_.insert(op);
  }
}

void UcxConnection::opDone(PendingOp* op, ucs_status_t s, size_t length) {
  ops_.erase(op);
  if (!op->req) return;
  if (s == UCS_OK)
    op->req->succeed(length);
  else
    op->req->fail(remoteError("ucx: %s %zu bytes %s rank %d failed: %s", op->isRecv ? "receiving" : "sending",
                              op->bytes, op->isRecv ? "from" : "to", peer_, ucsError(s).c_str()));
}

void UcxConnection::runDeferred() {
  if (!pendingFailure_.ok()) {
    Status why = std::move(pendingFailure_);
    close(why);
    return;
  }
  auto fetches = std::move(fetches_);
  fetches_.clear();
  for (auto& f : fetches) startFetch(*f.req, f.buf, f.desc);
}

void UcxConnection::sendAbort(std::string_view reason) noexcept {
  if (closed_) return;
  // Nobody waits for it (no connection, no request): the callback frees it, and the endpoint's flush at close
  // delivers it.
  try {
    auto* op = newOp(t_.get(), nullptr, nullptr, false, 0);
    op->text = std::string(reason.substr(0, 4096));
    send(op, AmHeader::kAbort, 0, op->text.data(), op->text.size(), UCP_AM_SEND_FLAG_EAGER);
  } catch (...) {  // out of memory: the peer learns from the closed endpoint instead
  }
}

void UcxConnection::close(const Status& why) noexcept {
  if (closed_) return;
  closed_ = true;
  broken_ = why;
  for (auto& [tag, p] : posted_) p.req->fail(why);
  posted_.clear();
  for (auto& f : fetches_) {
    f.req->fail(why);
    ucp_am_data_release(t_->worker, f.desc);
  }
  fetches_.clear();
  for (auto& [tag, e] : early_) release(e);
  early_.clear();
  for (PendingOp* op : ops_) {
    if (op->req) op->req->fail(why);
    op->req = nullptr;
    op->conn = nullptr;
    if (op->isRecv) ucp_request_cancel(t_->worker, op->ucxRequest);
  }
  ops_.clear();
  if (static_cast<size_t>(peer_) < t_->byRank.size() && t_->byRank[peer_] == this) t_->byRank[peer_] = nullptr;
  std::erase(t_->deferred, this);
  if (pidfd_ >= 0) {
    epoll_ctl(t_->epollFd, EPOLL_CTL_DEL, pidfd_, nullptr);
    ::close(pidfd_);
    pidfd_ = -1;
  }
  // Only an endpoint UCX reported failed, or whose peer process is gone, is force-closed (which needs peer-failure
  // handling at both ends); every other one is closed gracefully, flushing what it sent (an eager send completes
  // once UCX has copied it, before the peer has it), bounded by ~Impl. Forcing a live peer's busy endpoint broke
  // the peer's UCX 1.13 over TCP: a rendezvous send to us still in flight there was released while its TCP lane
  // held the completion, and the lane's purge then aborted the peer's process ("comp->count > 0" in
  // uct_iface.h, tcp_ep.c "PUT_TX_WAITING_ACK"): about 1 survivor in 100 of tests/integration/fault_matrix.sh's
  // kill trials, none in 720 since. Never force during set-up either: an endpoint force-closed while UCX's
  // wire-up with the peer is still in flight leaves a wire-up reply queued on its TCP lane, and UCX 1.13 then
  // asserts ("got REP message") in ucp_worker_destroy and aborts the process.
  if (!ep_) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = peerFailureMode_ && established_ && endpointFailed_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) t_->closing.push_back(r);
  ep_ = nullptr;
}

// ---- transport ----

UcxTransport::Impl::~Impl() {
  // Let endpoint closes finish (they flush sends to live peers), bounded: a dead peer must not hold us here.
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kCloseFlushSec);
  while (!closing.empty() && std::chrono::steady_clock::now() < until) {
    ucp_worker_progress(worker);
    std::erase_if(closing, [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
  }
  // UCX aborts the process when a worker goes with requests still out (a rendezvous receive cannot be cancelled,
  // a flush to a peer that stopped progressing never ends): after a failure, leave such a worker to the process.
  // After a failed set-up likewise: UCX 1.13 crashed destroying a worker whose endpoints to an unreachable peer
  // were half made (it purged their pending wire-up requests).
  if (!closing.empty() || opsInFlight > 0 || setupFailed) {
    HC_TRACE(Init, "ucx: %zu endpoint close(s) and %d operation(s) still out at teardown%s; the worker is left behind",
             closing.size(), opsInFlight, setupFailed ? ", after a failed set-up" : "");
    // And its context with it, never cleaned up under the worker. Both are held from a static, so a leak checker
    // sees them kept on purpose.
    struct LeftBehind {
      std::shared_ptr<SharedContext> context;
      ucp_worker_h worker;
    };
    static auto* leftBehind = new std::vector<LeftBehind>;
    static std::mutex leftMu;
    std::lock_guard<std::mutex> lock(leftMu);
    leftBehind->push_back({context, worker});
  } else if (worker) {
    ucp_worker_destroy(worker);
  }
  if (epollFd >= 0) ::close(epollFd);
}

void UcxTransport::Impl::defer(UcxConnection* c) {
  if (std::find(deferred.begin(), deferred.end(), c) == deferred.end()) deferred.push_back(c);
}

void UcxTransport::Impl::progressWorker() {
  // Until UCX has nothing more to do now, bounded so a steady stream cannot keep the engine from the executor.
  for (int i = 0; i < 64 && ucp_worker_progress(worker) != 0; ++i) {
  }
  runDeferred();
}

void UcxTransport::Impl::runDeferred() {
  while (!deferred.empty()) {
    UcxConnection* c = deferred.back();
    deferred.pop_back();
    c->runDeferred();
  }
}

bool UcxTransport::Impl::checkPeersAlive() {
  epoll_event evs[16];
  int n = epoll_wait(epollFd, evs, 16, 0);
  bool failed = false;
  for (int i = 0; i < n; ++i)
    if (evs[i].data.fd != efd)
      for (UcxConnection* c : byRank)
        if (c && c->pidfd() == evs[i].data.fd) {
          c->onPeerExited();
          failed = true;
        }
  runDeferred();
  return failed;
}

Result<std::unique_ptr<UcxTransport>> UcxTransport::create(const Config& config) {
  auto impl = std::make_shared<Impl>();
  impl->cfg = config;
  HC_ASSIGN_OR_RETURN(impl->context, SharedContext::get());
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // init thread first, then the progress engine: never at once
  ucs_status_t s = ucp_worker_create(impl->context->handle(), &wp, &impl->worker);
  if (s != UCS_OK) return systemError("ucx: ucp_worker_create failed: %s", ucsError(s).c_str());
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = kAmId;
  hp.cb = onActiveMessage;
  hp.arg = impl.get();
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  s = ucp_worker_set_am_recv_handler(impl->worker, &hp);
  if (s != UCS_OK) return systemError("ucx: setting the active-message handler failed: %s", ucsError(s).c_str());
  s = ucp_worker_get_efd(impl->worker, &impl->efd);
  if (s != UCS_OK) return systemError("ucx: ucp_worker_get_efd failed: %s", ucsError(s).c_str());
  impl->epollFd = epoll_create1(EPOLL_CLOEXEC);
  if (impl->epollFd < 0) return errnoStatus(errno, "ucx: epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = impl->efd;
  if (epoll_ctl(impl->epollFd, EPOLL_CTL_ADD, impl->efd, &ev) != 0) return errnoStatus(errno, "ucx: epoll_ctl");
  HC_TRY(crypto::randomBytes(impl->nonce));
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

UcxTransport::UcxTransport(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {
  props_.kind = Kind::kUcx;
  props_.name = "ucx(" + allowedTransports() + ")";
  props_.latencyUs = 20;
  props_.bandwidthGBps = 1.25;
}

UcxTransport::~UcxTransport() = default;

int UcxTransport::waitFd() const { return impl_->epollFd; }

Result<std::vector<std::byte>> UcxTransport::listen() {
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  ucs_status_t s = ucp_worker_query(impl_->worker, &attr);
  if (s != UCS_OK) return systemError("ucx: ucp_worker_query failed: %s", ucsError(s).c_str());
  Blob b;
  b.host = impl_->cfg.hostId;
  b.pid = static_cast<int>(getpid());
  b.nonce = impl_->nonce;
  const auto* a = reinterpret_cast<const uint8_t*>(attr.address);
  b.address.assign(a, a + attr.address_length);
  ucp_worker_release_address(impl_->worker, attr.address);
  b.addressMac = addressMac(impl_->cfg.secret, b.nonce, b.address);
  return encodeBlob(b);
}

Result<std::vector<std::unique_ptr<Connection>>> UcxTransport::connectAll(
    const std::vector<std::vector<std::byte>>& blobs, Deadline deadline) {
  Impl& t = *impl_;
  const int n = static_cast<int>(blobs.size());
  const int me = t.cfg.rank;
  t.byRank.assign(n, nullptr);
  t.helloOk.assign(n, 0);
  t.helloError.clear();
  std::vector<Request> sent(n);  // the hellos; declared before conns, whose close() may still fail them
  std::vector<std::unique_ptr<Connection>> conns(n);
  std::vector<Blob> peers(n);
  t.setupFailed = true;  // until every peer has answered
  for (int p = 0; p < n; ++p) {
    if (blobs[p].empty() || p == me) continue;
    HC_ASSIGN_OR_RETURN(peers[p], decodeBlob(blobs[p], p));
    if (!crypto::macEqual(peers[p].addressMac, addressMac(t.cfg.secret, peers[p].nonce, peers[p].address)))
      return remoteError(
          "ucx: rank %d's worker address failed authentication: is HETCOMM_SECRET the same "
          "everywhere? (or the address blob was garbled)",
          p);
  }
  for (int p = 0; p < n; ++p) {
    if (peers[p].address.empty()) continue;
    int pidfd = -1;
    if (peers[p].host == t.cfg.hostId && peers[p].pid > 0) {
      pidfd = openPidfd(peers[p].pid);
      if (pidfd >= 0) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = pidfd;
        epoll_ctl(t.epollFd, EPOLL_CTL_ADD, pidfd, &ev);
      }
    }
    auto* c = new UcxConnection(impl_, p, pidfd, peers[p].pid);
    conns[p].reset(c);
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peers[p].address.data());
    // Peer-failure handling makes UCX fail a dead peer's requests instead of asserting, but rules out its
    // shared-memory transports; with only those, go without (the pidfd reports a dead peer on this host).
    ep.err_mode = t.context->sharedMemoryOnly() ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = onEndpointError;
    ep.err_handler.arg = c;
    ucp_ep_h h = nullptr;
    ucs_status_t s = ucp_ep_create(t.worker, &ep, &h);
    if (s != UCS_OK) {
      // UCX 1.13's TCP transport counts every interface of the peer as reachable and may pick one on a network
      // this host is not on.
      const char* hint = s == UCS_ERR_UNREACHABLE ? ". Where hosts do not all share every network, name the "
                                                    "interfaces of a network they all share in UCX_NET_DEVICES"
                                                  : "";
      return systemError("ucx: rank %d cannot reach rank %d (UCX_TLS=%s): ucp_ep_create: %s%s", me, p,
                         allowedTransports().c_str(), ucsError(s).c_str(), hint);
    }
    c->setEndpoint(h, ep.err_mode == UCP_ERR_HANDLING_MODE_PEER);
    t.byRank[p] = c;
  }
  // Hello: prove the secret to each peer with its own nonce; wait for every peer's proof and for ours to leave.
  for (int p = 0; p < n; ++p)
    if (t.byRank[p])
      t.byRank[p]->sendHello(sent[p], crypto::prove(t.cfg.secret, peers[p].nonce, "ucx-hello", me, p, t.cfg.commId));
  auto allDone = [&]() -> Result<bool> {
    if (!t.helloError.empty()) return remoteError("%s", t.helloError.c_str());
    for (int p = 0; p < n; ++p) {
      if (!t.byRank[p]) {
        if (conns[p]) return remoteError("ucx: the connection from rank %d to rank %d failed during set-up", me, p);
        continue;
      }
      if (sent[p].failed()) return sent[p].error;
      if (!t.helloOk[p] || !sent[p].done()) return false;
    }
    return true;
  };
  while (true) {
    t.progressWorker();
    t.checkPeersAlive();
    HC_ASSIGN_OR_RETURN(bool done, allDone());
    if (done) break;
    if (deadline.expired()) {
      std::string missing;
      for (int p = 0; p < n; ++p)
        if (t.byRank[p] && !t.helloOk[p]) missing += (missing.empty() ? "" : ",") + std::to_string(p);
      return timeoutError("ucx: rank %d timed out connecting; no hello from rank(s) %s (UCX_TLS=%s)", me,
                          missing.c_str(), allowedTransports().c_str());
    }
    if (armForSleep()) {
      epoll_event ev;
      epoll_wait(t.epollFd, &ev, 1, std::min(100, std::max(1, deadline.msLeft())));
    }
  }
  t.helloOk.clear();
  t.setupFailed = false;
  for (auto& c : conns)
    if (c) static_cast<UcxConnection*>(c.get())->setEstablished();
  return conns;
}

Status UcxTransport::progress() {
  impl_->progressWorker();
  return okStatus();
}

bool UcxTransport::armForSleep() {
  Impl& t = *impl_;
  if (t.checkPeersAlive()) return false;  // requests failed: let the engine see them
  if (!t.deferred.empty()) return false;
  ucs_status_t s = ucp_worker_arm(t.worker);
  return s == UCS_OK;  // UCS_ERR_BUSY: events are waiting
}

void deliverForTesting(Transport& transport, std::span<const std::byte> header, std::span<const std::byte> payload) {
  auto& t = dynamic_cast<UcxTransport&>(transport);
  ucp_am_recv_param_t param{};  // eager, and UCX keeps nothing: the data is valid during the call only
  param.recv_attr = 0;
  onActiveMessage(t.impl_.get(), header.data(), header.size(), const_cast<std::byte*>(payload.data()), payload.size(),
                  &param);
}

}  // namespace hetcomm::transport::ucx
