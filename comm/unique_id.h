// unique_id.h: what a hetcommUniqueId carries (the store's address, the job secret, the root communicator's id)
// and its 128-byte encoding.
#pragma once

#include <cstdint>
#include <string>

#include "common/crypto.h"
#include "common/status.h"
#include "hetcomm/hetcomm.h"

namespace hetcomm::comm {

// The longest store address list a unique id carries.
constexpr size_t kMaxStoreAddressChars = 63;

struct UniqueIdContent {
  std::string addr;  // store host (IP or name), or several separated by commas; at most kMaxStoreAddressChars
  uint16_t port = 0;
  crypto::Secret secret{};
  uint64_t commId = 0;
};

Status encodeUniqueId(const UniqueIdContent& content, hetcommUniqueId* out);
// Fails with a clear message on an id that was not made by hetcommGetUniqueId (zeroed, truncated, foreign).
Result<UniqueIdContent> decodeUniqueId(const hetcommUniqueId& id);

}  // namespace hetcomm::comm
