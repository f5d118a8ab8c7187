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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
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

// What the harness saw go wrong, then a crash libFuzzer records. FUZZ_STORE_STOP=1 stops the process first, for a
// debugger to look at the server's thread.
[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_store: %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  if (std::getenv("FUZZ_STORE_STOP")) std::raise(SIGSTOP);
  std::abort();
}

// Waits up to ms for fd to be ready for events. libFuzzer's -timeout watchdog is a SIGALRM every second or so,
// which interrupts system calls: such a wake-up is not the server's doing, so the wait goes on (four false
// findings, "cannot connect", "no hello" and "kept a connection", were that).
bool ready(int fd, short events, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd pf{fd, events, 0};
    const int n = poll(&pf, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}
bool readable(int fd, int ms) { return ready(fd, POLLIN, ms); }

// A connection to the store on loopback. An interrupted connect goes on in the background: wait for its outcome.
int connectToStore() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) finding("cannot make a socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(server()->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
  if (errno != EINTR || !ready(fd, POLLOUT, 2000)) finding("cannot connect to the store");
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    errno = err;
    finding("cannot connect to the store");
  }
  return fd;
}

ssize_t recvSome(int fd, void* p, size_t n) {
  ssize_t r;
  do r = ::recv(fd, p, n, 0);
  while (r < 0 && errno == EINTR);
  return r;
}

bool readExactly(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    if (!readable(fd, 2000)) return false;
    ssize_t r = recvSome(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void writeAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
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
  const int fd = connectToStore();
  Hello hello;
  if (!readExactly(fd, &hello, sizeof(hello)) || hello.magic != kHelloMagic) finding("no hello from the store");
  if (authenticate) {
    Proof proof;
    proof.mac = crypto::prove(secret(), hello.nonce, "store-client");
    writeAll(fd, reinterpret_cast<const uint8_t*>(&proof), sizeof(proof));
    Welcome welcome;
    if (!readExactly(fd, &welcome, sizeof(welcome)) || welcome.magic != kWelcomeMagic)
      finding("no welcome after the right proof");
  }
  writeAll(fd, data, size);
  ::shutdown(fd, SHUT_WR);
  // Until the server closes: every request of the input answered, or the connection dropped. A server that
  // neither answers nor closes within the handshake deadline and then some hangs the connection: a finding.
  char sink[4096];
  for (;;) {
    if (!readable(fd, 5000)) finding("the server kept a connection whose client had left");
    if (recvSome(fd, sink, sizeof(sink)) <= 0) break;
  }
  ::close(fd);
  return 0;
}
