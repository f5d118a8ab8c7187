// fuzz_shm_frames: what a shm connection makes of the records its peer writes into their ring: data frames,
// cross-memory attach announcements, acks and abort frames, with any kinds, lengths, offsets and totals. Input:
// byte 0 is how many receives to post first (0-3, tags 0, 1, 2), then two bytes of size for each; the rest is the
// ring as the peer wrote it. The connection's own code reads it (shm::readPeerFramesForTesting): it must deliver,
// refuse or fail with a remote error, never read or write outside the ring or a buffer.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tests/fuzz/frame_input.h"
#include "transports/shm/shm_transport.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hetcomm::fuzz::boundEarlyMessages();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<size_t> sizes = hetcomm::fuzz::takeReceiveSizes(data, size);
  if (size > (1u << 20)) size = 1u << 20;
  (void)hetcomm::transport::shm::readPeerFramesForTesting({reinterpret_cast<const std::byte*>(data), size}, sizes);
  return 0;
}
