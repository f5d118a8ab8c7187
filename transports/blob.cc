#include "transports/blob.h"

#include <string>

namespace hetcomm::transport {

TextBlob::TextBlob(std::string_view magic, int version) : ok_(true) { put(magic, std::to_string(version)); }

TextBlob& TextBlob::put(std::string_view key, std::string_view value) {
  fields_.emplace_back(key, value);
  return *this;
}

std::vector<std::byte> TextBlob::bytes() const {
  std::string text;
  for (const auto& [k, v] : fields_) text.append(k).append("=").append(v).append("\n");
  auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

TextBlob TextBlob::parse(std::span<const std::byte> raw, std::string_view magic, int version) {
  TextBlob b;
  std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    b.fields_.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  b.ok_ = !b.fields_.empty() && b.fields_.front().first == magic && b.fields_.front().second == std::to_string(version);
  return b;
}

const std::string* TextBlob::find(std::string_view key) const {
  for (auto it = fields_.rbegin(); it != fields_.rend(); ++it)
    if (it->first == key) return &it->second;
  return nullptr;
}

}  // namespace hetcomm::transport
