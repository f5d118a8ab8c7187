// strings.h: printf-style formatting into std::string (GCC 12 has no <format>) and small text helpers.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hetcomm {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list ap);
// "1.5 MiB", "64 B": for log lines.
std::string humanBytes(uint64_t bytes);
std::vector<std::string> split(std::string_view s, char sep);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
std::string toHex(const void* data, size_t n);
// false when hex is not 2*n hex digits.
bool fromHex(std::string_view hex, void* out, size_t n);
// FNV-1a, 64 bits: a stable name for a text (cache files named by what they describe).
uint64_t fnv1a(std::string_view s);

}  // namespace hetcomm
