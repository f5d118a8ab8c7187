// fuzz_ucx_messages: what the UCX transport makes of the active messages a peer sends: headers of any magic,
// kind, ranks, communicator and tag, eager payloads of any length, against receives posted before or after. Two
// UCX transports of one process (ranks 0 and 1, over UCX's shared memory) are connected once; every input is a
// script run against rank 0's connection to rank 1:
//   op % 3 == 0  post a receive: tag (byte % 8), size (byte)
//   op % 3 == 1  a message arrives: flags byte (bit 7: the next 32 bytes are the raw header; else a valid header
//                of a kind flags & 3 picks: data, data, hello or unknown), tag (byte % 8), length (byte), payload
//   op % 3 == 2  a progress pass (failures noted in the handler take effect)
// through the transport's own handler (ucx::deliverForTesting). Then the harness completes every receive it posted
// and takes every message left early, so the next input starts clean; a connection the input broke (an abort, a
// tag sent twice) is made again. Nothing may crash, leak or write outside a receive's buffer.
//
// Making the pair again costs about 20 ms (two UCX workers and their shared memory), a hundred inputs' time, so
// a valid header's data message goes to a tag with no message waiting unless flags bits 2-6 are all set (one in 32)
// and ask for a second one on its tag: one input in five broke the connection that way, and the target ran at 200
// inputs a second (now one in twenty: 900 a second at first, 230 once the inputs grow to KiB).
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/deadline.h"
#include "transports/ucx/ucx_transport.h"

namespace {

using namespace hetcomm;
using namespace hetcomm::transport;

constexpr uint64_t kCommId = 0xf022;
constexpr uint32_t kMagic = 0x41554348;  // "HCUA": ucx_transport.cc's AmHeader

struct Pair {
  std::unique_ptr<Transport> t[2];
  std::vector<std::unique_ptr<Connection>> conns[2];
  Connection& conn() { return *conns[0][1]; }
};
std::unique_ptr<Pair> pair;

void connect() {
  pair.reset();  // the old pair goes first: its worker and endpoints
  auto p = std::make_unique<Pair>();
  std::vector<std::vector<std::byte>> blobs(2);
  for (int r = 0; r < 2; ++r) {
    Config cfg;
    cfg.rank = r;
    cfg.nranks = 2;
    cfg.secret.fill(7);
    cfg.commId = kCommId;
    cfg.timeoutSec = 10;
    cfg.hostId = "fuzz";
    auto t = ucx::UcxTransport::create(cfg);
    if (!t) {
      std::fprintf(stderr, "fuzz_ucx_messages: %s\n", t.error().toString().c_str());
      std::abort();
    }
    p->t[r] = std::move(*t);
    auto blob = p->t[r]->listen();
    if (!blob) std::abort();
    blobs[r] = *blob;
  }
  Status st[2];
  std::thread other([&] {
    auto c = p->t[1]->connectAll(blobs, Deadline::afterSec(10));
    if (c)
      p->conns[1] = std::move(*c);
    else
      st[1] = c.error();
  });
  auto c = p->t[0]->connectAll(blobs, Deadline::afterSec(10));
  if (c)
    p->conns[0] = std::move(*c);
  else
    st[0] = c.error();
  other.join();
  if (!st[0].ok() || !st[1].ok()) {
    std::fprintf(stderr, "fuzz_ucx_messages: connect: %s %s\n", st[0].toString().c_str(), st[1].toString().c_str());
    std::abort();
  }
  pair = std::move(p);
}

std::vector<std::byte> header(uint16_t kind, uint64_t tag) {
  std::vector<std::byte> h(32);
  const uint32_t src = 1, dst = 0;
  std::memcpy(h.data(), &kMagic, 4);
  std::memcpy(h.data() + 4, &kind, 2);
  std::memcpy(h.data() + 8, &src, 4);
  std::memcpy(h.data() + 12, &dst, 4);
  std::memcpy(h.data() + 16, &kCommId, 8);
  std::memcpy(h.data() + 24, &tag, 8);
  return h;
}

void deliver(uint64_t tag, std::span<const std::byte> payload) {
  ucx::deliverForTesting(*pair->t[0], header(0, tag), payload);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // UCX's posix shared memory only, with small receive pools: a worker's set-up is most of a reconnect.
  setenv("UCX_TLS", "posix,self", 0);
  setenv("UCX_POSIX_RX_BUFS_GROW", "8", 0);
  setenv("UCX_POSIX_FIFO_SIZE", "16", 0);
  connect();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::deque<Request> reqs;
  std::deque<std::vector<std::byte>> bufs;
  std::vector<uint64_t> tags;
  std::array<bool, 8> waiting{};  // a data message came on the tag and no receive has taken it (as far as we know)
  std::array<bool, 8> posted{};   // a receive waits on the tag
  size_t at = 0;
  auto next = [&]() -> uint8_t { return at < size ? data[at++] : 0; };
  while (at < size) {
    const uint8_t op = next() % 3;
    if (op == 0) {
      const uint64_t tag = next() % 8;
      bufs.emplace_back(next());
      tags.push_back(tag);
      if (!pair->conn().irecv(reqs.emplace_back(), bufs.back(), tag).ok()) {  // refused (a second on its tag)
        reqs.pop_back();
        bufs.pop_back();
        tags.pop_back();
      } else if (waiting[tag]) {
        waiting[tag] = false;  // it took the waiting message (or failed on its size)
      } else {
        posted[tag] = true;
      }
    } else if (op == 1) {
      const uint8_t flags = next();
      std::vector<std::byte> h;
      if ((flags & 0x80) && size - at >= 32) {
        h.assign(reinterpret_cast<const std::byte*>(data + at), reinterpret_cast<const std::byte*>(data + at + 32));
        at += 32;
      } else {
        // Data, hello or an unknown kind; an abort only through a raw header: each one ends the connection, and
        // making the pair again costs a hundred inputs' time.
        const uint16_t kind = std::array<uint16_t, 4>{0, 0, 2, 3}[flags & 3];
        uint64_t tag = next() % 8;
        if (kind != 2) {  // a data message (the unknown kind is taken as data)
          for (int i = 0; i < 8 && waiting[tag] && (flags & 0x7c) != 0x7c; ++i) tag = (tag + 1) % 8;
          if (posted[tag])
            posted[tag] = false;
          else
            waiting[tag] = true;
        }
        h = header(kind, tag);
      }
      const size_t len = std::min<size_t>(next(), size - at);
      ucx::deliverForTesting(*pair->t[0], h, {reinterpret_cast<const std::byte*>(data + at), len});
      at += len;
    } else {
      (void)pair->t[0]->progress();
    }
  }
  (void)pair->t[0]->progress();
  // Clean up for the next input: complete what is posted, then take what came early (a zero-byte receive takes
  // any message: it matches, or fails with a size mismatch and drops it).
  for (size_t i = 0; i < reqs.size(); ++i)
    if (!reqs[i].finished()) deliver(tags[i], std::vector<std::byte>(bufs[i].size()));
  for (uint64_t tag = 0; tag < 8; ++tag) {
    Request r;
    if (!pair->conn().irecv(r, {}, tag).ok()) std::abort();  // nothing may stay posted between inputs
    if (!r.finished()) deliver(tag, {});
    if (!r.finished()) std::abort();
  }
  (void)pair->t[0]->progress();
  for (Request& r : reqs)
    if (!r.finished()) std::abort();
  // A broken connection fails a new receive at once: make the pair again.
  Request probe;
  if (!pair->conn().irecv(probe, {}, 8).ok()) std::abort();
  if (probe.finished()) {
    connect();
  } else {
    deliver(8, {});
    if (!probe.done()) std::abort();
  }
  return 0;
}
