// verbs_wire.cc: encoders and checked decoders for what the verbs transport sends, HETCOMM_IB_HCA matching and the
// port-pair choice. No ibverbs call lives here, so all of it runs in unit tests without a device.
#include "transports/verbs/verbs_wire.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "common/strings.h"

namespace hetcomm::transport::verbs {

namespace {

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void bytes(const void* p, size_t n) {
    auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  std::vector<std::byte>& out_;
};

// Reads from bytes a peer sent. The first shortfall is remembered (what was being read) and every later read
// yields zeros, so a decoder reads straight through and checks ok() once.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> raw) : raw_(raw) {}
  bool ok() const { return what_.empty(); }
  const std::string& what() const { return what_; }
  size_t left() const { return raw_.size() - pos_; }
  uint8_t u8(const char* field) { return static_cast<uint8_t>(le(1, field)); }
  uint16_t u16(const char* field) { return static_cast<uint16_t>(le(2, field)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(le(4, field)); }
  uint64_t u64(const char* field) { return le(8, field); }
  bool bytes(void* out, size_t n, const char* field) {
    if (!need(n, field)) return false;
    std::memcpy(out, raw_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  void fail(std::string what) {
    if (what_.empty()) what_ = std::move(what);
  }

 private:
  bool need(size_t n, const char* field) {
    if (!ok()) return false;
    if (left() < n) {
      fail(format("truncated at byte %zu of %zu (reading %s)", pos_, raw_.size(), field));
      return false;
    }
    return true;
  }
  uint64_t le(int n, const char* field) {
    if (!need(static_cast<size_t>(n), field)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(raw_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::span<const std::byte> raw_;
  size_t pos_ = 0;
  std::string what_;
};

const char* gidKind(const PortInfo& p) {
  switch (p.gidType) {
    case GidType::kIb:
      return "IB";
    case GidType::kRoceV1:
      return gidIsIpv4(p.gid) ? "RoCE v1 IPv4" : "RoCE v1";
    case GidType::kRoceV2:
      return gidIsIpv4(p.gid) ? "RoCE v2 IPv4" : "RoCE v2 IPv6";
  }
  return "unknown";
}

uint64_t subnetPrefix(const PortInfo& p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p.gid[i];
  return v;
}

bool validMtu(uint32_t mtu) { return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096; }

std::string gidText(const std::array<uint8_t, 16>& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.data(), buf, sizeof(buf));
  return buf;
}

std::string portList(const std::vector<PortInfo>& ports) {
  if (ports.empty()) return "no port";
  std::string s;
  for (const auto& p : ports) s += (s.empty() ? "" : ", ") + describePort(p);
  return s;
}

}  // namespace

// ---- ports ----

bool gidIsIpv4(const std::array<uint8_t, 16>& gid) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.data(), prefix, 12) == 0;
}

std::string describePort(const PortInfo& p) {
  std::string rate = p.rateMbps ? format("%g Gb/s", static_cast<double>(p.rateMbps) / 1000) : "rate unknown";
  if (p.roce)
    return format("%s:%d (RoCE %s %s, gid %d %s)", p.device.c_str(), p.port,
                  p.gidType == GidType::kRoceV1 ? "v1" : "v2", rate.c_str(), p.gidIndex, gidText(p.gid).c_str());
  return format("%s:%d (IB %s, subnet %016llx, lid %u)", p.device.c_str(), p.port, rate.c_str(),
                (unsigned long long)subnetPrefix(p), p.lid);
}

bool hcaMatches(const std::string& spec, const std::string& device, int port) {
  std::string list = spec;
  const bool exclude = !list.empty() && list[0] == '^';
  if (exclude) list.erase(0, 1);
  const bool exact = !list.empty() && list[0] == '=';
  if (exact) list.erase(0, 1);
  bool any = false, hit = false;
  for (const auto& item : split(list, ',')) {
    if (item.empty()) continue;
    any = true;
    std::string name = item;
    int wantPort = -1;
    if (auto colon = item.find(':'); colon != std::string::npos) {
      name = item.substr(0, colon);
      wantPort = std::atoi(item.c_str() + colon + 1);
    }
    const bool nameOk = exact ? device == name : device.rfind(name, 0) == 0;
    if (nameOk && (wantPort < 0 || wantPort == port)) hit = true;
  }
  if (!any) return true;  // "" or "^": no restriction
  return exclude ? !hit : hit;
}

Result<PortPair> choosePortPair(const std::vector<PortInfo>& lowPorts, int lowRank,
                                const std::vector<PortInfo>& highPorts, int highRank) {
  struct Candidate {
    PortPair pair;
    uint64_t rate;
  };
  std::vector<Candidate> cands;
  bool gidMismatch = false;  // RoCE ports on both sides, addressed by GIDs of different kinds
  for (size_t i = 0; i < lowPorts.size(); ++i) {
    for (size_t j = 0; j < highPorts.size(); ++j) {
      const PortInfo &a = lowPorts[i], &b = highPorts[j];
      if (a.roce != b.roce) continue;
      if (!a.roce && subnetPrefix(a) != subnetPrefix(b)) continue;  // IB across subnets needs a router: not here
      if (a.roce && (a.gidType != b.gidType || gidIsIpv4(a.gid) != gidIsIpv4(b.gid))) {
        gidMismatch = true;  // v1 frames vs v2 packets, or IPv4 vs IPv6: they never reach each other
        continue;
      }
      cands.push_back({{i, j}, std::min(a.rateMbps, b.rateMbps)});
    }
  }
  if (cands.empty() && gidMismatch) {
    std::string low, high;
    for (const auto& p : lowPorts)
      if (p.roce) low += (low.empty() ? "" : ", ") + format("%s:%d %s", p.device.c_str(), p.port, gidKind(p));
    for (const auto& p : highPorts)
      if (p.roce) high += (high.empty() ? "" : ", ") + format("%s:%d %s", p.device.c_str(), p.port, gidKind(p));
    return invalidUsage(
        "verbs: rank %d and rank %d have RoCE ports, but addressed by GIDs of different kinds (rank %d: %s; rank "
        "%d: %s), which cannot reach each other: give every host a GID of the same kind (RoCE v2 with an IPv4 "
        "address is the default choice; HETCOMM_IB_GID_INDEX picks one by index)",
        lowRank, highRank, lowRank, low.c_str(), highRank, high.c_str());
  }
  if (cands.empty())
    return invalidUsage(
        "verbs: rank %d and rank %d share no usable RDMA port pair (one needs the same link layer and, on "
        "InfiniBand, the same subnet): rank %d has %s; rank %d has %s",
        lowRank, highRank, lowRank, portList(lowPorts).c_str(), highRank, portList(highPorts).c_str());
  uint64_t best = 0;
  for (const auto& c : cands) best = std::max(best, c.rate);
  std::erase_if(cands, [&](const Candidate& c) { return c.rate != best; });
  // Rail-optimised clusters cable the i-th NIC of every host to the i-th rail: prefer pairs of equal index.
  if (std::any_of(cands.begin(), cands.end(), [](const Candidate& c) { return c.pair.low == c.pair.high; }))
    std::erase_if(cands, [](const Candidate& c) { return c.pair.low != c.pair.high; });
  const size_t pick =
      static_cast<size_t>(static_cast<unsigned>(lowRank) + static_cast<unsigned>(highRank)) % cands.size();
  return cands[pick].pair;
}

// ---- blob ----

std::vector<std::byte> encodeBlob(const Blob& blob) {
  std::vector<std::byte> out;
  Writer w(out);
  w.u32(kBlobMagic);
  w.u16(kBlobVersion);
  w.u16(static_cast<uint16_t>(blob.ports.size()));
  w.u32(static_cast<uint32_t>(blob.sideband.size()));
  w.bytes(blob.sideband.data(), blob.sideband.size());
  for (const auto& p : blob.ports) {
    w.u8(static_cast<uint8_t>(std::min(p.device.size(), kMaxDeviceName)));
    w.bytes(p.device.data(), std::min(p.device.size(), kMaxDeviceName));
    w.u8(static_cast<uint8_t>(p.port));
    w.u8(p.roce ? 1 : 0);
    w.u8(static_cast<uint8_t>(p.gidIndex));
    w.u8(static_cast<uint8_t>(p.gidType));
    w.u16(p.lid);
    w.u32(static_cast<uint32_t>(p.mtu));
    w.u32(p.maxMsgSize);
    w.u64(p.rateMbps);
    w.bytes(p.gid.data(), p.gid.size());
  }
  return out;
}

Result<Blob> decodeBlob(std::span<const std::byte> raw, int peer) {
  auto bad = [&](const std::string& what) {
    return remoteError("rank %d's verbs address blob is malformed: %s", peer, what.c_str());
  };
  Reader r(raw);
  uint32_t magic = r.u32("magic");
  if (!r.ok()) return bad(r.what());
  if (magic != kBlobMagic) return bad(format("bad magic %#x (not a verbs blob)", magic));
  uint16_t version = r.u16("version");
  uint16_t nports = r.u16("port count");
  uint32_t sidebandLen = r.u32("side-band length");
  if (!r.ok()) return bad(r.what());
  if (version != kBlobVersion)
    return bad(format("version %u, expected %u (mixed hetcomm versions?)", version, kBlobVersion));
  if (nports == 0 || nports > kMaxPorts) return bad(format("%u ports (expected 1 to %zu)", nports, kMaxPorts));
  if (sidebandLen == 0 || sidebandLen > kMaxSidebandBlob || sidebandLen > r.left())
    return bad(format("side-band address of %u bytes with %zu left", sidebandLen, r.left()));
  Blob b;
  b.sideband.resize(sidebandLen);
  r.bytes(b.sideband.data(), sidebandLen, "side-band address");
  for (uint16_t i = 0; i < nports && r.ok(); ++i) {
    PortInfo p;
    uint8_t nameLen = r.u8("device name length");
    if (r.ok() && (nameLen == 0 || nameLen > kMaxDeviceName)) {
      r.fail(format("port %u: device name of %u bytes", i, nameLen));
      break;
    }
    p.device.resize(nameLen);
    r.bytes(p.device.data(), nameLen, "device name");
    p.port = r.u8("port number");
    uint8_t roce = r.u8("link layer");
    p.gidIndex = r.u8("gid index");
    uint8_t gidType = r.u8("gid type");
    p.lid = r.u16("lid");
    uint32_t mtu = r.u32("mtu");
    p.maxMsgSize = r.u32("max message size");
    p.rateMbps = r.u64("rate");
    r.bytes(p.gid.data(), p.gid.size(), "gid");
    if (!r.ok()) break;
    p.roce = roce != 0;
    p.mtu = static_cast<int>(mtu);
    p.gidType = static_cast<GidType>(gidType);
    if (roce > 1) r.fail(format("port %u: link layer %u", i, roce));
    if (gidType > static_cast<uint8_t>(GidType::kRoceV2) || (gidType == static_cast<uint8_t>(GidType::kIb)) == p.roce)
      r.fail(format("port %u: gid type %u on %s", i, gidType, p.roce ? "RoCE" : "InfiniBand"));
    if (p.maxMsgSize != 0 && p.maxMsgSize < kMinMaxMsgSize)
      r.fail(format("port %u: max message size %u", i, p.maxMsgSize));
    if (p.port == 0) r.fail(format("port %u: port number 0", i));
    if (!validMtu(mtu)) r.fail(format("port %u: mtu %u", i, mtu));
    for (char c : p.device)
      if (c < 0x21 || c > 0x7e) r.fail(format("port %u: device name is not printable", i));
    b.ports.push_back(std::move(p));
  }
  if (!r.ok()) return bad(r.what());
  if (r.left() != 0) return bad(format("%zu bytes of trailing garbage", r.left()));
  return b;
}

// ---- queue-pair information ----

std::vector<std::byte> encodeQpInfo(const QpInfo& q) {
  std::vector<std::byte> out;
  out.reserve(kQpInfoBytes);
  Writer w(out);
  w.u32(kQpInfoMagic);
  w.u32(kQpInfoVersion);
  w.u32(q.rank);
  w.u64(q.commId);
  w.u32(q.qpn);
  w.u32(q.psn);
  w.u16(q.lid);
  w.bytes(q.gid.data(), q.gid.size());
  w.u32(q.mtu);
  w.u32(q.senderPort);
  w.u32(q.receiverPort);
  w.u32(q.recvSlots);
  w.u32(q.slotPayload);
  w.u32(q.eagerMax);
  w.u32(q.rdAtomic);
  w.u32(q.maxMsgSize);
  return out;
}

Result<QpInfo> decodeQpInfo(std::span<const std::byte> raw, int peer) {
  auto bad = [&](const std::string& what) {
    return remoteError("rank %d sent malformed verbs queue-pair information: %s", peer, what.c_str());
  };
  if (raw.size() != kQpInfoBytes) return bad(format("%zu bytes, expected %zu", raw.size(), kQpInfoBytes));
  Reader r(raw);
  QpInfo q;
  uint32_t magic = r.u32("magic");
  uint32_t version = r.u32("version");
  q.rank = r.u32("rank");
  q.commId = r.u64("communicator id");
  q.qpn = r.u32("qpn");
  q.psn = r.u32("psn");
  q.lid = r.u16("lid");
  r.bytes(q.gid.data(), q.gid.size(), "gid");
  q.mtu = r.u32("mtu");
  q.senderPort = r.u32("sender port");
  q.receiverPort = r.u32("receiver port");
  q.recvSlots = r.u32("receive slots");
  q.slotPayload = r.u32("slot payload");
  q.eagerMax = r.u32("eager limit");
  q.rdAtomic = r.u32("rdma read depth");
  q.maxMsgSize = r.u32("max message size");
  if (!r.ok()) return bad(r.what());
  if (magic != kQpInfoMagic) return bad(format("bad magic %#x", magic));
  if (version != kQpInfoVersion) return bad(format("version %u, expected %u", version, kQpInfoVersion));
  if (q.qpn == 0 || q.qpn >= (1u << 24)) return bad(format("qpn %#x", q.qpn));
  if (q.psn >= (1u << 24)) return bad(format("psn %#x", q.psn));
  if (!validMtu(q.mtu)) return bad(format("mtu %u", q.mtu));
  if (q.senderPort >= kMaxPorts || q.receiverPort >= kMaxPorts)
    return bad(format("port indices %u and %u", q.senderPort, q.receiverPort));
  if (q.recvSlots < kMinRecvSlots || q.recvSlots > kMaxRecvSlots)
    return bad(format("%u receive slots (expected %u to %u)", q.recvSlots, kMinRecvSlots, kMaxRecvSlots));
  auto inRange = [](uint32_t v) { return v >= kMinSlotPayload && v <= kMaxSlotPayload; };
  if (!inRange(q.slotPayload) || !inRange(q.eagerMax))
    return bad(format("slot payload %u, eager limit %u (expected %u to %u)", q.slotPayload, q.eagerMax, kMinSlotPayload,
                      kMaxSlotPayload));
  if (q.rdAtomic == 0 || q.rdAtomic > 255) return bad(format("rdma read depth %u", q.rdAtomic));
  if (q.maxMsgSize != 0 && q.maxMsgSize < kMinMaxMsgSize) return bad(format("max message size %u", q.maxMsgSize));
  return q;
}

// ---- messages ----

const char* msgTypeName(uint8_t type) {
  switch (type) {
    case MsgHeader::kEager:
      return "eager";
    case MsgHeader::kRts:
      return "rts";
    case MsgHeader::kFin:
      return "fin";
    case MsgHeader::kCredit:
      return "credit";
    case MsgHeader::kAbort:
      return "abort";
  }
  return "unknown";
}

Result<MsgHeader> parseMessage(std::span<const std::byte> bytes, size_t maxPayload, int peer) {
  auto bad = [&](const std::string& what) {
    return remoteError("rank %d sent a malformed verbs message: %s", peer, what.c_str());
  };
  if (bytes.size() < kHeaderBytes) return bad(format("%zu bytes, shorter than a header", bytes.size()));
  MsgHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  const size_t after = bytes.size() - kHeaderBytes;
  if (h.len != after)
    return bad(format("%s header announces %u bytes but %zu followed", msgTypeName(h.type), h.len, after));
  if (after > maxPayload) return bad(format("%zu bytes of payload, more than a receive buffer holds", after));
  switch (h.type) {
    case MsgHeader::kEager:
      if (h.size != h.len)
        return bad(format("eager message of %llu bytes carrying %u", (unsigned long long)h.size, h.len));
      break;
    case MsgHeader::kRts:
      if (h.len != 0 || h.size == 0 || h.addr == 0)
        return bad(
            format("rendezvous announcement with %u bytes attached, size %llu", h.len, (unsigned long long)h.size));
      break;
    case MsgHeader::kFin:
      if (h.len != 0 || h.status > MsgHeader::kFinFailed)
        return bad(format("fin with %u bytes attached, status %u", h.len, h.status));
      break;
    case MsgHeader::kCredit:
      if (h.len != 0) return bad(format("credit message with %u bytes attached", h.len));
      break;
    case MsgHeader::kAbort:
      if (h.len > kMaxAbortReason) return bad(format("abort reason of %u bytes", h.len));
      break;
    default:
      return bad(format("unknown message type %u", h.type));
  }
  return h;
}

}  // namespace hetcomm::transport::verbs
