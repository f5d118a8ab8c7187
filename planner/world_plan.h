// world_plan.h: planning for a communicator, live (hetcomm-train --plan auto, hetcomm-plan under a launcher) or a
// model of a cluster file (hetcomm-plan --cluster, hetcommCommInitModel): the cluster as the communicator sees it
// (every rank's host and island), the devices' speeds and memory, the compute profile, and the search over the
// library's own predictions for that communicator's groups (hetcommCommPredict).
#pragma once

#include <hetcomm/hetcomm.h>

#include <string>
#include <vector>

#include "planner/profile.h"
#include "planner/search.h"
#include "trainer/config.h"
#include "trainer/error.h"

namespace hetcomm::planner {

struct PlanRequest {
  std::vector<double> speeds;        // per rank, relative to the profile's device; empty: all 1
  std::vector<double> memoryLimits;  // per rank, bytes; empty: none
  ComputeProfile profile = ComputeProfile::fromFlops(1e12);
  SearchOptions options;
};

// The compute profile's TP degrees worth measuring for comm's cluster: those of model (dividing its heads,
// channels and vocabulary) above 1, up to the ranks of the fullest host (a TP group stays in its host).
trainer::Result<std::vector<int>> profiledTpDegrees(hetcommComm_t comm, const trainer::ModelConfig& model);

// Local: asks comm's cost model, moves no data (any rank may call it; every rank gets the same answer from the
// same link figures).
trainer::Result<SearchReport> planWorld(hetcommComm_t comm, const trainer::TrainConfig& config,
                                        const PlanRequest& request);

// The prediction of one plan (validated against config here; roles as the trainer assigns them, NIC-aware unless
// the plan lists its ranks), with the links' sharing.
trainer::Result<PlanCandidate> predictPlan(hetcommComm_t comm, const trainer::TrainConfig& config,
                                           trainer::ParallelPlan plan, const PlanRequest& request);

// The report for people: the best plans with their predicted step, tokens/s, bubble and fullest rank's memory,
// the HetHub bound and each plan's share of it, and what the search looked at.
std::string formatReport(const SearchReport& report, const PlanRequest& request);

}  // namespace hetcomm::planner
