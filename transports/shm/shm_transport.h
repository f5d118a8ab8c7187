// shm_transport.h: the same-host transport. Ranks of one host exchange messages through shared memory.
//
// Each pair of ranks shares one shared-memory segment with a ring per direction. The lower rank creates it as an
// anonymous memfd and passes the descriptor to the higher rank over a Unix socket (SCM_RIGHTS): the segment never
// has a name, so nothing can be left in /dev/shm, whatever way the processes end.
//
// Messages of a collective's chunk size are pulled by the receiver straight from the sender's buffer with
// process_vm_readv (one copy, cross-memory attach), the sender's request completing when the receiver
// acknowledges. Smaller and larger messages are copied through the ring (two copies, pipelined over both
// processes, no system call). Where the kernel forbids cross-memory attach (ptrace restrictions), a pair uses the
// ring for everything.
//
// Waiting blocks: a receiver (or a sender facing a full ring) raises a flag in the segment before the engine
// sleeps (armForSleep), and the peer sends it a one-byte datagram on an abstract Unix socket after writing. While
// a thread polls (progress) no flag is up, so a message costs no system call on either side. The peer's pidfd is
// in the epoll set too, so a peer that dies fails the connection at once instead of at the timeout.
//
// Parameters: HETCOMM_SHM_CMA_BYTES and HETCOMM_SHM_CMA_MAX_BYTES, the range of message sizes sent by cross-memory
// attach (default 256K to 1M: a collective's chunks; 0 disables it). Larger messages stream through the ring,
// where sender and receiver copy on two cores at once. Whether attach pays at all depends on the machine (the
// kernel pins the peer's pages for every call): unless HETCOMM_SHM_CMA_BYTES is set, each process measures it
// once (measureAttach) and a rank that would copy slower by attach than the ring's two copies reads through the
// ring instead.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace hetcomm::transport::shm {

class ShmTransport final : public Transport {
 public:
  static Result<std::unique_ptr<ShmTransport>> create(const Config& config);
  ~ShmTransport() override;

  const Properties& properties() const override { return props_; }
  Result<std::vector<std::byte>> listen() override;
  // blobs of peers on another host (another host id in the blob) are an error: shm reaches this host only.
  Result<std::vector<std::unique_ptr<Connection>>> connectAll(const std::vector<std::vector<std::byte>>& blobs,
                                                              Deadline deadline) override;
  Status progress() override;
  int waitFd() const override { return epollFd_; }
  bool armForSleep() override;

  // Before connectAll: the ranks it connects (this one and every peer given a blob) also share one region of
  // `bytes`, zero-filled, mapped in each of them. The lowest of those ranks creates it (an anonymous memfd, like the
  // pairs' segments) and hands it to every other with their pair's segment. Every one of them must ask for the same
  // size, and only where they all connect to each other; empty afterwards when not asked for.
  void shareHostRegion(size_t bytes) { regionBytes_ = bytes; }
  std::span<std::byte> hostRegion() const { return {static_cast<std::byte*>(region_), region_ ? regionBytes_ : 0}; }
  // Ends the sleep of the peer's progress engine (a datagram to its wake-up socket): for a peer that waits on the
  // host region rather than on a message. Never blocks; a peer this transport does not serve is ignored.
  void wakePeer(int peer);

  struct Impl;

 private:
  explicit ShmTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  Properties props_;
  int epollFd_;
  size_t regionBytes_ = 0;
  void* region_ = nullptr;
};

// One copy by cross-memory attach against the ring's two memcpys, on the chunks of a 16 MiB region (past a core's
// own caches, as a large collective's buffers are): attach pays when it takes less than twice memcpy's time. Best of a few
// passes each, alternated, so that a busy moment slows both alike. About 15 ms; the transport runs it once per
// process (when HETCOMM_SHM_CMA_BYTES is unset).
struct AttachMeasure {
  double memcpyGBps = 0, attachGBps = 0;
  bool pays = false;
};
Result<AttachMeasure> measureAttach(size_t regionBytes = 16 << 20, size_t chunkBytes = 512 << 10);
// Whether this process reads its peers' chunks by attach (where the kernel lets it): yes where
// HETCOMM_SHM_CMA_BYTES is set (0 then leaves every size to the ring), else measureAttach's verdict, taken once.
bool attachChosen();

// For the fuzz target (tests/fuzz/fuzz_shm_frames.cc) and the ring's tests: a connection reads `ring` as if its
// peer had written it (from position 0, the head at its end; at most one ring's length), with receives posted
// first for tags 0, 1, ... of the sizes in `receives`. Returns how the connection ended: ok while it is usable,
// else the error a rank would see. It runs the connection's own code on a segment of this process, and no peer.
Status readPeerFramesForTesting(std::span<const std::byte> ring, std::span<const size_t> receives);

}  // namespace hetcomm::transport::shm
