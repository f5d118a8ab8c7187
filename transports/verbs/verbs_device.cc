// verbs_device.cc: opening a device, completion queues, and the completion loop every connection's work goes
// through.
#include "transports/verbs/verbs_device.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/strings.h"
#include "transports/verbs/verbs_connection.h"

namespace hetcomm::transport::verbs {

namespace {
constexpr int kPollBatch = 32;

int ibvAccess(uint8_t access) {
  return ((access & MrCache::kLocalWrite) ? IBV_ACCESS_LOCAL_WRITE : 0) |
         ((access & MrCache::kRemoteRead) ? IBV_ACCESS_REMOTE_READ : 0);
}

Status setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errnoStatus(errno, "fcntl(O_NONBLOCK)");
  return okStatus();
}

}  // namespace

Device::~Device() {
  // Teardown never fails: a verb that refuses is logged and the rest still goes.
  for (auto& c : cqs)
    if (int rc = c.cq ? ibv_destroy_cq(c.cq) : 0; rc != 0)
      HC_WARN("verbs: ibv_destroy_cq on %s failed: %s", name.c_str(), std::strerror(rc));
  if (int rc = channel ? ibv_destroy_comp_channel(channel) : 0; rc != 0)
    HC_WARN("verbs: ibv_destroy_comp_channel on %s failed: %s", name.c_str(), std::strerror(rc));
  mrCache.reset();  // its registrations go before the protection domain
  if (int rc = pd ? ibv_dealloc_pd(pd) : 0; rc != 0)
    HC_WARN("verbs: ibv_dealloc_pd on %s failed: %s", name.c_str(), std::strerror(rc));
  if (int rc = ctx ? ibv_close_device(ctx) : 0; rc != 0)
    HC_WARN("verbs: ibv_close_device(%s) failed: %s", name.c_str(), std::strerror(errno));
}

Result<ibv_cq*> Device::reserveCq(int entries, int hint) {
  if (!cqs.empty() && cqs.back().capacity - cqs.back().reserved >= entries) {
    cqs.back().reserved += entries;
    return cqs.back().cq;
  }
  const int maxCqe = attr.max_cqe > 0 ? attr.max_cqe : entries;
  if (entries > maxCqe)
    return invalidArgument(
        "verbs: a connection needs %d completion-queue entries but %s offers at most %d: lower "
        "HETCOMM_VERBS_RECV_SLOTS",
        entries, name.c_str(), maxCqe);
  const int size = std::clamp(hint, entries, maxCqe);
  ibv_cq* cq = ibv_create_cq(ctx, size, nullptr, channel, 0);
  if (!cq) return errnoStatus(errno, "verbs: ibv_create_cq of %d entries on %s", size, name.c_str());
  Cq c;
  c.cq = cq;
  c.capacity = cq->cqe;  // the provider may round up
  c.reserved = entries;
  cqs.push_back(c);
  return cq;
}

Result<std::unique_ptr<Device>> openDevice(const std::string& name, const MrCache::Limits& limits) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return errnoStatus(errno, "verbs: ibv_get_device_list");
  auto dev = std::make_unique<Device>();
  dev->name = name;
  for (int i = 0; i < n && !dev->ctx; ++i)
    if (name == ibv_get_device_name(list[i])) {
      dev->ctx = ibv_open_device(list[i]);
      if (!dev->ctx) {
        Status st = errnoStatus(errno, "verbs: ibv_open_device(%s)", name.c_str());
        ibv_free_device_list(list);
        return st;
      }
    }
  ibv_free_device_list(list);
  if (!dev->ctx) return systemError("verbs: device %s vanished since it was discovered", name.c_str());
  if (int rc = ibv_query_device(dev->ctx, &dev->attr); rc != 0)
    return errnoStatus(rc, "verbs: ibv_query_device(%s)", name.c_str());
  dev->pd = ibv_alloc_pd(dev->ctx);
  if (!dev->pd) return errnoStatus(errno, "verbs: ibv_alloc_pd on %s", name.c_str());
  dev->channel = ibv_create_comp_channel(dev->ctx);
  if (!dev->channel) return errnoStatus(errno, "verbs: ibv_create_comp_channel on %s", name.c_str());
  // The engine polls the fds; ibv_get_cq_event and ibv_get_async_event must then return EAGAIN instead of blocking
  // when there is nothing.
  if (Status st = setNonBlocking(dev->channel->fd); !st.ok())
    return systemError("verbs: making the completion channel of %s non-blocking: %s", name.c_str(),
                       std::string(st.message()).c_str());
  if (Status st = setNonBlocking(dev->ctx->async_fd); !st.ok())
    return systemError("verbs: making the asynchronous-event fd of %s non-blocking: %s", name.c_str(),
                       std::string(st.message()).c_str());
  ibv_pd* pd = dev->pd;
  dev->mrCache = std::make_unique<MrCache>(
      [pd](void* addr, size_t len, uint8_t access, Registration* out) -> int {
        errno = 0;
        ibv_mr* mr = ibv_reg_mr(pd, addr, len, ibvAccess(access));
        if (!mr) return errno != 0 ? errno : ENOMEM;
        *out = Registration{mr, mr->lkey, mr->rkey, access};
        return 0;
      },
      [name](const Registration& r) {
        if (int rc = ibv_dereg_mr(static_cast<ibv_mr*>(r.handle)); rc != 0)
          HC_WARN("verbs: ibv_dereg_mr on %s failed: %s", name.c_str(), std::strerror(rc));
      },
      limits);
  return dev;
}

// ---- shared state ----

Shared::~Shared() {
  devices.clear();
  if (epollFd >= 0) ::close(epollFd);
}

Device* Shared::device(const std::string& name) {
  for (auto& d : devices)
    if (d->name == name) return d.get();
  return nullptr;
}

void Shared::dispatch(const ibv_wc& wc) {
  ++dispatched;
  auto it = conns.find(wrConn(wc.wr_id));
  if (it != conns.end()) it->second->onCompletion(wc);  // else: its connection is gone
}

Status Shared::pollCq(Device& dev, ibv_cq* cq) {
  ibv_wc wc[kPollBatch];
  int n = ibv_poll_cq(cq, kPollBatch, wc);
  if (n < 0) return systemError("verbs: ibv_poll_cq on %s failed (%d)", dev.name.c_str(), n);
  pending_.insert(pending_.end(), wc, wc + n);
  return okStatus();
}

Status Shared::drain(Device& dev, ibv_cq* cq, uint32_t only) {
  // The next completion to hand out, in CQ order: any (only == 0) or that connection's. Taken out before it is
  // dispatched and looked up afresh each time, since a connection that fails inside onCompletion fences, and its
  // fence drains again (for itself) before this returns.
  auto next = [&](ibv_wc* out) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it)
      if (only == 0 || wrConn(it->wr_id) == only) {
        *out = *it;
        pending_.erase(it);
        return true;
      }
    return false;
  };
  while (true) {
    ibv_wc wc;
    while (next(&wc)) dispatch(wc);
    const size_t before = pending_.size();
    HC_TRY(pollCq(dev, cq));
    if (pending_.size() == before) return okStatus();  // dry
  }
}

Status Shared::pollFor(uint32_t connId) {
  for (auto& d : devices)
    if (!d->fatal)
      for (auto& c : d->cqs) HC_TRY(drain(*d, c.cq, connId));
  return okStatus();
}

size_t Shared::failConnections(Device& dev, const std::function<bool(const VerbsConnection&)>& which,
                               const Status& why) {
  // Collected first: failing one runs its fence, which dispatches completions.
  std::vector<uint32_t> ids;
  for (auto& [id, c] : conns)
    if (c->localPort().device == dev.name && which(*c)) ids.push_back(id);
  for (uint32_t id : ids)
    if (auto it = conns.find(id); it != conns.end()) it->second->onAsyncError(why);
  return ids.size();
}

void Shared::onAsyncEvent(Device& dev, const ibv_async_event& event) {
  const char* what = ibv_event_type_str(event.event_type);
  switch (event.event_type) {
    case IBV_EVENT_DEVICE_FATAL: {
      if (dev.fatal) return;
      dev.fatal = true;
      Status why =
          systemError("verbs: device %s reported a fatal error (%s): it needs a reset", dev.name.c_str(), what);
      HC_WARN("%s; every connection over it fails", std::string(why.message()).c_str());
      failConnections(dev, [](const VerbsConnection&) { return true; }, why);
      // Its fds may stay readable for good: out of the engine's wait set, or the engine would spin.
      if (epollFd >= 0) {
        if (dev.channel) epoll_ctl(epollFd, EPOLL_CTL_DEL, dev.channel->fd, nullptr);
        if (dev.ctx) epoll_ctl(epollFd, EPOLL_CTL_DEL, dev.ctx->async_fd, nullptr);
      }
      return;
    }
    case IBV_EVENT_PORT_ERR: {
      const int port = event.element.port_num;
      Status why = systemError("verbs: port %s:%d went down (%s)", dev.name.c_str(), port, what);
      const size_t n =
          failConnections(dev, [port](const VerbsConnection& c) { return c.localPort().port == port; }, why);
      if (n > 0)
        HC_WARN("%s: %zu connection(s) over it fail", std::string(why.message()).c_str(), n);
      else
        HC_INFO(Ib, "%s (no connection uses it)", std::string(why.message()).c_str());
      return;
    }
    case IBV_EVENT_CQ_ERR: {
      Status why = systemError("verbs: a completion queue on %s failed (%s: overrun or a device error)",
                               dev.name.c_str(), what);
      HC_WARN("%s", std::string(why.message()).c_str());
      ibv_cq* cq = event.element.cq;
      failConnections(dev, [cq](const VerbsConnection& c) { return c.cq() == cq; }, why);
      return;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR: {
      // The queue pair went to the error state: its connection only.
      const uint32_t qpn = event.element.qp ? event.element.qp->qp_num : 0;
      Status why = systemError("verbs: queue pair %#x on %s reported %s", qpn, dev.name.c_str(), what);
      failConnections(dev, [qpn](const VerbsConnection& c) { return c.qpn() == qpn; }, why);
      return;
    }
    default:
      // PORT_ACTIVE, LID_CHANGE, GID_CHANGE, SM_CHANGE, COMM_EST, LAST_WQE_REACHED ...: nothing to undo.
      HC_INFO(Ib, "verbs: %s: asynchronous event %s", dev.name.c_str(), what);
      return;
  }
}

void Shared::readAsyncEvents(Device& dev) {
  if (!dev.ctx || dev.fatal) return;
  ibv_async_event event;
  while (ibv_get_async_event(dev.ctx, &event) == 0) {  // non-blocking fd: -1 with EAGAIN once empty
    onAsyncEvent(dev, event);
    ibv_ack_async_event(&event);  // destroying a QP or CQ waits for the acks of its events
  }
}

Status Shared::poll() {
  if (polling_) return okStatus();  // never nested (connections use pollFor); a no-op rather than a reentry
  polling_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{polling_};
  // What a fence left queued for others goes first: it was polled before anything still in the CQs.
  while (!pending_.empty()) {
    ibv_wc wc = pending_.front();
    pending_.pop_front();
    dispatch(wc);
  }
  for (auto& d : devices) {
    Device& dev = *d;
    readAsyncEvents(dev);
    if (dev.fatal) continue;
    if (dev.mrCache && dev.mrCache->invalidationsPending()) dev.mrCache->purge();  // deregisters what munmap made stale
    if (dev.cqs.empty()) continue;
    ibv_cq* evCq = nullptr;
    void* evCtx = nullptr;
    while (ibv_get_cq_event(dev.channel, &evCq, &evCtx) == 0) {
      ibv_ack_cq_events(evCq, 1);  // every event acked at once: destroying a CQ waits for its acks
      for (auto& c : dev.cqs)
        if (c.cq == evCq) c.armed = false;
    }
    for (auto& c : dev.cqs) {
      HC_TRY(drain(dev, c.cq, 0));
      if (c.armed) continue;
      if (int rc = ibv_req_notify_cq(c.cq, 0); rc != 0)
        return errnoStatus(rc, "verbs: ibv_req_notify_cq on %s", dev.name.c_str());
      c.armed = true;
      HC_TRY(drain(dev, c.cq, 0));  // what arrived before the arming raises no event
    }
  }
  return okStatus();
}

}  // namespace hetcomm::transport::verbs
