#include "trainer/devices.h"

#include <algorithm>
#include <cstdlib>

#include "trainer/data_parallel.h"

namespace hetcomm::trainer {
namespace {

Error flagError(const std::string& flag, const std::string& detail) { return Error{.source = flag, .detail = detail}; }

Result<int> worldOf(hetcommComm_t comm) {
  int world = 0;
  if (hetcommResult_t r = hetcommCommCount(comm, &world); r != hetcommSuccess)
    return commError("hetcommCommCount", r, comm);
  return world;
}

}  // namespace

Result<DeviceSpeeds> deviceSpeeds(hetcommComm_t comm, const std::vector<std::string>& text) {
  auto world = worldOf(comm);
  if (!world) return world.error();
  const int n = *world;
  std::vector<double> peaks(n, 0.0);
  for (int r = 0; r < n; ++r)
    if (hetcommResult_t pr = hetcommCommRankDevice(comm, r, &peaks[r], nullptr); pr != hetcommSuccess)
      return commError("hetcommCommRankDevice", pr, comm);
  const auto [lo, hi] = std::minmax_element(peaks.begin(), peaks.end());
  DeviceSpeeds d;
  d.topoPeakTflops = *lo > 0 ? *hi : 0;
  if (text.empty()) return d;
  if (text.size() == 1 && text[0] == "topo") {
    if (*lo == 0)
      return flagError("--device-speeds topo",
                       "the topology gives rank " + std::to_string(lo - peaks.begin()) +
                           " no GPU peak (HETCOMM_TOPO_FILE or cluster-file \"gpus\" entries with \"peakTflops\" for "
                           "every rank)");
    for (double p : peaks) d.speeds.push_back(p / *hi);
    d.source = "the topology file's GPU peaks";
    return d;
  }
  for (size_t r = 0; r < text.size(); ++r) {
    const std::string& t = text[r];
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0')
      return flagError("--device-speeds",
                       "entry " + std::to_string(r) + " '" + t + "' is not a number (or give 'topo')");
    if (!(v > 0 && v <= 1))
      return flagError("--device-speeds",
                       "entry " + std::to_string(r) + " is " + t + "; a relative speed lies in (0, 1]");
    d.speeds.push_back(v);
  }
  if (static_cast<int>(d.speeds.size()) != n)
    return flagError("--device-speeds",
                     "has " + std::to_string(d.speeds.size()) + " entries for " + std::to_string(n) + " ranks");
  d.source = "--device-speeds";
  return d;
}

Result<std::vector<double>> memoryLimits(hetcommComm_t comm, const std::vector<uint64_t>& given, bool fromTopology,
                                         std::string* source) {
  auto world = worldOf(comm);
  if (!world) return world.error();
  const int n = *world;
  if (!given.empty()) {
    if (given.size() != 1 && static_cast<int>(given.size()) != n)
      return flagError("--memory-limits", "has " + std::to_string(given.size()) + " entries for " + std::to_string(n) +
                                              " ranks: give one for every rank, or one for all");
    std::vector<double> limits(n);
    for (int r = 0; r < n; ++r) limits[r] = double(given.size() == 1 ? given[0] : given[r]);
    if (source) *source = "--memory-limits";
    return limits;
  }
  if (!fromTopology) return std::vector<double>{};
  std::vector<double> limits(n);
  for (int r = 0; r < n; ++r) {
    size_t bytes = 0;
    if (hetcommResult_t pr = hetcommCommRankDevice(comm, r, nullptr, &bytes); pr != hetcommSuccess)
      return commError("hetcommCommRankDevice", pr, comm);
    if (bytes == 0) return std::vector<double>{};  // not every rank's memory is known: no limits
    limits[r] = double(bytes);
  }
  if (source) *source = "the topology's GPU memory";
  return limits;
}

bool launchedByALauncher() {
  for (const char* v : {"HETCOMM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return true;
  return false;
}

Result<Placement> placementOf(hetcommComm_t comm) {
  auto world = worldOf(comm);
  if (!world) return world.error();
  Placement where;
  for (int r = 0; r < *world; ++r) {
    int host = 0, island = 0;
    if (hetcommResult_t pr = hetcommCommRankPlacement(comm, r, &host, &island); pr != hetcommSuccess)
      return commError("hetcommCommRankPlacement", pr, comm);
    where.host.push_back(host);
    where.island.push_back(island);
  }
  return where;
}

}  // namespace hetcomm::trainer
