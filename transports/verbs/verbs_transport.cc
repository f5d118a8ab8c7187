// verbs_transport.cc: port discovery, the transport's life cycle and connection set-up over the TCP side band.
#include "transports/verbs/verbs_transport.h"

#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/verbs/verbs_connection.h"
#include "transports/verbs/verbs_device.h"
#include "transports/verbs/verbs_wire.h"

namespace hetcomm::transport::verbs {

HC_PARAM_STR(ibHca, "IB_HCA", "")
HC_PARAM_INT(ibGidIndex, "IB_GID_INDEX", -1)  // -1: a RoCE v2 GID with an IPv4 address, else the best there is
HC_PARAM_INT(ibSl, "IB_SL", 0)
HC_PARAM_INT(ibTc, "IB_TC", 0)
HC_PARAM_INT(ibTimeout, "IB_TIMEOUT", 18)  // 4.096 us * 2^18 = 1.07 s per try
HC_PARAM_INT(ibRetryCnt, "IB_RETRY_CNT", 7)
HC_PARAM_INT(verbsEagerBytes, "VERBS_EAGER_BYTES", 8192)
HC_PARAM_INT(verbsRecvSlots, "VERBS_RECV_SLOTS", 32)
HC_PARAM_INT(verbsMrCacheBytes, "VERBS_MR_CACHE_BYTES", int64_t{4} << 30)
HC_PARAM_INT(verbsMrCacheEntries, "VERBS_MR_CACHE_ENTRIES", 1024)

namespace {

// The side band's TcpTransport proves the job secret over (commId ^ salt): its handshakes cannot be replayed
// against the communicator's own tcp transport, nor the other way round.
constexpr uint64_t kSidebandSalt = 0x7665726273736262ull;  // "verbssbb"
constexpr uint64_t kTagQpInfo = 1, kTagReady = 2;
// Send-queue work requests beyond the bounce buffers: room for RDMA READ chunks.
constexpr uint32_t kReadWrs = 32;

// Lanes by ibv_port_attr::active_width and per-lane Mb/s by active_speed, as NCCL counts them (0: unknown).
uint64_t portRateMbps(uint8_t width, uint8_t speed) {
  struct Code {
    uint8_t code;
    uint64_t value;
  };
  static constexpr Code kLanes[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  static constexpr Code kLaneMbps[] = {{1, 2500},   {2, 5000},   {4, 10000},  {8, 10000},      // SDR DDR QDR FDR10
                                       {16, 14000}, {32, 25000}, {64, 50000}, {128, 100000}};  // FDR EDR HDR NDR
  uint64_t lanes = 0, lane = 0;
  for (const auto& c : kLanes)
    if (c.code == width) lanes = c.value;
  for (const auto& c : kLaneMbps)
    if (c.code == speed) lane = c.value;
  return lanes * lane;
}

GidType gidTypeOf(uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_ROCE_V1:
      return GidType::kRoceV1;
    case IBV_GID_TYPE_ROCE_V2:
      return GidType::kRoceV2;
    default:
      return GidType::kIb;
  }
}

// The GID this port is addressed by, and its type: index 0 on InfiniBand; on RoCE the best entry (RoCE v2 with an
// IPv4 address, then RoCE v2, then RoCE v1), unless HETCOMM_IB_GID_INDEX says which. Empty string: found; else why
// not.
std::string chooseGid(ibv_context* ctx, int port, const ibv_port_attr& pa, bool roce, PortInfo& out) {
  auto usable = [](const uint8_t* g) { return std::any_of(g, g + 16, [](uint8_t b) { return b != 0; }); };
  const int64_t forced = ibGidIndex();
  if (forced >= 0 || !roce) {
    const int idx = forced >= 0 ? static_cast<int>(forced) : 0;
    if (idx >= pa.gid_tbl_len)
      return format("HETCOMM_IB_GID_INDEX=%d, but the GID table has %d entries", idx, pa.gid_tbl_len);
    out.gidIndex = idx;
    out.gidType = GidType::kIb;
    if (roce) {
      // The type decides who the port can talk to (choosePortPair): ask for it with the GID.
      ibv_gid_entry e{};
      if (int rc = ibv_query_gid_ex(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(idx), &e, 0); rc != 0)
        return format("ibv_query_gid_ex(%d): %s", idx, std::strerror(rc));
      if (!usable(e.gid.raw)) return format("GID %d is empty", idx);
      out.gidType = gidTypeOf(e.gid_type) == GidType::kRoceV1 ? GidType::kRoceV1 : GidType::kRoceV2;
      std::memcpy(out.gid.data(), e.gid.raw, 16);
      return "";
    }
    ibv_gid gid{};
    if (ibv_query_gid(ctx, static_cast<uint8_t>(port), idx, &gid) != 0)
      return format("ibv_query_gid(%d): %s", idx, std::strerror(errno));
    if (!usable(gid.raw)) return format("GID %d is empty", idx);
    std::memcpy(out.gid.data(), gid.raw, 16);
    return "";
  }
  int bestScore = -1;
  for (int i = 0; i < pa.gid_tbl_len && i < 256; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(i), &e, 0) != 0) continue;
    if (!usable(e.gid.raw)) continue;
    std::array<uint8_t, 16> g;
    std::memcpy(g.data(), e.gid.raw, 16);
    int score = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? (gidIsIpv4(g) ? 3 : 2) : 1;
    if (score > bestScore) {
      bestScore = score;
      out.gidIndex = i;
      out.gidType = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? GidType::kRoceV2 : GidType::kRoceV1;
      out.gid = g;
    }
  }
  if (bestScore < 0) return "no GID configured (does its network interface have an IP address?)";
  return "";
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

Availability discoverImpl(const std::string& spec) {
  Availability av;
  av.code = Code::kSystem;
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  // ENOSYS: the kernel has no RDMA support loaded (no /sys/class/infiniband_verbs), so no device either.
  if ((!list && errno == ENOSYS) || (list && n == 0)) {
    if (list) ibv_free_device_list(list);
    av.reason = "no RDMA device (ibv_get_device_list found none)";
    return av;
  }
  if (!list) {
    av.reason = format("cannot list RDMA devices: ibv_get_device_list: %s", std::strerror(errno));
    return av;
  }
  std::vector<std::string> names, down, problems;
  bool anyMatch = false;
  for (int i = 0; i < n; ++i) {
    const std::string name = ibv_get_device_name(list[i]);
    names.push_back(name);
    // Queue pairs are connected by hand (ibv_modify_qp), which InfiniBand and RoCE allow; iWARP needs rdma_cm,
    // and EFA and friends have no RC queue pairs.
    if (list[i]->transport_type != IBV_TRANSPORT_IB) {
      if (hcaMatches(spec, name, 1)) {
        anyMatch = true;
        problems.push_back(format("%s: %s transport, not InfiniBand or RoCE", name.c_str(),
                                  list[i]->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "another"));
      }
      continue;
    }
    ibv_context* ctx = ibv_open_device(list[i]);
    if (!ctx) {
      problems.push_back(format("%s: ibv_open_device: %s", name.c_str(), std::strerror(errno)));
      continue;
    }
    ibv_device_attr attr{};
    auto closeDevice = [&] {
      if (ibv_close_device(ctx) != 0)
        HC_TRACE(Ib, "verbs: ibv_close_device(%s): %s", name.c_str(), std::strerror(errno));
    };
    if (int rc = ibv_query_device(ctx, &attr); rc != 0) {
      problems.push_back(format("%s: ibv_query_device: %s", name.c_str(), std::strerror(rc)));
      closeDevice();
      continue;
    }
    for (int port = 1; port <= attr.phys_port_cnt; ++port) {
      if (!hcaMatches(spec, name, port)) continue;
      anyMatch = true;
      ibv_port_attr pa{};
      if (int rc = ibv_query_port(ctx, static_cast<uint8_t>(port), &pa); rc != 0) {
        problems.push_back(format("%s:%d: ibv_query_port: %s", name.c_str(), port, std::strerror(rc)));
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        down.push_back(format("%s:%d %s", name.c_str(), port, ibv_port_state_str(pa.state)));
        continue;
      }
      PortInfo p;
      p.device = name;
      p.port = port;
      p.roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      p.rateMbps = portRateMbps(pa.active_width, pa.active_speed);
      p.lid = p.roce ? 0 : pa.lid;
      p.mtu = 128 << pa.active_mtu;  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
      p.maxMsgSize = pa.max_msg_sz;
      if (std::string why = chooseGid(ctx, port, pa, p.roce, p); !why.empty()) {
        problems.push_back(format("%s:%d: %s", name.c_str(), port, why.c_str()));
        continue;
      }
      av.ports.push_back(std::move(p));
    }
    closeDevice();
  }
  ibv_free_device_list(list);
  if (!av.ports.empty()) {
    av.code = Code::kOk;
    return av;
  }
  if (!anyMatch && problems.empty()) {
    if (!spec.empty()) {
      av.code = Code::kInvalidUsage;
      av.reason = format("HETCOMM_IB_HCA=%s matches none of %s", spec.c_str(), joined(names).c_str());
    } else {
      av.reason = format("the RDMA devices (%s) have no ports", joined(names).c_str());
    }
  } else if (problems.empty()) {
    av.reason = format("every port is down (%s)", joined(down).c_str());
  } else {
    for (const auto& d : down) problems.push_back(d);
    av.reason = format("no usable port: %s", joined(problems).c_str());
  }
  return av;
}

}  // namespace

Availability discover(const std::string& hcaSpec) { return discoverImpl(hcaSpec); }

namespace {

// Registered pages are pinned: after fork() the parent's copy-on-write may move a page the NIC still uses, so a
// process that forks (system(), a launcher, a data loader) corrupts RDMA traffic. libibverbs then needs
// ibv_fork_init() (MADV_DONTFORK on every registration) before the first registration in the process; afterwards it
// refuses (EINVAL). Kernels from 5.13 copy pinned pages at fork themselves: ibv_is_fork_initialized() says
// IBV_FORK_UNNEEDED and nothing is needed. RDMAV_FORK_SAFE=1 makes libibverbs do it on its own. Once per process.
void ensureForkSafety() {
  static std::once_flag once;
  std::call_once(once, [] {
    const ibv_fork_status status = ibv_is_fork_initialized();
    if (status != IBV_FORK_DISABLED) {
      HC_TRACE(Ib, "verbs: fork support %s",
               status == IBV_FORK_ENABLED ? "enabled" : "unneeded (kernel copies on fork)");
      return;
    }
    if (int rc = ibv_fork_init(); rc != 0)
      HC_INFO(Ib,
              "verbs: ibv_fork_init failed (%s%s): registered memory is not fork-safe, so a fork() in this process "
              "may corrupt RDMA transfers",
              std::strerror(rc), rc == EINVAL ? ": memory was registered before" : "");
  });
}

}  // namespace

// ---- transport ----

struct VerbsTransport::Impl {
  Config cfg;
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  std::vector<PortInfo> ports;
  std::unique_ptr<tcp::TcpTransport> sideband;
  VerbsConnection::Options opts;
  bool listened = false;
  int waitFd = -1;
};

Result<std::unique_ptr<VerbsTransport>> VerbsTransport::create(const Config& config) {
  return create(config, discoverImpl(ibHca()));
}

Result<std::unique_ptr<VerbsTransport>> VerbsTransport::create(const Config& config, const Availability& av) {
  if (av.ports.empty())
    return Status(av.code == Code::kOk ? Code::kSystem : av.code,
                  "verbs: " + (av.reason.empty() ? std::string("no usable RDMA port") : av.reason));

  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  impl->ports = av.ports;
  impl->shared->cfg = config;
  auto& o = impl->opts;
  const int64_t eager = verbsEagerBytes(), slots = verbsRecvSlots();
  if (eager < kMinSlotPayload || eager > kMaxSlotPayload)
    return invalidArgument("HETCOMM_VERBS_EAGER_BYTES=%lld is out of range %u..%u", (long long)eager, kMinSlotPayload,
                           kMaxSlotPayload);
  if (slots < kMinRecvSlots || slots > kMaxRecvSlots)
    return invalidArgument("HETCOMM_VERBS_RECV_SLOTS=%lld is out of range %u..%u", (long long)slots, kMinRecvSlots,
                           kMaxRecvSlots);
  o.eagerMax = o.slotPayload = static_cast<uint32_t>(eager);
  o.recvSlots = o.sendSlots = static_cast<uint32_t>(slots);
  o.sqDepth = o.sendSlots + kReadWrs;
  o.sl = static_cast<int>(ibSl());
  o.trafficClass = static_cast<int>(ibTc());
  o.timeout = static_cast<int>(ibTimeout());
  o.retryCnt = static_cast<int>(ibRetryCnt());
  if (o.sl < 0 || o.sl > 15) return invalidArgument("HETCOMM_IB_SL=%d is out of range 0..15", o.sl);
  if (o.trafficClass < 0 || o.trafficClass > 255)
    return invalidArgument("HETCOMM_IB_TC=%d is out of range 0..255", o.trafficClass);
  if (o.timeout < 1 || o.timeout > 31) return invalidArgument("HETCOMM_IB_TIMEOUT=%d is out of range 1..31", o.timeout);
  if (o.retryCnt < 0 || o.retryCnt > 7)
    return invalidArgument("HETCOMM_IB_RETRY_CNT=%d is out of range 0..7", o.retryCnt);
  const int64_t cacheBytes = verbsMrCacheBytes(), cacheEntries = verbsMrCacheEntries();
  if (cacheBytes < 0 || cacheEntries < 0)
    return invalidArgument("HETCOMM_VERBS_MR_CACHE_BYTES and _ENTRIES must be >= 0");
  MrCache::Limits limits{static_cast<size_t>(cacheBytes), static_cast<size_t>(cacheEntries)};

  Config side = config;
  side.commId ^= kSidebandSalt;
  HC_ASSIGN_OR_RETURN(impl->sideband, tcp::TcpTransport::create(side));

  ensureForkSafety();  // before anything is registered (the bounce buffers, at connectAll)
  for (const auto& p : impl->ports) {
    if (impl->shared->device(p.device)) continue;
    HC_ASSIGN_OR_RETURN(auto dev, openDevice(p.device, limits));
    impl->shared->devices.push_back(std::move(dev));
  }
  // One fd for the engine: an epoll set, readable when any of its members is: every device's completion channel
  // and asynchronous-event fd.
  impl->shared->epollFd = epoll_create1(EPOLL_CLOEXEC);
  if (impl->shared->epollFd < 0) return errnoStatus(errno, "verbs: epoll_create1");
  for (auto& d : impl->shared->devices) {
    for (auto [fd, what] : {std::pair<int, const char*>{d->channel->fd, "completion channel"},
                            std::pair<int, const char*>{d->ctx->async_fd, "asynchronous-event fd"}}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      if (epoll_ctl(impl->shared->epollFd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return errnoStatus(errno, "verbs: epoll_ctl for %s's %s", d->name.c_str(), what);
    }
  }
  impl->waitFd = impl->shared->epollFd;
  std::string portsText;
  for (const auto& p : impl->ports) portsText += (portsText.empty() ? "" : ", ") + describePort(p);
  HC_INFO(Ib, "verbs: rank %d can use %s; eager up to %s, %u receive buffers per peer, registration cache %s",
          config.rank, portsText.c_str(), humanBytes(o.eagerMax).c_str(), o.recvSlots,
          impl->shared->devices[0]->mrCache->watching() ? "on" : "off");
  return std::unique_ptr<VerbsTransport>(new VerbsTransport(std::move(impl)));
}

VerbsTransport::VerbsTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  props_.kind = Kind::kVerbs;
  props_.name = "verbs";
  uint64_t best = 0;
  bool allRoce = true;
  for (const auto& p : impl_->ports) {
    best = std::max(best, p.rateMbps);
    allRoce = allRoce && p.roce;
  }
  props_.latencyUs = allRoce ? 3 : 2;
  props_.bandwidthGBps = static_cast<double>(best) / 8000;
}

VerbsTransport::~VerbsTransport() = default;

int VerbsTransport::waitFd() const { return impl_->waitFd; }

const std::vector<PortInfo>& VerbsTransport::ports() const { return impl_->ports; }

Status VerbsTransport::progress() { return impl_->shared->poll(); }

bool VerbsTransport::armForSleep() {
  // poll() re-arms every completion queue whose event it consumed and polls again: what it finds now arrived
  // before the arming and raises no event, so the engine must not sleep on it.
  const uint64_t before = impl_->shared->dispatched;
  if (!impl_->shared->poll().ok()) return false;  // progress() reports the error
  return impl_->shared->dispatched == before;
}

Result<std::vector<std::byte>> VerbsTransport::listen() {
  Blob b;
  HC_ASSIGN_OR_RETURN(b.sideband, impl_->sideband->listen());
  b.ports = impl_->ports;
  impl_->listened = true;
  return encodeBlob(b);
}

namespace {

// One peer during set-up. Requests and buffers stay put (the vector of them is never resized once posting starts).
struct PeerSetup {
  int rank;
  Blob blob;
  size_t myPort = 0, theirPort = 0;
  std::unique_ptr<VerbsConnection> conn;
  std::vector<std::byte> out, in;
  Request sendReq, recvReq;
};

// Drives the side band until every peer's send and receive of this round is done.
Status waitSideband(tcp::TcpTransport& side, std::vector<PeerSetup>& peers, Deadline deadline, int me, const char* what,
                    double timeoutSec) {
  while (true) {
    HC_TRY(side.progress());
    bool all = true;
    for (auto& p : peers) {
      for (Request* r : {&p.sendReq, &p.recvReq})
        if (r->failed())
          return Status(r->error.code(), format("rank %d: verbs set-up with rank %d (%s over the tcp side band) "
                                                "failed: %s",
                                                me, p.rank, what, std::string(r->error.message()).c_str()));
      all = all && p.sendReq.done() && p.recvReq.done();
    }
    if (all) return okStatus();
    if (deadline.expired()) {
      std::string missing;
      for (auto& p : peers)
        if (!p.sendReq.done() || !p.recvReq.done()) missing += (missing.empty() ? "" : ", ") + std::to_string(p.rank);
      return timeoutError(
          "rank %d: verbs set-up timed out waiting for rank(s) %s to send their %s (HETCOMM_TIMEOUT=%g s)", me,
          missing.c_str(), what, timeoutSec);
    }
    pollfd pfd{side.waitFd(), POLLIN, 0};
    int ms = deadline.msLeft();
    ::poll(&pfd, 1, ms < 0 ? 100 : std::min(ms, 100));
  }
}

// The connection options on dev: the transport's, within the device's limits. Work requests per queue beyond
// max_qp_wr would make ibv_create_qp fail, so fewer receive buffers, bounce buffers and read slots; the read depth
// is what the device serves and issues.
Result<VerbsConnection::Options> optionsOn(const VerbsConnection::Options& base, const Device& dev) {
  VerbsConnection::Options o = base;
  o.rdAtomic = static_cast<uint32_t>(std::max(1, std::min(dev.attr.max_qp_rd_atom, dev.attr.max_qp_init_rd_atom)));
  if (dev.attr.max_sge < 1)
    return systemError("verbs: %s offers no scatter-gather entry per work request", dev.name.c_str());
  if (dev.attr.max_qp_wr <= 0) return o;  // not reported: trust the defaults
  const uint32_t maxWr = static_cast<uint32_t>(dev.attr.max_qp_wr);
  if (maxWr < std::max<uint32_t>(kMinRecvSlots, 2))
    return systemError("verbs: %s allows only %u work requests per queue", dev.name.c_str(), maxWr);
  if (o.recvSlots > maxWr) o.recvSlots = maxWr;
  if (o.sqDepth > maxWr) {
    const uint32_t reads = std::min(o.sqDepth - o.sendSlots, maxWr / 2);
    o.sendSlots = std::min(o.sendSlots, maxWr - reads);
    o.sqDepth = o.sendSlots + reads;
  }
  if (o.recvSlots != base.recvSlots || o.sqDepth != base.sqDepth)
    HC_INFO(Ib,
            "verbs: %s allows %u work requests per queue: %u receive buffers, %u bounce buffers and %u read "
            "slots per peer",
            dev.name.c_str(), maxWr, o.recvSlots, o.sendSlots, o.sqDepth - o.sendSlots);
  return o;
}

// Closes the side band's connections on every way out of connectAll.
struct SidebandCloser {
  std::vector<std::unique_ptr<Connection>>& conns;
  ~SidebandCloser() {
    Status why = invalidUsage("the verbs side band closes once the queue pairs are connected");
    for (auto& c : conns)
      if (c) c->close(why);
    conns.clear();
  }
};

}  // namespace

Result<std::vector<std::unique_ptr<Connection>>> VerbsTransport::connectAll(
    const std::vector<std::vector<std::byte>>& blobs, Deadline deadline) {
  Impl& t = *impl_;
  const int n = t.cfg.nranks, me = t.cfg.rank;
  if (static_cast<int>(blobs.size()) != n) return internalError("verbs: %zu blobs for %d ranks", blobs.size(), n);
  if (!t.listened) return invalidUsage("verbs: connectAll before listen");

  // Decode every blob and agree on each pair's ports (both ranks compute the same pair: lower rank's ports first).
  std::vector<PeerSetup> peers;
  peers.reserve(n);
  std::vector<std::vector<std::byte>> sideBlobs(n);
  for (int p = 0; p < n; ++p) {
    if (p == me || blobs[p].empty()) continue;
    HC_ASSIGN_OR_RETURN(Blob b, decodeBlob(blobs[p], p));
    const bool low = me < p;
    auto pair = low ? choosePortPair(t.ports, me, b.ports, p) : choosePortPair(b.ports, p, t.ports, me);
    if (!pair) return pair.error();
    PeerSetup& s = peers.emplace_back();
    s.rank = p;
    s.myPort = low ? pair->low : pair->high;
    s.theirPort = low ? pair->high : pair->low;
    sideBlobs[p] = b.sideband;
    s.blob = std::move(b);
  }

  // Queue pairs in INIT with their receives posted, on completion queues sized for this batch, with the options
  // each device allows.
  std::vector<VerbsConnection::Options> devOpts;
  for (auto& d : t.shared->devices) {
    HC_ASSIGN_OR_RETURN(auto o, optionsOn(t.opts, *d));
    devOpts.push_back(o);
  }
  auto perConn = [&](size_t d) { return static_cast<int>(devOpts[d].sqDepth + devOpts[d].recvSlots); };
  std::vector<int> left(t.shared->devices.size(), 0);
  auto devIndex = [&](const std::string& name) {
    for (size_t i = 0; i < t.shared->devices.size(); ++i)
      if (t.shared->devices[i]->name == name) return i;
    return size_t{0};
  };
  for (auto& s : peers) {
    const size_t d = devIndex(t.ports[s.myPort].device);
    left[d] += perConn(d);
  }
  for (auto& s : peers) {
    const PortInfo& port = t.ports[s.myPort];
    const size_t d = devIndex(port.device);
    Device* dev = t.shared->devices[d].get();
    HC_ASSIGN_OR_RETURN(ibv_cq * cq, dev->reserveCq(perConn(d), left[d]));
    left[d] -= perConn(d);
    HC_ASSIGN_OR_RETURN(s.conn, VerbsConnection::create(t.shared, dev, cq, me, s.rank, port,
                                                        static_cast<uint32_t>(s.myPort), devOpts[d]));
  }

  HC_ASSIGN_OR_RETURN(auto side, t.sideband->connectAll(sideBlobs, deadline));
  SidebandCloser closer{side};

  // Round 1: queue-pair numbers, addresses and buffer sizes, both ways.
  for (auto& s : peers) {
    s.out = encodeQpInfo(s.conn->localInfo(t.cfg.commId, static_cast<uint32_t>(s.theirPort)));
    s.in.assign(kQpInfoBytes, std::byte{0});
    HC_TRY(side[s.rank]->isend(s.sendReq, s.out, kTagQpInfo));
    HC_TRY(side[s.rank]->irecv(s.recvReq, s.in, kTagQpInfo));
  }
  HC_TRY(waitSideband(*t.sideband, peers, deadline, me, "queue-pair information", t.cfg.timeoutSec));
  for (auto& s : peers) {
    HC_ASSIGN_OR_RETURN(QpInfo q, decodeQpInfo(s.in, s.rank));
    if (q.rank != static_cast<uint32_t>(s.rank) || q.commId != t.cfg.commId)
      return remoteError("rank %d: the verbs side band to rank %d answered as rank %u of communicator %016llx", me,
                         s.rank, q.rank, (unsigned long long)q.commId);
    if (q.senderPort != s.theirPort || q.receiverPort != s.myPort)
      return invalidUsage(
          "verbs: rank %d and rank %d chose different port pairs (%s <-> %s here, port %u <-> %u there): were "
          "they given different HETCOMM_IB_HCA settings or versions?",
          me, s.rank, describePort(t.ports[s.myPort]).c_str(), describePort(s.blob.ports[s.theirPort]).c_str(),
          q.receiverPort, q.senderPort);
    HC_TRY(s.conn->connect(q, s.blob.ports[s.theirPort]));
  }

  // Round 2: "ready to receive". Nobody sends on a queue pair before its peer's reached RTR.
  for (auto& s : peers) {
    s.sendReq = Request{};
    s.recvReq = Request{};
    s.out.assign(4, std::byte{0});
    for (int i = 0; i < 4; ++i) s.out[i] = static_cast<std::byte>(kReadyMagic >> (8 * i));
    s.in.assign(4, std::byte{0});
    HC_TRY(side[s.rank]->isend(s.sendReq, s.out, kTagReady));
    HC_TRY(side[s.rank]->irecv(s.recvReq, s.in, kTagReady));
  }
  HC_TRY(waitSideband(*t.sideband, peers, deadline, me, "ready signal", t.cfg.timeoutSec));
  for (auto& s : peers)
    if (s.in != s.out)
      return remoteError("rank %d: rank %d sent a garbled ready signal on the verbs side band", me, s.rank);

  std::vector<std::unique_ptr<Connection>> conns(n);
  for (auto& s : peers) {
    HC_TRACE(Ib, "verbs: %s", s.conn->describe().c_str());
    conns[s.rank] = std::move(s.conn);
  }
  return conns;
}

}  // namespace hetcomm::transport::verbs
