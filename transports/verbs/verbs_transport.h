// verbs_transport.h: the libibverbs (rdma-core) transport. One reliable-connected (RC) queue pair per peer over
// InfiniBand or RoCE, on the port pair the two ranks share that is fastest.
//
// Set-up needs a side band to swap queue-pair numbers, so this transport runs a TcpTransport inside itself: its
// listen() blob goes inside ours, its connectAll() gives authenticated (HMAC) sockets to every peer, the queue
// pairs' addresses cross those sockets, and the sockets are closed once every queue pair is ready to send.
//
// Data path (verbs_connection.h): messages up to HETCOMM_VERBS_EAGER_BYTES are copied through pre-registered
// bounce buffers with SEND, under a credit scheme so a sender never overruns the receive buffers its peer posted;
// larger messages are rendezvous: the sender announces its registered buffer, the receiver RDMA READs it into the
// posted receive buffer and answers with a FIN. Registrations come from a cache (mr_cache.h) that watches munmap.
// Completions arrive on one CQ per device with a completion channel; waitFd() is an epoll set of every device's
// completion channel and asynchronous-event fd. Asynchronous events fail the connections they concern: a fatal
// device error all of the device's, an error of a port the connections on it, a queue-pair error its connection.
// Before anything is registered, create() asks libibverbs to make registered memory fork-safe (ibv_fork_init) where
// the kernel does not copy DMA pages on fork by itself.
//
// Parameters: HETCOMM_IB_HCA picks ports (NCCL_IB_HCA syntax: "mlx5_0:1,mlx5_1" prefixes, "^" excludes, "="
// exact); HETCOMM_IB_GID_INDEX (RoCE; default: a RoCE v2 GID with an IPv4 address), HETCOMM_IB_SL, HETCOMM_IB_TC,
// HETCOMM_IB_TIMEOUT (4.096 us * 2^n, default 18), HETCOMM_IB_RETRY_CNT (default 7); HETCOMM_VERBS_EAGER_BYTES
// (default 8K), HETCOMM_VERBS_RECV_SLOTS (receive buffers per peer, default 32), HETCOMM_VERBS_MR_CACHE_BYTES /
// HETCOMM_VERBS_MR_CACHE_ENTRIES (registration cache size; entries 0 turns caching off).
//
// This header does not include <infiniband/verbs.h>: everything that touches the library is behind Impl.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace hetcomm::transport::verbs {

// The kind of GID a port is addressed by (ibv_gid_entry::gid_type). Two RoCE ports can only talk when they use the
// same kind: RoCE v1 frames are not IP packets, and a RoCE v2 GID with an IPv4 address (::ffff:a.b.c.d) sends
// IPv4 packets, which an IPv6 GID on the other side does not answer.
enum class GidType : uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };

// One active port this rank can use, as discovered and as carried in the listen() blob.
struct PortInfo {
  std::string device;             // "mlx5_0"
  int port = 1;                   // 1-based, as ibverbs counts
  bool roce = false;              // link layer Ethernet (RoCE); false: InfiniBand
  uint64_t rateMbps = 0;          // nominal signalling rate: active width x lane speed
  uint16_t lid = 0;               // IB: the port's LID (0 on RoCE)
  std::array<uint8_t, 16> gid{};  // the GID at gidIndex; on IB its upper 64 bits are the subnet prefix
  int gidIndex = 0;
  GidType gidType = GidType::kIb;  // of the GID at gidIndex (kIb on InfiniBand)
  int mtu = 0;                     // active MTU in bytes (256..4096)
  uint32_t maxMsgSize = 0;         // ibv_port_attr::max_msg_sz: the longest message (and RDMA READ) in bytes; 0 unknown
};
// True for a GID that holds an IPv4 address (::ffff:a.b.c.d).
bool gidIsIpv4(const std::array<uint8_t, 16>& gid);
// "mlx5_0:1 (IB 200 Gb/s, subnet fe80000000000000, lid 7)" / "mlx5_1:1 (RoCE v2 100 Gb/s, gid 3 ::ffff:10.0.0.2)".
std::string describePort(const PortInfo& port);

struct Availability {
  std::vector<PortInfo> ports;
  std::string reason;      // why none, when ports is empty
  Code code = Code::kOk;   // with no ports: kSystem, or kInvalidUsage when HETCOMM_IB_HCA matches no port at all
};

// NCCL_IB_HCA syntax: a comma-separated list of "device[:port]" items, device names matched as prefixes
// ("mlx5" matches mlx5_0 and mlx5_12), or exactly when the list starts with "="; a leading "^" inverts the list.
// An empty spec matches every port.
bool hcaMatches(const std::string& spec, const std::string& device, int port);

// Every ACTIVE port of every RDMA device that hcaSpec matches (ibv_get_device_list + ibv_query_port). Never fails:
// an empty list comes with the reason.
Availability discover(const std::string& hcaSpec);

class VerbsTransport final : public Transport {
 public:
  // Reads HETCOMM_IB_HCA and discovers the ports; fails (kSystem, or kInvalidUsage for a HETCOMM_IB_HCA that matches
  // nothing) when no port is usable, with the reason.
  static Result<std::unique_ptr<VerbsTransport>> create(const Config& config);
  // The same on ports the caller already discovered (discover(HETCOMM_IB_HCA)), so the devices are not listed and
  // queried twice. An Availability without ports fails with its reason and code.
  static Result<std::unique_ptr<VerbsTransport>> create(const Config& config, const Availability& availability);
  ~VerbsTransport() override;

  const Properties& properties() const override { return props_; }
  Result<std::vector<std::byte>> listen() override;
  // Blocks until every given peer's queue pair is ready to send, or the deadline passes. Fails naming both ranks'
  // ports when a peer shares no usable port pair with this rank.
  Result<std::vector<std::unique_ptr<Connection>>> connectAll(const std::vector<std::vector<std::byte>>& blobs,
                                                              Deadline deadline) override;
  // Polls the completion queues, then re-arms their notification and polls once more, so no completion that
  // arrives while the engine sleeps is missed.
  Status progress() override;
  // Polls once more after arming every completion queue; false when that found completions (call progress()).
  bool armForSleep() override;
  // An epoll fd of every device's completion channel and asynchronous-event fd (all non-blocking).
  int waitFd() const override;

  const std::vector<PortInfo>& ports() const;

  struct Impl;

 private:
  explicit VerbsTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  Properties props_;
};

}  // namespace hetcomm::transport::verbs
