// store.h: the rendezvous store every communicator bootstraps through: a small key-value server over TCP
// (Boost.Asio), started by rank 0's hetcommGetUniqueId or by the launcher, and its client.
//
// Every connection first proves it knows the job secret (challenge, HMAC; both directions) and only then may
// set or get keys. get() waits until the key exists or the deadline passes. Values are opaque bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/deadline.h"
#include "common/status.h"

namespace hetcomm::comm {

class StoreServer {
 public:
  // What one job's peers, and strangers, may cost the store's process. The defaults are the protocol's; tests
  // shrink them.
  struct Limits {
    std::chrono::milliseconds handshake{10000};  // a connection that has not proven the secret by then is dropped
    int maxUnauthenticated = 512;  // connections in their handshake at once; more are closed at once (clients retry)
    uint64_t maxHeldBytes = 1ull << 30;  // stored values plus requests being read, for all connections
    // A fixed port that another socket holds: how long to keep trying it. A port derived from a launcher's (torchrun:
    // MASTER_PORT+2) is one any process may have taken for a moment by binding port 0 (a neighbouring job's
    // listener); the other ranks keep dialling meanwhile, so waiting it out costs nothing but the wait.
    std::chrono::milliseconds busyPortWait{10000};
  };
  // Listens on bindAddr:port (port 0: any free port; bindAddr "" or "0.0.0.0": every interface) and serves
  // on a thread of its own until destroyed.
  static Result<std::unique_ptr<StoreServer>> start(const std::string& bindAddr, uint16_t port,
                                                    const crypto::Secret& secret, Limits limits);
  static Result<std::unique_ptr<StoreServer>> start(const std::string& bindAddr, uint16_t port,
                                                    const crypto::Secret& secret) {
    return start(bindAddr, port, secret, Limits{});
  }
  ~StoreServer();
  uint16_t port() const { return port_; }

  struct Impl;

 private:
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// A value as text and back: what the ranks exchange through the store is mostly lines of text.
inline std::vector<std::byte> textBytes(std::string_view text) {
  const auto* b = reinterpret_cast<const std::byte*>(text.data());
  return {b, b + text.size()};
}
inline std::string bytesText(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

class StoreClient {
 public:
  // Connects (retrying while the server is not up yet) and authenticates, within the deadline. addrs: one address
  // or several separated by commas, tried in turn.
  static Result<std::unique_ptr<StoreClient>> connect(const std::string& addrs, uint16_t port,
                                                      const crypto::Secret& secret, Deadline deadline);
  ~StoreClient();

  Status set(const std::string& key, const std::vector<std::byte>& value);
  Result<std::vector<std::byte>> get(const std::string& key, Deadline deadline);
  // Adds delta to the integer under key (0 when missing) and returns the new value.
  Result<int64_t> add(const std::string& key, int64_t delta);
  // Sets the key unless it exists: true when this call set it.
  Result<bool> create(const std::string& key, const std::vector<std::byte>& value);
  // Sets the key for as long as this client's connection lasts: when it ends (the process exited, its host went
  // silent), the store removes the key and sets "<key>/gone" (store_wire::kGoneSuffix).
  Status own(const std::string& key, const std::vector<std::byte>& value);
  // The key's value now, or nullopt; never waits.
  Result<std::optional<std::vector<std::byte>>> tryGet(const std::string& key);

  // Helpers built on the three operations. Keys live under prefix.
  Result<std::vector<std::vector<std::byte>>> allGather(const std::string& prefix, int rank, int nranks,
                                                        const std::vector<std::byte>& mine, Deadline deadline);
  Status barrier(const std::string& prefix, int nranks, Deadline deadline);

 private:
  StoreClient(int fd, std::string where) : fd_(fd), where_(std::move(where)) {}
  Status request(uint8_t op, const std::string& key, const std::vector<std::byte>& value, Deadline deadline,
                 std::vector<std::byte>* reply);
  int fd_;
  std::string where_;  // "host:port" for messages
};

}  // namespace hetcomm::comm
