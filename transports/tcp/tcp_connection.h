// tcp_connection.h: one peer over TCP, striped over one or more sockets (streams).
//
// Wire format: every segment is a 40-byte FrameHeader followed by `len` payload bytes. A message of `total`
// bytes is cut into segments (each carries its offset), spread over the streams by queued bytes, and
// reassembled by tag on the other side, so large messages use every socket at once. The receive side reads
// payload straight into the posted buffer when the receive was posted before the data came; otherwise into a
// buffer of its own, copied out when the receive is posted. The receiver always reads: it never leaves data in
// the kernel waiting for a receive, because a rank only posts the next operation's receives once its own sends
// have drained, and a receiver that stopped reading could close that loop into a deadlock across the ring (seen
// with pipelined operations on streams). Early data therefore costs one extra copy; schedules post receives
// early to keep it rare.
//
// Threading: only the progress engine thread calls a connection (and the transport's progress()).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "transports/buffer_pool.h"
#include "transports/inbound.h"
#include "transports/transport.h"

namespace hetcomm::transport::tcp {

struct FrameHeader {
  static constexpr uint32_t kMagic = 0x46544348;  // "HCTF"
  enum Flags : uint16_t { kData = 0, kAbort = 1 };
  uint32_t magic = kMagic;
  uint16_t flags = kData;
  uint16_t reserved = 0;
  uint32_t len = 0;  // payload bytes of this segment
  uint32_t pad = 0;
  uint64_t tag = 0;
  uint64_t total = 0;   // bytes of the whole message
  uint64_t offset = 0;  // of this segment within the message
};
static_assert(sizeof(FrameHeader) == 40);

class TcpConnection;

// The longest congestion control name the kernel takes, its terminating zero included (TCP_CA_NAME_MAX).
inline constexpr size_t kCongestionNameMax = 16;
// A TCP socket's congestion control ("reno", "bbr"; "?" when the kernel does not say).
std::string congestionOf(int fd);

// Striping over several paths (multi-rail): no path gets a share smaller than kMinStripeBytes (a frame's overhead
// and a socket's wake-up are not worth less), and shares are whole pages.
inline constexpr size_t kMinStripeBytes = 32 << 10;
inline constexpr size_t kStripeAlign = 4096;

// How a message of `total` bytes is cut over paths of these weights (their rates): shares in proportion, so every
// path finishes its part at the same time. Fixed 128 KiB segments, each to the path with the fewest bytes per
// weight so far, left a 512 KiB message on rails of 69, 198 and 342 Mbit/s taking 9.2 ms instead of 6.9 (the
// fast rail got three segments, the middle one one, the slow one none). The slowest paths sit a message out while
// their share would be under kMinStripeBytes; the fastest takes what page rounding leaves. Empty: the message is
// too small to cut (one socket takes it whole).
std::vector<size_t> stripeShares(size_t total, std::span<const double> weights);

// One socket of a connection, with its own send queue and receive state machine.
struct TcpStream {
  struct Segment {
    Request* req;
    FrameHeader hdr;
    const std::byte* data;
    size_t sent = 0;  // of header + payload
  };

  TcpStream(TcpConnection* owner, boost::asio::ip::tcp::socket sock, int index);
  int fd() const { return fd_; }

  TcpConnection* owner;
  boost::asio::ip::tcp::socket sock;
  int index;
  double weight = 1;         // share of large messages (multi-rail); 0: only messages sent over its path
  int path = -1;             // Transport::Path::id of the address it reaches the peer at (-1: none listed)
  double assignedBytes = 0;  // payload bytes given to this socket so far: segments go where this / weight is least
  int fd_;

  std::deque<Segment> sendq;
  size_t queuedBytes = 0;
  bool wantWrite = false;  // EPOLLOUT registered

  // Received bytes not yet parsed: [begin, end) of stagingBytes. Not zeroed: only what was read is ever parsed.
  std::unique_ptr<std::byte[]> staging;
  size_t stagingBytes;
  size_t begin = 0, end = 0;
  bool inPayload = false;
  FrameHeader cur;
  size_t curDone = 0;  // payload bytes of cur consumed
  bool eof = false;
};

class TcpConnection final : public Connection {
 public:
  // via[i]: the address at the peer's end of socket i; weights[i]: its share of large messages (multi-rail), 0
  // for a socket that carries only messages sent over its path; paths[i]: that path's id (isendOn), -1 if none.
  // What a transport's connections share with it. Null: every send is written at once, and nobody reads the
  // sockets but the owner of the epoll set.
  struct Hub {
    // Connections whose sends wait for the transport's flush() (TcpTransport::flush): a send only queues its
    // segments and lists the connection here.
    std::vector<TcpConnection*> toFlush;
    // Every connection, while it lives: the transport reads their sockets directly when they are few.
    std::vector<TcpConnection*> live;
  };

  TcpConnection(int epollFd, int myRank, int peer, std::vector<boost::asio::ip::tcp::socket> sockets,
                std::vector<std::string> via, std::vector<double> weights, std::vector<int> paths = {},
                std::shared_ptr<Hub> hub = nullptr);
  ~TcpConnection() override;

  int peer() const override { return peer_; }
  Status isend(Request& req, std::span<const std::byte> buf, uint64_t tag) override;
  // Over the sockets of that path only (all striped ones when it has none).
  Status isendOn(Request& req, std::span<const std::byte> buf, uint64_t tag, int path) override;
  Status irecv(Request& req, std::span<std::byte> buf, uint64_t tag) override;
  void sendAbort(std::string_view reason) noexcept override;
  void close(const Status& why) noexcept override;
  std::string describe() const override;

  // Called by the transport's progress() for a ready socket.
  void onReadable(TcpStream& s);
  void onWritable(TcpStream& s);
  // Writes the segments queued since the last flush (the transport's flush() and progress()).
  void flushQueued();
  // Sockets still open for reading.
  size_t openSockets() const { return broken_.ok() ? streams_.size() - eofStreams_ : 0; }
  // Reads every open socket without asking epoll which are ready (an empty one costs one system call), and
  // writes to those waiting for room.
  void pollSockets();

 private:
  using Inbound = InboundMessages::Message;

  struct Piece {
    TcpStream* stream;
    size_t offset, len;
  };
  // Cuts buf into segments over the sockets `use` accepts.
  template <class Use>
  Status send(Request& req, std::span<const std::byte> buf, uint64_t tag, Use use);
  template <class Use>
  void stripe(size_t total, Use use, std::vector<Piece>& pieces);
  void flush(TcpStream& s);
  void setWantWrite(TcpStream& s, bool want);

  // Parses staged bytes; returns false when the stream's data is garbage (connection failed).
  bool parse(TcpStream& s);
  Inbound* beginSegment(const FrameHeader& h);
  void payloadArrived(const FrameHeader& h, size_t n);
  void fail(Status why);
  void streamEof(TcpStream& s);
  Status peerGone() const;

  int epollFd_;
  bool multiPath_ = false;  // sockets reach the peer over more than one path (multi-rail)
  int myRank_;
  int peer_;
  std::string via_;
  std::vector<std::unique_ptr<TcpStream>> streams_;
  std::vector<Piece> pieces_;  // send()'s scratch: where the segments of the message being queued go
  InboundMessages inbound_;
  std::shared_ptr<Hub> hub_;
  bool listed_ = false;  // in hub_->toFlush
  Status broken_;        // once set, every new request fails with it
  size_t eofStreams_ = 0;

  std::string abortReason_;  // reassembled abort frame payload
};

}  // namespace hetcomm::transport::tcp
