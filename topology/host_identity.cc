#include "topology/host_identity.h"

#include <unistd.h>

#include <fstream>

#include "common/param.h"

namespace hetcomm::topo {

HC_PARAM_STR(hostIdOverride, "HOSTID", "")

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  std::string name(buf);
  if (auto dot = name.find('.'); dot != std::string::npos) name.resize(dot);
  return name;
}

std::string kernelBootId() {
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return boot;
}

std::string hostIdentity() {
  if (!hostIdOverride().empty()) return hostIdOverride();
  // Two machines cloned from one image share a hostname; their boot ids differ.
  return hostName() + ":" + kernelBootId().substr(0, 8);
}

}  // namespace hetcomm::topo
