#include "comm/cpu_sharing.h"

#include <cstdlib>
#include <map>

#include "common/strings.h"

namespace hetcomm::comm {

std::string affinityList() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  return cpuList(set);
}

std::string cpuList(const cpu_set_t& set) {
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

cpu_set_t parseCpuList(const std::string& text) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const auto& item : split(text, ',')) {
    char* end = nullptr;
    const long c = std::strtol(item.c_str(), &end, 10);
    if (!item.empty() && *end == '\0' && c >= 0 && c < CPU_SETSIZE) CPU_SET(static_cast<int>(c), &set);
  }
  return set;
}

CpuSharing cpuSharing(const std::vector<std::string>& cpusByRank, const std::vector<bool>& sameHost, int me) {
  const cpu_set_t mine = parseCpuList(cpusByRank[me]);
  if (CPU_COUNT(&mine) == 0) return {};
  CpuSharing out{0, 0};
  cpu_set_t all;
  CPU_ZERO(&all);
  for (size_t p = 0; p < cpusByRank.size(); ++p) {
    if (!sameHost[p]) continue;
    cpu_set_t theirs = parseCpuList(cpusByRank[p]), common;
    CPU_AND(&common, &theirs, &mine);
    if (CPU_COUNT(&common) == 0) continue;
    ++out.ranks;
    CPU_OR(&all, &all, &theirs);
  }
  out.cpus = CPU_COUNT(&all);
  return out;
}

bool anyMachineOversubscribed(const std::vector<std::string>& cpusByRank, const std::vector<std::string>& machineOf) {
  struct Machine {
    int ranks = 0;
    cpu_set_t cpus;
  };
  std::map<std::string, Machine> machines;
  for (size_t p = 0; p < cpusByRank.size() && p < machineOf.size(); ++p) {
    const cpu_set_t theirs = parseCpuList(cpusByRank[p]);
    if (CPU_COUNT(&theirs) == 0) continue;
    auto [it, fresh] = machines.try_emplace(machineOf[p]);
    if (fresh) CPU_ZERO(&it->second.cpus);
    ++it->second.ranks;
    CPU_OR(&it->second.cpus, &it->second.cpus, &theirs);
  }
  for (const auto& [name, m] : machines)
    if (m.ranks > CPU_COUNT(&m.cpus)) return true;
  return false;
}

}  // namespace hetcomm::comm
