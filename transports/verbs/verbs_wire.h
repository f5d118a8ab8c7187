// verbs_wire.h: what the verbs transport puts on the wire, as pure functions that need no device (so the unit
// tests cover them on any machine): the listen() blob, the queue-pair information swapped over the TCP side band,
// the header of every message sent on a queue pair, and the choice of the port pair two ranks use.
//
// Every decoder takes bytes from a peer, so it checks magic, version, lengths and counts and fails with a clear
// remote error instead of reading past the end or allocating what a garbled count asks for. The blob and the
// queue-pair information are written little-endian byte by byte, so they do not depend on struct layout; the
// message header on the data path is copied as a struct (all ranks of a job share one byte order, as with tcp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transports/verbs/verbs_transport.h"

namespace hetcomm::transport::verbs {

// ---- listen() blob: the side band's address and this rank's ports ----

constexpr uint32_t kBlobMagic = 0x42564348;  // "HCVB"
constexpr uint16_t kBlobVersion = 2;  // 2: ports carry their GID type and max_msg_sz
constexpr size_t kMaxPorts = 64;
constexpr size_t kMaxDeviceName = 64;  // IBV_SYSFS_NAME_MAX
constexpr size_t kMaxSidebandBlob = 64 << 10;

struct Blob {
  std::vector<std::byte> sideband;  // the inner TcpTransport's listen() blob
  std::vector<PortInfo> ports;
};
std::vector<std::byte> encodeBlob(const Blob& blob);
Result<Blob> decodeBlob(std::span<const std::byte> raw, int peer);

// ---- queue-pair information, one message each way over the side band ----

constexpr uint32_t kQpInfoMagic = 0x51564348;  // "HCVQ"
constexpr uint32_t kQpInfoVersion = 2;  // 2: maxMsgSize
constexpr uint32_t kMinRecvSlots = 4;  // the credit scheme needs 1 < threshold <= slots - 1
constexpr uint32_t kMaxRecvSlots = 4096;
constexpr uint32_t kMinSlotPayload = 64;  // HETCOMM_VERBS_EAGER_BYTES's range
constexpr uint32_t kMaxSlotPayload = 1 << 20;

struct QpInfo {
  uint32_t rank = 0;
  uint64_t commId = 0;
  uint32_t qpn = 0;  // 24 bits
  uint32_t psn = 0;  // 24 bits
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  uint32_t mtu = 0;           // bytes
  uint32_t senderPort = 0;    // index into the sender's blob ports
  uint32_t receiverPort = 0;  // index into the receiver's blob ports: the pair as the sender chose it
  uint32_t recvSlots = 0;     // receive buffers the sender posted for the receiver: the receiver's credits
  uint32_t slotPayload = 0;   // bytes of payload each of those buffers holds after the message header
  uint32_t eagerMax = 0;      // the sender's eager limit (HETCOMM_VERBS_EAGER_BYTES)
  uint32_t rdAtomic = 0;      // RDMA READs the sender serves at once (responder resources): caps the receiver's
                              // reads in flight, which mixed NICs may not share
  uint32_t maxMsgSize = 0;    // the sender's port's max_msg_sz (0: unknown): caps the receiver's RDMA READ chunks
};
constexpr size_t kQpInfoBytes = 4 + 4 + 4 + 8 + 4 + 4 + 2 + 16 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4;
// The smallest max_msg_sz a decoder accepts (besides 0): a page. Devices offer megabytes (rxe 8 MiB, mlx5 1 GiB).
constexpr uint32_t kMinMaxMsgSize = 4096;
std::vector<std::byte> encodeQpInfo(const QpInfo& info);
Result<QpInfo> decodeQpInfo(std::span<const std::byte> raw, int peer);

// The last side-band message: "my queue pair is ready to receive". Only after both sides said so does either send.
constexpr uint32_t kReadyMagic = 0x52564348;  // "HCVR"

// ---- the port pair of two ranks ----

// Indices into each rank's port list. Candidates share the link layer and, on InfiniBand, the subnet prefix (the
// GID's upper 64 bits), on RoCE the GID type (v1 or v2) and address family (IPv4 or IPv6: each side picks its GID
// alone, so two hosts configured differently may not match); the fastest win (the slower port of a pair sets its
// speed). Ties are broken by (lowRank + highRank) so that peers spread over equal rails, and both ranks compute the
// same answer because they call it with the lower rank's ports first. No candidate: an invalid-usage error naming
// every port of both ranks (and, when RoCE ports were there but their GIDs differ in kind, saying so and how to
// align them).
struct PortPair {
  size_t low = 0;   // index into lowPorts
  size_t high = 0;  // index into highPorts
};
Result<PortPair> choosePortPair(const std::vector<PortInfo>& lowPorts, int lowRank,
                                const std::vector<PortInfo>& highPorts, int highRank);

// ---- messages on a queue pair ----

// Every SEND carries this 40-byte header, then `len` bytes (eager payload or abort reason). `credits` returns
// receive buffers: the sender of the header reposted that many since its previous message.
struct MsgHeader {
  enum Type : uint8_t { kEager = 1, kRts = 2, kFin = 3, kCredit = 4, kAbort = 5 };
  enum FinStatus : uint8_t { kFinOk = 0, kFinSizeMismatch = 1, kFinFailed = 2 };
  uint8_t type = 0;
  uint8_t status = 0;    // kFin: FinStatus
  uint16_t credits = 0;  // receive buffers returned
  uint32_t id = 0;       // kRts, kFin: the sender's rendezvous id
  uint32_t len = 0;      // bytes after the header
  uint32_t rkey = 0;     // kRts: the remote key of the buffer to read
  uint64_t tag = 0;      // kEager, kRts, kFin
  uint64_t size = 0;     // kEager: len; kRts: bytes to read
  uint64_t addr = 0;     // kRts: the sender's buffer
};
static_assert(sizeof(MsgHeader) == 40);
constexpr size_t kHeaderBytes = sizeof(MsgHeader);
constexpr size_t kMaxAbortReason = 1024;

// Checks a received message of `bytes` (byte_len of the completion) against a receive buffer holding
// maxPayload bytes after the header.
Result<MsgHeader> parseMessage(std::span<const std::byte> bytes, size_t maxPayload, int peer);
const char* msgTypeName(uint8_t type);

}  // namespace hetcomm::transport::verbs
