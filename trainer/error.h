// error.h: the trainer's error value and Result<T>. What went wrong, and where: the file (or what was being read),
// the byte offset in it when known, and the named field at fault.
//
// Loading a config, a corpus or a checkpoint fails in ordinary ways (a typo in a key, a truncated file) and the
// caller decides what to do (the trainer prints the message and exits 1; a test checks the message), so these
// functions return Result<T> instead of throwing. Result has std::expected's member names, like common/'s, but
// the trainer is a client and may not include common/ (DESIGN.md). For callers that prefer exceptions,
// value() on an error throws ErrorException carrying the Error: the same "bad access throws" rule as
// std::expected, with the message kept.
//
// Not here: errors of the communication library (hetcomm::Error in include/hetcomm/hetcomm.hpp, a result code).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace hetcomm::trainer {

struct Error {
  // Default member initializers let callers name only the fields they have (Error{.source = s, .detail = d})
  // without GCC 12's -Wmissing-field-initializers.
  std::string source{};              // what was being read: "config configs/gpt.json", "checkpoint /ckpt/step100"
  std::optional<uint64_t> offset{};  // byte offset in source, when the fault has one (a JSON syntax error, a length)
  std::string field{};               // the named thing at fault, with its kind: "key 'model.n_head'", "tensor 'wte'"
  std::string detail{};              // what was wrong, with the numbers: "must be positive, got -1"

  // "checkpoint /ckpt/step100: byte 8: tensor 'wte': data_offsets [0,96] hold 96 bytes but ..."
  std::string message() const {
    std::string m = source.empty() ? std::string("trainer") : source;
    if (offset) m += ": byte " + std::to_string(*offset);
    if (!field.empty()) m += ": " + field;
    m += ": " + detail;
    return m;
  }
};

// Thrown only by Result::value() on an error (and so never by the loaders themselves).
class ErrorException : public std::runtime_error {
 public:
  explicit ErrorException(Error error) : std::runtime_error(error.message()), error_(std::move(error)) {}
  const Error& error() const noexcept { return error_; }

 private:
  Error error_;
};

// A T or an Error. Implicit from either, so `return Error{...};` and `return value;` both work.
template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Error>, "Result<Error> would be ambiguous");

 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & {
    throwIfError();
    return std::get<0>(v_);
  }
  const T& value() const& {
    throwIfError();
    return std::get<0>(v_);
  }
  T&& value() && {
    throwIfError();
    return std::get<0>(std::move(v_));
  }
  // Precondition: has_value() (std::get checks it and throws std::bad_variant_access otherwise).
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  // Precondition: !has_value().
  const Error& error() const& { return std::get<1>(v_); }

 private:
  void throwIfError() const {
    if (!has_value()) throw ErrorException(std::get<1>(v_));
  }
  std::variant<T, Error> v_;
};

// Success or an Error: `return {};` is success.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}

  bool has_value() const noexcept { return !error_; }
  explicit operator bool() const noexcept { return has_value(); }
  void value() const {
    if (error_) throw ErrorException(*error_);
  }
  // Precondition: !has_value().
  const Error& error() const& { return error_.value(); }

 private:
  std::optional<Error> error_;
};

}  // namespace hetcomm::trainer
