// crypto: HMAC-SHA256 against RFC 4231, the challenge proofs, constant-time comparison, random bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "common/crypto.h"
#include "common/strings.h"

namespace hetcomm::crypto {
namespace {

std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Hmac, Rfc4231TestCase2) {
  // Key "Jefe", data "what do ya want for nothing?".
  Mac mac = hmacSha256(bytes("Jefe"), bytes("what do ya want for nothing?"));
  EXPECT_EQ(toHex(mac.data(), mac.size()), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Hmac, Rfc4231TestCase1) {
  // Key 20 x 0x0b, data "Hi There".
  std::string key(20, '\x0b');
  Mac mac = hmacSha256(bytes(key), bytes("Hi There"));
  EXPECT_EQ(toHex(mac.data(), mac.size()), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

class Prove : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 7 + 1);
    for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<uint8_t>(200 - i);
  }
  Secret secret{};
  Nonce nonce{};
};

TEST_F(Prove, DeterministicForTheSameInputs) {
  EXPECT_TRUE(macEqual(prove(secret, nonce, "tcp-dial", 1, 2, 3, 4), prove(secret, nonce, "tcp-dial", 1, 2, 3, 4)));
  EXPECT_TRUE(macEqual(prove(secret, nonce, "store"), prove(secret, nonce, "store", 0, 0, 0, 0)));
}

TEST_F(Prove, DiffersByLabel) {
  Mac a = prove(secret, nonce, "tcp-dial", 1, 2, 3, 4);
  EXPECT_FALSE(macEqual(a, prove(secret, nonce, "tcp-accept", 1, 2, 3, 4)));
  EXPECT_FALSE(macEqual(a, prove(secret, nonce, "tcp-dia", 1, 2, 3, 4)));
  EXPECT_FALSE(macEqual(a, prove(secret, nonce, "", 1, 2, 3, 4)));
}

TEST_F(Prove, DiffersByEachBoundValue) {
  Mac base = prove(secret, nonce, "tcp-dial", 1, 2, 3, 4);
  EXPECT_FALSE(macEqual(base, prove(secret, nonce, "tcp-dial", 9, 2, 3, 4)));
  EXPECT_FALSE(macEqual(base, prove(secret, nonce, "tcp-dial", 1, 9, 3, 4)));
  EXPECT_FALSE(macEqual(base, prove(secret, nonce, "tcp-dial", 1, 2, 9, 4)));
  EXPECT_FALSE(macEqual(base, prove(secret, nonce, "tcp-dial", 1, 2, 3, 9)));
  // Swapped values (dialer and acceptor ranks) must not collide either.
  EXPECT_FALSE(macEqual(base, prove(secret, nonce, "tcp-dial", 2, 1, 3, 4)));
  // High bytes count: values that agree in their low 32 bits.
  EXPECT_FALSE(macEqual(base, prove(secret, nonce, "tcp-dial", 1, 2, 3 | (uint64_t{1} << 40), 4)));
}

TEST_F(Prove, DiffersBySecretAndNonce) {
  Mac base = prove(secret, nonce, "store");
  Secret other = secret;
  other[15] ^= 1;
  EXPECT_FALSE(macEqual(base, prove(other, nonce, "store")));
  Nonce n2 = nonce;
  n2[0] ^= 0x80;
  EXPECT_FALSE(macEqual(base, prove(secret, n2, "store")));
}

TEST(MacEqual, ComparesEveryByte) {
  Mac a{};
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
  Mac b = a;
  EXPECT_TRUE(macEqual(a, b));
  for (size_t i : {size_t{0}, size_t{15}, kMacBytes - 1}) {
    Mac c = a;
    c[i] ^= 0x01;
    EXPECT_FALSE(macEqual(a, c)) << "byte " << i;
  }
}

TEST(RandomBytes, FillsAndDiffers) {
  Secret a{}, b{};
  ASSERT_TRUE(randomBytes(a).ok());
  ASSERT_TRUE(randomBytes(b).ok());
  EXPECT_NE(a, b);  // 2^-128 to fail
  EXPECT_NE(a, Secret{});
  EXPECT_TRUE(randomBytes(std::span<uint8_t>()).ok());
}

}  // namespace
}  // namespace hetcomm::crypto
