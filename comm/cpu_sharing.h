// cpu_sharing.h: whether the ranks of a communicator that may run on this rank's CPUs outnumber those CPUs. A rank
// that waits for a peer polls; when the peer may need this very CPU to answer, the poll must give the CPU up often
// (Engine::noteCpuSharing). Each rank publishes its affinity at init as a list ("0,1,5"); every rank of its machine
// (its kernel: the hosts of an emulated cluster or containers on one machine are one) whose list overlaps its own
// counts. Ranks bound one to a core (hetcomm-run --bind-to core, mpirun) share
// nothing; unbound ranks share the host's CPUs; ranks bound round robin to fewer cores share them.
#pragma once

#include <sched.h>

#include <string>
#include <vector>

namespace hetcomm::comm {

// This process's CPU affinity as a list of CPU numbers, "0,1,5"; empty where the kernel does not say.
std::string affinityList();

// A set's CPU numbers as such a list.
std::string cpuList(const cpu_set_t& set);

// The set a list names; numbers past CPU_SETSIZE and items that are not numbers are left out.
cpu_set_t parseCpuList(const std::string& text);

struct CpuSharing {
  int ranks = 1;  // ranks (this one included) that may run on one of this rank's CPUs
  int cpus = 1;   // the CPUs those ranks may run on, together
  bool oversubscribed() const { return ranks > cpus; }
};

// cpusByRank[p]: rank p's list; sameHost[p]: whether rank p runs on this rank's machine. A rank whose own list is
// empty or unreadable counts as alone on its CPU.
CpuSharing cpuSharing(const std::vector<std::string>& cpusByRank, const std::vector<bool>& sameHost, int me);

// Whether some machine of the job runs more ranks than the CPUs they may use together (machineOf[p]: rank p's
// machine, any name its machine's ranks share). Every rank computes the same answer from the same lists. Ranks with
// an empty list count as having a CPU of their own.
bool anyMachineOversubscribed(const std::vector<std::string>& cpusByRank, const std::vector<std::string>& machineOf);

}  // namespace hetcomm::comm
