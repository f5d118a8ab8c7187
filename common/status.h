// status.h: error values used inside every hetcomm layer (no exceptions cross a layer).
//
// Status is a code plus a message saying who, what and where. Result<T> is a T or a Status, with
// std::expected's member names (GCC 12 in C++20 mode has no <expected>; C++23 makes this a using line).
// The C API boundary (comm/api_guard) maps Code to hetcommResult_t.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace hetcomm {

// Same order and meaning as hetcommResult_t so the boundary mapping is a table.
enum class Code : uint8_t {
  kOk = 0,
  kUnhandled = 1,
  kSystem = 2,
  kInternal = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemote = 6,
  kInProgress = 7,
  kTimeout = 8,
};

const char* codeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK: no allocation
  Status(Code code, std::string msg) : code_(code), msg_(std::make_shared<const std::string>(std::move(msg))) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  std::string_view message() const { return msg_ ? std::string_view(*msg_) : std::string_view(); }
  // "timeout: recv from rank 3 ..." for logs.
  std::string toString() const;

 private:
  Code code_ = Code::kOk;
  std::shared_ptr<const std::string> msg_;  // cheap to copy across threads
};

inline Status okStatus() { return Status(); }

// Builds a Status from a printf-style message. Use the named helpers below.
Status makeStatus(Code code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
#define HC_STATUS_HELPER(Name, CodeValue)         \
  template <class... A>                           \
  Status Name(const char* fmt, A... args) {       \
    if constexpr (sizeof...(A) == 0)              \
      return Status(CodeValue, fmt);              \
    else                                          \
      return makeStatus(CodeValue, fmt, args...); \
  }
HC_STATUS_HELPER(invalidArgument, Code::kInvalidArgument)
HC_STATUS_HELPER(invalidUsage, Code::kInvalidUsage)
HC_STATUS_HELPER(systemError, Code::kSystem)
HC_STATUS_HELPER(remoteError, Code::kRemote)
HC_STATUS_HELPER(timeoutError, Code::kTimeout)
HC_STATUS_HELPER(internalError, Code::kInternal)
#undef HC_STATUS_HELPER
// A failed system call: appends ": strerror(err)".
Status errnoStatus(int err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Wraps a Status so Result<T> can be built from an error unambiguously (std::unexpected's role).
struct Unexpected {
  Status status;
};
inline Unexpected unexpected(Status s) { return Unexpected{std::move(s)}; }

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit like std::expected
  Expected(Unexpected e) : v_(std::in_place_index<1>, std::move(e.status)) {}
  Expected(Status s) : v_(std::in_place_index<1>, std::move(s)) {}  // must not be ok()

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Status& error() const { return std::get<1>(v_); }
  Status status() const { return has_value() ? Status() : error(); }

 private:
  std::variant<T, Status> v_;
};

template <class T>
using Result = Expected<T>;

}  // namespace hetcomm

// Propagates a failed Status; at TRACE it leaves a breadcrumb "-> code at file:line".
#define HC_TRY(expr)                                                    \
  do {                                                                  \
    if (::hetcomm::Status hc_st_ = (expr); !hc_st_.ok()) [[unlikely]] { \
      ::hetcomm::log::breadcrumb(hc_st_, __FILE__, __LINE__);           \
      return hc_st_;                                                    \
    }                                                                   \
  } while (0)

#define HC_CONCAT_INNER(a, b) a##b
#define HC_CONCAT(a, b) HC_CONCAT_INNER(a, b)
// auto x = HC_TRY_ASSIGN(result_expr); -> declares lhs from a Result or returns its error.
#define HC_ASSIGN_OR_RETURN(lhs, expr) HC_ASSIGN_OR_RETURN_IMPL(HC_CONCAT(hc_res_, __LINE__), lhs, expr)
#define HC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                 \
  auto tmp = (expr);                                             \
  if (!tmp.has_value()) [[unlikely]] {                           \
    ::hetcomm::log::breadcrumb(tmp.error(), __FILE__, __LINE__); \
    return tmp.error();                                          \
  }                                                              \
  lhs = std::move(tmp).value()

namespace hetcomm::log {
void breadcrumb(const Status& st, const char* file, int line);
}
