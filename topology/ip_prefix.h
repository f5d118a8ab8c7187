// ip_prefix.h: an interface address with its prefix length ("10.1.0.3/24", "fd00::3/64"), and the network it
// lies in. The cluster view groups NICs into fabrics by network, and every address that enters a
// NodeDescription (discovery, topology files, a peer's bytes) is checked with parse().
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hetcomm::topo {

struct IpPrefix {
  int family = 0;                  // AF_INET or AF_INET6
  std::array<uint8_t, 16> addr{};  // network byte order; IPv4 uses the first 4 bytes
  int length = 0;                  // prefix length in bits

  // "10.1.0.3/24" or "fd00::3/64". The prefix length is required: without it the network is unknown.
  static std::optional<IpPrefix> parse(std::string_view text);

  // The same prefix with the host bits cleared: 10.1.0.3/24 -> 10.1.0.0/24.
  IpPrefix network() const;
  // "10.1.0.3/24"; parse(toString()) gives back the same value.
  std::string toString() const;
  // The address alone, "10.1.0.3".
  std::string addressString() const;

  // 169.254.0.0/16 and fe80::/10: every link has one, so they say nothing about which hosts can reach each other.
  bool isLinkLocal() const;
  // 127.0.0.0/8 and ::1.
  bool isLoopback() const;

  bool operator==(const IpPrefix&) const = default;
};

}  // namespace hetcomm::topo
