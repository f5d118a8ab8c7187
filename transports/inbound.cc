#include "transports/inbound.h"

#include <cstring>

#include "common/param.h"

namespace hetcomm::transport {

// Bytes of messages that may wait for their receives, per connection. Schedules post receives first, so early
// messages are small and few; the bound is what keeps a garbled or hostile header from asking for terabytes.
HC_PARAM_INT(earlyMaxBytes, "EARLY_MAX_BYTES", int64_t{16} << 30)

Result<InboundMessages::Posted> InboundMessages::post(Request& req, std::span<std::byte> buf, uint64_t tag,
                                                      const Status& closed, Message** msg) {
  req.state = Request::State::kPending;
  req.bytes = 0;
  auto it = messages_.find(tag);
  if (it == messages_.end()) {
    if (!closed.ok()) {
      req.fail(closed);
      return Posted::kDone;
    }
    Message& m = messages_[tag];
    m.req = &req;
    m.user = buf;
    return Posted::kWaiting;
  }
  Message& m = it->second;
  if (m.req || m.discard)
    return internalError(
        "%s: a receive with tag %#llx from rank %d is already posted (or its refused message is "
        "still arriving)",
        transport_, (unsigned long long)tag, peer_);
  if (m.total != buf.size()) {
    req.fail(sizeMismatch(peer_, m.total, tag, me_, buf.size()));
    if (m.rendezvous) {
      messages_.erase(it);
      return Posted::kRefusedRendezvous;
    }
    if (m.complete)
      messages_.erase(it);
    else
      m.discard = true;  // still arriving: finish() throws it away
    return Posted::kRefused;
  }
  m.req = &req;
  m.user = buf;
  if (msg) *msg = &m;
  if (m.rendezvous) return Posted::kPull;
  if (!m.complete) return Posted::kWaiting;  // partly here: lands in m.buf, copied out when complete
  finish(tag, m);
  return Posted::kDone;
}

Result<InboundMessages::Message*> InboundMessages::frame(uint64_t tag, uint64_t total, uint64_t offset, uint64_t len) {
  auto malformed = [&] {
    return remoteError("rank %d sent a malformed %s frame (tag %#llx, offset %llu, len %llu, total %llu)", peer_,
                       transport_, (unsigned long long)tag, (unsigned long long)offset, (unsigned long long)len,
                       (unsigned long long)total);
  };
  auto it = messages_.find(tag);
  if (it == messages_.end() || !it->second.haveHeader) {
    if (offset > total || len > total - offset) return malformed();
    Message& m = messages_[tag];
    m.haveHeader = true;
    m.total = total;
    if (m.req && m.user.size() == total) {
      m.intoUser = true;
      return &m;
    }
    if (m.req) {
      m.req->fail(sizeMismatch(peer_, total, tag, me_, m.user.size()));
      m.req = nullptr;
      m.discard = true;
    }
    const uint64_t limit = static_cast<uint64_t>(earlyMaxBytes());
    if (total > limit || early_.leasedBytes() > limit - total)
      return remoteError(
          "rank %d sent a %llu-byte %s message (tag %#llx) before its receive was posted, and messages waiting "
          "for their receives already hold %llu bytes: at most HETCOMM_EARLY_MAX_BYTES=%llu may wait (raise it, "
          "or post receives before the sends)",
          peer_, (unsigned long long)total, transport_, (unsigned long long)tag,
          (unsigned long long)early_.leasedBytes(), (unsigned long long)limit);
    m.buf = early_.take(total);
    if (!m.buf.get())
      return systemError("cannot allocate %llu bytes for a %s message from rank %d that came before its receive",
                         (unsigned long long)total, transport_, peer_);
    return &m;
  }
  Message& m = it->second;
  // Frames of another message on the tag (one announced for a pull, or one here whole already: a tag is used once
  // until received; found by fuzz_shm_frames, a data frame after an attach announcement), or outside this one.
  if (m.rendezvous || m.complete || total != m.total || offset > m.total || len > m.total - offset) return malformed();
  return &m;
}

InboundMessages::Message* InboundMessages::announce(uint64_t tag, uint64_t total, uint64_t remote) {
  Message& m = messages_[tag];
  m.rendezvous = true;
  m.haveHeader = true;
  m.remote = remote;
  m.total = total;
  if (m.req && m.user.size() != total) {
    m.req->fail(sizeMismatch(peer_, total, tag, me_, m.user.size()));
    messages_.erase(tag);
    return nullptr;
  }
  return &m;
}

void InboundMessages::landed(uint64_t tag, Message& m, size_t n) {
  m.received += n;
  if (m.received == m.total) finish(tag, m);
}

void InboundMessages::finish(uint64_t tag, Message& m) {
  m.complete = true;
  if (m.discard) {
    messages_.erase(tag);
    return;
  }
  if (!m.req) return;  // arrived early: waits for its receive
  if (!m.intoUser && !m.rendezvous && m.total) std::memcpy(m.user.data(), m.buf.get(), m.total);
  Request* req = m.req;
  const uint64_t total = m.total;
  messages_.erase(tag);
  req->succeed(total);
}

InboundMessages::Message* InboundMessages::find(uint64_t tag) {
  auto it = messages_.find(tag);
  return it == messages_.end() ? nullptr : &it->second;
}

void InboundMessages::failAll(const Status& why, bool keepEarly) {
  for (auto it = messages_.begin(); it != messages_.end();) {
    Message& m = it->second;
    if (keepEarly && m.complete && !m.req && !m.rendezvous) {
      ++it;
      continue;
    }
    if (m.req) m.req->fail(why);
    it = messages_.erase(it);
  }
}

bool InboundMessages::anyWaiting() const {
  for (const auto& [tag, m] : messages_)
    if (m.req && !m.complete) return true;
  return false;
}

}  // namespace hetcomm::transport
