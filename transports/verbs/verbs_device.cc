// verbs_device.cc: opening a device, completion queues, and the completion loop every connection's work goes
// through.
#include "transports/verbs/verbs_device.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/strings.h"
#include "transports/verbs/verbs_connection.h"

namespace hetcomm::transport::verbs {

namespace {
constexpr int kPollBatch = 32;
// Registered memory: sends' buffers are read by the peer (RDMA READ), receives' buffers written by our reads.
constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
}  // namespace

Status registrationError(int err, const void* addr, size_t len) {
  std::string hint;
  rlimit rl{};
  if ((err == ENOMEM || err == EPERM || err == EAGAIN) && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
      rl.rlim_cur != RLIM_INFINITY)
    hint = format(" (RLIMIT_MEMLOCK is %s: raise it, e.g. ulimit -l unlimited)",
                  humanBytes(static_cast<uint64_t>(rl.rlim_cur)).c_str());
  return systemError("verbs: ibv_reg_mr of %s at %p: %s%s", humanBytes(len).c_str(), addr, std::strerror(err),
                     hint.c_str());
}

Device::~Device() {
  for (auto& c : cqs)
    if (int rc = c.cq ? ibv_destroy_cq(c.cq) : 0; rc != 0)
      HC_WARN("verbs: ibv_destroy_cq on %s failed: %s", name.c_str(), std::strerror(rc));
  if (channel) ibv_destroy_comp_channel(channel);
  mrCache.reset();  // its registrations go before the protection domain
  if (int rc = pd ? ibv_dealloc_pd(pd) : 0; rc != 0)
    HC_WARN("verbs: ibv_dealloc_pd on %s failed: %s", name.c_str(), std::strerror(rc));
  if (ctx) ibv_close_device(ctx);
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
  // The engine polls the fd; ibv_get_cq_event must then return EAGAIN instead of blocking when it is empty.
  int flags = fcntl(dev->channel->fd, F_GETFL);
  if (flags < 0 || fcntl(dev->channel->fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return errnoStatus(errno, "verbs: making the completion channel of %s non-blocking", name.c_str());
  ibv_pd* pd = dev->pd;
  dev->mrCache = std::make_unique<MrCache>(
      [pd](void* addr, size_t len) -> Result<Registration> {
        ibv_mr* mr = ibv_reg_mr(pd, addr, len, kMrAccess);
        if (!mr) return registrationError(errno, addr, len);
        return Registration{mr, mr->lkey, mr->rkey};
      },
      [](const Registration& r) {
        if (int rc = ibv_dereg_mr(static_cast<ibv_mr*>(r.handle)); rc != 0)
          HC_WARN("verbs: ibv_dereg_mr failed: %s", std::strerror(rc));
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

Status Shared::drain(Device& dev, ibv_cq* cq) {
  ibv_wc wc[kPollBatch];
  while (true) {
    int n = ibv_poll_cq(cq, kPollBatch, wc);
    if (n < 0) return systemError("verbs: ibv_poll_cq on %s failed (%d)", dev.name.c_str(), n);
    for (int i = 0; i < n; ++i) {
      ++dispatched;
      auto it = conns.find(wrConn(wc[i].wr_id));
      if (it != conns.end()) it->second->onCompletion(wc[i]);  // else: its connection is gone
    }
    if (n < kPollBatch) return okStatus();
  }
}

Status Shared::poll() {
  for (auto& d : devices) {
    Device& dev = *d;
    if (dev.mrCache->invalidationsPending()) dev.mrCache->purge();  // deregisters what munmap made stale
    if (dev.cqs.empty()) continue;
    ibv_cq* evCq = nullptr;
    void* evCtx = nullptr;
    while (ibv_get_cq_event(dev.channel, &evCq, &evCtx) == 0) {
      ibv_ack_cq_events(evCq, 1);  // every event acked at once: destroying a CQ waits for its acks
      for (auto& c : dev.cqs)
        if (c.cq == evCq) c.armed = false;
    }
    for (auto& c : dev.cqs) {
      HC_TRY(drain(dev, c.cq));
      if (c.armed) continue;
      if (int rc = ibv_req_notify_cq(c.cq, 0); rc != 0)
        return errnoStatus(rc, "verbs: ibv_req_notify_cq on %s", dev.name.c_str());
      c.armed = true;
      HC_TRY(drain(dev, c.cq));  // what arrived before the arming raises no event
    }
  }
  return okStatus();
}

}  // namespace hetcomm::transport::verbs
