// checkpoint_test: safetensors round trip and byte layout, and refusal of every kind of damaged file:
// each truncation, flipped header and data bytes, bad dtypes, overlapping or gapped offsets, absurd lengths.
// Also the atomic write: a failed write leaves the old file and no temp file behind.
#include "trainer/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/unit/trainer/test_support.h"

namespace hetcomm::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("hetcomm_ckpt_") {}
};
using test::messageOf;

std::vector<std::byte> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

void writeBytes(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A safetensors file by hand, per the spec: u64 LE header length, header text, data. No padding is added, so
// tests can check that unpadded files from other writers are read.
std::vector<std::byte> craft(const std::string& header, const std::string& data) {
  std::vector<std::byte> b(8);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = std::byte(uint64_t(header.size()) >> (8 * i));
  for (char c : header) b.push_back(std::byte(c));
  for (char c : data) b.push_back(std::byte(c));
  return b;
}

// A small model-like set: a matrix, a scalar, a zero-size tensor, an odd-sized byte tensor (unaligned offsets).
struct Sample {
  std::vector<float> w = std::vector<float>(32);
  int64_t step = 1234567890123;
  std::vector<uint8_t> mask = {1, 0, 1, 1, 0};
  std::vector<double> bias = {0.5, -2.25};
  std::vector<TensorRef> refs() const {
    return {TensorRef{"h.0.attn.w", DType::kF32, {4, 8}, w.data()}, TensorRef{"step", DType::kI64, {}, &step},
            TensorRef{"empty", DType::kF32, {0, 3}, nullptr}, TensorRef{"mask", DType::kU8, {5}, mask.data()},
            TensorRef{"bias", DType::kF64, {2}, bias.data()}};
  }
  Sample() {
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(i) * 0.25f - 3.0f;
  }
};
const std::map<std::string, std::string> kMeta = {{"config", R"({"steps":10})"}, {"step", "100"}};

std::string writeSample(const TempDir& dir, const std::string& name = "ckpt.safetensors") {
  Sample s;
  std::vector<TensorRef> refs = s.refs();
  const std::string path = dir.file(name);
  Result<void> r = writeCheckpoint(path, refs, kMeta);
  EXPECT_TRUE(r.has_value()) << messageOf(r);
  return path;
}

bool sameCheckpoint(const Checkpoint& a, const Checkpoint& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.data != y.data) return false;
  }
  return true;
}

TEST(Checkpoint, RoundTrip) {
  TempDir dir;
  const std::string path = writeSample(dir);
  Result<Checkpoint> c = readCheckpoint(path);
  ASSERT_TRUE(c.has_value()) << messageOf(c);
  EXPECT_EQ(c->source, "checkpoint " + path);
  EXPECT_EQ(c->metadata, kMeta);  // the checksum key is not handed back
  ASSERT_EQ(c->tensors.size(), 5u);
  Sample s;
  const Tensor* w = c->find("h.0.attn.w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(w->numel(), 32);
  ASSERT_EQ(w->data.size(), 128u);
  EXPECT_EQ(std::memcmp(w->data.data(), s.w.data(), 128), 0);
  const Tensor* step = c->find("step");
  ASSERT_NE(step, nullptr);
  EXPECT_TRUE(step->shape.empty());
  int64_t stepValue;
  std::memcpy(&stepValue, step->data.data(), 8);
  EXPECT_EQ(stepValue, s.step);
  EXPECT_EQ(c->find("empty")->data.size(), 0u);
  EXPECT_EQ(c->find("mask")->data.size(), 5u);
  EXPECT_EQ(c->find("missing"), nullptr);
  // File order: tensors come back in data-offset order, which is the order they were written in. ("empty" has
  // zero bytes at offset 136, so it sorts with the tensor that starts there.)
  EXPECT_EQ(c->tensors[0].name, "h.0.attn.w");
  EXPECT_EQ(c->tensors[1].name, "step");

  // Overwriting replaces the file.
  std::vector<float> other(32, 1.0f);
  std::vector<TensorRef> refs = {TensorRef{"h.0.attn.w", DType::kF32, {4, 8}, other.data()}};
  ASSERT_TRUE(writeCheckpoint(path, refs).has_value());
  Result<Checkpoint> c2 = readCheckpoint(path);
  ASSERT_TRUE(c2.has_value()) << messageOf(c2);
  EXPECT_EQ(c2->tensors.size(), 1u);
  EXPECT_TRUE(c2->metadata.empty());
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt.safetensors"}));  // no temp files left
}

// The bytes on disk follow the safetensors spec: checked field by field without our reader.
TEST(Checkpoint, LayoutFollowsTheSpec) {
  TempDir dir;
  const std::vector<std::byte> b = readBytes(writeSample(dir));
  ASSERT_GE(b.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(b[size_t(i)]) << (8 * i);
  ASSERT_LE(8 + n, b.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-aligned";
  const std::string header(reinterpret_cast<const char*>(b.data()) + 8, n);
  EXPECT_EQ(header.front(), '{');
  const size_t lastBrace = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', lastBrace + 1), std::string::npos) << "padding must be spaces";
  json j = json::parse(header);
  const size_t dataStart = 8 + n;
  Sample s;
  struct Expect {
    const char* name;
    const char* dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
    const void* data;
  } expects[] = {{"h.0.attn.w", "F32", {4, 8}, 0, 128, s.w.data()},
                 {"step", "I64", {}, 128, 136, &s.step},
                 {"empty", "F32", {0, 3}, 136, 136, nullptr},
                 {"mask", "U8", {5}, 136, 141, s.mask.data()},
                 {"bias", "F64", {2}, 141, 157, s.bias.data()}};
  for (const Expect& e : expects) {
    ASSERT_TRUE(j.contains(e.name)) << e.name;
    const json& t = j[e.name];
    EXPECT_EQ(t["dtype"], e.dtype);
    EXPECT_EQ(t["shape"].get<std::vector<int64_t>>(), e.shape);
    EXPECT_EQ(t["data_offsets"], json::array({e.begin, e.end})) << e.name;
    if (e.end > e.begin) {
      EXPECT_EQ(std::memcmp(b.data() + dataStart + e.begin, e.data, e.end - e.begin), 0);
    }
  }
  EXPECT_EQ(b.size(), dataStart + 157);
  ASSERT_TRUE(j.contains("__metadata__"));
  EXPECT_EQ(j["__metadata__"]["step"], "100");
  const std::string sum = j["__metadata__"][kChecksumKey];
  EXPECT_EQ(sum.size(), 24u);
  EXPECT_EQ(sum.substr(0, 8), "fnv1a64:");
}

// A file as another safetensors writer makes it: unpadded header, no checksum, keys in any order.
TEST(Checkpoint, ReadsForeignFilesWithoutChecksumWhenAllowed) {
  const std::string header =
      R"({"b":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("__metadata__":{"format":"pt"}})";
  float a[2] = {1.5f, -2.0f};
  int64_t bval = -7;
  std::string data(16, '\0');
  std::memcpy(data.data(), a, 8);
  std::memcpy(data.data() + 8, &bval, 8);
  const std::vector<std::byte> file = craft(header, data);

  Result<Checkpoint> strict = parseCheckpoint(file, "foreign");
  ASSERT_FALSE(strict.has_value());
  EXPECT_NE(strict.error().detail.find("no hetcomm.checksum"), std::string::npos) << strict.error().message();

  Result<Checkpoint> c = parseCheckpoint(file, "foreign", ReadOptions{.requireChecksum = false});
  ASSERT_TRUE(c.has_value()) << messageOf(c);
  ASSERT_EQ(c->tensors.size(), 2u);
  EXPECT_EQ(c->tensors[0].name, "a");  // data-offset order, not header order
  EXPECT_EQ(c->metadata.at("format"), "pt");
  float back[2];
  std::memcpy(back, c->tensors[0].data.data(), 8);
  EXPECT_EQ(back[1], -2.0f);
}

TEST(Checkpoint, EveryTruncationIsRefused) {
  TempDir dir;
  const std::vector<std::byte> full = readBytes(writeSample(dir));
  const std::string cut = dir.file("cut.safetensors");
  for (size_t len = 0; len < full.size(); ++len) {
    writeBytes(cut, std::span(full).first(len));
    Result<Checkpoint> r = readCheckpoint(cut);
    ASSERT_FALSE(r.has_value()) << "prefix of " << len << " bytes was accepted";
    EXPECT_EQ(r.error().source, "checkpoint " + cut);
  }
  writeBytes(cut, full);
  EXPECT_TRUE(readCheckpoint(cut).has_value());
}

TEST(Checkpoint, TruncationMessagesSayWhatIsMissing) {
  TempDir dir;
  const std::vector<std::byte> full = readBytes(writeSample(dir));
  Result<Checkpoint> r = parseCheckpoint(std::span(full).first(5), "c");
  EXPECT_EQ(r.error().message(), "c: file is 5 bytes, too short for the 8-byte header length (truncated?)");
  r = parseCheckpoint(std::span(full).first(20), "c");
  EXPECT_NE(r.error().detail.find("runs past the end of the 20-byte file"), std::string::npos) << r.error().message();
  r = parseCheckpoint(std::span(full).first(full.size() - 3), "c");
  EXPECT_EQ(r.error().field, "tensor 'bias'");
  EXPECT_NE(r.error().detail.find("data_offsets [141,157] run past the 154-byte data section"), std::string::npos)
      << r.error().message();
}

// Any change to a header byte is refused, unless it leaves the header's meaning intact (padding turned into
// another JSON whitespace); then the file must read back identical.
TEST(Checkpoint, CorruptHeaderBytesAreRefused) {
  TempDir dir;
  const std::vector<std::byte> full = readBytes(writeSample(dir));
  Result<Checkpoint> original = parseCheckpoint(full, "c");
  ASSERT_TRUE(original.has_value());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(full[size_t(i)]) << (8 * i);
  int accepted = 0;
  for (size_t pos = 0; pos < 8 + n; ++pos) {
    for (unsigned mask : {0x01u, 0x02u, 0x20u, 0x80u, 0xFFu}) {
      std::vector<std::byte> bad = full;
      bad[pos] ^= std::byte(mask);
      Result<Checkpoint> r = parseCheckpoint(bad, "c");
      if (r.has_value()) {
        ++accepted;
        EXPECT_TRUE(sameCheckpoint(*r, *original)) << "byte " << pos << " ^ " << mask << " changed the content";
      } else {
        EXPECT_FALSE(r.error().detail.empty());
      }
    }
  }
  EXPECT_LT(accepted, 20);  // a few whitespace-for-whitespace swaps at most
}

TEST(Checkpoint, FlippedDataBytesAreRefused) {
  TempDir dir;
  const std::vector<std::byte> full = readBytes(writeSample(dir));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(full[size_t(i)]) << (8 * i);
  for (size_t pos = 8 + n; pos < full.size(); ++pos) {
    std::vector<std::byte> bad = full;
    bad[pos] ^= std::byte{0x01};
    Result<Checkpoint> r = parseCheckpoint(bad, "c");
    ASSERT_FALSE(r.has_value()) << "data byte " << pos << " flipped was accepted";
    EXPECT_NE(r.error().detail.find("checksum mismatch"), std::string::npos) << r.error().message();
  }
  // Through the file reader too.
  std::vector<std::byte> bad = full;
  bad.back() ^= std::byte{0x40};
  writeBytes(dir.file("bad.safetensors"), bad);
  EXPECT_FALSE(readCheckpoint(dir.file("bad.safetensors")).has_value());
}

TEST(Checkpoint, BadEntriesAreRefusedWithTheTensorName) {
  const ReadOptions unchecked{.requireChecksum = false};
  struct Case {
    std::string header;
    size_t dataBytes;
    std::string field;
    std::string says;
  } cases[] = {
      {R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8, "tensor 'w'", "unknown dtype \"F33\""},
      {R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8, "tensor 'w'", "unknown dtype"},
      {R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8, "tensor 'w'", "unknown dtype 7"},
      {R"({"w":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", 8, "tensor 'w'", "unknown dtype"},
      {R"({"h.0.attn.w":{"dtype":"F32","shape":[4,8],"data_offsets":[0,96]}})", 96, "tensor 'h.0.attn.w'",
       "data_offsets [0,96] hold 96 bytes but shape [4,8] F32 needs 128"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "tensor 'w'", "non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8, "tensor 'w'", "non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8, "tensor 'w'", "shape must be an array"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "tensor 'w'", "end before they begin"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "tensor 'w'", "two non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8, "tensor 'w'", "two non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8, "tensor 'w'",
       "data_offsets [0,16] run past the 8-byte data section"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, "tensor 'w'",
       "overflows 64 bits"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", 8, "tensor 'w'", "exactly dtype, shape and data_offsets"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8, "tensor 'w'", "exactly dtype"},
      {R"({"w":[1,2]})", 8, "tensor 'w'", "exactly dtype"},
      {R"({"__metadata__":{"step":100}})", 0, "metadata 'step'", "not a string"},
      {R"({"__metadata__":[1]})", 0, "__metadata__", "must be an object"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
       24, "tensor 'b'", "data_offsets [8,24] overlap tensor 'a' [0,16]"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       8, "tensor 'b'", "overlap tensor 'a' [0,8]"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
       20, "tensor 'b'", "data bytes [8,12) before it belong to no tensor"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12, "",
       "tensors cover 8 bytes but the data section holds 12"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"hetcomm.checksum":"crc32:1234"}})", 8,
       "metadata 'hetcomm.checksum'", "not fnv1a64:<16 lowercase hex digits>"},
  };
  for (const Case& c : cases) {
    Result<Checkpoint> r = parseCheckpoint(craft(c.header, std::string(c.dataBytes, 'x')), "ck", unchecked);
    ASSERT_FALSE(r.has_value()) << c.header;
    EXPECT_EQ(r.error().field, c.field) << c.header << " -> " << r.error().message();
    EXPECT_NE(r.error().detail.find(c.says), std::string::npos) << c.header << " -> " << r.error().message();
  }
}

TEST(Checkpoint, BadHeadersAreRefused) {
  const ReadOptions unchecked{.requireChecksum = false};
  Result<Checkpoint> r = parseCheckpoint(craft("[]", ""), "ck", unchecked);
  EXPECT_NE(messageOf(r).find("header is a JSON array, not an object"), std::string::npos) << messageOf(r);
  r = parseCheckpoint(craft(R"({"a": )", ""), "ck", unchecked);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().detail.find("not valid JSON"), std::string::npos);
  EXPECT_TRUE(r.error().offset.has_value());
  r = parseCheckpoint(craft("", ""), "ck", unchecked);
  EXPECT_FALSE(r.has_value());
  r = parseCheckpoint(craft(std::string("{\"a\x00\":1}", 8), ""), "ck", unchecked);
  EXPECT_FALSE(r.has_value());
  // Nesting deep enough to overflow a recursive parser's stack.
  r = parseCheckpoint(craft(std::string(1'000'000, '['), ""), "ck", unchecked);
  EXPECT_FALSE(r.has_value());
  r = parseCheckpoint(craft(std::string(500'000, '[') + std::string(500'000, ']'), ""), "ck", unchecked);
  EXPECT_NE(messageOf(r).find("not an object"), std::string::npos);

  // Absurd header lengths: over the limit, and past the end of the file.
  std::vector<std::byte> huge(16, std::byte{0});
  huge[7] = std::byte{0x80};  // 2^63
  r = parseCheckpoint(huge, "ck", unchecked);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().offset, 0u);
  EXPECT_NE(r.error().detail.find("exceeds the 100000000-byte limit"), std::string::npos) << r.error().message();
  std::vector<std::byte> past(16, std::byte{0});
  past[0] = std::byte{9};
  r = parseCheckpoint(past, "ck", unchecked);
  EXPECT_NE(messageOf(r).find("header length 9 runs past the end of the 16-byte file"), std::string::npos);
}

TEST(Checkpoint, GetChecksDtypeAndShape) {
  TempDir dir;
  Result<Checkpoint> c = readCheckpoint(writeSample(dir));
  ASSERT_TRUE(c.has_value());
  const int64_t good[] = {4, 8}, wrong[] = {8, 4};
  Result<const Tensor*> t = c->get("h.0.attn.w", DType::kF32, good);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ((*t)->name, "h.0.attn.w");
  Result<const Tensor*> bad = c->get("h.0.attn.w", DType::kF32, wrong);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message(), c->source + ": tensor 'h.0.attn.w': shape [4,8] F32 but [8,4] F32 expected");
  EXPECT_FALSE(c->get("h.0.attn.w", DType::kF64, good).has_value());
  EXPECT_NE(messageOf(c->get("nope", DType::kF32, good)).find("not in the checkpoint"), std::string::npos);
}

TEST(Checkpoint, WriterRefusesBadInput) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  float v[2] = {1, 2};
  auto write = [&](std::vector<TensorRef> refs, std::map<std::string, std::string> meta = {}) {
    return writeCheckpoint(path, refs, meta);
  };
  EXPECT_NE(messageOf(write({{"a", DType::kF32, {2}, v}, {"a", DType::kF32, {2}, v}})).find("duplicate name"),
            std::string::npos);
  EXPECT_NE(messageOf(write({{"", DType::kF32, {2}, v}})).find("empty name"), std::string::npos);
  EXPECT_NE(messageOf(write({{"__metadata__", DType::kF32, {2}, v}})).find("reserved"), std::string::npos);
  EXPECT_NE(messageOf(write({{"a", DType::kF32, {-1}, v}})).find("negative dimension"), std::string::npos);
  EXPECT_NE(messageOf(write({{"a", DType::kF32, {2}, nullptr}})).find("null data for 8 bytes"), std::string::npos);
  EXPECT_NE(messageOf(write({{"a", DType::kF32, {2}, v}}, {{kChecksumKey, "x"}})).find("is reserved"),
            std::string::npos);
  EXPECT_NE(messageOf(write({{"bad\xff", DType::kF32, {2}, v}})).find("cannot encode"), std::string::npos);
  EXPECT_TRUE(dir.entries().empty());  // nothing written, no temp files
  EXPECT_TRUE(write({}).has_value());  // no tensors at all is a valid file
  EXPECT_TRUE(readCheckpoint(path).has_value());
}

// The write fails half way (the file size limit makes write() fail with EFBIG, which works even as root,
// where an unwritable directory does not): the old checkpoint must be intact and no temp file left.
TEST(Checkpoint, FailedWriteKeepsTheOldFile) {
  TempDir dir;
  const std::string path = writeSample(dir);
  const std::vector<std::byte> before = readBytes(path);

  std::vector<float> big(64 * 1024);
  std::vector<TensorRef> refs = {TensorRef{"big", DType::kF32, {int64_t(big.size())}, big.data()}};
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);  // else exceeding the limit kills the process
  struct rlimit small = old;
  small.rlim_cur = 16 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Result<void> r = writeCheckpoint(path, refs);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);

  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().detail.find("cannot write"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().detail.find(".tmp."), std::string::npos) << r.error().message();
  EXPECT_EQ(readBytes(path), before);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt.safetensors"}));
}

// A run killed mid-write leaves its temp file; the next write of that checkpoint removes it, and only it: a live
// writer's temp file and another host's stay.
TEST(Checkpoint, TempFilesOfKilledWritersAreRemoved) {
  TempDir dir;
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);  // gone: its PID no longer runs (and is not reused this soon)
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const std::string me(host);
  const std::string live = std::to_string(::getppid());
  for (const std::string& name :
       {"ckpt.safetensors.tmp." + me + "." + std::to_string(dead), "ckpt.safetensors.tmp." + std::to_string(dead),
        "ckpt.safetensors.tmp." + me + "." + live, "ckpt.safetensors.tmp.otherhost." + std::to_string(dead),
        "other.safetensors.tmp." + std::to_string(dead)})
    std::ofstream(dir.file(name)) << "partial";
  // The older name (no host) goes only once an hour old: another host may be writing it.
  const std::string oldRecent = "ckpt.safetensors.tmp." + std::to_string(dead);
  fs::last_write_time(dir.file(oldRecent), fs::file_time_type::clock::now() - std::chrono::hours(2));
  const std::string oldFresh = "ckpt.safetensors.tmp.0" + std::to_string(dead);  // same PID, written just now
  std::ofstream(dir.file(oldFresh)) << "partial";
  writeSample(dir);
  std::vector<std::string> kept = {"ckpt.safetensors", "ckpt.safetensors.tmp." + me + "." + live, oldFresh,
                                   "ckpt.safetensors.tmp.otherhost." + std::to_string(dead),
                                   "other.safetensors.tmp." + std::to_string(dead)};
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(dir.entries(), kept);
}

TEST(Checkpoint, FailedRenameKeepsTheTargetAndNoTempFile) {
  TempDir dir;
  // A directory where the checkpoint should go: the rename fails (EISDIR) after a complete temp file exists.
  fs::create_directories(dir.path() / "ckpt.safetensors" / "inside");
  float v[2] = {1, 2};
  std::vector<TensorRef> refs = {TensorRef{"a", DType::kF32, {2}, v}};
  Result<void> r = writeCheckpoint(dir.file("ckpt.safetensors"), refs);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().detail.find("cannot rename"), std::string::npos) << r.error().message();
  EXPECT_TRUE(fs::is_directory(dir.path() / "ckpt.safetensors" / "inside"));
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt.safetensors"}));

  Result<void> noDir = writeCheckpoint(dir.file("missing/ckpt.safetensors"), refs);
  ASSERT_FALSE(noDir.has_value());
  EXPECT_NE(noDir.error().detail.find("cannot create"), std::string::npos) << noDir.error().message();
}

TEST(Checkpoint, UnwritableDirectoryKeepsTheOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not stop root (FailedWrite covers this)";
  TempDir dir;
  const std::string path = writeSample(dir);
  const std::vector<std::byte> before = readBytes(path);
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  float v[2] = {1, 2};
  std::vector<TensorRef> refs = {TensorRef{"a", DType::kF32, {2}, v}};
  Result<void> r = writeCheckpoint(path, refs);
  fs::permissions(dir.path(), fs::perms::owner_all);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().detail.find("cannot create"), std::string::npos) << r.error().message();
  EXPECT_EQ(readBytes(path), before);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt.safetensors"}));
}

TEST(Checkpoint, MissingFileIsNamed) {
  Result<Checkpoint> r = readCheckpoint("/nonexistent/ckpt.safetensors");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().source, "checkpoint /nonexistent/ckpt.safetensors");
  EXPECT_NE(r.error().detail.find("cannot open"), std::string::npos);
  TempDir dir;
  EXPECT_NE(messageOf(readCheckpoint(dir.path().string())).find("not a regular file"), std::string::npos);
}

TEST(Checkpoint, DTypeNamesRoundTrip) {
  for (DType d : {DType::kBool, DType::kU8, DType::kI8, DType::kU16, DType::kI16, DType::kF16, DType::kBF16,
                  DType::kU32, DType::kI32, DType::kF32, DType::kU64, DType::kI64, DType::kF64}) {
    EXPECT_EQ(dtypeFromName(dtypeName(d)), d);
    EXPECT_GT(dtypeSize(d), 0u);
  }
  EXPECT_EQ(dtypeSize(DType::kBF16), 2u);
  EXPECT_EQ(dtypeFromName("F8_E5M2"), std::nullopt);
}

TEST(Checkpoint, Fnv1a64KnownValues) {
  // Published FNV-1a 64 test vectors.
  EXPECT_EQ(fnv1a64({}), 0xcbf29ce484222325ull);
  const std::string a = "a", foobar = "foobar";
  EXPECT_EQ(fnv1a64(std::as_bytes(std::span(a.data(), a.size()))), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64(std::as_bytes(std::span(foobar.data(), foobar.size()))), 0x85944171f73967e8ull);
}

}  // namespace
}  // namespace hetcomm::trainer
