// verbs_device.h: what the verbs transport and its connections share. An opened device (context, protection
// domain, completion channel, completion queues, registration cache) and the table that routes each completion to
// its connection by the id packed into wr_id.
//
// Connections hold the Shared state by shared_ptr, so the communicator may destroy transport and connections in
// either order, and a completion that surfaces after its connection is gone finds no entry in the table and is
// dropped instead of touching freed memory.
//
// Threading: only the progress engine thread uses any of it (the registration cache's unmap hook excepted, see
// mr_cache.h).
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "transports/transport.h"
#include "transports/verbs/mr_cache.h"

namespace hetcomm::transport::verbs {

class VerbsConnection;

// wr_id: connection id (32 bits) | kind (8 bits) | index (24 bits: a receive slot, a send slot or a read).
enum class WrKind : uint8_t { kRecv = 1, kSend = 2, kRead = 3 };
constexpr uint32_t kMaxWrIndex = (1u << 24) - 1;
inline uint64_t makeWrId(uint32_t conn, WrKind kind, uint32_t index) {
  return (static_cast<uint64_t>(conn) << 32) | (static_cast<uint64_t>(kind) << 24) | (index & kMaxWrIndex);
}
inline uint32_t wrConn(uint64_t wrId) { return static_cast<uint32_t>(wrId >> 32); }
inline WrKind wrKind(uint64_t wrId) { return static_cast<WrKind>((wrId >> 24) & 0xff); }
inline uint32_t wrIndex(uint64_t wrId) { return static_cast<uint32_t>(wrId & kMaxWrIndex); }

struct Device {
  struct Cq {
    ibv_cq* cq = nullptr;
    int capacity = 0;
    int reserved = 0;    // entries promised to connections
    bool armed = false;  // ibv_req_notify_cq is pending: the next completion raises an event
  };

  std::string name;
  ibv_context* ctx = nullptr;           // its async_fd is non-blocking
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;  // its fd is non-blocking
  ibv_device_attr attr{};
  std::vector<Cq> cqs;
  std::unique_ptr<MrCache> mrCache;
  bool fatal = false;  // IBV_EVENT_DEVICE_FATAL came: nothing on it works any more, nor is it polled

  ~Device();
  // A completion queue with room for `entries` more completions (one connection's queues); when the last one is
  // full a new one is created, sized for `hint` entries (the connections still to come) within the device limit.
  Result<ibv_cq*> reserveCq(int entries, int hint);
};

// Opens a device by name with its protection domain, completion channel and registration cache.
Result<std::unique_ptr<Device>> openDevice(const std::string& name, const MrCache::Limits& limits);

struct Shared {
  Config cfg;
  std::vector<std::unique_ptr<Device>> devices;
  std::unordered_map<uint32_t, VerbsConnection*> conns;  // by connection id
  uint32_t nextConnId = 1;
  int epollFd = -1;         // every device's completion channel and asynchronous-event fd
  uint64_t dispatched = 0;  // completions handed to connections, ever
  // close() lets an abort still in flight leave before it moves the queue pair to the error state, until this
  // deadline. One for the whole transport, set by the first abort: a rank that gives up aborts every connection and
  // closes them one after another on the engine thread, which must not linger for each.
  std::optional<std::chrono::steady_clock::time_point> abortLingerUntil;
  // A connection's fence once waited in vain for its flushed work requests: the device no longer completes work,
  // so later fences do not wait again.
  bool fenceTimedOut = false;

  virtual ~Shared();
  Device* device(const std::string& name);
  // Reads asynchronous events, consumes channel events, polls every CQ dry and dispatches, re-arms a CQ whose event
  // was consumed and polls it again (a completion between the last poll and the arming raises no event). Never
  // blocks. Not reentrant: connections call pollFor instead.
  Status poll();
  // Polls the CQs for one connection's completions only (its fence after an error, its abort's linger), dispatching
  // them in order; everybody else's stay queued, in order, for the next poll(), so no other connection runs inside
  // this one's call. Never blocks. Virtual: the unit tests' software queue pairs complete work here.
  virtual Status pollFor(uint32_t connId);
  // Acts on one asynchronous event of dev (after ibv_get_async_event; the caller acks it): fails the connections a
  // fatal device error, an error of their port, a CQ error or a fatal error of their queue pair concerns, naming
  // the device and port; logs the rest.
  void onAsyncEvent(Device& dev, const ibv_async_event& event);

 private:
  Status drain(Device& dev, ibv_cq* cq, uint32_t only);
  Status pollCq(Device& dev, ibv_cq* cq);  // appends to pending_
  void dispatch(const ibv_wc& wc);
  void readAsyncEvents(Device& dev);
  // Fails dev's connections that `which` picks; returns how many.
  size_t failConnections(Device& dev, const std::function<bool(const VerbsConnection&)>& which, const Status& why);

  std::deque<ibv_wc> pending_;  // polled, not dispatched yet (a fence took its own out of the middle), CQ order
  bool polling_ = false;
};

}  // namespace hetcomm::transport::verbs
