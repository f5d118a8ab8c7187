// blob.h: the text form of the address blobs transports publish at init (Transport::listen): "key=value" lines, the
// first naming the transport and its format version ("hctcp=1"). tcp, shm and UCX write and read their blobs with
// it; verbs has a binary format of its own (verbs_wire.h). A blob comes from a peer: reading never trusts it (a key
// may be missing, repeated or garbled), and each transport says what it needs.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hetcomm::transport {

class TextBlob {
 public:
  // A blob of transport `magic` ("hctcp") at format version `version`.
  TextBlob(std::string_view magic, int version);
  // Adds a field. Keys and values must not hold '=' (keys) or line breaks (either).
  TextBlob& put(std::string_view key, std::string_view value);
  std::vector<std::byte> bytes() const;

  // The fields of raw. ok() is false unless its first field is magic at this version.
  static TextBlob parse(std::span<const std::byte> raw, std::string_view magic, int version);
  bool ok() const { return ok_; }
  // The value of key (the last one, if repeated); nullptr when absent.
  const std::string* find(std::string_view key) const;

 private:
  TextBlob() = default;
  std::vector<std::pair<std::string, std::string>> fields_;
  bool ok_ = false;
};

}  // namespace hetcomm::transport
