// The verbs transport where hetcomm was built without libibverbs (HETCOMM_VERBS=OFF, or no libibverbs-dev at
// build time): discovery finds no port, with that reason, so RDMA peers fall back to UCX or tcp. The port naming
// and matching helpers (verbs_wire.cc) stay, as the topology and tests use them. The class's other members exist
// only because code that would own a transport names them; no object is ever made.
#include "transports/verbs/verbs_transport.h"

namespace hetcomm::transport::verbs {

namespace {
constexpr const char* kNotBuilt =
    "verbs: this hetcomm was built without libibverbs (HETCOMM_VERBS=OFF, or libibverbs-dev missing at build time)";
Status notBuilt() { return systemError("%s", kNotBuilt); }
}  // namespace

struct VerbsTransport::Impl {};

Availability discover(const std::string&) { return Availability{{}, kNotBuilt, Code::kSystem}; }

Result<std::unique_ptr<VerbsTransport>> VerbsTransport::create(const Config&) { return notBuilt(); }
Result<std::unique_ptr<VerbsTransport>> VerbsTransport::create(const Config&, const Availability&) {
  return notBuilt();
}
VerbsTransport::~VerbsTransport() = default;
Result<std::vector<std::byte>> VerbsTransport::listen() { return notBuilt(); }
Result<std::vector<std::unique_ptr<Connection>>> VerbsTransport::connectAll(const std::vector<std::vector<std::byte>>&,
                                                                            Deadline) {
  return notBuilt();
}
Status VerbsTransport::progress() { return notBuilt(); }
bool VerbsTransport::armForSleep() { return true; }
int VerbsTransport::waitFd() const { return -1; }
const std::vector<PortInfo>& VerbsTransport::ports() const {
  static const std::vector<PortInfo> none;
  return none;
}

}  // namespace hetcomm::transport::verbs
