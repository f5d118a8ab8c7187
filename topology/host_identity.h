// host_identity.h: which host this process runs on. Ranks with the same identity share memory and loopback,
// so the communicator may use host-local paths between them. HETCOMM_HOSTID overrides it (emulated clusters run
// several "hosts" as network namespaces of one machine, which share the kernel's boot id and hostname).
#pragma once

#include <string>

namespace hetcomm::topo {

// "name:bootid8" (hostname plus the first 8 hex digits of the kernel's boot id), or HETCOMM_HOSTID.
std::string hostIdentity();
// The short host name, for logs and tables.
std::string hostName();

// The running kernel's boot id (empty where unreadable): processes that report the same one share one machine's
// CPUs and memory, whatever hosts the topology or HETCOMM_HOSTID makes of them (network namespaces, containers).
std::string kernelBootId();

}  // namespace hetcomm::topo
