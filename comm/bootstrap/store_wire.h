// store_wire.h: the store's protocol on the wire, shared by the server, the client and the fuzz target that
// plays a client (tests/fuzz/fuzz_store.cc). All ranks of a job share one byte order, so structs go as they are.
#pragma once

#include <cstdint>

#include "common/crypto.h"

namespace hetcomm::comm::store_wire {

// Protocol. Handshake: server Hello{nonce}; client Proof{mac(nonce), clientNonce}; server Welcome{mac(clientNonce)}.
// Then requests [op u8][keylen u32][vallen u64][key][value] and replies [status u8][len u64][data].
constexpr uint32_t kHelloMagic = 0x48534348;    // "HCSH"
constexpr uint32_t kProofMagic = 0x50534348;    // "HCSP"
constexpr uint32_t kWelcomeMagic = 0x57534348;  // "HCSW"
constexpr uint32_t kMaxKey = 4096;
// The largest value: a rank's record (its transports' addresses, its topology) is a few KiB; a cluster's link matrix
// a few MiB at thousands of ranks.
constexpr uint64_t kMaxValue = 16ull << 20;
// StoreServer::Limits: bytes held for every connection together (a peer that knows the secret still cannot make
// the store's process grow past them); a handshake deadline and a cap on connections in their handshake (port
// scanners and half-open connections cannot hold the store's file descriptors): common/listener_guard.h.

struct Hello {
  uint32_t magic = kHelloMagic;
  uint32_t version = 1;
  crypto::Nonce nonce{};
};
struct Proof {
  uint32_t magic = kProofMagic;
  uint32_t version = 1;
  crypto::Mac mac{};
  crypto::Nonce nonce{};
};
struct Welcome {
  uint32_t magic = kWelcomeMagic;
  uint32_t version = 1;
  crypto::Mac mac{};
};
struct ReqHeader {
  uint8_t op;
  uint8_t pad[3];
  uint32_t keyLen;
  uint64_t valueLen;
};
struct ReplyHeader {
  uint8_t status;  // kReplyOk, kReplyBad, kReplyExists
  uint8_t pad[7];
  uint64_t len;
};
// kCreate: set, unless the key exists (then kReplyExists, and the value stays).
// kOwn: set, and tie the key to this connection: when the connection ends (the client's process exited, or its
// host went silent past TCP keepalive), the key goes and "<key>/gone" is set. A rank's liveness, for shrink.
// kTryGet: the value now, or kReplyMissing; never waits.
enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCreate = 4, kOwn = 5, kTryGet = 6 };
enum Reply : uint8_t { kReplyOk = 0, kReplyBad = 1, kReplyExists = 2, kReplyMissing = 3 };
constexpr uint8_t kLastOp = kTryGet;
constexpr const char* kGoneSuffix = "/gone";

}  // namespace hetcomm::comm::store_wire
