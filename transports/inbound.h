// inbound.h: the receive half of tag matching, shared by the transports that carry framed byte streams (tcp,
// shm). A receive (irecv) and the message's frames may come in either order; whichever comes second finds the
// first here, by tag.
//
//   - A receive posted before its message: the payload lands in the caller's buffer directly.
//   - A message before its receive (early): the payload waits in a pooled buffer and is copied out when the
//     receive is posted.
//   - Another size than the receive's: the receive fails with sizeMismatch (the same words on every transport) and
//     the message is read and thrown away.
//   - A rendezvous message (shm cross-memory attach): only its announcement arrives; the data waits in the sender's
//     memory until the receiver pulls it, which the transport does.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>

#include "common/status.h"
#include "transports/buffer_pool.h"
#include "transports/transport.h"

namespace hetcomm::transport {

class InboundMessages {
 public:
  struct Message {
    Request* req = nullptr;     // the posted receive; null until posted (an early message)
    std::span<std::byte> user;  // its buffer
    bool haveHeader = false;    // the first frame came: total is known
    bool intoUser = false;      // the payload lands in `user` directly
    bool complete = false;      // every byte is here
    bool discard = false;       // its receive was refused (another size): read it and throw it away
    bool rendezvous = false;    // the data waits at the sender, at `remote`
    uint64_t remote = 0;
    uint64_t total = 0, received = 0;
    BufferPool::Lease buf;  // the payload when not intoUser
    std::byte* base() { return intoUser ? user.data() : buf.get(); }
  };

  // transport ("tcp"): for messages; me and peer: the ranks of the two ends.
  InboundMessages(const char* transport, int me, int peer) : transport_(transport), me_(me), peer_(peer) {}

  // irecv. What the receive found, and what the transport still has to do:
  enum class Posted {
    kWaiting,            // its message has not (all) come: finish() completes it later
    kDone,               // the receive finished: its message was here whole, or (closed) it failed
    kRefused,            // its message has another size: the receive failed (sizeMismatch)
    kPull,               // a rendezvous message of the right size: the transport pulls it (*msg)
    kRefusedRendezvous,  // a rendezvous message of another size, now forgotten: the transport lets the sender go
  };
  // A receive for a tag nobody sent yet is refused with `closed` when that is not ok (the connection is broken or
  // the peer is gone), since its message can never come; messages that already came are still delivered. Posting a
  // second receive for a tag is an internal error.
  Result<Posted> post(Request& req, std::span<std::byte> buf, uint64_t tag, const Status& closed,
                      Message** msg = nullptr);

  // The first or a later frame of a message of `total` bytes, carrying [offset, offset + len): the message it
  // belongs to (its payload goes to base() + offset). A remote error (the connection is done for) when the frame
  // contradicts the message (another total, or out of range: the peer sent garbage), or when a message nobody
  // posted a receive for would take the early messages past HETCOMM_EARLY_MAX_BYTES: a peer's header must not make
  // this process allocate what the peer never sends.
  Result<Message*> frame(uint64_t tag, uint64_t total, uint64_t offset, uint64_t len);
  // A rendezvous announcement: the message's data waits at the sender's `remote`. Returns its entry; a receive
  // that waits for it with another size has failed and the entry is gone (nullptr: let the sender go).
  Message* announce(uint64_t tag, uint64_t total, uint64_t remote);
  // n more bytes of a message landed; completes it when all have.
  void landed(uint64_t tag, Message& m, size_t n);
  // The message is all here (or pulled): its receive completes, or it waits for one.
  void finish(uint64_t tag, Message& m);
  void erase(uint64_t tag) { messages_.erase(tag); }
  Message* find(uint64_t tag);

  // Fails every posted receive with why and forgets the messages, except (keepEarly) those that are here whole
  // and wait for a receive: a peer that exited cleanly still delivers what it sent.
  void failAll(const Status& why, bool keepEarly);
  // A posted receive still waits for its data.
  bool anyWaiting() const;

 private:
  const char* transport_;
  int me_, peer_;
  BufferPool early_;  // before messages_, whose leases return to it
  std::unordered_map<uint64_t, Message> messages_;
};

}  // namespace hetcomm::transport
