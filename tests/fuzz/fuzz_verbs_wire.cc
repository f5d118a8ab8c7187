// fuzz_verbs_wire: the verbs transport's decoders of what a peer sends: its listen() blob, its queue-pair
// information over the side band, and the header of every message on a queue pair; then the port choice over
// decoded blobs. Input: byte 0 picks the decoder, the rest is the peer's bytes. Each must return a value or a
// clear error, never read past the input or allocate what a count only claims.
#include <cstdint>
#include <span>

#include "transports/verbs/verbs_wire.h"

using namespace hetcomm::transport::verbs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 4;
  std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  switch (which) {
    case 0:
      (void)decodeBlob(raw, 1);
      break;
    case 1:
      (void)decodeQpInfo(raw, 1);
      break;
    case 2:
      (void)parseMessage(raw, 4096, 1);
      break;
    default: {  // two blobs back to back, split at the middle: the pair of ports two such peers would use
      auto a = decodeBlob(raw.first(raw.size() / 2), 1);
      auto b = decodeBlob(raw.subspan(raw.size() / 2), 2);
      if (a && b) (void)choosePortPair(a->ports, 1, b->ports, 2);
    }
  }
  return 0;
}
