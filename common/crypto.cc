#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <vector>

namespace hetcomm::crypto {

Status randomBytes(std::span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errnoStatus(errno, "getrandom for %zu bytes", out.size());
    }
    done += static_cast<size_t>(n);
  }
  return okStatus();
}

Mac hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data) {
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), mac.data(), &len);
  return mac;
}

bool macEqual(const Mac& a, const Mac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

}  // namespace hetcomm::crypto

namespace hetcomm::crypto {

Mac prove(const Secret& secret, const Nonce& nonce, std::string_view label, uint64_t a, uint64_t b, uint64_t c,
          uint64_t d) {
  std::vector<uint8_t> msg(nonce.begin(), nonce.end());
  msg.insert(msg.end(), label.begin(), label.end());
  for (uint64_t v : {a, b, c, d})
    for (int i = 0; i < 8; ++i) msg.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return hmacSha256(secret, msg);
}

}  // namespace hetcomm::crypto
