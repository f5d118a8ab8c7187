#include "comm/unique_id.h"

#include <cstring>

namespace hetcomm::comm {

namespace {
constexpr uint32_t kMagic = 0x31554348;  // "HCU1"
struct Layout {
  uint32_t magic;
  uint16_t port;
  uint8_t addrLen;
  uint8_t pad;
  char addr[kMaxStoreAddressChars + 1];
  uint8_t secret[crypto::kSecretBytes];
  uint64_t commId;
  uint32_t check;  // sum of the bytes above: catches a truncated or mangled copy
};
static_assert(sizeof(Layout) <= HETCOMM_UNIQUE_ID_BYTES);

uint32_t checksum(const Layout& l) {
  const auto* p = reinterpret_cast<const uint8_t*>(&l);
  uint32_t h = 2166136261u;  // FNV-1a
  for (size_t i = 0; i < offsetof(Layout, check); ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}
}  // namespace

Status encodeUniqueId(const UniqueIdContent& c, hetcommUniqueId* out) {
  if (c.addr.size() >= sizeof(Layout::addr)) return invalidArgument("store address '%s' is too long", c.addr.c_str());
  Layout l{};
  l.magic = kMagic;
  l.port = c.port;
  l.addrLen = static_cast<uint8_t>(c.addr.size());
  std::memcpy(l.addr, c.addr.data(), c.addr.size());
  std::memcpy(l.secret, c.secret.data(), c.secret.size());
  l.commId = c.commId;
  l.check = checksum(l);
  std::memset(out->internal, 0, sizeof(out->internal));
  std::memcpy(out->internal, &l, sizeof(l));
  return okStatus();
}

Result<UniqueIdContent> decodeUniqueId(const hetcommUniqueId& id) {
  Layout l;
  std::memcpy(&l, id.internal, sizeof(l));
  if (l.magic != kMagic)
    return invalidArgument("the unique id was not made by hetcommGetUniqueId (bad magic; zeroed or foreign id?)");
  if (l.check != checksum(l) || l.addrLen >= sizeof(l.addr) || l.port == 0)
    return invalidArgument("the unique id is corrupt (checksum mismatch): was it copied whole to every rank?");
  UniqueIdContent c;
  c.addr.assign(l.addr, l.addrLen);
  c.port = l.port;
  std::memcpy(c.secret.data(), l.secret, c.secret.size());
  c.commId = l.commId;
  return c;
}

}  // namespace hetcomm::comm
