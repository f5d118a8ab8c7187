// frame_input.h: the input layout the two frame targets share (fuzz_tcp_frames, fuzz_shm_frames): byte 0 is how
// many receives to post first (0-3, tags 0, 1, 2), then two bytes of size for each; the rest is the peer's bytes.
// Early messages may hold at most 1 MiB there (HETCOMM_EARLY_MAX_BYTES), so a claim past it is refused, not met.
// Inputs are a few KiB, so 1 MiB still leaves room for claims the input never fills; a larger bound only slows
// every input down: ASan poisons the shadow of each buffer it hands out and takes back (fuzz_shm_frames ran 1,900
// inputs a second with 64 MiB, 3,100 with 1 MiB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace hetcomm::fuzz {

inline void boundEarlyMessages() { setenv("HETCOMM_EARLY_MAX_BYTES", "1048576", 1); }

// Takes the receive sizes off the front of the input; data and size then hold the peer's bytes.
inline std::vector<size_t> takeReceiveSizes(const uint8_t*& data, size_t& size) {
  std::vector<size_t> sizes;
  if (size == 0) return sizes;
  const size_t n = data[0] % 4;
  ++data, --size;
  for (size_t i = 0; i < n && size >= 2; ++i, data += 2, size -= 2) sizes.push_back(data[0] | data[1] << 8);
  return sizes;
}

}  // namespace hetcomm::fuzz
