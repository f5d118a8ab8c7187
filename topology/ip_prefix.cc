#include "topology/ip_prefix.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>

namespace hetcomm::topo {

std::optional<IpPrefix> IpPrefix::parse(std::string_view text) {
  size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::string host(text.substr(0, slash));
  std::string_view lenText = text.substr(slash + 1);

  IpPrefix p;
  int maxLength = 0;
  if (inet_pton(AF_INET, host.c_str(), p.addr.data()) == 1) {
    p.family = AF_INET;
    maxLength = 32;
  } else if (inet_pton(AF_INET6, host.c_str(), p.addr.data()) == 1) {
    p.family = AF_INET6;
    maxLength = 128;
  } else {
    return std::nullopt;
  }
  auto [end, ec] = std::from_chars(lenText.data(), lenText.data() + lenText.size(), p.length);
  if (ec != std::errc() || end != lenText.data() + lenText.size() || lenText.empty()) return std::nullopt;
  if (p.length < 0 || p.length > maxLength) return std::nullopt;
  return p;
}

IpPrefix IpPrefix::network() const {
  IpPrefix n = *this;
  int bytes = family == AF_INET ? 4 : 16;
  for (int i = 0; i < bytes; ++i) {
    int bitsKept = std::clamp(length - 8 * i, 0, 8);
    n.addr[i] &= static_cast<uint8_t>(0xff00u >> bitsKept);
  }
  return n;
}

std::string IpPrefix::addressString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(family, addr.data(), buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

std::string IpPrefix::toString() const { return addressString() + "/" + std::to_string(length); }

bool IpPrefix::isLinkLocal() const {
  if (family == AF_INET) return addr[0] == 169 && addr[1] == 254;
  return addr[0] == 0xfe && (addr[1] & 0xc0) == 0x80;
}

bool IpPrefix::isLoopback() const {
  if (family == AF_INET) return addr[0] == 127;
  static const std::array<uint8_t, 16> kLoop6 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return addr == kLoop6;
}

}  // namespace hetcomm::topo
