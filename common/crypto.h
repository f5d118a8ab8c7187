// crypto.h: the little cryptography the handshakes need: random bytes and an HMAC-SHA256 (OpenSSL libcrypto).
// A connection proves it knows the job's secret by answering a random challenge with HMAC(secret, challenge ||
// context), so the secret itself never crosses the wire.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace hetcomm::crypto {

constexpr size_t kSecretBytes = 16;
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;
using Secret = std::array<uint8_t, kSecretBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// Fills out from the kernel's CSPRNG (getrandom).
Status randomBytes(std::span<uint8_t> out);
Mac hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data);
// Compares without early exit so timing does not leak how much matched.
bool macEqual(const Mac& a, const Mac& b);

}  // namespace hetcomm::crypto

namespace hetcomm::crypto {

// The answer to a challenge: HMAC(secret, nonce || label || a || b || c || d). label names the purpose
// ("store", "tcp-dial", "tcp-accept") so a proof for one step cannot be replayed at another; a..d bind the
// identities (ranks, communicator id, socket index).
Mac prove(const Secret& secret, const Nonce& nonce, std::string_view label, uint64_t a = 0, uint64_t b = 0,
          uint64_t c = 0, uint64_t d = 0);

}  // namespace hetcomm::crypto
