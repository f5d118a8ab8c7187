// param.h: HETCOMM_* parameters, declared where they are used and read once.
//
//   HC_PARAM_INT(socketNThreads, "SOCKET_NTHREADS", 2);   // int64_t socketNThreads() reads HETCOMM_SOCKET_NTHREADS
//   HC_PARAM_STR(socketIfname, "SOCKET_IFNAME", "");
//
// A value that does not parse is reported once (WARN) and the default is used; a value that is set is logged at
// INFO ENV. The README's table lists every parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hetcomm::param {

// Reads HETCOMM_<name>; returns def when unset or invalid.
int64_t readInt(const char* name, int64_t def);
std::string readString(const char* name, const char* def);
// Raw lookup of any variable (not cached): nullopt when unset or empty.
std::optional<std::string> env(const char* fullName);
// Parses "123", "-4", "64K", "2M", "1G" (binary suffixes) strictly; nullopt when malformed.
std::optional<int64_t> parseInt(const std::string& text);

}  // namespace hetcomm::param

#define HC_PARAM_INT(fn, NAME, DEF)                                    \
  inline int64_t fn() {                                                \
    static const int64_t value = ::hetcomm::param::readInt(NAME, DEF); \
    return value;                                                      \
  }
#define HC_PARAM_STR(fn, NAME, DEF)                                           \
  inline const std::string& fn() {                                            \
    static const std::string value = ::hetcomm::param::readString(NAME, DEF); \
    return value;                                                             \
  }
