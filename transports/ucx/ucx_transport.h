// ucx_transport.h: the UCX transport (UCP active messages). Reaches whatever UCX_TLS lets UCX reach: TCP,
// shared memory (posix, sysv, cma) here; rc, ud, dc on InfiniBand and RoCE.
//
// One UCP worker per communicator, on one UCP context per process (a context loads every UCT component, which
// is slow, and workers are what keeps communicators apart). The listen() blob is the worker's address plus a
// nonce; connectAll() creates one endpoint per peer and proves the job secret both ways with an HMAC "hello"
// message before it returns (UCX itself authenticates nothing).
//
// Messages are active messages whose header carries the sender's rank and the tag; matching is ours, as in the
// other transports. Small messages arrive eagerly (kept by UCX until their receive is posted, or copied when UCX
// cannot keep them); large ones use UCX's rendezvous: they stay in the sender's memory until the receive is
// posted, then UCX moves them (zero-copy where the fabric allows). Waiting blocks on the worker's event fd,
// armed right before the engine sleeps; peers on this host are also watched through their pidfd, since UCX's
// shared-memory transports notice a dead peer only after a keep-alive interval.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace hetcomm::transport::ucx {

class UcxTransport final : public Transport {
 public:
  // Fails (kSystem, with UCX's reason) when UCX cannot start here, e.g. UCX_TLS names nothing usable.
  static Result<std::unique_ptr<UcxTransport>> create(const Config& config);
  ~UcxTransport() override;

  const Properties& properties() const override { return props_; }
  Result<std::vector<std::byte>> listen() override;
  Result<std::vector<std::unique_ptr<Connection>>> connectAll(const std::vector<std::vector<std::byte>>& blobs,
                                                              Deadline deadline) override;
  Status progress() override;
  int waitFd() const override;
  bool armForSleep() override;

  struct Impl;

 private:
  friend void deliverForTesting(Transport&, std::span<const std::byte>, std::span<const std::byte>);
  explicit UcxTransport(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with the connections, which may outlive this object
  Properties props_;
};

// For the fuzz target (tests/fuzz/fuzz_ucx_messages.cc): hands a UcxTransport an eager active message from a peer,
// header and payload as UCX would pass them to the transport's handler (UCX keeping nothing), through that handler.
// What it made of it shows in the connections' receives and failures.
void deliverForTesting(Transport& transport, std::span<const std::byte> header, std::span<const std::byte> payload);

// "tcp", "sm", "rc,sm": what UCX_TLS allows, for names and logs ("all" when unset).
std::string allowedTransports();

}  // namespace hetcomm::transport::ucx
