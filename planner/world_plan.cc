#include "planner/world_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "trainer/devices.h"

namespace hetcomm::planner {

trainer::Result<std::vector<int>> profiledTpDegrees(hetcommComm_t comm, const trainer::ModelConfig& model) {
  auto where = trainer::placementOf(comm);
  if (!where) return where.error();
  std::map<int, int> perHost;
  for (int h : where->host) ++perHost[h];
  int most = 1;
  for (auto [h, n] : perHost) most = std::max(most, n);
  std::vector<int> tps;
  for (int t = 2; t <= most; ++t)
    if (model.nHead % t == 0 && model.dModel % t == 0 && model.vocabSize % t == 0) tps.push_back(t);
  return tps;
}

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

trainer::Result<PlanCandidate> predictPlan(hetcommComm_t comm, const trainer::TrainConfig& config,
                                           trainer::ParallelPlan plan, const PlanRequest& request) {
  auto where = trainer::placementOf(comm);
  if (!where) return where.error();
  const int world = static_cast<int>(where->host.size());
  trainer::TrainConfig cfg = config;
  if (plan.microBatch > 0) cfg.microBatch = plan.microBatch;
  if (auto ok = trainer::validatePlan(plan, cfg, world, "plan"); !ok) return ok.error();
  auto roles = trainer::assignRoles(plan, *where, trainer::Assignment::kNicAware);
  if (!roles) return roles.error();
  StepInputs in{cfg,
                plan,
                *roles,
                request.speeds.empty() ? std::vector<double>(world, 1.0) : request.speeds,
                request.profile,
                request.options.bucketBytes,
                plan.zero == 1,
                request.options.optimizerBytesPerS,
                *where};
  auto p = predictStep(in, predictedBy(comm));
  if (!p) return p.error();
  PlanCandidate c;
  c.memory = rankMemory(in);
  for (int r = 0; r < world && r < static_cast<int>(request.memoryLimits.size()); ++r)
    if (request.memoryLimits[r] > 0)
      c.peakMemoryShare = std::max(c.peakMemoryShare, c.memory[r].total() / request.memoryLimits[r]);
  c.plan = std::move(plan);
  c.microBatch = cfg.microBatch;
  c.zero1 = c.plan.zero == 1;
  c.layout = "given";
  c.prediction = *p;
  c.tokensPerS = double(cfg.globalBatch) * cfg.model.seqLen / p->stepS;
  return c;
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
    if (!p.memoryNote.empty()) out += "     memory: " + p.memoryNote + "\n";
  }
  std::snprintf(line, sizeof line,
                "planner: HetHub bound %.0f tok/s (each device type alone, summed; memory not counted)\n",
                report.boundTokensPerS);
  out += line;
  return out;
}

}  // namespace hetcomm::planner
