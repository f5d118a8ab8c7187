#include "comm/bootstrap/store.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without including it

#include "comm/bootstrap/store_wire.h"
#include "common/listener_guard.h"
#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::comm {

using namespace store_wire;

namespace asio = boost::asio;
using asio::ip::tcp;

// ---- server ----

struct StoreServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  crypto::Secret secret;
  StoreServer::Limits limits;
  std::map<std::string, std::vector<std::byte>> data;
  // Getters parked until their key is set: each waits on a timer that set() cancels.
  std::multimap<std::string, asio::steady_timer*> waiters;
  std::shared_ptr<int> unauthenticated = std::make_shared<int>(0);  // connections still in their handshake
  uint64_t heldBytes = 0;  // stored values plus requests being read (Limits::maxHeldBytes)
  RefusalLog refusals{"store"};

  void store(const std::string& key, std::vector<std::byte> value) {
    auto it = data.find(key);
    if (it != data.end()) heldBytes -= it->second.size();
    heldBytes += value.size();
    data[key] = std::move(value);
  }

  // Reads a request's value as it arrives, never ahead of it: a header that announces 16 MiB and sends nothing
  // costs nothing. Fails (and the connection closes) past the value limit or the store's budget.
  asio::awaitable<bool> readValue(tcp::socket& sock, uint64_t len, std::vector<std::byte>& value) {
    if (heldBytes + len > limits.maxHeldBytes) co_return false;
    heldBytes += len;  // reserved while it is read; released below (the caller stores it again if it keeps it)
    boost::system::error_code ec;
    constexpr uint64_t kChunk = 64 << 10;
    value.clear();
    while (value.size() < len && !ec) {
      const size_t at = value.size(), n = static_cast<size_t>(std::min<uint64_t>(kChunk, len - at));
      value.resize(at + n);
      co_await asio::async_read(sock, asio::buffer(value.data() + at, n),
                                asio::redirect_error(asio::use_awaitable, ec));
    }
    heldBytes -= len;
    co_return !ec;
  }

  // A get of a key nobody set yet waits until set() wakes it. It also watches its socket: a client that gave up
  // (its deadline passed, it exited) closes the connection, and the parked get must then go and free what it holds,
  // or every abandoned get would keep its coroutine and key until the job ends. Returns false when the get should
  // end: the store shuts down, or the client closed or sent ahead of its reply (clients wait for each reply).
  asio::awaitable<bool> park(tcp::socket& sock, const std::string& key) {
    struct Parked {
      explicit Parked(asio::io_context& io) : timer(io, asio::steady_timer::time_point::max()) {}
      asio::steady_timer timer;
      bool readable = false;
    };
    auto parked = std::make_shared<Parked>(io);  // the socket's handler may run after this coroutine ended
    auto it = waiters.emplace(key, &parked->timer);
    sock.async_wait(tcp::socket::wait_read, [parked](const boost::system::error_code& ec) {
      parked->readable = !ec;
      parked->timer.cancel();
    });
    boost::system::error_code ec;
    co_await parked->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    waiters.erase(it);
    sock.cancel(ec);
    if (!acceptor.is_open() || parked->readable) co_return false;
    co_return true;
  }

  void wake(const std::string& key) {
    auto [lo, hi] = waiters.equal_range(key);
    for (auto it = lo; it != hi; ++it) it->second->cancel();
  }

  // The keys one connection owns (kOwn). When the connection's coroutine ends, for whatever reason, each goes and
  // "<key>/gone" appears in its place, waking whoever waits for it. Not while the store shuts down: then the maps
  // may already be gone (`open` outlives them).
  struct Owned {
    Impl* impl;
    std::shared_ptr<bool> open;
    std::vector<std::string> keys;
    ~Owned() {
      if (!*open) return;
      for (const std::string& key : keys) {
        if (auto it = impl->data.find(key); it != impl->data.end()) {
          impl->heldBytes -= it->second.size();
          impl->data.erase(it);
        }
        impl->store(key + kGoneSuffix, {});
        impl->wake(key + kGoneSuffix);
      }
    }
  };
  std::shared_ptr<bool> open = std::make_shared<bool>(true);

  asio::awaitable<void> serve(tcp::socket sock) {
    boost::system::error_code ec;
    auto redirect = asio::redirect_error(asio::use_awaitable, ec);
    auto remote = sock.remote_endpoint(ec);
    std::string from = ec ? "?" : remote.address().to_string() + ":" + std::to_string(remote.port());
    if (*unauthenticated >= limits.maxUnauthenticated) {
      refusals.refuse(from + ": " + std::to_string(limits.maxUnauthenticated) +
                      " connections already wait to authenticate");
      co_return;
    }
    Unauthenticated pending(unauthenticated);
    HandshakeDeadline<tcp::socket> deadline(io, sock, limits.handshake);  // closing the socket ends the reads
    Hello hello;
    if (!crypto::randomBytes(hello.nonce).ok()) co_return;
    co_await asio::async_write(sock, asio::buffer(&hello, sizeof(hello)), redirect);
    Proof proof;
    if (!ec) co_await asio::async_read(sock, asio::buffer(&proof, sizeof(proof)), redirect);
    if (deadline.expired()) {
      refusals.refuse(from + ": it did not authenticate within " + std::to_string(limits.handshake.count()) + " ms");
      co_return;
    }
    if (ec || proof.magic != kProofMagic) {
      refusals.refuse(from + ": it does not speak the hetcomm store protocol");
      co_return;
    }
    if (!crypto::macEqual(proof.mac, crypto::prove(secret, hello.nonce, "store-client"))) {
      refusals.refuse(from + ": wrong secret (another job, or a stale unique id?)");
      co_return;
    }
    deadline.disarm();
    if (deadline.expired()) co_return;  // it fired just as the proof arrived: the socket is closed
    pending.done();
    // A peer's host that dies without closing (power, kernel panic) ends the connection, and releases what it
    // owns, after about 10 + 3 x 2 s, not the kernel's two hours.
    {
      int fd = sock.native_handle(), on = 1, idle = 10, interval = 2, count = 3;
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
    }
    Owned owned{this, open, {}};
    Welcome welcome;
    welcome.mac = crypto::prove(secret, proof.nonce, "store-server");
    co_await asio::async_write(sock, asio::buffer(&welcome, sizeof(welcome)), redirect);
    while (!ec) {
      ReqHeader h;
      co_await asio::async_read(sock, asio::buffer(&h, sizeof(h)), redirect);
      if (ec) break;
      if (h.keyLen > kMaxKey || h.valueLen > kMaxValue || h.op < kSet || h.op > kLastOp) {
        HC_WARN(
            "store: malformed request from %s (op %u, key %u bytes, value %llu bytes; at most %u and %llu); "
            "closing",
            from.c_str(), h.op, h.keyLen, (unsigned long long)h.valueLen, kMaxKey, (unsigned long long)kMaxValue);
        break;
      }
      std::string key(h.keyLen, '\0');
      co_await asio::async_read(sock, asio::buffer(key), redirect);
      if (ec) break;
      std::vector<std::byte> value;
      if (!co_await readValue(sock, h.valueLen, value)) {
        if (heldBytes + h.valueLen > limits.maxHeldBytes)
          HC_WARN("store: %s asked to store %llu bytes beyond the store's budget (%llu of %llu bytes held); closing",
                  from.c_str(), (unsigned long long)h.valueLen, (unsigned long long)heldBytes,
                  (unsigned long long)limits.maxHeldBytes);
        break;
      }
      std::vector<std::byte> out;
      uint8_t status = kReplyOk;
      if (h.op == kSet || h.op == kOwn) {
        if (h.op == kOwn && std::find(owned.keys.begin(), owned.keys.end(), key) == owned.keys.end())
          owned.keys.push_back(key);
        store(key, std::move(value));
        wake(key);
      } else if (h.op == kTryGet) {
        if (auto it = data.find(key); it != data.end())
          out = it->second;
        else
          status = kReplyMissing;
      } else if (h.op == kCreate) {
        if (data.count(key)) {
          status = kReplyExists;
        } else {
          store(key, std::move(value));
          wake(key);
        }
      } else if (h.op == kAdd) {
        int64_t delta = 0, cur = 0;
        if (value.size() == 8) std::memcpy(&delta, value.data(), 8);
        auto it = data.find(key);
        if (it != data.end() && it->second.size() == 8) std::memcpy(&cur, it->second.data(), 8);
        // Wraps like the unsigned counter it is (a signed overflow is undefined; found by fuzz_store).
        cur = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
        std::vector<std::byte> stored(8);
        std::memcpy(stored.data(), &cur, 8);
        store(key, stored);
        out = stored;
        wake(key);
      } else {  // kGet: wait for the key; the client bounds the wait by closing the connection
        while (!data.count(key)) {
          if (!co_await park(sock, key)) co_return;  // shutting down, or the client left
        }
        out = data[key];
      }
      ReplyHeader rh{};
      rh.status = status;
      rh.len = out.size();
      std::array<asio::const_buffer, 2> reply{asio::buffer(&rh, sizeof(rh)), asio::buffer(out)};
      co_await asio::async_write(sock, reply, redirect);
    }
  }

  asio::awaitable<void> acceptLoop() {
    while (acceptor.is_open()) {
      boost::system::error_code ec;
      tcp::socket sock = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        continue;
      }
      asio::co_spawn(io, serve(std::move(sock)), asio::detached);
    }
  }
};

Result<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& bindAddr, uint16_t port,
                                                        const crypto::Secret& secret, Limits limits) {
  auto impl = std::make_unique<Impl>();
  impl->secret = secret;
  impl->limits = limits;
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(bindAddr.empty() ? "0.0.0.0" : bindAddr, ec);
  if (ec) return invalidArgument("store: bad bind address '%s'", bindAddr.c_str());
  tcp::endpoint ep(addr, port);
  auto listen = [&] {
    impl->acceptor.open(ep.protocol(), ec);
    if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) impl->acceptor.bind(ep, ec);
    if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  };
  const auto giveUp = std::chrono::steady_clock::now() + limits.busyPortWait;
  listen();
  while (ec == asio::error::address_in_use && port != 0 && std::chrono::steady_clock::now() < giveUp) {
    boost::system::error_code ignored;
    impl->acceptor.close(ignored);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    listen();
  }
  if (ec == asio::error::address_in_use && port != 0)
    return systemError("store: cannot listen on %s:%u: %s (still, after %lld ms)", bindAddr.c_str(), port,
                       ec.message().c_str(), static_cast<long long>(limits.busyPortWait.count()));
  if (ec) return systemError("store: cannot listen on %s:%u: %s", bindAddr.c_str(), port, ec.message().c_str());
  auto server = std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
  return server;
}

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  port_ = impl_->acceptor.local_endpoint().port();
  asio::co_spawn(impl_->io, impl_->acceptLoop(), asio::detached);
  thread_ = std::thread([io = &impl_->io] {
    pthread_setname_np(pthread_self(), "hc-store");
    io->run();
  });
  HC_INFO(Boot, "store: serving on port %u", port_);
}

StoreServer::~StoreServer() {
  asio::post(impl_->io, [impl = impl_.get()] {
    boost::system::error_code ec;
    impl->acceptor.close(ec);
    *impl->open = false;
    for (auto& [key, timer] : impl->waiters) timer->cancel();
    impl->io.stop();
  });
  if (thread_.joinable()) thread_.join();
}

// ---- client: blocking sockets, every wait bounded by poll() with the deadline ----

namespace {

Status waitFd(int fd, short events, Deadline deadline, const std::string& where, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, deadline.msLeft());
    if (rc > 0) return okStatus();
    if (rc == 0) return timeoutError("store at %s: timed out %s (HETCOMM_TIMEOUT)", where.c_str(), what);
    if (errno != EINTR) return errnoStatus(errno, "store at %s: poll", where.c_str());
  }
}

Status sendAll(int fd, const void* data, size_t n, Deadline deadline, const std::string& where) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    HC_TRY(waitFd(fd, POLLOUT, deadline, where, "sending"));
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return remoteError("store at %s: send failed: %s (did the store's process exit?)", where.c_str(),
                         std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return okStatus();
}

Status recvAll(int fd, void* data, size_t n, Deadline deadline, const std::string& where, const char* what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    HC_TRY(waitFd(fd, POLLIN, deadline, where, what));
    ssize_t r = ::recv(fd, p, n, 0);
    if (r == 0)
      return remoteError("store at %s closed the connection while %s (the store's process exited?)", where.c_str(),
                         what);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return remoteError("store at %s: receive failed: %s", where.c_str(), std::strerror(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return okStatus();
}

}  // namespace

namespace {

// One attempt at one endpoint: connect, then the mutual proof of the secret. attemptEnd bounds the connect when
// other addresses remain to try (a silent address would otherwise hold the whole deadline).
Result<int> dialStore(const tcp::endpoint& ep, const std::string& where, const crypto::Secret& secret,
                      Deadline deadline, Deadline attemptEnd) {
  // Non-blocking connect bounded by the deadline: a blocking one to a silent address waits for the kernel's SYN
  // timeout (about two minutes), whatever HETCOMM_TIMEOUT says.
  int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoStatus(errno, "store: socket");
  int rc = ::connect(fd, ep.data(), static_cast<socklen_t>(ep.size()));
  if (rc != 0 && errno == EINPROGRESS) {
    Status w = waitFd(fd, POLLOUT, attemptEnd, where, "connecting");
    int err = 0;
    socklen_t len = sizeof(err);
    if (w.ok()) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = w.ok() && err == 0 ? 0 : -1;
    errno = w.ok() ? err : ETIMEDOUT;
  }
  if (rc != 0) {
    Status st = errnoStatus(errno, "connecting to %s", where.c_str());
    ::close(fd);
    return st;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Hello hello;
  Status st = recvAll(fd, &hello, sizeof(hello), deadline, where, "waiting for the handshake");
  // Closed before its hello: a store whose handshake slots strangers fill (StoreServer::Limits), or one shutting
  // down. Worth another try, like a refused connect.
  if (!st.ok() && st.code() == Code::kRemote)
    st = systemError("%s closed the connection before its hello", where.c_str());
  if (st.ok() && hello.magic != kHelloMagic)
    st = remoteError("%s is not a hetcomm store (bad handshake)", where.c_str());
  Proof proof;
  if (st.ok()) st = crypto::randomBytes(proof.nonce);
  if (st.ok()) {
    proof.mac = crypto::prove(secret, hello.nonce, "store-client");
    st = sendAll(fd, &proof, sizeof(proof), deadline, where);
  }
  Welcome welcome;
  if (st.ok()) {
    st = recvAll(fd, &welcome, sizeof(welcome), deadline, where, "authenticating");
    if (!st.ok() && st.code() == Code::kRemote)
      st = remoteError("store at %s refused this rank: wrong secret (a stale or foreign unique id?)", where.c_str());
  }
  if (st.ok() && !crypto::macEqual(welcome.mac, crypto::prove(secret, proof.nonce, "store-server")))
    st = remoteError("the store at %s failed to prove it knows the job secret", where.c_str());
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<StoreClient>> StoreClient::connect(const std::string& addrs, uint16_t port,
                                                          const crypto::Secret& secret, Deadline deadline) {
  // addrs: one address, or several separated by commas (a unique id lists every interface of its rank: on a
  // cluster whose hosts share no single fabric, each rank reaches rank 0 over the one it shares).
  struct Candidate {
    tcp::endpoint ep;
    std::string where;
  };
  std::vector<Candidate> candidates;
  std::string unresolved;
  asio::io_context io;
  tcp::resolver resolver(io);
  for (const std::string& addr : split(addrs, ',')) {
    if (addr.empty()) continue;
    std::string where = addr + ":" + std::to_string(port);
    boost::system::error_code ec;
    auto endpoints = resolver.resolve(addr, std::to_string(port), ec);
    if (ec) {
      unresolved += (unresolved.empty() ? "" : "; ") + where + ": " + ec.message();
      continue;
    }
    for (const auto& e : endpoints) candidates.push_back({e.endpoint(), where});
  }
  if (candidates.empty())
    return invalidArgument("store address %s does not resolve: %s", addrs.c_str(), unresolved.c_str());
  const bool several = candidates.size() > 1;
  Status last;
  // The server may not be up yet (rank 0 starts it while the others already dial): retry until the deadline. A
  // refusal by the wrong store (another job's, reached at an address that means another host here) ends the
  // search only when no other address is left to try.
  for (int attempt = 0;; ++attempt) {
    Status refused;  // an address that answered and refused (another job's store): final once nothing else answers
    bool anyMayAnswer = false;
    for (const Candidate& c : candidates) {
      const Deadline attemptEnd = several ? Deadline::earlier(deadline, Deadline::afterSec(1.0)) : deadline;
      Result<int> fd = dialStore(c.ep, c.where, secret, several ? attemptEnd : deadline, attemptEnd);
      if (fd) {
        HC_TRACE(Boot, "store: connected to %s", c.where.c_str());
        return std::unique_ptr<StoreClient>(new StoreClient(*fd, c.where));
      }
      last = fd.error();
      const bool connectFailed = last.code() == Code::kSystem || last.code() == Code::kTimeout;
      if (connectFailed)
        anyMayAnswer = true;
      else
        refused = last;
    }
    if (!anyMayAnswer && !refused.ok()) return refused;
    if (deadline.expired())
      return timeoutError(
          "cannot reach the rendezvous store at %s: %s (is rank 0 / the launcher running, and the "
          "address right?)",
          addrs.c_str(), std::string(last.message()).c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50 * (attempt + 1), 500)));
  }
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

Status StoreClient::request(uint8_t op, const std::string& key, const std::vector<std::byte>& value, Deadline deadline,
                            std::vector<std::byte>* reply) {
  if (fd_ < 0) return remoteError("store at %s: connection lost earlier", where_.c_str());
  ReqHeader h{};
  h.op = op;
  h.keyLen = static_cast<uint32_t>(key.size());
  h.valueLen = value.size();
  Status st = sendAll(fd_, &h, sizeof(h), deadline, where_);
  if (st.ok()) st = sendAll(fd_, key.data(), key.size(), deadline, where_);
  if (st.ok() && !value.empty()) st = sendAll(fd_, value.data(), value.size(), deadline, where_);
  ReplyHeader rh{};
  std::string what = "waiting for key " + key;
  if (st.ok()) st = recvAll(fd_, &rh, sizeof(rh), deadline, where_, what.c_str());
  if (st.ok() && rh.status == kReplyExists && rh.len == 0) return Status(Code::kInvalidUsage, "exists");
  if (st.ok() && rh.status == kReplyMissing && rh.len == 0) return Status(Code::kInvalidArgument, "missing");
  if (st.ok() && (rh.status != kReplyOk || rh.len > kMaxValue))
    st = remoteError("store at %s: bad reply", where_.c_str());
  if (st.ok()) {
    reply->resize(rh.len);
    st = recvAll(fd_, reply->data(), rh.len, deadline, where_, what.c_str());
  }
  if (!st.ok()) {
    // A request cut half-way leaves the stream out of step: this connection is done.
    ::close(fd_);
    fd_ = -1;
  }
  return st;
}

Status StoreClient::set(const std::string& key, const std::vector<std::byte>& value) {
  std::vector<std::byte> reply;
  return request(kSet, key, value, Deadline::afterSec(60), &reply);
}

Result<std::vector<std::byte>> StoreClient::get(const std::string& key, Deadline deadline) {
  std::vector<std::byte> reply;
  HC_TRY(request(kGet, key, {}, deadline, &reply));
  return reply;
}

Status StoreClient::own(const std::string& key, const std::vector<std::byte>& value) {
  std::vector<std::byte> reply;
  return request(kOwn, key, value, Deadline::afterSec(60), &reply);
}

Result<std::optional<std::vector<std::byte>>> StoreClient::tryGet(const std::string& key) {
  std::vector<std::byte> reply;
  Status st = request(kTryGet, key, {}, Deadline::afterSec(60), &reply);
  if (st.code() == Code::kInvalidArgument && st.message() == "missing") return std::optional<std::vector<std::byte>>();
  HC_TRY(st);
  return std::optional<std::vector<std::byte>>(std::move(reply));
}

Result<bool> StoreClient::create(const std::string& key, const std::vector<std::byte>& value) {
  std::vector<std::byte> reply;
  Status st = request(kCreate, key, value, Deadline::afterSec(60), &reply);
  if (st.code() == Code::kInvalidUsage && st.message() == "exists") return false;
  HC_TRY(st);
  return true;
}

Result<int64_t> StoreClient::add(const std::string& key, int64_t delta) {
  std::vector<std::byte> value(8), reply;
  std::memcpy(value.data(), &delta, 8);
  HC_TRY(request(kAdd, key, value, Deadline::afterSec(60), &reply));
  int64_t out = 0;
  if (reply.size() == 8) std::memcpy(&out, reply.data(), 8);
  return out;
}

Result<std::vector<std::vector<std::byte>>> StoreClient::allGather(const std::string& prefix, int rank, int nranks,
                                                                   const std::vector<std::byte>& mine,
                                                                   Deadline deadline) {
  // Created, not set: a second process with the same rank finds the key taken and fails now, saying so, instead
  // of the job hanging until its timeout.
  std::vector<std::byte> ignored;
  const std::string myKey = prefix + "/" + std::to_string(rank);
  if (Status st = request(kCreate, myKey, mine, Deadline::afterSec(60), &ignored); !st.ok()) {
    if (st.code() != Code::kInvalidUsage) return st;
    return invalidUsage(
        "duplicate rank: another process already joined as rank %d of %d (store key %s): the "
        "launcher gave two processes the same rank (RANK, HETCOMM_RANK, ...)",
        rank, nranks, myKey.c_str());
  }
  std::vector<std::vector<std::byte>> all(nranks);
  for (int i = 0; i < nranks; ++i) {
    if (i == rank) {
      all[i] = mine;
      continue;
    }
    auto v = get(prefix + "/" + std::to_string(i), deadline);
    if (!v) {
      if (v.error().code() == Code::kTimeout)
        return timeoutError("rank %d: rank %d did not join within HETCOMM_TIMEOUT (waiting for %s/%d)", rank, i,
                            prefix.c_str(), i);
      return v.error();
    }
    all[i] = std::move(*v);
  }
  return all;
}

Status StoreClient::barrier(const std::string& prefix, int nranks, Deadline deadline) {
  HC_ASSIGN_OR_RETURN(int64_t arrived, add(prefix + "/count", 1));
  if (arrived == nranks) HC_TRY(set(prefix + "/go", {}));
  auto go = get(prefix + "/go", deadline);
  return go.status();
}

}  // namespace hetcomm::comm
