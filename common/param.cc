#include "common/param.h"

#include <cerrno>
#include <cstdlib>

#include "common/log.h"

namespace hetcomm::param {

std::optional<std::string> env(const char* fullName) {
  const char* v = std::getenv(fullName);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> parseInt(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str()) return std::nullopt;
  int64_t mult = 1;
  if (*end) {
    switch (*end) {
      case 'k':
      case 'K':
        mult = 1ll << 10;
        break;
      case 'm':
      case 'M':
        mult = 1ll << 20;
        break;
      case 'g':
      case 'G':
        mult = 1ll << 30;
        break;
      default:
        return std::nullopt;
    }
    if (end[1] != '\0') return std::nullopt;
  }
  int64_t out;
  if (__builtin_mul_overflow(static_cast<int64_t>(v), mult, &out)) return std::nullopt;
  return out;
}

int64_t readInt(const char* name, int64_t def) {
  std::string full = std::string("HETCOMM_") + name;
  auto raw = env(full.c_str());
  if (!raw) return def;
  auto v = parseInt(*raw);
  if (!v) {
    HC_WARN("%s=%s is not an integer; using the default %lld", full.c_str(), raw->c_str(), (long long)def);
    return def;
  }
  HC_INFO(Env, "%s set by environment to %lld", full.c_str(), (long long)*v);
  return *v;
}

std::string readString(const char* name, const char* def) {
  std::string full = std::string("HETCOMM_") + name;
  auto raw = env(full.c_str());
  if (!raw) return def;
  HC_INFO(Env, "%s set by environment to %s", full.c_str(), raw->c_str());
  return *raw;
}

}  // namespace hetcomm::param
