// transport.h: how bytes move between two ranks, and nothing else.
//
// A transport never sees the bootstrap, the topology or the collectives: the communicator calls listen() for a
// blob, ships the blobs through its bootstrap, and hands every peer's blob to connectAll(). After that the
// progress engine (one thread) drives the connections with isend/irecv and progress(), and sleeps in epoll on
// waitFd() when nothing moves.
//
// Messages are matched by tag: a receive with tag T completes with the message the peer sent with tag T, in
// whatever order messages arrive. A tag may be in flight at most once per direction of a connection (the
// collectives derive tags from an operation sequence number and a step, so this holds by construction). Data that
// arrives before its receive is posted is buffered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "common/deadline.h"
#include "common/status.h"

namespace hetcomm::transport {

enum class Kind : uint8_t { kShm, kTcp, kUcx, kVerbs };
const char* kindName(Kind kind);

struct Properties {
  Kind kind = Kind::kTcp;
  std::string name;          // "tcp", "ucx(rc_mlx5)": logs and HETCOMM_TRANSPORT
  double latencyUs = 0;      // nominal alpha; the topology replaces it with a probe result
  double bandwidthGBps = 0;  // nominal 1/beta, GB = 1e9 bytes
};

// What a transport needs to know about the communicator it serves: who this rank is (for names, logs and the
// handshake), the job secret every connection must prove, an id that keeps communicators' connections apart,
// and the bound on waits.
struct Config {
  int rank = 0;
  int nranks = 1;
  crypto::Secret secret{};
  uint64_t commId = 0;
  double timeoutSec = 300;
  std::string hostId;  // this host's identity: peers with the same id may take host-local paths
};

// One send or receive. Owned by the caller, who must keep it (and its buffer) alive until it is done or failed,
// or until the connection is closed; the transport only writes its fields from progress()/isend/irecv.
struct Request {
  enum class State : uint8_t { kIdle, kPending, kDone, kFailed };
  State state = State::kIdle;
  Status error;        // why it failed
  size_t bytes = 0;    // bytes transferred when done
  size_t pending = 0;  // transport-private: bytes still to move
  bool done() const { return state == State::kDone; }
  bool failed() const { return state == State::kFailed; }
  bool finished() const { return state == State::kDone || state == State::kFailed; }

  // For transports: finish it. A finished request stays as it is (the first outcome wins).
  void succeed(size_t n) {
    state = State::kDone;
    bytes = n;
  }
  void fail(const Status& why) {
    if (finished()) return;
    state = State::kFailed;
    error = why;
  }
};

// A connection to one peer. Only the progress engine thread calls it.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual int peer() const = 0;
  // Queue a message; never blocks. Errors of the connection itself come back later in req.error.
  virtual Status isend(Request& req, std::span<const std::byte> buf, uint64_t tag) = 0;
  // The same over one path to the peer (Transport::Path::id): a schedule that spreads its traffic over a host's
  // NICs says which one a message takes. Transports with one way to the peer send as isend does.
  virtual Status isendOn(Request& req, std::span<const std::byte> buf, uint64_t tag, int /*path*/) {
    return isend(req, buf, tag);
  }
  // Post a receive for exactly buf.size() bytes; a message of another size fails the request.
  virtual Status irecv(Request& req, std::span<std::byte> buf, uint64_t tag) = 0;
  // Best effort: tell the peer why this rank gives up, so its pending receives fail with that reason instead
  // of a bare "connection closed". Never blocks.
  virtual void sendAbort(std::string_view reason) noexcept = 0;
  // Fails every pending request with `why` and releases every reference to callers' requests and buffers.
  // Idempotent; never fails.
  virtual void close(const Status& why) noexcept = 0;
  virtual std::string describe() const = 0;  // "r0->r1/tcp(2 sockets)"
  // True when a message of this size from the peer waits in the peer's memory until the receive is posted
  // (single-copy rendezvous): a late receive then costs nothing, while on an eager transport the data arrives
  // anyway and a late receive costs an extra copy. Planners size their staging by it.
  virtual bool lateReceiveIsFree(size_t bytes) const { return false; }
  // Ok while the connection is usable; otherwise why it is not (the peer exited or aborted, a fault). For callers
  // that wait on the peer by other means than a request on this connection (memory the two share).
  virtual Status health() const { return okStatus(); }
};

// The error of a receive whose peer sent another number of bytes: the same words from every transport, since
// users meet it when ranks call a collective with different counts.
Status sizeMismatch(int peer, uint64_t sentBytes, uint64_t tag, int me, size_t expectedBytes);

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const Properties& properties() const = 0;
  // Starts listening; the blob tells peers how to reach this rank.
  virtual Result<std::vector<std::byte>> listen() = 0;
  // Connects to every peer whose blob is given (blobs[i] empty: no connection to rank i wanted). Blocks until
  // all are connected and authenticated, or the deadline passes. Every peer must call it with a consistent set.
  virtual Result<std::vector<std::unique_ptr<Connection>>> connectAll(const std::vector<std::vector<std::byte>>& blobs,
                                                                      Deadline deadline) = 0;
  // Optional, before connectAll: per rank, the paths to the peer the communicator chose from the topology (the
  // peer's address on each fabric the pair uses, with that fabric's relative bandwidth); empty: no preference.
  // Transports that reach peers by IP address (tcp) dial the first path first and, given several (multi-rail),
  // stripe large messages over all of them in proportion to their weights; the others ignore it. A path of weight 0
  // carries only messages sent over it by isendOn; id numbers the path for isendOn (a fabric's addresses share
  // one id).
  struct Path {
    std::string address;
    double weight = 1;
    int id = -1;
  };
  virtual void preferPaths(std::vector<std::vector<Path>> byPeer) {}
  // Moves whatever data can move now on every connection; never blocks. Sends queued since the last call go out
  // first.
  virtual Status progress() = 0;
  // Sends queued by isend since the last progress() go out now. A transport may hold a send back until then, so
  // that the messages a pass queues for one peer (a collective's data and its descriptor, say) leave together in
  // one system call; the engine calls flush() at the end of every pass that issued any. Transports that write in
  // isend do nothing.
  virtual void flush() {}
  // Readable when progress() has work to do; the engine polls it. -1: must be polled.
  virtual int waitFd() const = 0;
  // Called right before the engine sleeps on waitFd(), after a progress() that moved nothing. A transport whose
  // fd must be re-armed (UCX, verbs completion channels) does it here; false means work is already waiting, so
  // the engine must call progress() again instead of sleeping.
  virtual bool armForSleep() { return true; }
};

}  // namespace hetcomm::transport
