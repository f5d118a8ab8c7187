#include "common/status.h"

#include <cstdarg>
#include <cstring>

#include "common/strings.h"

namespace hetcomm {

const char* codeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kUnhandled:
      return "unhandled error";
    case Code::kSystem:
      return "system error";
    case Code::kInternal:
      return "internal error";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kInvalidUsage:
      return "invalid usage";
    case Code::kRemote:
      return "remote error";
    case Code::kInProgress:
      return "in progress";
    case Code::kTimeout:
      return "timeout";
  }
  return "unknown code";
}

std::string Status::toString() const {
  if (ok()) return "ok";
  return std::string(codeName(code_)) + ": " + std::string(message());
}

Status makeStatus(Code code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  return Status(code, std::move(msg));
}

Status errnoStatus(int err, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  msg += ": ";
  msg += std::strerror(err);
  return Status(Code::kSystem, std::move(msg));
}

}  // namespace hetcomm
