// The UCX transport where hetcomm was built without UCX (HETCOMM_UCX=OFF, or no libucx-dev at build time): every
// start fails with that reason, so the communicator falls back to verbs or tcp, and HETCOMM_TRANSPORT=ucx fails
// saying why. The class's other members exist only because code that would own a transport names them; no object
// is ever made.
#include "transports/ucx/ucx_transport.h"

namespace hetcomm::transport::ucx {

namespace {
Status notBuilt() {
  return systemError("ucx: this hetcomm was built without UCX (HETCOMM_UCX=OFF, or libucx-dev missing at build time)");
}
}  // namespace

Result<std::unique_ptr<UcxTransport>> UcxTransport::create(const Config&) { return notBuilt(); }
UcxTransport::~UcxTransport() = default;
Result<std::vector<std::byte>> UcxTransport::listen() { return notBuilt(); }
Result<std::vector<std::unique_ptr<Connection>>> UcxTransport::connectAll(const std::vector<std::vector<std::byte>>&,
                                                                          Deadline) {
  return notBuilt();
}
Status UcxTransport::progress() { return notBuilt(); }
int UcxTransport::waitFd() const { return -1; }
bool UcxTransport::armForSleep() { return true; }

}  // namespace hetcomm::transport::ucx
