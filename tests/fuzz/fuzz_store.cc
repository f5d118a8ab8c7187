// fuzz_store: the bootstrap store's server, as a stranger or a client that knows the secret drives it. Each input
// is one connection to a real StoreServer on loopback: byte 0 chooses whether the harness first proves the secret
// (so the fuzzer reaches the requests) or sends the input as the handshake; the rest goes as it is, then the
// harness half-closes and reads until the server closes. The server must answer, refuse or close, and never crash,
// grow without bound (its budget here is 64 MiB) or keep a connection that has left (a parked get included).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "comm/bootstrap/store.h"
#include "comm/bootstrap/store_wire.h"
#include "common/crypto.h"

namespace {

using namespace hetcomm;
using namespace hetcomm::comm::store_wire;

crypto::Secret secret() {
  crypto::Secret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i * 7 + 1);
  return s;
}

std::unique_ptr<comm::StoreServer>& server() {
  static std::unique_ptr<comm::StoreServer> s;
  return s;
}

bool readExactly(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 2000) <= 0) return false;
    ssize_t r = ::recv(fd, c, n, 0);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void writeAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;  // the server closed: what it made of the bytes so far is the test
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  comm::StoreServer::Limits limits;
  limits.handshake = std::chrono::milliseconds(2000);
  limits.maxHeldBytes = 64 << 20;
  auto s = comm::StoreServer::start("127.0.0.1", 0, secret(), limits);
  if (!s) {
    std::fprintf(stderr, "fuzz_store: %s\n", s.error().toString().c_str());
    std::abort();
  }
  server() = std::move(*s);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool authenticate = data[0] & 1;
  ++data, --size;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(server()->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) std::abort();
  Hello hello;
  if (!readExactly(fd, &hello, sizeof(hello)) || hello.magic != kHelloMagic) std::abort();
  if (authenticate) {
    Proof proof;
    proof.mac = crypto::prove(secret(), hello.nonce, "store-client");
    writeAll(fd, reinterpret_cast<const uint8_t*>(&proof), sizeof(proof));
    Welcome welcome;
    if (!readExactly(fd, &welcome, sizeof(welcome)) || welcome.magic != kWelcomeMagic) std::abort();
  }
  writeAll(fd, data, size);
  ::shutdown(fd, SHUT_WR);
  // Until the server closes: every request of the input answered, or the connection dropped. A server that
  // neither answers nor closes within the handshake deadline and then some hangs the connection: a finding.
  char sink[4096];
  for (;;) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 5000) <= 0) {
      std::fprintf(stderr, "fuzz_store: the server kept a connection whose client had left\n");
      std::abort();
    }
    if (::recv(fd, sink, sizeof(sink), 0) <= 0) break;
  }
  ::close(fd);
  return 0;
}
