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

}  // namespace hetcomm::transport
