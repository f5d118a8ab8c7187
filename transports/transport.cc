#include "transports/transport.h"

namespace hetcomm::transport {

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::kShm:
      return "shm";
    case Kind::kTcp:
      return "tcp";
    case Kind::kUcx:
      return "ucx";
    case Kind::kVerbs:
      return "verbs";
  }
  return "?";
}

Status sizeMismatch(int peer, uint64_t sentBytes, uint64_t tag, int me, size_t expectedBytes) {
  return invalidUsage(
      "rank %d sent %llu bytes (tag %#llx) but rank %d expected %zu: were the calls made with "
      "different counts?",
      peer, (unsigned long long)sentBytes, (unsigned long long)tag, me, expectedBytes);
}

}  // namespace hetcomm::transport
