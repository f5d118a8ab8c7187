// json_reader.h: reading JSON the way topology files and peers' node descriptions need it: without exceptions,
// with errors that name the JSON path and the problem ("$.hosts[0].nics[1].kind: expected one of ib, roce, eth,
// got \"infini\""), and with unknown keys rejected (a typo in a hand-written file must not turn into a silent
// default).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hetcomm::topo {

// Parses text with nlohmann's non-throwing overload; // and /* */ comments are allowed (hand-written files).
// Errors: "<source>: parse error at line 3, column 7: syntax error ...".
Result<nlohmann::json> parseJson(std::string_view text, const std::string& source);

// The whole file; errors name it and say why (errno).
Result<std::string> readTextFile(const std::string& path);

// Reads the fields of one JSON object. Each getter returns true when the key is present and valid (and writes
// out), false when it is absent or invalid; an invalid or missing required key records an error, the first of
// which finish() returns. Not thread-safe; the object must outlive the reader.
class JsonObjectReader {
 public:
  JsonObjectReader(const nlohmann::json& object, std::string path);

  bool has(const char* key) const;
  bool str(const char* key, std::string& out, bool required = false);
  bool u64(const char* key, uint64_t& out, bool required = false);   // a non-negative integer
  bool i32(const char* key, int& out, bool required = false);        // an integer; -1 often means unknown
  bool number(const char* key, double& out, bool required = false);  // a finite number >= 0
  bool boolean(const char* key, bool& out, bool required = false);
  // A byte count: an integer, or a string with a binary suffix ("80G", "512M": param::parseInt's syntax).
  bool bytes(const char* key, uint64_t& out, bool required = false);
  // Calls each(element, "<path>.key[i]") for every element of an array, stopping at its first error.
  using ElementFn = std::function<Status(const nlohmann::json& element, const std::string& elementPath)>;
  bool array(const char* key, const ElementFn& each, bool required = false);
  // Marks a key as known without reading it (read elsewhere, or accepted and ignored on purpose).
  void skip(const char* key);
  // Records a problem found by the caller's own validation of a key's value.
  void fail(const char* key, const std::string& problem);

  // OK, or the first error; a key no getter asked about is an error too.
  Status finish();
  // "$.hosts[0]": where this object is.
  const std::string& path() const { return path_; }
  std::string pathOf(const char* key) const { return path_ + "." + key; }

 private:
  const nlohmann::json* find(const char* key, bool required);
  bool wrongType(const char* key, const nlohmann::json& value, const char* expected);  // records; false

  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string> known_;
  Status error_;
};

// A JSON value, shortened for error messages.
std::string jsonSnippet(const nlohmann::json& value);

}  // namespace hetcomm::topo
