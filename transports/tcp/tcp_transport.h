// tcp_transport.h: the TCP transport (Boost.Asio). Reaches any rank with an IP route.
//
// Connection set-up runs Asio coroutines on a private io_context: the lower rank of a pair dials, every socket
// is authenticated both ways with the job secret (challenge and HMAC, see common/crypto.h), then the sockets
// are handed to the data path, which runs non-blocking on the progress engine thread: the transport keeps one
// epoll set of its sockets and exposes that epoll fd as waitFd().
//
// Parameters: HETCOMM_SOCKET_IFNAME picks interfaces (prefixes; "^" excludes, "=" matches exactly, e.g.
// "=eth1" or "^docker,lo"); HETCOMM_NSOCKS_PERPEER sockets per peer (default: 1 on this host, 2 to other hosts;
// at most 16); HETCOMM_TCP_CONGESTION the sockets' congestion control (below: loopback ones get reno).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transports/tcp/tcp_connection.h"
#include "transports/transport.h"

namespace hetcomm::transport::tcp {

struct Interface {
  std::string name;  // "eth0"
  std::string addr;  // "10.0.0.2" or "fe80::1"
  bool loopback = false;
};

// Interfaces matching spec (HETCOMM_SOCKET_IFNAME syntax; empty: every up interface except docker*, loopback
// last). Fails with a clear message when nothing matches.
Result<std::vector<Interface>> selectInterfaces(const std::string& spec);
// True when ifname matches spec (exposed for tests).
bool interfaceMatches(const std::string& spec, const std::string& ifname);

// Each socket's share of a connection's large messages: its path's weight (by the address at the peer's end),
// split evenly among the sockets on that path; 0 on a path that carries only messages sent over it (isendOn).
// Sockets on no listed path count as the slowest path that shares messages. (Exposed for tests.)
std::vector<double> socketWeights(const std::vector<Transport::Path>& paths, const std::vector<std::string>& via);
// Each socket's path id (Transport::Path::id) by the address at the peer's end; -1 for one on no listed path.
std::vector<int> socketPaths(const std::vector<Transport::Path>& paths, const std::vector<std::string>& via);

// Congestion control. A pacing algorithm (BBR, the system's default on some distributions and on this project's
// machines) sends no faster than its estimate of the path's rate. Over loopback every burst is limited by the
// application, the estimate drifts low and stays there, and a rank's sends queue behind the pacing timer: two ranks
// swapping 128 KiB over loopback took 27 us a call, or 47-54 us for the whole run once BBR had left its start-up
// (16 runs of 80; none of 36 with reno; pacing at 50-60 Gbit/s), and a 64 MiB allreduce ran at 2.40-2.49 GB/s
// against 2.66-2.90 with reno. A socket that never leaves this machine has no network to share: it gets reno
// (kLoopbackCongestion), which never paces and which every process may choose. Sockets to other machines keep the
// system's choice. HETCOMM_TCP_CONGESTION: unset, that; "system": the system's for every socket; a name: that one for
// every socket (init fails with the kernel's answer when it refuses).
inline constexpr const char* kLoopbackCongestion = "reno";
// Whether a connected socket's two ends are this machine: the peer's address is a loopback one or this end's own.
bool staysOnMachine(const boost::asio::ip::tcp::endpoint& local, const boost::asio::ip::tcp::endpoint& remote);
// The congestion control to set on a socket for HETCOMM_TCP_CONGESTION=setting; empty: leave the system's.
std::string congestionFor(const std::string& setting, bool onMachine);
// Refuses a setting that cannot name a congestion control (empty is the default, and fine).
Status checkCongestionName(const std::string& setting);
// Sets it on a TCP socket; the kernel's refusal comes back with what it offers.
Status setCongestion(int fd, const std::string& name);

class TcpTransport final : public Transport {
 public:
  static Result<std::unique_ptr<TcpTransport>> create(const Config& config);
  ~TcpTransport() override;

  const Properties& properties() const override { return props_; }
  Result<std::vector<std::byte>> listen() override;
  Result<std::vector<std::unique_ptr<Connection>>> connectAll(const std::vector<std::vector<std::byte>>& blobs,
                                                              Deadline deadline) override;
  void preferPaths(std::vector<std::vector<Path>> byPeer) override { paths_ = std::move(byPeer); }
  Status progress() override;
  void flush() override;
  // Not with sends still queued: they go out first (false: pass again).
  bool armForSleep() override;
  int waitFd() const override { return epollFd_; }
  // progress() reads the sockets directly, without epoll_wait, while there are at most this many
  // (HETCOMM_TCP_DIRECT_READ_SOCKETS, default 1; 0: always epoll). Tests set it to run both paths.
  void readDirectlyUpTo(size_t sockets) { directReadSockets_ = sockets; }

 private:
  TcpTransport(const Config& config, std::vector<Interface> ifaces, int nsocks, int epollFd, bool ifnameForced);

  Config config_;
  Properties props_;
  std::vector<Interface> ifaces_;
  int nsocks_;  // 0: automatic per peer
  int epollFd_;
  bool ifnameForced_;
  boost::asio::io_context io_;  // owns the data sockets; never run (the data path is non-blocking)
  std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
  std::vector<std::vector<Path>> paths_;  // per peer: its addresses to dial first; several: stripe over them
  // Connections with sends queued since the last flush() (written together, one system call per socket), and
  // every live connection.
  std::shared_ptr<TcpConnection::Hub> hub_ = std::make_shared<TcpConnection::Hub>();
  size_t directReadSockets_;
};

}  // namespace hetcomm::transport::tcp
