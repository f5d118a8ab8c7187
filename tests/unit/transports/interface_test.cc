// HETCOMM_SOCKET_IFNAME matching (prefix, ^exclude, =exact), interface selection on this machine, and each
// socket's share of a multi-rail connection.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "transports/tcp/tcp_transport.h"

namespace hetcomm::transport::tcp {
namespace {

TEST(InterfaceMatches, EmptySpecSkipsDockerAndVirbr) {
  EXPECT_TRUE(interfaceMatches("", "eth0"));
  EXPECT_TRUE(interfaceMatches("", "ib0"));
  EXPECT_TRUE(interfaceMatches("", "lo"));
  EXPECT_FALSE(interfaceMatches("", "docker0"));
  EXPECT_FALSE(interfaceMatches("", "virbr0"));
}

TEST(InterfaceMatches, Prefix) {
  EXPECT_TRUE(interfaceMatches("eth", "eth0"));
  EXPECT_TRUE(interfaceMatches("eth", "eth12"));
  EXPECT_TRUE(interfaceMatches("eth", "eth"));
  EXPECT_FALSE(interfaceMatches("eth", "veth0"));  // a prefix, not a substring
  EXPECT_FALSE(interfaceMatches("eth", "ib0"));
  EXPECT_TRUE(interfaceMatches("eth,ib", "ib1"));
  EXPECT_TRUE(interfaceMatches("eth,ib", "eth3"));
  EXPECT_FALSE(interfaceMatches("eth,ib", "lo"));
}

TEST(InterfaceMatches, Exclude) {
  EXPECT_FALSE(interfaceMatches("^docker,lo", "docker0"));
  EXPECT_FALSE(interfaceMatches("^docker,lo", "lo"));
  EXPECT_TRUE(interfaceMatches("^docker,lo", "eth0"));
  EXPECT_TRUE(interfaceMatches("^docker,lo", "ib0"));
}

TEST(InterfaceMatches, Exact) {
  EXPECT_TRUE(interfaceMatches("=eth1", "eth1"));
  EXPECT_FALSE(interfaceMatches("=eth1", "eth10"));
  EXPECT_FALSE(interfaceMatches("=eth1", "eth"));
  EXPECT_TRUE(interfaceMatches("=eth1,ib0", "ib0"));
  EXPECT_FALSE(interfaceMatches("=eth1,ib0", "ib01"));
}

TEST(InterfaceMatches, ExcludeExact) {
  EXPECT_FALSE(interfaceMatches("^=eth1", "eth1"));
  EXPECT_TRUE(interfaceMatches("^=eth1", "eth10"));
  EXPECT_TRUE(interfaceMatches("^=eth1", "lo"));
}

TEST(SelectInterfaces, LoopbackByPrefix) {
  auto r = selectInterfaces("lo");
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_FALSE(r->empty());
  bool has127 = false;
  for (const auto& i : *r) {
    EXPECT_EQ(i.name.rfind("lo", 0), 0u) << i.name;
    EXPECT_TRUE(i.loopback) << i.name;
    has127 |= i.addr == "127.0.0.1";
  }
  EXPECT_TRUE(has127);
  // IPv4 first.
  EXPECT_EQ(r->front().addr, "127.0.0.1");
}

TEST(SelectInterfaces, ExactName) {
  auto r = selectInterfaces("=lo");
  ASSERT_TRUE(r) << r.error().toString();
  for (const auto& i : *r) EXPECT_EQ(i.name, "lo");
}

TEST(SelectInterfaces, DefaultPutsLoopbackLastAndV4First) {
  auto r = selectInterfaces("");
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_FALSE(r->empty());
  auto firstLoop = std::find_if(r->begin(), r->end(), [](const Interface& i) { return i.loopback; });
  for (auto it = firstLoop; it != r->end(); ++it) EXPECT_TRUE(it->loopback) << it->name << " after loopback";
  auto v6 = [](const Interface& i) { return i.addr.find(':') != std::string::npos; };
  // Within the non-loopback group, no IPv4 address after an IPv6 one.
  auto firstV6 = std::find_if(r->begin(), firstLoop, v6);
  for (auto it = firstV6; it != firstLoop; ++it) EXPECT_TRUE(v6(*it)) << it->addr;
  for (const auto& i : *r) {
    EXPECT_NE(i.name.rfind("docker", 0), 0u);
    EXPECT_NE(i.addr.rfind("fe80", 0), 0u) << "link-local addresses need a scope id";
  }
}

TEST(SelectInterfaces, ExcludeLoopback) {
  auto r = selectInterfaces("^lo");
  if (!r) GTEST_SKIP() << "this machine has no interface but loopback: " << r.error().toString();
  for (const auto& i : *r) {
    EXPECT_NE(i.name, "lo");
    EXPECT_FALSE(i.loopback);
  }
}

TEST(SelectInterfaces, NothingMatchesIsAnInvalidArgumentNamingTheSpec) {
  for (const std::string spec : {"nosuchif", "=lo0x", "=eth"}) {
    SCOPED_TRACE(spec);
    auto r = selectInterfaces(spec);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(r.error().message().find("HETCOMM_SOCKET_IFNAME=" + spec), std::string::npos)
        << r.error().message();
  }
}

// Multi-rail: each socket's share of large messages, from its path's weight split among the sockets on it.
TEST(SocketWeights, PathWeightSplitAmongItsSockets) {
  std::vector<Transport::Path> paths{{"10.1.0.2", 1600}, {"10.2.0.2", 800}};
  EXPECT_EQ(socketWeights(paths, {"10.1.0.2", "10.2.0.2"}), (std::vector<double>{1600, 800}));
  EXPECT_EQ(socketWeights(paths, {"10.1.0.2", "10.2.0.2", "10.1.0.2", "10.2.0.2"}),
            (std::vector<double>{800, 400, 800, 400}));
  // A socket that reached the peer on an address no path names counts as the slowest path.
  EXPECT_EQ(socketWeights(paths, {"10.1.0.2", "192.168.0.2"}), (std::vector<double>{1600, 800}));
  // No paths: every socket alike.
  EXPECT_EQ(socketWeights({}, {"a", "b", "a"}), (std::vector<double>{0.5, 1, 0.5}));
}

// A path of weight 0 (a fabric a schedule sends over on purpose, Connection::isendOn) takes no share of ordinary
// messages; a socket on no listed path counts as the slowest path that does. Every socket knows its path's id.
TEST(SocketWeights, PathsForMessagesSentOnPurpose) {
  std::vector<Transport::Path> paths{{"10.1.0.2", 1600, 0}, {"10.2.0.2", 800, 1}, {"10.3.0.2", 0, 2}};
  EXPECT_EQ(socketWeights(paths, {"10.1.0.2", "10.2.0.2", "10.3.0.2", "192.168.0.2"}),
            (std::vector<double>{1600, 800, 0, 800}));
  EXPECT_EQ(socketPaths(paths, {"10.1.0.2", "10.3.0.2", "192.168.0.2", "10.1.0.2"}), (std::vector<int>{0, 2, -1, 0}));
  // Only weight-0 paths: a socket on no listed path takes the ordinary messages at weight 1.
  EXPECT_EQ(socketWeights({{"10.3.0.2", 0, 0}}, {"10.3.0.2", "10.9.0.9"}), (std::vector<double>{0, 1}));
}

}  // namespace
}  // namespace hetcomm::transport::tcp
