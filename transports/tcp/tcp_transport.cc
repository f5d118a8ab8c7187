#include "transports/tcp/tcp_transport.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cstring>
#include <fstream>
#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without including it

#include "common/listener_guard.h"
#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "transports/blob.h"
#include "transports/tcp/tcp_connection.h"

namespace hetcomm::transport::tcp {

namespace asio = boost::asio;
using asio::ip::tcp;

HC_PARAM_STR(socketIfname, "SOCKET_IFNAME", "")
// 0: automatic. One socket to a peer on this host (a loopback stream is bound by the kernel's copies, and more
// streams only contend for the same cores); two to a remote peer, where one flow rarely fills a NIC.
HC_PARAM_INT(nsocksPerPeer, "NSOCKS_PERPEER", 0)
// With this many sockets or fewer, progress() reads each directly instead of asking epoll_wait which are ready:
// a read of an empty socket costs what epoll_wait costs, and a message then costs one system call instead of two.
// Measured over loopback on 2 vCPUs, 2 ranks (one socket): 8 B ping-pong 8.6 -> 6.7 us, 8 B allreduce 14.6 ->
// 13.0 us. With two sockets (3 ranks) the reads of an idle pass already cost more than they save (75 -> 87 us),
// with 3 and 7 sockets (4 and 8 ranks) 1.3x and 2.4x slower.
HC_PARAM_INT(directReadSocketsParam, "TCP_DIRECT_READ_SOCKETS", 1)
// Empty: loopback sockets get reno, the others the system's congestion control; "system": the system's for all;
// a name: that one for all (congestionFor).
HC_PARAM_STR(tcpCongestion, "TCP_CONGESTION", "")
constexpr int kLocalSockets = 1, kRemoteSockets = 2;

namespace {

constexpr int kMaxSockets = 16;
constexpr double kDialAttemptSec = 10;
// A connection to the listener that has not proven the job secret within this long is dropped, and at most this
// many beyond what the communicator's own peers may dial can be in their handshake at once.
constexpr std::chrono::milliseconds kHandshakeTime{10000};
constexpr int kMaxStrangers = 64;

// ---- handshake messages (fixed size, sent as bytes; all ranks of a job share one byte order) ----
struct Hello {
  static constexpr uint32_t kMagic = 0x41544348;  // "HCTA"
  uint32_t magic = kMagic;
  uint32_t version = 1;
  crypto::Nonce nonce{};
};
struct Reply {
  static constexpr uint32_t kMagic = 0x52544348;  // "HCTR"
  uint32_t magic = kMagic;
  uint32_t rank = 0;
  uint32_t sockIdx = 0;
  uint32_t nsocks = 0;
  uint64_t commId = 0;
  crypto::Nonce nonce{};
  crypto::Mac mac{};
};
struct Ack {
  static constexpr uint32_t kMagic = 0x4b544348;  // "HCTK"
  uint32_t magic = kMagic;
  uint32_t ok = 1;
  crypto::Mac mac{};
};

// ---- blob (transports/blob.h) ----
struct PeerInfo {
  std::string host;
  uint16_t port = 0;
  std::vector<std::string> addrs;
};

std::vector<std::byte> encodeBlob(const std::string& host, uint16_t port, const std::vector<Interface>& ifaces) {
  std::string addrs;
  for (size_t i = 0; i < ifaces.size(); ++i) addrs += (i ? "," : "") + ifaces[i].addr;
  return TextBlob("hctcp", 1).put("host", host).put("port", std::to_string(port)).put("addrs", addrs).bytes();
}

Result<PeerInfo> decodeBlob(std::span<const std::byte> blob, int peer) {
  const TextBlob b = TextBlob::parse(blob, "hctcp", 1);
  PeerInfo info;
  if (const std::string* v = b.find("host")) info.host = *v;
  if (const std::string* v = b.find("port")) info.port = static_cast<uint16_t>(std::atoi(v->c_str()));
  if (const std::string* v = b.find("addrs")) info.addrs = split(*v, ',');
  if (!b.ok() || info.port == 0 || info.addrs.empty() || info.addrs[0].empty())
    return remoteError("rank %d's tcp address blob is malformed", peer);
  return info;
}

struct ConnectState {
  asio::io_context& io;
  const Config& cfg;
  int nsocks;
  std::vector<std::vector<std::optional<tcp::socket>>> socks;  // [peer][socket index]
  std::vector<int> expectFrom;                                 // lower peers: sockets announced, -1 unknown
  std::vector<int> gotFrom;
  std::vector<std::vector<std::string>> via;  // [peer][socket index]: the address at the peer's end
  int dialsLeft = 0;
  Status error;
  Deadline deadline;  // connectAll's
  // Strangers on the listening port (common/listener_guard.h): each must finish its handshake in time, few may
  // wait at once, and their refusals are logged once per interval.
  std::shared_ptr<int> unauthenticated = std::make_shared<int>(0);
  int maxUnauthenticated = kMaxStrangers;  // plus the sockets this rank's lower peers may dial
  RefusalLog refusals{"tcp"};

  bool done() const {
    if (dialsLeft > 0) return false;
    for (size_t p = 0; p < expectFrom.size(); ++p)
      if (expectFrom[p] != 0 && gotFrom[p] != expectFrom[p]) return false;
    return true;
  }
};

template <class T>
std::span<uint8_t> bytesOf(T& v) {
  return {reinterpret_cast<uint8_t*>(&v), sizeof(T)};
}

asio::awaitable<void> dialOne(ConnectState& st, int peer, int idx, int nsocks, PeerInfo info,
                              std::vector<std::string> addrs) {
  const Config& cfg = st.cfg;
  std::string lastError = "no address to try";
  std::string refusal;  // a peer that answered but refused says more than an address that did not answer
  // A listener that closes the connection before its hello is busy (strangers fill its handshake slots, see
  // acceptOne): try again until set-up's deadline, as they are dropped within its handshake deadline.
  for (int attempt = 0;; ++attempt) {
    bool busy = false;
    for (const auto& addr : addrs) {
      boost::system::error_code ec;
      auto ip = asio::ip::make_address(addr, ec);
      if (ec) {
        lastError = "bad address " + addr;
        continue;
      }
      tcp::socket sock(st.io);
      // An unreachable address must not eat the whole deadline: close the socket when this attempt runs long. The
      // flag keeps a timer that fires in the same pass as the handshake's end from touching a socket moved away.
      auto attemptLive = std::make_shared<bool>(true);
      asio::steady_timer timer(st.io, std::chrono::duration_cast<asio::steady_timer::duration>(
                                          std::chrono::duration<double>(kDialAttemptSec)));
      timer.async_wait([&sock, attemptLive](boost::system::error_code e) {
        if (!e && *attemptLive) sock.close();
      });
      co_await sock.async_connect(tcp::endpoint(ip, info.port), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        *attemptLive = false;
        timer.cancel();
        lastError = format("connect to %s:%u: %s", addr.c_str(), info.port, ec.message().c_str());
        continue;
      }
      Hello hello;
      co_await asio::async_read(sock, asio::buffer(&hello, sizeof(hello)),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec || hello.magic != Hello::kMagic) {
        *attemptLive = false;
        timer.cancel();
        lastError = format("%s:%u did not answer with the hetcomm tcp handshake", addr.c_str(), info.port);
        busy = busy || (ec == asio::error::eof || ec == asio::error::connection_reset);
        continue;
      }
      Reply reply;
      reply.rank = static_cast<uint32_t>(cfg.rank);
      reply.sockIdx = static_cast<uint32_t>(idx);
      reply.nsocks = static_cast<uint32_t>(nsocks);
      reply.commId = cfg.commId;
      if (Status s = crypto::randomBytes(reply.nonce); !s.ok()) {
        *attemptLive = false;
        st.error = s;
        co_return;
      }
      reply.mac = crypto::prove(cfg.secret, hello.nonce, "tcp-dial", cfg.rank, peer, cfg.commId, idx);
      co_await asio::async_write(sock, asio::buffer(&reply, sizeof(reply)),
                                 asio::redirect_error(asio::use_awaitable, ec));
      Ack ack;
      if (!ec)
        co_await asio::async_read(sock, asio::buffer(&ack, sizeof(ack)), asio::redirect_error(asio::use_awaitable, ec));
      *attemptLive = false;
      timer.cancel();
      if (ec || ack.magic != Ack::kMagic) {
        refusal = format("rank %d at %s:%u refused the connection (another job, communicator or secret?)", peer,
                         addr.c_str(), info.port);
        continue;
      }
      if (!crypto::macEqual(ack.mac,
                            crypto::prove(cfg.secret, reply.nonce, "tcp-accept", peer, cfg.rank, cfg.commId, idx))) {
        refusal = format("the listener at %s:%u failed to prove it knows the job secret: not rank %d of this job",
                         addr.c_str(), info.port, peer);
        continue;
      }
      st.via[peer][idx] = addr;
      st.socks[peer][idx].emplace(std::move(sock));
      --st.dialsLeft;
      co_return;
    }
    if (!busy || !refusal.empty() || st.deadline.expired() || !st.error.ok()) break;
    asio::steady_timer pause(st.io, std::chrono::milliseconds(std::min(100 * (attempt + 1), 1000)));
    boost::system::error_code ignored;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  if (st.error.ok())
    st.error = remoteError("rank %d cannot reach rank %d over tcp: %s", cfg.rank, peer,
                           (refusal.empty() ? lastError : refusal).c_str());
}

asio::awaitable<void> acceptOne(ConnectState& st, tcp::socket sock) {
  const Config& cfg = st.cfg;
  boost::system::error_code ec;
  auto remote = sock.remote_endpoint(ec);
  std::string from = ec ? "?" : remote.address().to_string() + ":" + std::to_string(remote.port());
  if (*st.unauthenticated >= st.maxUnauthenticated) {
    st.refusals.refuse(format("a connection from %s to rank %d: %d connections already wait to authenticate",
                              from.c_str(), cfg.rank, st.maxUnauthenticated));
    co_return;
  }
  Unauthenticated pending(st.unauthenticated);
  HandshakeDeadline<tcp::socket> deadline(st.io, sock, kHandshakeTime);  // closing the socket ends the reads
  Hello hello;
  if (Status s = crypto::randomBytes(hello.nonce); !s.ok()) {
    st.error = s;
    co_return;
  }
  co_await asio::async_write(sock, asio::buffer(&hello, sizeof(hello)), asio::redirect_error(asio::use_awaitable, ec));
  Reply r;
  if (!ec) co_await asio::async_read(sock, asio::buffer(&r, sizeof(r)), asio::redirect_error(asio::use_awaitable, ec));
  std::string why;
  if (deadline.expired())
    why = format("it did not authenticate within %lld ms", (long long)kHandshakeTime.count());
  else if (ec)
    why = "handshake read failed: " + ec.message();
  else if (r.magic != Reply::kMagic)
    why = "it does not speak the hetcomm tcp handshake";
  else if (r.commId != cfg.commId)
    why = "it belongs to another communicator";
  else if (r.rank >= static_cast<uint32_t>(cfg.rank) || st.expectFrom[r.rank] == 0)
    why = format("rank %u is not expected to dial rank %d", r.rank, cfg.rank);
  else if (r.nsocks == 0 || r.nsocks > kMaxSockets || r.sockIdx >= r.nsocks)
    why = "bad socket index";
  else if (st.socks[r.rank][r.sockIdx])
    why = "duplicate socket";
  else if (!crypto::macEqual(
               r.mac, crypto::prove(cfg.secret, hello.nonce, "tcp-dial", r.rank, cfg.rank, cfg.commId, r.sockIdx)))
    why = "wrong secret";
  if (!why.empty()) {
    st.refusals.refuse(format("a connection from %s to rank %d: %s", from.c_str(), cfg.rank, why.c_str()));
    co_return;  // the socket closes; set-up goes on
  }
  deadline.disarm();
  if (deadline.expired()) co_return;  // it fired just as the reply arrived: the socket is closed
  pending.done();
  Ack ack;
  ack.mac = crypto::prove(cfg.secret, r.nonce, "tcp-accept", cfg.rank, r.rank, cfg.commId, r.sockIdx);
  co_await asio::async_write(sock, asio::buffer(&ack, sizeof(ack)), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return;
  st.via[r.rank][r.sockIdx] = remote.address().to_string();
  st.expectFrom[r.rank] = static_cast<int>(r.nsocks);
  st.socks[r.rank][r.sockIdx].emplace(std::move(sock));
  ++st.gotFrom[r.rank];
}

asio::awaitable<void> acceptLoop(ConnectState& st, tcp::acceptor& acceptor) {
  while (true) {
    boost::system::error_code ec;
    tcp::socket sock = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      HC_WARN("tcp: accept failed: %s", ec.message().c_str());
      continue;
    }
    asio::co_spawn(st.io, acceptOne(st, std::move(sock)), asio::detached);
  }
}

}  // namespace

std::vector<double> socketWeights(const std::vector<Transport::Path>& paths, const std::vector<std::string>& via) {
  // A socket on no listed path counts as the slowest listed path that shares messages (1 when none does).
  double unknown = 0;
  for (const Transport::Path& p : paths)
    if (p.weight > 0 && (unknown == 0 || p.weight < unknown)) unknown = p.weight;
  if (unknown == 0) unknown = 1;
  std::vector<double> weights;
  for (const auto& addr : via) {
    double w = unknown;
    for (const Transport::Path& path : paths)
      if (path.address == addr) w = path.weight;
    // Sockets that share a path share its bandwidth.
    weights.push_back(w / static_cast<double>(std::count(via.begin(), via.end(), addr)));
  }
  return weights;
}

std::vector<int> socketPaths(const std::vector<Transport::Path>& paths, const std::vector<std::string>& via) {
  std::vector<int> ids;
  for (const auto& addr : via) {
    int id = -1;
    for (const Transport::Path& path : paths)
      if (path.address == addr) id = path.id;
    ids.push_back(id);
  }
  return ids;
}

// ---- interfaces ----

bool interfaceMatches(const std::string& spec, const std::string& ifname) {
  if (spec.empty()) return ifname.rfind("docker", 0) != 0 && ifname.rfind("virbr", 0) != 0;
  bool exclude = spec[0] == '^';
  std::string list = exclude ? spec.substr(1) : spec;
  bool exact = !list.empty() && list[0] == '=';
  if (exact) list = list.substr(1);
  bool hit = false;
  for (const auto& tok : split(list, ',')) {
    if (tok.empty()) continue;
    if (exact ? ifname == tok : ifname.rfind(tok, 0) == 0) hit = true;
  }
  return exclude ? !hit : hit;
}

Result<std::vector<Interface>> selectInterfaces(const std::string& spec) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoStatus(errno, "tcp: getifaddrs");
  std::vector<Interface> out, loop;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP)) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (!interfaceMatches(spec, ifa->ifa_name)) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (fam == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, buf, sizeof(buf));
    } else {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;  // needs a scope id: not portable across hosts
      inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof(buf));
    }
    Interface i{ifa->ifa_name, buf, (ifa->ifa_flags & IFF_LOOPBACK) != 0};
    (i.loopback ? loop : out).push_back(i);
  }
  freeifaddrs(list);
  // IPv4 before IPv6 within each group: the common case, and what emulated clusters use.
  auto v4first = [](const Interface& a, const Interface& b) {
    return (a.addr.find(':') == std::string::npos) > (b.addr.find(':') == std::string::npos);
  };
  std::stable_sort(out.begin(), out.end(), v4first);
  std::stable_sort(loop.begin(), loop.end(), v4first);
  out.insert(out.end(), loop.begin(), loop.end());
  if (out.empty()) return invalidArgument("tcp: no network interface matches HETCOMM_SOCKET_IFNAME=%s", spec.c_str());
  return out;
}

// ---- congestion control ----

bool staysOnMachine(const tcp::endpoint& local, const tcp::endpoint& remote) {
  return remote.address().is_loopback() || remote.address() == local.address();
}

std::string congestionFor(const std::string& setting, bool onMachine) {
  if (setting == "system") return "";
  if (!setting.empty()) return setting;
  return onMachine ? kLoopbackCongestion : "";
}

Status checkCongestionName(const std::string& setting) {
  const bool wellFormed =
      setting.size() < kCongestionNameMax && std::all_of(setting.begin(), setting.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      });
  if (wellFormed) return okStatus();  // the empty default included
  return invalidArgument(
      "HETCOMM_TCP_CONGESTION=%s is not a congestion control name (letters, digits, '_' or '-', at most %d "
      "characters; \"system\" keeps the system's)",
      setting.c_str(), static_cast<int>(kCongestionNameMax - 1));
}

Status setCongestion(int fd, const std::string& name) {
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0)
    return okStatus();
  const int err = errno;
  std::string allowed, available;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), allowed);
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_available_congestion_control"), available);
  return errnoStatus(err,
                     "tcp: the kernel refused congestion control %s (this kernel has: %s; a process without "
                     "CAP_NET_ADMIN may choose: %s)",
                     name.c_str(), available.empty() ? "?" : available.c_str(),
                     allowed.empty() ? "?" : allowed.c_str());
}

// ---- transport ----

Result<std::unique_ptr<TcpTransport>> TcpTransport::create(const Config& config) {
  const std::string& spec = socketIfname();
  HC_ASSIGN_OR_RETURN(auto ifaces, selectInterfaces(spec));
  int64_t nsocks = nsocksPerPeer();
  if (nsocks < 0 || nsocks > kMaxSockets)
    return invalidArgument("HETCOMM_NSOCKS_PERPEER=%lld is out of range 1..%d (0: automatic)", (long long)nsocks,
                           kMaxSockets);
  HC_TRY(checkCongestionName(tcpCongestion()));
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return errnoStatus(errno, "tcp: epoll_create1");
  return std::unique_ptr<TcpTransport>(
      new TcpTransport(config, std::move(ifaces), static_cast<int>(nsocks), epfd, !spec.empty()));
}

TcpTransport::TcpTransport(const Config& config, std::vector<Interface> ifaces, int nsocks, int epollFd,
                           bool ifnameForced)
    : config_(config),
      ifaces_(std::move(ifaces)),
      nsocks_(nsocks),
      epollFd_(epollFd),
      ifnameForced_(ifnameForced),
      directReadSockets_(static_cast<size_t>(std::max<int64_t>(0, directReadSocketsParam()))) {
  props_.kind = Kind::kTcp;
  props_.name = "tcp";
  props_.latencyUs = 20;
  props_.bandwidthGBps = 1.25;
}

TcpTransport::~TcpTransport() {
  acceptor_.reset();
  if (epollFd_ >= 0) ::close(epollFd_);
}

Result<std::vector<std::byte>> TcpTransport::listen() {
  boost::system::error_code ec;
  bool v6only = ifaces_[0].addr.find(':') != std::string::npos;
  tcp::endpoint ep(v6only ? tcp::v6() : tcp::v4(), 0);
  acceptor_.emplace(io_);
  acceptor_->open(ep.protocol(), ec);
  if (!ec) acceptor_->bind(ep, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return systemError("tcp: cannot listen: %s", ec.message().c_str());
  uint16_t port = acceptor_->local_endpoint().port();
  // Advertise only addresses of the family we listen on: a peer dialling the other family would be refused.
  std::vector<Interface> reachable;
  for (const auto& i : ifaces_)
    if ((i.addr.find(':') != std::string::npos) == v6only) reachable.push_back(i);
  HC_TRACE(Net, "tcp: rank %d listening on port %u (%zu interfaces, first %s %s)", config_.rank, port, ifaces_.size(),
           ifaces_[0].name.c_str(), ifaces_[0].addr.c_str());
  return encodeBlob(config_.hostId, port, reachable);
}

Result<std::vector<std::unique_ptr<Connection>>> TcpTransport::connectAll(
    const std::vector<std::vector<std::byte>>& blobs, Deadline deadline) {
  const int n = config_.nranks, me = config_.rank;
  if (static_cast<int>(blobs.size()) != n) return internalError("tcp: %zu blobs for %d ranks", blobs.size(), n);
  if (!acceptor_) return invalidUsage("tcp: connectAll before listen");

  asio::io_context io;  // first: destroyed last, after the coroutine frames that use it
  ConnectState st{io, config_, nsocks_, {}, std::vector<int>(n, 0), std::vector<int>(n, 0), {}, 0, {}, deadline};
  st.socks.resize(n);
  for (auto& v : st.socks) v.resize(kMaxSockets);
  st.via.assign(n, std::vector<std::string>(kMaxSockets));
  auto pathsTo = [&](int p) { return static_cast<size_t>(p) < paths_.size() ? paths_[p] : std::vector<Path>{}; };

  // Lower rank dials (and picks the socket count); the higher accepts.
  std::vector<int> dialCount(n, 0);
  for (int p = 0; p < n; ++p) {
    if (p == me || blobs[p].empty()) continue;
    if (p < me) {
      st.expectFrom[p] = -1;                 // count announced in the handshake
      st.maxUnauthenticated += kMaxSockets;  // its dials may all be in their handshake at once
      continue;
    }
    HC_ASSIGN_OR_RETURN(PeerInfo info, decodeBlob(blobs[p], p));
    const bool sameHost = info.host == config_.hostId;
    // The paths the communicator chose for the pair first (the peer's address on each fabric it uses), then the
    // peer's own order. With several paths that share messages (multi-rail), socket k starts with path k mod
    // paths, so every rail carries its share of the sockets; each path that carries only messages sent over it
    // (weight 0) gets one socket of its own after those.
    const std::vector<Path> paths = pathsTo(p);
    std::vector<std::string> known, onPurpose;
    for (const Transport::Path& path : paths)
      if (std::find(info.addrs.begin(), info.addrs.end(), path.address) != info.addrs.end())
        (path.weight > 0 ? known : onPurpose).push_back(path.address);
    const int rails = std::max<int>(1, static_cast<int>(known.size()));
    const int striped = nsocks_ > 0 ? nsocks_ : std::max(sameHost ? kLocalSockets : kRemoteSockets, rails);
    dialCount[p] = std::min<int>(kMaxSockets, striped + (sameHost ? 0 : static_cast<int>(onPurpose.size())));
    for (int k = 0; k < dialCount[p]; ++k) {
      std::vector<std::string> addrs;
      if (sameHost && !ifnameForced_) addrs.push_back("127.0.0.1");
      if (k >= striped) addrs.push_back(onPurpose[k - striped]);
      for (size_t i = 0; i < known.size(); ++i) addrs.push_back(known[(k + i) % known.size()]);
      for (const auto& a : info.addrs)
        if (std::find(addrs.begin(), addrs.end(), a) == addrs.end()) addrs.push_back(a);
      ++st.dialsLeft;
      asio::co_spawn(io, dialOne(st, p, k, dialCount[p], info, addrs), asio::detached);
    }
  }
  boost::system::error_code ec;
  tcp::acceptor acceptor(io);
  auto proto = acceptor_->local_endpoint().protocol();
  acceptor.assign(proto, acceptor_->release(), ec);
  acceptor_.reset();
  if (ec) return systemError("tcp: cannot take over the listening socket: %s", ec.message().c_str());
  asio::co_spawn(io, acceptLoop(st, acceptor), asio::detached);

  while (!st.done() && st.error.ok()) {
    if (deadline.expired()) {
      std::string missing;
      for (int p = 0; p < n; ++p) {
        bool ok = p == me || blobs[p].empty() ||
                  (p < me ? st.expectFrom[p] > 0 && st.gotFrom[p] == st.expectFrom[p]
                          : std::all_of(st.socks[p].begin(), st.socks[p].begin() + dialCount[p],
                                        [](const auto& s) { return s.has_value(); }));
        if (!ok) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      }
      return timeoutError("rank %d: tcp connection set-up timed out waiting for rank(s) %s (HETCOMM_TIMEOUT=%g s)", me,
                          missing.c_str(), config_.timeoutSec);
    }
    io.run_one_for(std::chrono::milliseconds(100));
  }
  if (!st.error.ok()) return st.error;

  // Hand the sockets to the non-blocking data path.
  std::vector<std::unique_ptr<Connection>> conns(n);
  for (int p = 0; p < n; ++p) {
    if (p == me || blobs[p].empty()) continue;
    int count = p < me ? st.expectFrom[p] : dialCount[p];
    std::vector<tcp::socket> socks;
    for (int k = 0; k < count; ++k) {
      tcp::socket& s = *st.socks[p][k];
      auto protocol = s.local_endpoint(ec).protocol();
      tcp::socket moved(io_);
      int fd = s.release();
      moved.assign(protocol, fd, ec);
      if (ec) ::close(fd);  // assign took no ownership
      if (!ec) moved.non_blocking(true, ec);
      if (!ec) moved.set_option(tcp::no_delay(true), ec);
      if (ec) return systemError("tcp: socket set-up for rank %d: %s", p, ec.message().c_str());
      const tcp::endpoint local = moved.local_endpoint(ec), remote = ec ? tcp::endpoint() : moved.remote_endpoint(ec);
      if (ec) return systemError("tcp: socket set-up for rank %d: %s", p, ec.message().c_str());
      const bool onMachine = staysOnMachine(local, remote);
      if (const std::string cc = congestionFor(tcpCongestion(), onMachine); !cc.empty()) {
        Status st = setCongestion(moved.native_handle(), cc);
        if (!st.ok() && !tcpCongestion().empty())  // the user's choice: say so rather than run without it
          return invalidArgument("HETCOMM_TCP_CONGESTION=%s, socket to rank %d: %s", cc.c_str(), p,
                                 std::string(st.message()).c_str());
        if (!st.ok())
          HC_INFO(Net, "tcp: %s; the socket to rank %d keeps the system's", std::string(st.message()).c_str(), p);
      }
      socks.push_back(std::move(moved));
    }
    std::vector<std::string> via(st.via[p].begin(), st.via[p].begin() + count);
    std::vector<double> weights = socketWeights(pathsTo(p), via);
    std::vector<int> ids = socketPaths(pathsTo(p), via);
    auto conn = std::make_unique<TcpConnection>(epollFd_, me, p, std::move(socks), std::move(via), std::move(weights),
                                                std::move(ids), hub_);
    HC_TRACE(Net, "tcp: %s", conn->describe().c_str());
    conns[p] = std::move(conn);
  }
  return conns;
}

void TcpTransport::flush() {
  // A flush may fail a connection, which never removes it from the list: take the list first.
  std::vector<TcpConnection*> listed;
  listed.swap(hub_->toFlush);
  for (TcpConnection* c : listed) c->flushQueued();
}

bool TcpTransport::armForSleep() {
  if (hub_->toFlush.empty()) return true;
  flush();
  return false;
}

Status TcpTransport::progress() {
  flush();
  if (hub_->live.size() <= directReadSockets_) {  // each connection has a socket at least
    size_t open = 0;
    for (const TcpConnection* c : hub_->live) open += c->openSockets();
    if (open <= directReadSockets_) {
      for (TcpConnection* c : hub_->live) c->pollSockets();  // a failure closes sockets, never removes a connection
      return okStatus();
    }
  }
  epoll_event evs[64];
  int n = epoll_wait(epollFd_, evs, 64, 0);
  if (n < 0) return errno == EINTR ? okStatus() : errnoStatus(errno, "tcp: epoll_wait");
  for (int i = 0; i < n; ++i) {
    auto* s = static_cast<TcpStream*>(evs[i].data.ptr);
    if (!s->sock.is_open() || s->eof) continue;
    if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) s->owner->onReadable(*s);
    if (s->sock.is_open() && (evs[i].events & EPOLLOUT)) s->owner->onWritable(*s);
  }
  return okStatus();
}

}  // namespace hetcomm::transport::tcp
