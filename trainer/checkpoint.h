// checkpoint.h: named tensors plus string metadata in a safetensors file (the Hugging Face format, so other
// tools can open our checkpoints), written atomically and read back with every offset and size checked.
//
// File layout (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of JSON header, padded with spaces to make 8 + N a multiple of 8 | data
//   header: { "<tensor name>": {"dtype": "F32", "shape": [4, 8], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"<key>": "<string value>", ...} }
// Offsets are relative to the start of the data section; the tensors tile the data section exactly (no gaps,
// no overlaps). Tensor bytes are raw little-endian, row-major.
//
// Integrity: the writer stores kChecksumKey = "fnv1a64:<16 hex digits>" in __metadata__: FNV-1a 64 over a
// canonical encoding of the tensor table (names, dtypes, shapes, offsets, in file order) and of the other
// metadata (sorted by key), followed by the data bytes. The reader recomputes it, so a flipped byte anywhere
// (a tensor value, a shape digit, a metadata value) is refused, not silently loaded; only edits that leave the
// header's meaning unchanged (JSON whitespace) pass. FNV-1a detects every single-byte change: each step
// (h ^ byte) * odd prime is a bijection of h. It is not cryptographic and does not need to be.
//
// Not here: which tensors a trainer checkpoint holds (parameters, AdamW moments, data position); that is the
// trainer's, which puts them in as tensors and metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/error.h"

namespace hetcomm::trainer {

// The safetensors dtypes we read and write (the 8-bit float types are not supported and are refused).
enum class DType : uint8_t { kBool, kU8, kI8, kU16, kI16, kF16, kBF16, kU32, kI32, kF32, kU64, kI64, kF64 };
std::string_view dtypeName(DType dtype);                    // "F32"
std::optional<DType> dtypeFromName(std::string_view name);  // exact, case-sensitive: "F32" -> kF32
size_t dtypeSize(DType dtype);                              // bytes per element

inline constexpr char kChecksumKey[] = "hetcomm.checksum";  // reserved metadata key
inline constexpr uint64_t kMaxHeaderBytes = 100000000;  // 100 MB, upstream safetensors' limit: more is a corrupt length

// A tensor to write: the caller keeps `data` (product(shape) * dtypeSize(dtype) bytes) alive for the call.
struct TensorRef {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// A tensor read back. data comes from operator new, so it is aligned for any scalar dtype.
struct Tensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
  int64_t numel() const;
};

struct Checkpoint {
  std::string source;                           // "checkpoint <path>", for messages
  std::vector<Tensor> tensors;                  // in file (data offset) order
  std::map<std::string, std::string> metadata;  // without kChecksumKey

  const Tensor* find(std::string_view name) const;  // nullptr when absent
  // The tensor, checked to have this dtype and shape: "checkpoint X: tensor 'wte': shape [256,64] F32 but
  // [256,128] F32 expected". Error also when absent.
  Result<const Tensor*> get(std::string_view name, DType dtype, std::span<const int64_t> shape) const;
};

// Writes atomically: to `<path>.tmp.<pid>` in the same directory, fsync, rename over `path`, fsync the
// directory. On any failure the temp file is removed, `path` is untouched (old contents or absent), and the
// error says which step failed and why. Errors too for a bad tensor list: empty or duplicate names,
// "__metadata__" as a name, negative dims, null data with a non-zero size; and for kChecksumKey in metadata.
Result<void> writeCheckpoint(const std::string& path, std::span<const TensorRef> tensors,
                             const std::map<std::string, std::string>& metadata = {});

struct ReadOptions {
  // false reads safetensors files from other tools, which carry no checksum; a checksum, when present, is
  // verified either way.
  bool requireChecksum = true;
};

// Reads and checks a whole file. Never reads out of bounds or crashes on a truncated or corrupt file: every
// length, offset and size is checked first, and the message names the file, the tensor and the numbers.
Result<Checkpoint> readCheckpoint(const std::string& path, ReadOptions options = {});
// The same on bytes in memory; `source` names them in errors (readCheckpoint passes "checkpoint <path>").
Result<Checkpoint> parseCheckpoint(std::span<const std::byte> bytes, const std::string& source,
                                   ReadOptions options = {});

// FNV-1a 64: h = (h ^ byte) * 0x100000001b3 from h = 0xcbf29ce484222325; chain calls by passing the result.
inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
uint64_t fnv1a64(std::span<const std::byte> bytes, uint64_t h = kFnvOffsetBasis);

}  // namespace hetcomm::trainer
