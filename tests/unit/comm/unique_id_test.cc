// hetcommUniqueId encoding: round trip, and clear refusals of ids not made by hetcommGetUniqueId.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "comm/unique_id.h"

namespace hetcomm::comm {
namespace {

UniqueIdContent sample() {
  UniqueIdContent c;
  c.addr = "192.0.2.17";
  c.port = 29411;
  for (size_t i = 0; i < c.secret.size(); ++i) c.secret[i] = static_cast<uint8_t>(0xa0 + i);
  c.commId = 0x0123456789abcdefull;
  return c;
}

TEST(UniqueId, RoundTrip) {
  hetcommUniqueId id;
  std::memset(&id, 0x5a, sizeof(id));
  ASSERT_TRUE(encodeUniqueId(sample(), &id).ok());
  auto d = decodeUniqueId(id);
  ASSERT_TRUE(d) << d.error().toString();
  EXPECT_EQ(d->addr, "192.0.2.17");
  EXPECT_EQ(d->port, 29411);
  EXPECT_EQ(d->secret, sample().secret);
  EXPECT_EQ(d->commId, 0x0123456789abcdefull);
}

TEST(UniqueId, RoundTripOfLongestAddressAndHostName) {
  UniqueIdContent c = sample();
  c.addr = std::string(63, 'h');
  hetcommUniqueId id;
  ASSERT_TRUE(encodeUniqueId(c, &id).ok());
  auto d = decodeUniqueId(id);
  ASSERT_TRUE(d) << d.error().toString();
  EXPECT_EQ(d->addr, c.addr);
  c.addr = "fd00::2";
  ASSERT_TRUE(encodeUniqueId(c, &id).ok());
  EXPECT_EQ(decodeUniqueId(id)->addr, "fd00::2");
}

TEST(UniqueId, AddressTooLongIsRefused) {
  UniqueIdContent c = sample();
  c.addr = std::string(64, 'h');
  hetcommUniqueId id;
  Status st = encodeUniqueId(c, &id);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("too long"), std::string::npos) << st.message();
}

TEST(UniqueId, ZeroedIdIsRefused) {
  hetcommUniqueId id;
  std::memset(&id, 0, sizeof(id));
  auto d = decodeUniqueId(id);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code(), Code::kInvalidArgument);
  EXPECT_NE(d.error().message().find("not made by hetcommGetUniqueId"), std::string::npos) << d.error().message();
}

TEST(UniqueId, EveryFlippedByteIsCaught) {
  hetcommUniqueId good;
  ASSERT_TRUE(encodeUniqueId(sample(), &good).ok());
  // The encoded part: magic 4, port 2, address length 1, pad 1, address 64, secret 16, comm id 8, checksum 4:
  // the first 100 bytes.
  for (size_t i = 0; i < 100; ++i) {
    hetcommUniqueId bad = good;
    bad.internal[i] = static_cast<char>(bad.internal[i] ^ 0x01);
    auto d = decodeUniqueId(bad);
    ASSERT_FALSE(d) << "byte " << i << " flipped went unnoticed";
    EXPECT_EQ(d.error().code(), Code::kInvalidArgument) << i;
    const std::string msg(d.error().message());
    EXPECT_TRUE(msg.find("corrupt") != std::string::npos || msg.find("not made by hetcommGetUniqueId") != std::string::npos)
        << "byte " << i << ": " << msg;
  }
}

TEST(UniqueId, FlippedByteMessageSaysCorrupt) {
  hetcommUniqueId id;
  ASSERT_TRUE(encodeUniqueId(sample(), &id).ok());
  id.internal[20] ^= 0x40;  // inside the address
  auto d = decodeUniqueId(id);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("corrupt"), std::string::npos) << d.error().message();
  EXPECT_NE(d.error().message().find("every rank"), std::string::npos) << d.error().message();
}

TEST(UniqueId, PortZeroIsRefused) {
  UniqueIdContent c = sample();
  c.port = 0;
  hetcommUniqueId id;
  ASSERT_TRUE(encodeUniqueId(c, &id).ok());
  EXPECT_FALSE(decodeUniqueId(id));
}

}  // namespace
}  // namespace hetcomm::comm
