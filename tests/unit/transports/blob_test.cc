// The text address blob (transports/blob.h): what a transport writes reads back, and a peer's blob of another
// transport, another version or garbage is not taken for a good one.
#include "transports/blob.h"

#include <gtest/gtest.h>

#include <string>

namespace hetcomm::transport {
namespace {

std::vector<std::byte> bytesOf(const std::string& s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

TEST(TextBlob, RoundTrip) {
  auto raw = TextBlob("hcx", 3).put("host", "h1").put("port", "4242").put("empty", "").bytes();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(raw.data()), raw.size()), "hcx=3\nhost=h1\nport=4242\nempty=\n");
  TextBlob b = TextBlob::parse(raw, "hcx", 3);
  ASSERT_TRUE(b.ok());
  ASSERT_NE(b.find("host"), nullptr);
  EXPECT_EQ(*b.find("host"), "h1");
  EXPECT_EQ(*b.find("port"), "4242");
  EXPECT_EQ(*b.find("empty"), "");
  EXPECT_EQ(b.find("missing"), nullptr);
}

TEST(TextBlob, AnotherTransportOrVersionIsNotOk) {
  auto raw = TextBlob("hcx", 1).put("host", "h").bytes();
  EXPECT_FALSE(TextBlob::parse(raw, "hcy", 1).ok());
  EXPECT_FALSE(TextBlob::parse(raw, "hcx", 2).ok());
  // The magic must come first: a blob that only mentions it later is not one of ours.
  EXPECT_FALSE(TextBlob::parse(bytesOf("host=h\nhcx=1\n"), "hcx", 1).ok());
}

TEST(TextBlob, GarbageIsNotOkAndNeverCrashes) {
  for (std::string s : {std::string(), std::string("\n\n\n"), std::string("no equals sign"), std::string("=\n=\n"),
                        std::string("hcx=1"), std::string("\0\0\0\0", 4), std::string(1000, '=')}) {
    TextBlob b = TextBlob::parse(bytesOf(s), "hcx", 1);
    EXPECT_EQ(b.ok(), s == "hcx=1") << s;
  }
}

TEST(TextBlob, ARepeatedKeyTakesTheLastValue) {
  TextBlob b = TextBlob::parse(bytesOf("hcx=1\nport=1\nport=2\n"), "hcx", 1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b.find("port"), "2");
}

}  // namespace
}  // namespace hetcomm::transport
