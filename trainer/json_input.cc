#include "trainer/json_input.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hetcomm::trainer {

Result<std::string> readTextFile(const std::string& path, const std::string& source) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{.source = source, .detail = "cannot open: " + std::string(std::strerror(errno))};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{.source = source, .detail = "read failed: " + std::string(std::strerror(errno))};
  return text.str();
}

Result<nlohmann::json> parseJsonText(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the position of the character that broke the parse.
    return Error{
        .source = source, .offset = e.byte > 0 ? e.byte - 1 : 0, .detail = std::string("not valid JSON: ") + e.what()};
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double (found by fuzz_plan_file)
    return Error{.source = source, .detail = std::string("not valid JSON: ") + e.what()};
  }
}

Error keyError(const std::string& source, const std::string& key, std::string detail) {
  return Error{.source = source, .field = "key '" + key + "'", .detail = std::move(detail)};
}

std::string describeJson(const nlohmann::json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + text;
}

}  // namespace hetcomm::trainer
