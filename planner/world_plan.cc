#include "planner/world_plan.h"

#include <cstdio>

#include "trainer/devices.h"

namespace hetcomm::planner {

trainer::Result<SearchReport> planWorld(hetcommComm_t comm, const trainer::TrainConfig& config,
                                        const PlanRequest& request) {
  auto where = trainer::placementOf(comm);
  if (!where) return where.error();
  ClusterInfo cluster;
  cluster.host = where->host;
  cluster.island = where->island;
  cluster.speed = request.speeds.empty() ? std::vector<double>(cluster.host.size(), 1.0) : request.speeds;
  cluster.memoryBytes = request.memoryLimits;
  return searchPlans(config, cluster, request.profile, predictedBy(comm), request.options);
}

std::string formatReport(const SearchReport& report, const PlanRequest& request) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "planner: %d structures estimated, %d plans simulated, %d refused for memory; compute: %s\n",
                report.structures, report.simulated, report.memoryRefused, request.profile.source().c_str());
  out += line;
  for (size_t i = 0; i < report.best.size(); ++i) {
    const PlanCandidate& p = report.best[i];
    std::snprintf(line, sizeof line, "  #%zu %s", i + 1, p.summary().c_str());
    out += line;
    if (report.boundTokensPerS > 0) {
      std::snprintf(line, sizeof line, ", %.2f of the bound", p.tokensPerS / report.boundTokensPerS);
      out += line;
    }
    if (p.peakMemoryShare > 0) {
      std::snprintf(line, sizeof line, ", fullest rank at %.0f%% of its memory", p.peakMemoryShare * 100);
      out += line;
    }
    out += "\n";
  }
  std::snprintf(line, sizeof line,
                "planner: HetHub bound %.0f tok/s (each device type alone, summed; memory not counted)\n",
                report.boundTokensPerS);
  out += line;
  return out;
}

}  // namespace hetcomm::planner
