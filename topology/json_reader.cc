#include "topology/json_reader.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/param.h"
#include "common/strings.h"

namespace hetcomm::topo {
namespace {

using nlohmann::json;

// Finds where a text fails to parse. nlohmann's non-throwing parse only says "discarded"; its SAX interface is
// told the position and message without an exception being thrown.
class ErrorFinder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 3, column 7: ..." without the bracketed id.
    message = ex.what();
    if (size_t close = message.find("] "); message.starts_with("[") && close != std::string::npos)
      message.erase(0, close + 2);
    return false;
  }
  std::string message;
};

}  // namespace

Result<json> parseJson(std::string_view text, const std::string& source) {
  json value = json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false,
                           /*ignore_comments=*/true);
  if (!value.is_discarded()) return value;
  ErrorFinder finder;
  json::sax_parse(text.begin(), text.end(), &finder, json::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/true);
  return invalidArgument("%s: %s", source.c_str(), finder.message.empty() ? "not valid JSON" : finder.message.c_str());
}

Result<std::string> readTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return errnoStatus(errno, "cannot open %s", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return errnoStatus(errno, "cannot read %s", path.c_str());
  return ss.str();
}

std::string jsonSnippet(const json& value) {
  // replace: a dump never throws on invalid UTF-8.
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

JsonObjectReader::JsonObjectReader(const json& object, std::string path) : object_(object), path_(std::move(path)) {
  if (!object_.is_object())
    error_ = invalidArgument("%s: expected an object, got %s", path_.c_str(), jsonSnippet(object_).c_str());
}

bool JsonObjectReader::has(const char* key) const { return object_.is_object() && object_.contains(key); }

const json* JsonObjectReader::find(const char* key, bool required) {
  known_.insert(key);
  if (!error_.ok()) return nullptr;  // report the first problem only
  auto it = object_.find(key);
  if (it == object_.end()) {
    if (required) error_ = invalidArgument("%s: missing", pathOf(key).c_str());
    return nullptr;
  }
  return &*it;
}

bool JsonObjectReader::wrongType(const char* key, const json& value, const char* expected) {
  error_ = invalidArgument("%s: expected %s, got %s", pathOf(key).c_str(), expected, jsonSnippet(value).c_str());
  return false;
}

void JsonObjectReader::fail(const char* key, const std::string& problem) {
  if (error_.ok()) error_ = invalidArgument("%s: %s", pathOf(key).c_str(), problem.c_str());
}

bool JsonObjectReader::str(const char* key, std::string& out, bool required) {
  const json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_string()) return wrongType(key, *v, "a string");
  out = v->get<std::string>();
  return true;
}

bool JsonObjectReader::u64(const char* key, uint64_t& out, bool required) {
  const json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_number_unsigned()) return wrongType(key, *v, "a non-negative integer");
  out = v->get<uint64_t>();
  return true;
}

bool JsonObjectReader::i32(const char* key, int& out, bool required) {
  const json* v = find(key, required);
  if (v == nullptr) return false;
  bool fits = v->is_number_integer() &&
              (v->is_number_unsigned() ? v->get<uint64_t>() <= INT32_MAX : v->get<int64_t>() >= INT32_MIN);
  if (!fits) return wrongType(key, *v, "a 32-bit integer");
  out = static_cast<int>(v->get<int64_t>());
  return true;
}

bool JsonObjectReader::number(const char* key, double& out, bool required) {
  const json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0)
    return wrongType(key, *v, "a number >= 0");
  out = v->get<double>();
  return true;
}

bool JsonObjectReader::boolean(const char* key, bool& out, bool required) {
  const json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_boolean()) return wrongType(key, *v, "true or false");
  out = v->get<bool>();
  return true;
}

bool JsonObjectReader::bytes(const char* key, uint64_t& out, bool required) {
  const json* v = find(key, required);
  if (v == nullptr) return false;
  if (v->is_number_unsigned()) {
    out = v->get<uint64_t>();
    return true;
  }
  if (v->is_string()) {
    if (auto n = param::parseInt(v->get<std::string>()); n && *n >= 0) {
      out = static_cast<uint64_t>(*n);
      return true;
    }
  }
  return wrongType(key, *v, "a byte count (an integer, or a string like \"80G\")");
}

bool JsonObjectReader::array(const char* key, const ElementFn& each, bool required) {
  const json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_array()) return wrongType(key, *v, "an array");
  for (size_t i = 0; i < v->size(); ++i) {
    Status st = each((*v)[i], format("%s[%zu]", pathOf(key).c_str(), i));
    if (!st.ok()) {
      error_ = st;
      return false;
    }
  }
  return true;
}

void JsonObjectReader::skip(const char* key) { known_.insert(key); }

Status JsonObjectReader::finish() {
  if (!error_.ok()) return error_;
  for (const auto& [key, value] : object_.items()) {
    if (!known_.contains(key)) return invalidArgument("%s: unknown field", pathOf(key.c_str()).c_str());
  }
  return okStatus();
}

}  // namespace hetcomm::topo
