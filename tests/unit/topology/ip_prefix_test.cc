// IpPrefix: parsing with prefix length, networks, and the address classes the cluster view ignores.
#include "topology/ip_prefix.h"

#include <gtest/gtest.h>

namespace hetcomm::topo {
namespace {

TEST(IpPrefix, ParsesAndPrintsIpv4AndIpv6) {
  auto v4 = IpPrefix::parse("10.1.0.3/24");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->toString(), "10.1.0.3/24");
  EXPECT_EQ(v4->addressString(), "10.1.0.3");
  EXPECT_EQ(v4->network().toString(), "10.1.0.0/24");
  auto v6 = IpPrefix::parse("fd00:1::3/64");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->network().toString(), "fd00:1::/64");
}

TEST(IpPrefix, NetworkKeepsPartialBytes) {
  EXPECT_EQ(IpPrefix::parse("192.168.77.200/20")->network().toString(), "192.168.64.0/20");
  EXPECT_EQ(IpPrefix::parse("10.9.8.7/0")->network().toString(), "0.0.0.0/0");
  EXPECT_EQ(IpPrefix::parse("10.9.8.7/32")->network().toString(), "10.9.8.7/32");
}

TEST(IpPrefix, RejectsMalformed) {
  for (const char* bad : {"10.1.0.3", "10.1.0.3/33", "10.1.0.3/", "10.1.0.3/x", "10.1.0/24", "fd00::1/129", "host/24",
                          "", "/24", "10.1.0.3/-1", "10.1.0.3/24 "}) {
    EXPECT_FALSE(IpPrefix::parse(bad)) << bad;
  }
}

TEST(IpPrefix, LinkLocalAndLoopback) {
  EXPECT_TRUE(IpPrefix::parse("169.254.3.4/16")->isLinkLocal());
  EXPECT_TRUE(IpPrefix::parse("fe80::1/64")->isLinkLocal());
  EXPECT_FALSE(IpPrefix::parse("10.0.0.1/8")->isLinkLocal());
  EXPECT_FALSE(IpPrefix::parse("fec0::1/64")->isLinkLocal());
  EXPECT_TRUE(IpPrefix::parse("127.0.0.1/8")->isLoopback());
  EXPECT_TRUE(IpPrefix::parse("::1/128")->isLoopback());
  EXPECT_FALSE(IpPrefix::parse("::2/128")->isLoopback());
}

}  // namespace
}  // namespace hetcomm::topo
