#include "transports/tcp/tcp_connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/buffer.hpp>
#include <chrono>
#include <cstring>
#include <mutex>

#include "common/deadline.h"
#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::transport::tcp {

namespace asio = boost::asio;

namespace {
constexpr size_t kStagingBytes = 256 << 10;
// Messages up to this size go whole on one socket; larger ones are cut into segments of this size and spread
// over the sockets, so one message can use them all.
constexpr size_t kSegmentBytes = 512 << 10;
// Over several rails, smaller: a collective's message is often one pipelining chunk (512 KiB), and whole on one
// rail it would leave the others idle whenever it is the only one in flight (a chain, a 2-host exchange).
constexpr size_t kMultiRailSegmentBytes = 128 << 10;
// A direct read into the destination pays off once this much payload is left.
constexpr size_t kDirectReadBytes = 32 << 10;
// Per socket and progress() call, so one busy peer cannot starve the others.
constexpr size_t kReadBudgetBytes = 8 << 20;
constexpr size_t kMaxAbortReason = 1024;
// sendAbort finishes a frame in flight before its abort frame when at most this much of it is left, within this
// long (the peer is alive and reading, or the write fails at once).
constexpr size_t kAbortFinishBytes = 8 << 20;
constexpr int64_t kAbortFinishMs = 200;
constexpr size_t kMaxIov = 32;

}  // namespace

TcpStream::TcpStream(TcpConnection* o, asio::ip::tcp::socket s, int i)
    : owner(o),
      sock(std::move(s)),
      index(i),
      fd_(sock.native_handle()),
      staging(std::make_unique_for_overwrite<std::byte[]>(kStagingBytes)),
      stagingBytes(kStagingBytes) {}

TcpConnection::TcpConnection(int epollFd, int myRank, int peer, std::vector<asio::ip::tcp::socket> sockets,
                             std::vector<std::string> via, std::vector<double> weights, std::vector<int> paths,
                             std::shared_ptr<Hub> hub)
    : epollFd_(epollFd), myRank_(myRank), peer_(peer), inbound_("tcp", myRank, peer), hub_(std::move(hub)) {
  if (hub_) hub_->live.push_back(this);
  for (size_t i = 0; i < sockets.size(); ++i) {
    auto s = std::make_unique<TcpStream>(this, std::move(sockets[i]), static_cast<int>(i));
    if (i < weights.size() && weights[i] >= 0) s->weight = weights[i];
    if (i < paths.size()) s->path = paths[i];
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = s.get();
    if (epoll_ctl(epollFd_, EPOLL_CTL_ADD, s->fd(), &ev) != 0) {
      broken_ = errnoStatus(errno, "tcp: epoll_ctl add for rank %d", peer_);
      HC_WARN("%s", broken_.toString().c_str());
    }
    streams_.push_back(std::move(s));
  }
  // "10.1.0.2" or, over several paths, "10.1.0.2 (2/3), 10.2.0.2 (1/3)": what logs and errors name.
  std::vector<std::string> addrs;
  for (const auto& a : via)
    if (std::find(addrs.begin(), addrs.end(), a) == addrs.end()) addrs.push_back(a);
  double total = 0;
  for (auto& s : streams_) total += s->weight;
  // Only paths that share ordinary messages stripe them by weight.
  std::vector<std::string> striped;
  for (size_t i = 0; i < via.size() && i < streams_.size(); ++i)
    if (streams_[i]->weight > 0 && std::find(striped.begin(), striped.end(), via[i]) == striped.end())
      striped.push_back(via[i]);
  multiPath_ = striped.size() > 1;
  for (const auto& a : addrs) {
    double share = 0;
    for (size_t i = 0; i < via.size() && i < streams_.size(); ++i)
      if (via[i] == a) share += streams_[i]->weight;
    via_ += (via_.empty() ? "" : ", ") + a +
            (addrs.size() > 1 ? format(" (%.0f%%)", total > 0 ? 100 * share / total : 0.0) : "");
  }
}

TcpConnection::~TcpConnection() {
  close(invalidUsage("connection to rank %d closed", peer_));
  if (hub_) {
    if (listed_) std::erase(hub_->toFlush, this);
    std::erase(hub_->live, this);
  }
}

std::string congestionOf(int fd) {
  char name[kCongestionNameMax] = {};
  socklen_t len = sizeof(name);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "?";
  return std::string(name, strnlen(name, std::min<size_t>(len, sizeof(name))));
}

std::string TcpConnection::describe() const {
  std::vector<std::string> congestion;  // each one the sockets use, once
  for (const auto& s : streams_)
    if (std::string cc = congestionOf(s->fd()); std::find(congestion.begin(), congestion.end(), cc) == congestion.end())
      congestion.push_back(std::move(cc));
  return format("r%d->r%d/tcp(%zu socket%s via %s, congestion %s)", myRank_, peer_, streams_.size(),
                streams_.size() == 1 ? "" : "s", via_.c_str(), join(congestion, "/").c_str());
}

Status TcpConnection::peerGone() const {
  if (!abortReason_.empty()) return remoteError("rank %d aborted: %s", peer_, abortReason_.c_str());
  return remoteError("rank %d closed its connection to rank %d (tcp via %s): the peer exited or aborted", peer_,
                     myRank_, via_.c_str());
}

// ---- sending ----

Status TcpConnection::isend(Request& req, std::span<const std::byte> buf, uint64_t tag) {
  const bool anyStriped = std::any_of(streams_.begin(), streams_.end(), [](const auto& s) { return s->weight > 0; });
  return send(req, buf, tag, [&](const TcpStream& s) { return s.weight > 0 || !anyStriped; });
}

Status TcpConnection::isendOn(Request& req, std::span<const std::byte> buf, uint64_t tag, int path) {
  const bool known = std::any_of(streams_.begin(), streams_.end(), [&](const auto& s) { return s->path == path; });
  if (!known) return isend(req, buf, tag);
  return send(req, buf, tag, [&](const TcpStream& s) { return s.path == path; });
}

template <class Use>
Status TcpConnection::send(Request& req, std::span<const std::byte> buf, uint64_t tag, Use use) {
  req.state = Request::State::kPending;
  req.bytes = 0;
  if (!broken_.ok()) {
    req.fail(broken_);
    return okStatus();
  }
  if (eofStreams_ > 0) {
    req.fail(peerGone());
    return okStatus();
  }
  const size_t total = buf.size();
  std::vector<Piece>& pieces = pieces_;
  pieces.clear();
  if (multiPath_) stripe(total, use, pieces);
  if (pieces.empty()) {
    const size_t seg = multiPath_ ? kMultiRailSegmentBytes : kSegmentBytes;
    const size_t nseg = total <= seg ? 1 : (total + seg - 1) / seg;
    for (size_t i = 0; i < nseg; ++i) {
      size_t off = i * seg;
      size_t len = nseg == 1 ? total : std::min(seg, total - off);
      // One path: the socket with the fewest queued bytes, which keeps a message off a socket still busy with an
      // earlier one. Several paths (multi-rail) and a message too small to stripe: the socket given the fewest
      // bytes per unit of weight, so every path carries its share however fast each kernel buffer swallows data
      // (by queued bytes alone the first socket would look idle, its kernel buffer taking megabytes at once).
      TcpStream* s = nullptr;
      auto load = [&](const TcpStream& t) {
        return multiPath_ && t.weight > 0 ? (t.assignedBytes + static_cast<double>(len)) / t.weight
                                          : static_cast<double>(t.queuedBytes);
      };
      for (auto& cand : streams_)
        if (use(*cand) && (!s || load(*cand) < load(*s))) s = cand.get();
      pieces.push_back({s, off, len});
    }
  }
  req.pending = pieces.size();
  uint32_t touched = 0;  // bit i: stream i got a segment
  for (const Piece& p : pieces) {
    TcpStream* s = p.stream;
    s->assignedBytes += static_cast<double>(p.len);
    FrameHeader h;
    h.len = static_cast<uint32_t>(p.len);
    h.tag = tag;
    h.total = total;
    h.offset = p.offset;
    s->sendq.push_back({&req, h, buf.data() + p.offset, 0});
    s->queuedBytes += p.len + sizeof(FrameHeader);
    touched |= 1u << (s->index & 31);
  }
  if (hub_) {  // written at the transport's flush(), with whatever else this pass queues
    if (!listed_) hub_->toFlush.push_back(this);
    listed_ = true;
    return okStatus();
  }
  for (auto& s : streams_)
    if (touched & (1u << (s->index & 31))) flush(*s);
  return okStatus();
}

void TcpConnection::flushQueued() {
  listed_ = false;
  for (auto& s : streams_)
    if (!s->sendq.empty() && !s->wantWrite) flush(*s);  // a socket waiting for EPOLLOUT is flushed when writable
}

std::vector<size_t> stripeShares(size_t total, std::span<const double> weights) {
  std::vector<size_t> order(weights.size());  // fastest first
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weights[a] > weights[b]; });
  while (!order.empty() && !(weights[order.back()] > 0)) order.pop_back();
  auto weightOf = [&] {
    double w = 0;
    for (size_t i : order) w += weights[i];
    return w;
  };
  while (order.size() > 1 && static_cast<double>(total) * weights[order.back()] / weightOf() < kMinStripeBytes)
    order.pop_back();  // the slowest path's share is too small: it sits this message out
  if (order.size() < 2) return {};
  const double w = weightOf();
  std::vector<size_t> share(weights.size(), 0);
  size_t given = 0;
  for (size_t k = 1; k < order.size(); ++k) {  // page-aligned shares; the fastest path takes what rounding leaves
    const double exact = static_cast<double>(total) * weights[order[k]] / w;
    share[order[k]] = static_cast<size_t>(exact) / kStripeAlign * kStripeAlign;
    given += share[order[k]];
  }
  share[order[0]] = total - given;
  return share;
}

// Several paths: stripeShares over the striped sockets `use` accepts, each share in segments so a frame never
// holds a socket long; appended to pieces (nothing when the message is not cut).
template <class Use>
void TcpConnection::stripe(size_t total, Use use, std::vector<Piece>& pieces) {
  std::vector<TcpStream*> cands;
  std::vector<double> weights;
  for (auto& s : streams_)
    if (use(*s) && s->weight > 0) {
      cands.push_back(s.get());
      weights.push_back(s->weight);
    }
  size_t off = 0;
  const std::vector<size_t> shares = stripeShares(total, weights);
  for (size_t i = 0; i < shares.size(); ++i)
    for (size_t left = shares[i]; left > 0;) {
      const size_t len = std::min(left, kMultiRailSegmentBytes);
      pieces.push_back({cands[i], off, len});
      off += len;
      left -= len;
    }
}

void TcpConnection::setWantWrite(TcpStream& s, bool want) {
  if (s.wantWrite == want || !s.sock.is_open() || s.eof) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (want ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.ptr = &s;
  if (epoll_ctl(epollFd_, EPOLL_CTL_MOD, s.fd(), &ev) != 0) {
    fail(errnoStatus(errno, "tcp: epoll_ctl mod for rank %d", peer_));
    return;
  }
  s.wantWrite = want;
}

void TcpConnection::flush(TcpStream& s) {
  std::array<asio::const_buffer, kMaxIov> iov;
  while (!s.sendq.empty() && broken_.ok()) {
    size_t n = 0;
    for (auto it = s.sendq.begin(); it != s.sendq.end() && n + 2 <= kMaxIov; ++it) {
      size_t hdrLeft = it->sent < sizeof(FrameHeader) ? sizeof(FrameHeader) - it->sent : 0;
      if (hdrLeft) iov[n++] = asio::const_buffer(reinterpret_cast<const char*>(&it->hdr) + it->sent, hdrLeft);
      size_t paySent = it->sent > sizeof(FrameHeader) ? it->sent - sizeof(FrameHeader) : 0;
      if (it->hdr.len > paySent) iov[n++] = asio::const_buffer(it->data + paySent, it->hdr.len - paySent);
    }
    boost::system::error_code ec;
    size_t wrote = s.sock.write_some(std::span(iov.data(), n), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      setWantWrite(s, true);
      return;
    }
    if (ec == asio::error::interrupted) continue;
    if (ec) {
      // The peer may have said why it went away before closing: read that first, for a better message.
      if (!s.eof) onReadable(s);
      if (broken_.ok())
        fail(remoteError("send to rank %d over tcp (via %s) failed: %s", peer_, via_.c_str(), ec.message().c_str()));
      return;
    }
    s.queuedBytes -= std::min(s.queuedBytes, wrote);
    while (wrote > 0) {  // retire what the kernel took
      auto& seg = s.sendq.front();
      size_t take = std::min(sizeof(FrameHeader) + seg.hdr.len - seg.sent, wrote);
      seg.sent += take;
      wrote -= take;
      if (seg.sent < sizeof(FrameHeader) + seg.hdr.len) break;
      Request* req = seg.req;
      uint64_t total = seg.hdr.total;
      s.sendq.pop_front();
      if (--req->pending == 0) req->succeed(total);
    }
  }
  setWantWrite(s, false);
}

void TcpConnection::onWritable(TcpStream& s) { flush(s); }

void TcpConnection::pollSockets() {
  for (auto& s : streams_) {
    if (!broken_.ok()) return;
    if (s->eof) continue;
    onReadable(*s);
    if (s->wantWrite && broken_.ok()) flush(*s);
  }
}

namespace {
// Writes all of bufs on a non-blocking socket, waiting for room until the deadline. False when it could not.
bool writeFully(asio::ip::tcp::socket& sock, std::vector<asio::const_buffer> bufs, Deadline deadline) {
  while (!bufs.empty()) {
    boost::system::error_code ec;
    size_t wrote = sock.write_some(bufs, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      pollfd p{sock.native_handle(), POLLOUT, 0};
      if (deadline.expired() || ::poll(&p, 1, std::max(1, deadline.msLeft())) < 0) return false;
      continue;
    }
    if (ec && ec != asio::error::interrupted) return false;
    while (wrote > 0 && !bufs.empty()) {  // drop what the kernel took
      const size_t take = std::min(wrote, bufs.front().size());
      bufs.front() += take;
      wrote -= take;
      if (bufs.front().size() == 0) bufs.erase(bufs.begin());
    }
  }
  return true;
}
}  // namespace

void TcpConnection::sendAbort(std::string_view reason) noexcept {
  if (!broken_.ok() || eofStreams_ > 0) return;
  // The reason goes on a socket between frames: one whose queue is empty or has not started its first segment.
  // When every socket is in the middle of a frame (large messages streaming), the one closest to a frame's end
  // finishes that frame first, within a short bound: the peer should learn why, not only that this rank went away
  // (it would blame this rank for what another one caused).
  TcpStream* best = nullptr;
  size_t bestLeft = SIZE_MAX;
  for (auto& s : streams_) {
    if (!s->sock.is_open()) continue;
    const size_t left = s->sendq.empty() ? 0 : sizeof(FrameHeader) + s->sendq.front().hdr.len - s->sendq.front().sent;
    const bool atBoundary = s->sendq.empty() || s->sendq.front().sent == 0;
    const size_t cost = atBoundary ? 0 : left;
    if (cost < bestLeft) best = s.get(), bestLeft = cost;
  }
  if (!best || bestLeft > kAbortFinishBytes) return;
  // One budget for every connection an abort reaches: a communicator aborts all its connections in turn, on the
  // engine thread, and peers that do not read would otherwise cost kAbortFinishMs each.
  static std::mutex budgetMu;
  static std::chrono::steady_clock::time_point budgetEnd{};
  Deadline deadline = Deadline::never();
  {
    std::lock_guard<std::mutex> lock(budgetMu);
    const auto now = std::chrono::steady_clock::now();
    if (now > budgetEnd + std::chrono::seconds(1)) budgetEnd = now + std::chrono::milliseconds(kAbortFinishMs);
    deadline = Deadline::afterMs(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(budgetEnd - now).count()));
  }
  std::vector<asio::const_buffer> rest;
  if (bestLeft > 0) {
    const TcpStream::Segment& seg = best->sendq.front();
    const size_t hdrLeft = seg.sent < sizeof(FrameHeader) ? sizeof(FrameHeader) - seg.sent : 0;
    if (hdrLeft) rest.emplace_back(reinterpret_cast<const char*>(&seg.hdr) + seg.sent, hdrLeft);
    const size_t paySent = seg.sent > sizeof(FrameHeader) ? seg.sent - sizeof(FrameHeader) : 0;
    if (seg.hdr.len > paySent) rest.emplace_back(seg.data + paySent, seg.hdr.len - paySent);
  }
  std::string text(reason.substr(0, kMaxAbortReason));
  FrameHeader h;
  h.flags = FrameHeader::kAbort;
  h.len = static_cast<uint32_t>(text.size());
  h.total = text.size();
  rest.emplace_back(&h, sizeof(h));
  rest.emplace_back(text.data(), text.size());
  // Best effort: the connection closes next whatever happens. (The front segment stays queued; closing fails it.)
  (void)writeFully(best->sock, std::move(rest), deadline);
}

// ---- receiving ----

Status TcpConnection::irecv(Request& req, std::span<std::byte> buf, uint64_t tag) {
  const Status closed = !broken_.ok() ? broken_ : eofStreams_ == streams_.size() ? peerGone() : okStatus();
  return inbound_.post(req, buf, tag, closed).status();
}

TcpConnection::Inbound* TcpConnection::beginSegment(const FrameHeader& h) {
  Result<Inbound*> in = inbound_.frame(h.tag, h.total, h.offset, h.len);
  if (!in) {
    fail(in.error());
    return nullptr;
  }
  return *in;
}

void TcpConnection::payloadArrived(const FrameHeader& h, size_t n) {
  Inbound* in = inbound_.find(h.tag);
  HC_CHECK(in != nullptr);
  inbound_.landed(h.tag, *in, n);
}

bool TcpConnection::parse(TcpStream& s) {
  while (s.begin < s.end) {
    if (!s.inPayload) {
      size_t avail = s.end - s.begin;
      if (avail < sizeof(FrameHeader)) break;
      FrameHeader h;
      std::memcpy(&h, s.staging.get() + s.begin, sizeof(h));
      if (h.magic != FrameHeader::kMagic) {
        fail(remoteError("rank %d sent garbage on tcp (bad frame magic %#x)", peer_, h.magic));
        return false;
      }
      if (h.flags == FrameHeader::kAbort) {
        if (h.len > kMaxAbortReason) {
          fail(remoteError("rank %d sent an oversized abort frame", peer_));
          return false;
        }
        if (avail < sizeof(h) + h.len) break;  // wait for the whole reason
        abortReason_.assign(reinterpret_cast<const char*>(s.staging.get() + s.begin + sizeof(h)), h.len);
        if (abortReason_.empty()) abortReason_ = "no reason given";
        s.begin += sizeof(h) + h.len;
        fail(peerGone());
        return false;
      }
      s.begin += sizeof(h);
      s.cur = h;
      s.curDone = 0;
      if (!beginSegment(h)) return false;
      s.inPayload = true;
      if (h.len == 0) {
        s.inPayload = false;
        payloadArrived(h, 0);
      }
      continue;
    }
    Inbound& in = *inbound_.find(s.cur.tag);
    size_t n = std::min(s.end - s.begin, static_cast<size_t>(s.cur.len) - s.curDone);
    std::memcpy(in.base() + s.cur.offset + s.curDone, s.staging.get() + s.begin, n);
    s.begin += n;
    s.curDone += n;
    if (s.curDone == s.cur.len) s.inPayload = false;
    payloadArrived(s.cur, n);
  }
  // Keep a partial header at the front so the next read appends to it.
  if (s.begin == s.end) {
    s.begin = s.end = 0;
  } else if (s.begin > 0) {
    std::memmove(s.staging.get(), s.staging.get() + s.begin, s.end - s.begin);
    s.end -= s.begin;
    s.begin = 0;
  }
  return true;
}

void TcpConnection::onReadable(TcpStream& s) {
  size_t budget = kReadBudgetBytes;
  while (budget > 0 && broken_.ok() && !s.eof) {
    boost::system::error_code ec;
    size_t n, asked;
    bool direct = false;
    if (s.inPayload && s.begin == s.end && s.cur.len - s.curDone >= kDirectReadBytes) {
      // The rest of this segment goes straight to where it belongs.
      Inbound& in = *inbound_.find(s.cur.tag);
      std::byte* dst = in.base() + s.cur.offset + s.curDone;
      asked = s.cur.len - s.curDone;
      n = s.sock.read_some(asio::buffer(dst, asked), ec);
      direct = true;
    } else {
      asked = s.stagingBytes - s.end;
      n = s.sock.read_some(asio::buffer(s.staging.get() + s.end, asked), ec);
    }
    if (ec == asio::error::would_block || ec == asio::error::try_again) return;
    if (ec == asio::error::interrupted) continue;
    if (ec == asio::error::eof) {
      streamEof(s);
      return;
    }
    if (ec) {
      fail(remoteError("receive from rank %d over tcp (via %s) failed: %s (the peer died?)", peer_, via_.c_str(),
                       ec.message().c_str()));
      return;
    }
    budget -= std::min(budget, n);
    if (direct) {
      s.curDone += n;
      if (s.curDone == s.cur.len) s.inPayload = false;
      payloadArrived(s.cur, n);
    } else {
      s.end += n;
      if (!parse(s)) return;
    }
    // A short read emptied the socket: another read would only say so (a system call per message). Whatever
    // comes next makes the socket readable again.
    if (n < asked) return;
  }
}

void TcpConnection::streamEof(TcpStream& s) {
  s.eof = true;
  epoll_ctl(epollFd_, EPOLL_CTL_DEL, s.fd(), nullptr);  // an EOF socket is always readable: stop watching it
  ++eofStreams_;
  if (s.inPayload || s.begin != s.end) {
    fail(remoteError("rank %d closed its tcp connection in the middle of a message (the peer died?)", peer_));
    return;
  }
  if (eofStreams_ < streams_.size()) return;
  // The peer closed every socket, so everything it sent is here. Receives that are still waiting never complete.
  Status gone = peerGone();
  inbound_.failAll(gone, /*keepEarly=*/true);
  for (auto& st : streams_) {
    for (auto& seg : st->sendq) seg.req->fail(gone);
    st->sendq.clear();
    st->queuedBytes = 0;
  }
}

void TcpConnection::fail(Status why) {
  if (!broken_.ok()) return;
  broken_ = why;
  HC_TRACE(Net, "tcp: connection to rank %d failed: %s", peer_, why.toString().c_str());
  inbound_.failAll(why, /*keepEarly=*/false);
  for (auto& s : streams_) {
    for (auto& seg : s->sendq) seg.req->fail(why);
    s->sendq.clear();
    s->queuedBytes = 0;
    if (s->sock.is_open()) {
      if (!s->eof) epoll_ctl(epollFd_, EPOLL_CTL_DEL, s->fd(), nullptr);
      boost::system::error_code ec;
      // Closing tells the peer at once, so its pending receives fail now rather than at its timeout.
      s->sock.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
      s->sock.close(ec);
    }
  }
}

void TcpConnection::close(const Status& why) noexcept { fail(why); }

}  // namespace hetcomm::transport::tcp
