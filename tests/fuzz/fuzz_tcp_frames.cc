// fuzz_tcp_frames: what a tcp connection makes of the bytes its peer sends after the handshake: frame headers,
// payloads, abort frames, in any order and cut anywhere. Input: byte 0 is how many receives to post first (0-3,
// tags 0, 1, 2), then two bytes of size for each; the rest is the byte stream, written into one end of a socket
// pair whose other end a real TcpConnection reads, driven as the transport's progress() drives it (epoll, then
// onReadable), until the stream ends. The connection must deliver, refuse the receive with a size mismatch, or fail
// with a remote error; never write outside a receive's buffer or allocate what the header only announces (early
// messages may hold at most HETCOMM_EARLY_MAX_BYTES, set to 1 MiB here).
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <vector>

#include "tests/fuzz/frame_input.h"
#include "transports/tcp/tcp_connection.h"

namespace {

using namespace hetcomm;
using namespace hetcomm::transport;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hetcomm::fuzz::boundEarlyMessages();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<size_t> sizes = hetcomm::fuzz::takeReceiveSizes(data, size);

  static boost::asio::io_context io;
  static const int epollFd = epoll_create1(EPOLL_CLOEXEC);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  std::vector<boost::asio::ip::tcp::socket> socks;
  socks.emplace_back(io).assign(boost::asio::ip::tcp::v4(), sv[0]);
  socks.back().non_blocking(true);

  std::deque<Request> reqs;  // outlive the connection, which fails what is pending when it goes
  std::vector<std::vector<std::byte>> bufs;
  auto conn = std::make_unique<tcp::TcpConnection>(epollFd, 0, 1, std::move(socks), std::vector<std::string>{"peer"},
                                                   std::vector<double>{1.0});
  for (size_t i = 0; i < sizes.size(); ++i) {
    bufs.emplace_back(sizes[i]);
    (void)conn->irecv(reqs.emplace_back(), bufs.back(), i);
  }
  // The peer's bytes, then its end closes: the connection reads them all, then sees the end of the stream.
  int sndbuf = 4 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  for (size_t at = 0; at < size;) {
    ssize_t w = ::send(sv[1], data + at, size - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) break;  // a full buffer: the rest would only be more of the same
    at += static_cast<size_t>(w);
  }
  ::close(sv[1]);
  // A broken connection stops reading, and its socket stays readable: the passes are bounded.
  for (int quiet = 0, pass = 0; quiet < 2 && pass < 1000; ++pass) {
    epoll_event evs[4];
    int n = epoll_wait(epollFd, evs, 4, 0);
    if (n <= 0) {
      ++quiet;
      continue;
    }
    quiet = 0;
    for (int i = 0; i < n; ++i) {
      auto* s = static_cast<tcp::TcpStream*>(evs[i].data.ptr);
      s->owner->onReadable(*s);
      if (s->eof) quiet = 2;
    }
  }
  conn.reset();
  for (Request& r : reqs)
    if (!r.finished()) std::abort();  // closing the connection must finish every receive
  return 0;
}
