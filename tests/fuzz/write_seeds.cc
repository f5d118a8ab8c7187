// write_seeds: writes the binary seeds of tests/fuzz/corpus/ with the encoders the code itself uses (so a seed is
// a valid message of today's wire format), and copies the shipped text files in as the parsers' seeds. Run by
// hand after a format change: build-fuzz/bin/write_seeds tests/fuzz/corpus (scripts/fuzz.sh --seeds).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "comm/bootstrap/store_wire.h"
#include "trainer/checkpoint.h"
#include "transports/tcp/tcp_connection.h"
#if HETCOMM_HAVE_VERBS
#include "transports/verbs/verbs_wire.h"
#endif

namespace fs = std::filesystem;
using namespace hetcomm;
using Bytes = std::vector<uint8_t>;

namespace {

fs::path root;

void put(Bytes& b, const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  b.insert(b.end(), c, c + n);
}
template <class T>
void put(Bytes& b, const T& v) {
  put(b, &v, sizeof(v));
}
void save(const std::string& target, const std::string& name, const Bytes& b) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}
void saveBytes(const std::string& target, const std::string& name, uint8_t first, std::span<const std::byte> rest) {
  Bytes b{first};
  put(b, rest.data(), rest.size());
  save(target, name, b);
}

// ---- store: [authenticate?] then requests [op u8][pad 3][keylen u32][vallen u64][key][value] ----
void storeRequest(Bytes& b, uint8_t op, const std::string& key, const Bytes& value) {
  comm::store_wire::ReqHeader h{};
  h.op = op;
  h.keyLen = static_cast<uint32_t>(key.size());
  h.valueLen = value.size();
  put(b, h);
  put(b, key.data(), key.size());
  put(b, value.data(), value.size());
}
void storeSeeds() {
  using namespace comm::store_wire;
  Bytes s{1};
  storeRequest(s, kSet, "rank/0", {1, 2, 3, 4});
  storeRequest(s, kGet, "rank/0", {});
  save("fuzz_store", "set-get", s);
  Bytes a{1};
  int64_t one = 1;
  Bytes delta(8);
  std::memcpy(delta.data(), &one, 8);
  storeRequest(a, kAdd, "barrier", delta);
  storeRequest(a, kCreate, "rank/1", {7});
  storeRequest(a, kCreate, "rank/1", {8});
  save("fuzz_store", "add-create", a);
  Bytes o{1};  // a rank's liveness (shrink): owned, looked at, and its tombstone looked for
  storeRequest(o, kOwn, "c1/live/0", {});
  storeRequest(o, kTryGet, "c1/live/0", {});
  storeRequest(o, kTryGet, "c1/live/1/gone", {});
  save("fuzz_store", "own-tryget", o);
  Bytes p{1};
  storeRequest(p, kGet, "never-set", {});
  save("fuzz_store", "parked-get", p);
  Bytes u{0};
  Proof proof;  // a wrong proof: the stranger's path
  put(u, proof);
  save("fuzz_store", "stranger", u);
}

// ---- tcp: [receives: count, sizes u16] then the stream of 40-byte frame headers and payloads ----
void tcpFrame(Bytes& b, uint16_t flags, uint64_t tag, uint64_t total, uint64_t offset, const Bytes& payload) {
  transport::tcp::FrameHeader h;
  h.flags = flags;
  h.len = static_cast<uint32_t>(payload.size());
  h.tag = tag;
  h.total = total;
  h.offset = offset;
  put(b, h);
  put(b, payload.data(), payload.size());
}
void tcpSeeds() {
  using transport::tcp::FrameHeader;
  Bytes one{1, 16, 0};
  tcpFrame(one, FrameHeader::kData, 0, 16, 0, Bytes(16, 0xab));
  save("fuzz_tcp_frames", "posted", one);
  Bytes split{2, 32, 0, 8, 0};
  tcpFrame(split, FrameHeader::kData, 0, 32, 16, Bytes(16, 1));
  tcpFrame(split, FrameHeader::kData, 1, 8, 0, Bytes(8, 2));
  tcpFrame(split, FrameHeader::kData, 0, 32, 0, Bytes(16, 3));
  save("fuzz_tcp_frames", "two-segments", split);
  Bytes early{0};
  tcpFrame(early, FrameHeader::kData, 5, 100, 0, Bytes(100, 4));
  save("fuzz_tcp_frames", "early", early);
  Bytes abort{1, 4, 0};
  tcpFrame(abort, FrameHeader::kAbort, 0, 0, 0, {'b', 'y', 'e'});
  save("fuzz_tcp_frames", "abort", abort);
}

// ---- shm: [receives] then ring records: kind u32, len u32, tag u64, total u64, offset u64, payload ----
void shmRecord(Bytes& b, uint32_t kind, uint64_t tag, uint64_t total, uint64_t offset, const Bytes& payload) {
  put(b, kind);
  put(b, static_cast<uint32_t>(payload.size()));
  put(b, tag);
  put(b, total);
  put(b, offset);
  put(b, payload.data(), payload.size());
}
void shmSeeds() {
  enum : uint32_t { kData = 1, kCma = 2, kAck = 3, kAbort = 4 };
  Bytes d{1, 24, 0};
  shmRecord(d, kData, 0, 24, 0, Bytes(24, 9));
  shmRecord(d, kAck, 3, 0, 0, {});
  save("fuzz_shm_frames", "data-ack", d);
  Bytes e{0};
  shmRecord(e, kData, 2, 40, 0, Bytes(20, 1));
  shmRecord(e, kData, 2, 40, 20, Bytes(20, 2));
  save("fuzz_shm_frames", "early-two-chunks", e);
  Bytes c{1, 8, 0};
  shmRecord(c, kCma, 0, 8, reinterpret_cast<uint64_t>(&root), {});
  save("fuzz_shm_frames", "attach", c);
  Bytes a{0};
  shmRecord(a, kAbort, 0, 0, 0, {'g', 'o', 'n', 'e'});
  save("fuzz_shm_frames", "abort", a);
}

// ---- ucx: scripts of fuzz_ucx_messages.cc: 0 tag size (post), 1 flags [tag | raw header] len payload, 2 ----
void ucxSeeds() {
  Bytes posted{0, 1, 16, 1, 0, 1, 16};
  put(posted, Bytes(16, 6).data(), 16);
  posted.push_back(2);
  save("fuzz_ucx_messages", "posted", posted);
  Bytes early{1, 0, 2, 8};
  put(early, Bytes(8, 7).data(), 8);
  early.insert(early.end(), {0, 2, 8, 2});
  save("fuzz_ucx_messages", "early", early);
  save("fuzz_ucx_messages", "abort", {0, 3, 4, 1, 1, 3, 3, 'b', 'y', 'e', 2});
  // A raw header as ucx_transport.cc's AmHeader lays it out: magic, kind, reserved, src, dst, comm id, tag.
  Bytes raw{1, 0x80};
  put(raw, uint32_t{0x41554348});
  put(raw, uint16_t{0});
  put(raw, uint16_t{0});
  put(raw, uint32_t{1});
  put(raw, uint32_t{0});
  put(raw, uint64_t{0xf022});
  put(raw, uint64_t{5});
  raw.push_back(4);
  put(raw, Bytes(4, 8).data(), 4);
  raw.insert(raw.end(), {0, 5, 4});
  save("fuzz_ucx_messages", "raw-header", raw);
}

#if HETCOMM_HAVE_VERBS
void verbsSeeds() {
  using namespace transport::verbs;
  Blob blob;
  blob.sideband = std::vector<std::byte>(24, std::byte{0x41});
  transport::verbs::PortInfo ib;
  ib.device = "mlx5_0";
  ib.rateMbps = 200000;
  ib.lid = 7;
  ib.gid[0] = 0xfe;
  ib.gid[1] = 0x80;
  ib.mtu = 4096;
  ib.maxMsgSize = 1u << 30;
  transport::verbs::PortInfo roce = ib;
  roce.device = "mlx5_1";
  roce.roce = true;
  roce.lid = 0;
  roce.gidType = transport::verbs::GidType::kRoceV2;
  roce.gidIndex = 3;
  blob.ports = {ib, roce};
  saveBytes("fuzz_verbs_wire", "blob", 0, encodeBlob(blob));
  auto one = encodeBlob(blob);
  auto both = one;
  both.insert(both.end(), one.begin(), one.end());
  saveBytes("fuzz_verbs_wire", "blob-pair", 3, both);
  QpInfo qp;
  qp.rank = 1;
  qp.commId = 42;
  qp.qpn = 0x123;
  qp.psn = 0x456;
  qp.mtu = 4096;
  qp.recvSlots = 64;
  qp.slotPayload = 8192;
  qp.eagerMax = 8192;
  qp.rdAtomic = 16;
  qp.maxMsgSize = 1u << 30;
  saveBytes("fuzz_verbs_wire", "qpinfo", 1, encodeQpInfo(qp));
  MsgHeader h;
  h.type = MsgHeader::kEager;
  h.len = 16;
  h.size = 16;
  Bytes m{2};
  put(m, h);
  put(m, Bytes(16, 5).data(), 16);
  save("fuzz_verbs_wire", "eager", m);
  MsgHeader r;
  r.type = MsgHeader::kRts;
  r.id = 9;
  r.rkey = 77;
  r.size = 1 << 20;
  Bytes rts{2};
  put(rts, r);
  save("fuzz_verbs_wire", "rts", rts);
}
#endif

void safetensorsSeeds() {
  const float w[6] = {1, 2, 3, 4, 5, 6};
  const int64_t step = 12;
  std::vector<trainer::TensorRef> ts = {{"w", trainer::DType::kF32, {2, 3}, w},
                                        {"step", trainer::DType::kI64, {1}, &step}};
  fs::create_directories(root / "fuzz_safetensors");
  auto st = trainer::writeCheckpoint((root / "fuzz_safetensors" / "two-tensors").string(), ts, {{"format", "pt"}});
  if (!st) std::fprintf(stderr, "write_seeds: %s\n", st.error().message().c_str());
}

void copyText(const std::string& target, const fs::path& from) {
  fs::create_directories(root / target);
  fs::copy_file(from, root / target / from.filename(), fs::copy_options::overwrite_existing);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_seeds CORPUS_DIR SOURCE_DIR\n");
    return 2;
  }
  root = argv[1];
  const fs::path src = argv[2];
  storeSeeds();
  tcpSeeds();
  shmSeeds();
  ucxSeeds();
#if HETCOMM_HAVE_VERBS
  verbsSeeds();
#endif
  safetensorsSeeds();
  for (const auto& f : fs::directory_iterator(src / "clusters")) copyText("fuzz_cluster_spec", f.path());
  for (const auto& f : fs::directory_iterator(src / "tests/integration/plans")) copyText("fuzz_plan_file", f.path());
  for (const auto& f : fs::directory_iterator(src / "configs")) copyText("fuzz_model_config", f.path());
  copyText("fuzz_topo_file", src / "topology/example-topo.json");
  for (const auto& f : fs::directory_iterator(src / "tests/unit/topology/fixtures"))
    if (f.path().extension() == ".json") copyText("fuzz_topo_file", f.path());
  return 0;
}
