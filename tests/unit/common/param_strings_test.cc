// param::parseInt and the string helpers (format, split, hex, humanBytes).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/param.h"
#include "common/strings.h"

namespace hetcomm {
namespace {

// ---- param ----

TEST(ParseInt, PlainNumbers) {
  EXPECT_EQ(param::parseInt("0"), 0);
  EXPECT_EQ(param::parseInt("123"), 123);
  EXPECT_EQ(param::parseInt("-4"), -4);
  EXPECT_EQ(param::parseInt("9223372036854775807"), INT64_MAX);
}

TEST(ParseInt, BinarySuffixesInEitherCase) {
  EXPECT_EQ(param::parseInt("64K"), 64 << 10);
  EXPECT_EQ(param::parseInt("64k"), 64 << 10);
  EXPECT_EQ(param::parseInt("2M"), 2 << 20);
  EXPECT_EQ(param::parseInt("2m"), 2 << 20);
  EXPECT_EQ(param::parseInt("1G"), int64_t{1} << 30);
  EXPECT_EQ(param::parseInt("3g"), int64_t{3} << 30);
  EXPECT_EQ(param::parseInt("-1K"), -1024);
  EXPECT_EQ(param::parseInt("0G"), 0);
}

TEST(ParseInt, GarbageIsRejected) {
  for (const char* bad : {"", "abc", "K", "12KB", "12 ", "1.5", "1.5M", "12T", "0x10", "--1", "1e3", "5MiB",
                          "99999999999999999999"}) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    EXPECT_FALSE(param::parseInt(bad).has_value());
  }
}

// A suffix must not turn a valid number into a wrapped-around one: 2^53 K is 2^63, past INT64_MAX. Plain numbers
// past the range are rejected (ERANGE), and a suffixed one should be too, not silently overflow (undefined
// behaviour in signed arithmetic; in practice a negative or zero value).
TEST(ParseInt, SuffixOverflowIsRejected) {
  EXPECT_FALSE(param::parseInt("9007199254740992K").has_value());  // 2^53 * 2^10 = 2^63
  EXPECT_FALSE(param::parseInt("9223372036854775807G").has_value());
  EXPECT_FALSE(param::parseInt("-9223372036854775807M").has_value());
  // The largest that fits is still fine.
  EXPECT_EQ(param::parseInt("8589934591G"), int64_t{8589934591} << 30);
}

TEST(Param, EnvTreatsEmptyAsUnset) {
  ::setenv("HETCOMM_UNIT_TEST_PARAM", "", 1);
  EXPECT_FALSE(param::env("HETCOMM_UNIT_TEST_PARAM").has_value());
  ::setenv("HETCOMM_UNIT_TEST_PARAM", "x y", 1);
  EXPECT_EQ(param::env("HETCOMM_UNIT_TEST_PARAM"), "x y");
  ::unsetenv("HETCOMM_UNIT_TEST_PARAM");
  EXPECT_FALSE(param::env("HETCOMM_UNIT_TEST_PARAM").has_value());
}

TEST(Param, ReadIntAndStringUseDefaultsAndParseSuffixes) {
  ::unsetenv("HETCOMM_UNIT_TEST_INT");
  EXPECT_EQ(param::readInt("UNIT_TEST_INT", 17), 17);
  ::setenv("HETCOMM_UNIT_TEST_INT", "4K", 1);
  EXPECT_EQ(param::readInt("UNIT_TEST_INT", 17), 4096);
  ::setenv("HETCOMM_UNIT_TEST_INT", "lots", 1);  // invalid: WARN and the default
  EXPECT_EQ(param::readInt("UNIT_TEST_INT", 17), 17);
  ::unsetenv("HETCOMM_UNIT_TEST_INT");

  ::unsetenv("HETCOMM_UNIT_TEST_STR");
  EXPECT_EQ(param::readString("UNIT_TEST_STR", "dflt"), "dflt");
  ::setenv("HETCOMM_UNIT_TEST_STR", "eth1", 1);
  EXPECT_EQ(param::readString("UNIT_TEST_STR", "dflt"), "eth1");
  ::unsetenv("HETCOMM_UNIT_TEST_STR");
}

// ---- strings ----

TEST(Format, ShortAndLongOutput) {
  EXPECT_EQ(format("rank %d of %d", 3, 8), "rank 3 of 8");
  EXPECT_EQ(format("%s", ""), "");
  // Past the 256-byte stack buffer: the second vsnprintf path.
  std::string big(1000, 'x');
  std::string out = format("<%s|%d>", big.c_str(), 77);
  EXPECT_EQ(out, "<" + big + "|77>");
  EXPECT_EQ(out.size(), 1005u);
}

TEST(Format, AroundTheStackBufferBoundary) {
  for (size_t n : {254u, 255u, 256u, 257u, 511u, 100000u}) {
    std::string s(n, 'a');
    s.back() = 'z';
    std::string out = format("%s", s.c_str());
    EXPECT_EQ(out.size(), n) << n;
    EXPECT_EQ(out, s) << n;
  }
}

TEST(HumanBytes, Units) {
  EXPECT_EQ(humanBytes(0), "0 B");
  EXPECT_EQ(humanBytes(64), "64 B");
  EXPECT_EQ(humanBytes(1023), "1023 B");
  EXPECT_EQ(humanBytes(1024), "1 KiB");
  EXPECT_EQ(humanBytes(1536), "1.5 KiB");
  EXPECT_EQ(humanBytes(512 << 10), "512 KiB");
  EXPECT_EQ(humanBytes(uint64_t{3} << 30), "3 GiB");
}

TEST(Split, KeepsEmptyFields) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("a,b,c", ','), (V{"a", "b", "c"}));
  EXPECT_EQ(split("a,,c", ','), (V{"a", "", "c"}));
  EXPECT_EQ(split("a,", ','), (V{"a", ""}));
  EXPECT_EQ(split(",a", ','), (V{"", "a"}));
  EXPECT_EQ(split("", ','), (V{""}));
  EXPECT_EQ(split("abc", ','), (V{"abc"}));
  EXPECT_EQ(split("k=v\nx=y\n", '\n'), (V{"k=v", "x=y", ""}));
}

// The published FNV-1a 64 test vectors: cache files keep their names from one build to the next.
TEST(Fnv1a, PublishedVectors) {
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
}

TEST(Hex, RoundTrip) {
  const uint8_t in[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
  std::string hex = toHex(in, sizeof(in));
  EXPECT_EQ(hex, "00017f80abff");
  uint8_t out[sizeof(in)] = {};
  ASSERT_TRUE(fromHex(hex, out, sizeof(out)));
  EXPECT_EQ(0, std::memcmp(in, out, sizeof(in)));
  EXPECT_EQ(toHex(in, 0), "");
}

TEST(Hex, UppercaseAccepted) {
  uint8_t out[2] = {};
  ASSERT_TRUE(fromHex("ABcd", out, 2));
  EXPECT_EQ(out[0], 0xab);
  EXPECT_EQ(out[1], 0xcd);
}

TEST(Hex, BadInputRejected) {
  uint8_t out[4] = {};
  EXPECT_FALSE(fromHex("", out, 4));            // too short
  EXPECT_FALSE(fromHex("0011223", out, 4));     // odd length
  EXPECT_FALSE(fromHex("001122334", out, 4));   // one digit too many
  EXPECT_FALSE(fromHex("0011223344", out, 4));  // one byte too many
  EXPECT_FALSE(fromHex("00112g33", out, 4));    // not a hex digit
  EXPECT_FALSE(fromHex("0x112233", out, 4));
  EXPECT_FALSE(fromHex("00 11 22", out, 4));
  EXPECT_FALSE(fromHex("-1112233", out, 4));
}

}  // namespace
}  // namespace hetcomm
