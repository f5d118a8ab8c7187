// allowedTransports(): UCX_TLS as the logs show it, with or without the UCX transport built.
#include <cstdlib>

#include "transports/ucx/ucx_transport.h"

namespace hetcomm::transport::ucx {

std::string allowedTransports() {
  const char* tls = std::getenv("UCX_TLS");
  return tls && *tls ? tls : "all";
}

}  // namespace hetcomm::transport::ucx
