// checkpoint.cc: safetensors writer (atomic) and reader (checks every length before using it). Format and
// checksum are described in checkpoint.h.
#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace hetcomm::trainer {
namespace {

using nlohmann::json;

// Tensor bytes go to disk as they are in memory; safetensors says little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");

// One row per DType, in enum order, so kDTypes[size_t(d)] describes d.
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},   {DType::kI8, "I8", 1},     {DType::kU16, "U16", 2},
    {DType::kI16, "I16", 2},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2}, {DType::kU32, "U32", 4},
    {DType::kI32, "I32", 4},   {DType::kF32, "F32", 4}, {DType::kU64, "U64", 8},   {DType::kI64, "I64", 8},
    {DType::kF64, "F64", 8},
};
constexpr bool tableInEnumOrder() {
  for (size_t i = 0; i < std::size(kDTypes); ++i)
    if (size_t(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(tableInEnumOrder());

std::string errnoText() { return std::strerror(errno); }

std::string shapeText(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// product(shape) * dtypeSize, or nullopt on a negative dim or overflow.
std::optional<uint64_t> byteSize(DType dtype, std::span<const int64_t> shape) {
  uint64_t n = dtypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return std::nullopt;
  }
  return n;
}

// One row of the header's tensor table.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// Canonical order for tiling checks and the checksum: by offsets, and by name among zero-size tensors that share
// an offset (the JSON object's key order is not part of the format).
bool fileOrder(const Entry* a, const Entry* b) {
  return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
}

// The header's meaning as bytes: lengths before strings so no two tables encode alike. The checksum is
// fnv1a64(data, tableDigest(...)).
uint64_t tableDigest(const std::vector<const Entry*>& ordered, const std::map<std::string, std::string>& metadata) {
  uint64_t h = kFnvOffsetBasis;
  auto u64 = [&](uint64_t v) {
    std::byte b[8];
    for (int i = 0; i < 8; ++i) b[i] = std::byte(v >> (8 * i));
    h = fnv1a64(b, h);
  };
  auto str = [&](std::string_view s) {
    u64(s.size());
    h = fnv1a64(std::as_bytes(std::span(s.data(), s.size())), h);
  };
  u64(ordered.size());
  for (const Entry* e : ordered) {
    str(e->name);
    str(dtypeName(e->dtype));
    u64(e->shape.size());
    for (int64_t d : e->shape) u64(uint64_t(d));
    u64(e->begin);
    u64(e->end);
  }
  u64(metadata.size());
  for (const auto& [k, v] : metadata) {
    str(k);
    str(v);
  }
  return h;
}

// Owns the temp file of one write: closes and unlinks it unless the rename went through.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }
  int fd_ = -1;
  bool renamed_ = false;

 private:
  std::string path_;
};

// The host name as the kernel has it (not shortened: node1.a and node1.b are two hosts).
std::string hostName() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "localhost";
  return host;
}

// The temp file of this process's write of path: PATH.tmp.HOST.PID (the host: on a shared file system another
// host's PIDs mean nothing here).
std::string tempPathFor(const std::string& path) {
  return path + ".tmp." + hostName() + "." + std::to_string(::getpid());
}

// Removes the temp files of earlier writes of path whose writer is gone (killed before it could rename or unlink
// them): PATH.tmp.HOST.PID of this host whose PID no longer runs, and PATH.tmp.PID (the older name) likewise once
// an hour old. A live writer's, or another host's, is left alone.
void removeStaleTemps(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  const std::string host = hostName();
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find_last_of('.');
    bool oldName = dot == std::string::npos;
    if (!oldName) {
      if (rest.substr(0, dot) != host) continue;
      rest = rest.substr(dot + 1);
    }
    if (rest.empty() || rest.find_first_not_of("0123456789") != std::string::npos || rest.size() > 9) continue;
    // The older name carries no host: on a shared file system it may be another host's live write, so only one
    // untouched for an hour goes.
    std::error_code tec;
    if (oldName && std::filesystem::file_time_type::clock::now() - std::filesystem::last_write_time(it->path(), tec) <
                       std::chrono::hours(1))
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(rest));
    std::error_code rec;
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(it->path(), rec);
  }
}

bool writeAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    p += n;
    size -= size_t(n);
  }
  return true;
}

}  // namespace

std::string_view dtypeName(DType dtype) {
  return size_t(dtype) < std::size(kDTypes) ? kDTypes[size_t(dtype)].name : "?";
}

std::optional<DType> dtypeFromName(std::string_view name) {
  for (const DTypeInfo& d : kDTypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

size_t dtypeSize(DType dtype) { return size_t(dtype) < std::size(kDTypes) ? kDTypes[size_t(dtype)].size : 0; }

uint64_t fnv1a64(std::span<const std::byte> bytes, uint64_t h) {
  for (std::byte b : bytes) {
    h ^= uint64_t(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const Tensor* Checkpoint::find(std::string_view name) const {
  for (const Tensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Result<const Tensor*> Checkpoint::get(std::string_view name, DType dtype, std::span<const int64_t> shape) const {
  const std::string field = "tensor '" + std::string(name) + "'";
  const Tensor* t = find(name);
  if (!t) return Error{.source = source, .field = field, .detail = "not in the checkpoint"};
  if (t->dtype != dtype || !std::equal(t->shape.begin(), t->shape.end(), shape.begin(), shape.end())) {
    return Error{.source = source,
                 .field = field,
                 .detail = "shape " + shapeText(t->shape) + " " + std::string(dtypeName(t->dtype)) + " but " +
                           shapeText(shape) + " " + std::string(dtypeName(dtype)) + " expected"};
  }
  return t;
}

Result<void> writeCheckpoint(const std::string& path, std::span<const TensorRef> tensors,
                             const std::map<std::string, std::string>& metadata) {
  const std::string source = "checkpoint " + path;
  if (metadata.count(kChecksumKey))
    return Error{.source = source, .field = std::string("metadata '") + kChecksumKey + "'", .detail = "is reserved"};

  // The table, offsets in the order given; refuse what the reader would refuse.
  std::vector<Entry> entries;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorRef& t : tensors) {
    const std::string field = "tensor '" + t.name + "'";
    if (t.name.empty()) return Error{.source = source, .field = "tensor ''", .detail = "empty name"};
    if (t.name == "__metadata__")
      return Error{.source = source, .field = field, .detail = "name is reserved for the metadata"};
    if (!names.insert(t.name).second) return Error{.source = source, .field = field, .detail = "duplicate name"};
    if (dtypeSize(t.dtype) == 0) return Error{.source = source, .field = field, .detail = "unknown dtype"};
    const std::optional<uint64_t> size = byteSize(t.dtype, t.shape);
    if (!size) {
      return Error{.source = source,
                   .field = field,
                   .detail = "shape " + shapeText(t.shape) + " has a negative dimension or overflows"};
    }
    if (*size > 0 && t.data == nullptr)
      return Error{.source = source, .field = field, .detail = "null data for " + std::to_string(*size) + " bytes"};
    entries.push_back(Entry{t.name, t.dtype, t.shape, offset, offset + *size});
    offset += *size;
  }

  std::vector<const Entry*> ordered;
  for (const Entry& e : entries) ordered.push_back(&e);
  std::sort(ordered.begin(), ordered.end(), fileOrder);
  uint64_t checksum = tableDigest(ordered, metadata);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t size = entries[i].end - entries[i].begin;
    if (size) checksum = fnv1a64({static_cast<const std::byte*>(tensors[i].data), size}, checksum);
  }

  json header = json::object();
  for (const Entry& e : entries)
    header[e.name] = {
        {"dtype", std::string(dtypeName(e.dtype))}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  json meta = json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta[kChecksumKey] = "fnv1a64:" + hex16(checksum);
  header["__metadata__"] = std::move(meta);
  std::string headerText;
  try {
    headerText = header.dump();
  } catch (const json::exception& e) {  // a name or metadata string that is not valid UTF-8
    return Error{.source = source, .detail = std::string("cannot encode the header: ") + e.what()};
  }
  headerText.append((8 - headerText.size() % 8) % 8, ' ');  // 8 + N stays 8-aligned, as safetensors pads
  unsigned char lengthBytes[8];
  for (int i = 0; i < 8; ++i) lengthBytes[i] = static_cast<unsigned char>(uint64_t(headerText.size()) >> (8 * i));

  removeStaleTemps(path);
  TempFile tmp(tempPathFor(path));
  auto ioError = [&](const std::string& step) {
    return Error{.source = source, .detail = step + " " + tmp.path() + ": " + errnoText()};
  };
  tmp.fd_ = ::open(tmp.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (tmp.fd_ < 0) return ioError("cannot create");
  if (!writeAll(tmp.fd_, lengthBytes, 8) || !writeAll(tmp.fd_, headerText.data(), headerText.size()))
    return ioError("cannot write");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!writeAll(tmp.fd_, tensors[i].data, entries[i].end - entries[i].begin)) return ioError("cannot write");
  }
  // Data on disk before the rename makes it visible: otherwise a crash could leave a renamed, empty file.
  if (::fsync(tmp.fd_) != 0) return ioError("cannot fsync");
  const int fd = tmp.fd_;
  tmp.fd_ = -1;
  if (::close(fd) != 0) return ioError("cannot close");
  if (::rename(tmp.path().c_str(), path.c_str()) != 0) {
    return Error{.source = source, .detail = "cannot rename " + tmp.path() + " over it: " + errnoText()};
  }
  tmp.renamed_ = true;
  // The rename itself is durable only once the directory is synced.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd < 0 || ::fsync(dirFd) != 0) {
    const std::string why = errnoText();
    if (dirFd >= 0) ::close(dirFd);
    return Error{.source = source, .detail = "written, but syncing directory " + dir + " failed: " + why};
  }
  ::close(dirFd);
  return {};
}

Result<Checkpoint> readCheckpoint(const std::string& path, ReadOptions options) {
  const std::string source = "checkpoint " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{.source = source, .detail = "cannot open: " + errnoText()};
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return Error{.source = source, .detail = "cannot stat: " + errnoText()};
  if (!S_ISREG(st.st_mode)) return Error{.source = source, .detail = "not a regular file"};
  std::vector<std::byte> bytes(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{.source = source, .offset = got, .detail = "read failed: " + errnoText()};
    if (n == 0) {
      return Error{.source = source,
                   .offset = got,
                   .detail = "file shrank to " + std::to_string(got) + " bytes while being read"};
    }
    got += size_t(n);
  }
  return parseCheckpoint(bytes, source, options);
}

Result<Checkpoint> parseCheckpoint(std::span<const std::byte> bytes, const std::string& source, ReadOptions options) {
  auto fail = [&](std::string detail, std::optional<uint64_t> offset = std::nullopt, std::string field = {}) {
    return Error{.source = source, .offset = offset, .field = std::move(field), .detail = std::move(detail)};
  };
  const uint64_t fileSize = bytes.size();
  if (fileSize < 8) {
    return fail("file is " + std::to_string(fileSize) + " bytes, too short for the 8-byte header length (truncated?)");
  }
  uint64_t headerSize = 0;
  for (int i = 0; i < 8; ++i) headerSize |= uint64_t(bytes[size_t(i)]) << (8 * i);
  if (headerSize > kMaxHeaderBytes) {
    return fail("header length " + std::to_string(headerSize) + " exceeds the " + std::to_string(kMaxHeaderBytes) +
                    "-byte limit (corrupt length field?)",
                0);
  }
  if (headerSize > fileSize - 8) {
    return fail("header length " + std::to_string(headerSize) + " runs past the end of the " +
                    std::to_string(fileSize) + "-byte file (truncated?)",
                0);
  }
  const char* headerBegin = reinterpret_cast<const char*>(bytes.data()) + 8;
  json header;
  try {
    header = json::parse(headerBegin, headerBegin + headerSize);
  } catch (const json::parse_error& e) {
    return fail(std::string("header is not valid JSON: ") + e.what(), 8 + (e.byte > 0 ? e.byte - 1 : 0));
  } catch (const json::exception& e) {
    return fail(std::string("header is not valid JSON: ") + e.what(), 8);
  }
  if (!header.is_object()) return fail(std::string("header is a JSON ") + header.type_name() + ", not an object", 8);

  const uint64_t dataStart = 8 + headerSize;
  const uint64_t dataSize = fileSize - dataStart;
  Checkpoint ckpt;
  ckpt.source = source;
  std::optional<std::string> storedChecksum;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return fail("must be an object of strings", std::nullopt, "__metadata__");
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string())
          return fail(std::string("value is a JSON ") + v.type_name() + ", not a string", std::nullopt,
                      "metadata '" + k + "'");
        if (k == kChecksumKey)
          storedChecksum = v.get<std::string>();
        else
          ckpt.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string field = "tensor '" + name + "'";
    if (!info.is_object() || info.size() != 3 || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets")) {
      return fail(
          "entry must be an object with exactly dtype, shape and data_offsets, got " + info.dump().substr(0, 80),
          std::nullopt, field);
    }
    const json& jd = info["dtype"];
    std::optional<DType> dtype = jd.is_string() ? dtypeFromName(jd.get<std::string>()) : std::nullopt;
    if (!dtype) return fail("unknown dtype " + jd.dump().substr(0, 40), std::nullopt, field);
    const json& js = info["shape"];
    if (!js.is_array()) return fail("shape must be an array, got " + js.dump().substr(0, 40), std::nullopt, field);
    std::vector<int64_t> shape;
    for (const json& d : js) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
        return fail("shape " + js.dump().substr(0, 80) + " must hold non-negative integers", std::nullopt, field);
      shape.push_back(d.get<int64_t>());
    }
    const json& jo = info["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned()) {
      return fail("data_offsets must be two non-negative integers, got " + jo.dump().substr(0, 80), std::nullopt,
                  field);
    }
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    const std::string offsetsText = "data_offsets [" + std::to_string(begin) + "," + std::to_string(end) + "]";
    if (begin > end) return fail(offsetsText + " end before they begin", std::nullopt, field);
    if (end > dataSize) {
      return fail(offsetsText + " run past the " + std::to_string(dataSize) + "-byte data section (truncated?)",
                  std::nullopt, field);
    }
    const std::optional<uint64_t> need = byteSize(*dtype, shape);
    const std::string typeText = "shape " + shapeText(shape) + " " + std::string(dtypeName(*dtype));
    if (!need) return fail(typeText + " overflows 64 bits", std::nullopt, field);
    if (end - begin != *need) {
      return fail(offsetsText + " hold " + std::to_string(end - begin) + " bytes but " + typeText + " needs " +
                      std::to_string(*need),
                  std::nullopt, field);
    }
    entries.push_back(Entry{name, *dtype, std::move(shape), begin, end});
  }

  // The tensors must tile [0, dataSize): sorted by offset, each begins where the previous ended.
  std::vector<const Entry*> ordered;
  for (const Entry& e : entries) ordered.push_back(&e);
  std::sort(ordered.begin(), ordered.end(), fileOrder);
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : ordered) {
    const std::string field = "tensor '" + e->name + "'";
    if (e->begin < covered) {
      return fail("data_offsets [" + std::to_string(e->begin) + "," + std::to_string(e->end) + "] overlap tensor '" +
                      previous->name + "' [" + std::to_string(previous->begin) + "," + std::to_string(previous->end) +
                      "]",
                  std::nullopt, field);
    }
    if (e->begin > covered) {
      return fail(
          "data bytes [" + std::to_string(covered) + "," + std::to_string(e->begin) + ") before it belong to no tensor",
          std::nullopt, field);
    }
    covered = e->end;
    previous = e;
  }
  if (covered != dataSize) {
    return fail("tensors cover " + std::to_string(covered) + " bytes but the data section holds " +
                    std::to_string(dataSize) + " (trailing bytes?)",
                dataStart + covered);
  }

  const std::span<const std::byte> data = bytes.subspan(size_t(dataStart));
  if (storedChecksum) {
    const std::string& s = *storedChecksum;
    const bool wellFormed =
        s.size() == 8 + 16 && s.compare(0, 8, "fnv1a64:") == 0 &&
        std::all_of(s.begin() + 8, s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
    if (!wellFormed) {
      return fail("'" + s.substr(0, 40) + "' is not fnv1a64:<16 lowercase hex digits>", std::nullopt,
                  std::string("metadata '") + kChecksumKey + "'");
    }
    const uint64_t computed = fnv1a64(data, tableDigest(ordered, ckpt.metadata));
    if ("fnv1a64:" + hex16(computed) != s) {
      return fail("checksum mismatch: stored " + s.substr(8) + ", computed " + hex16(computed) +
                  " over the header and data: the file is corrupt");
    }
  } else if (options.requireChecksum) {
    return fail(std::string("no ") + kChecksumKey +
                " in __metadata__: not written by hetcomm, or its header was damaged "
                "(ReadOptions::requireChecksum = false reads files of other tools unchecked)");
  }

  for (const Entry* e : ordered) {
    Tensor t{e->name, e->dtype, e->shape, {}};
    t.data.assign(data.begin() + std::ptrdiff_t(e->begin), data.begin() + std::ptrdiff_t(e->end));
    ckpt.tensors.push_back(std::move(t));
  }
  return ckpt;
}

}  // namespace hetcomm::trainer
