// search.h: the automatic hybrid-parallel plan. Given the model, the cluster (where each rank runs, its device's
// rate and memory) and the communication library's predictions, it finds the plans with the shortest predicted
// step (step_cost.h, step_sim.h) among:
//
//   - tensor-parallel degrees per host (a TP group never leaves its host): one degree for every host, or the
//     largest valid degree up to it that the host's rank count allows, so hosts of other sizes take their own;
//     with two kinds of device, a degree per kind (per-stage TP);
//   - data-parallel degree R and pipeline depth S (R x S TP groups use every rank);
//   - two layouts of the groups: "striped" (Holmes: stage s takes R consecutive groups in the order island,
//     device rate, host, so a stage's data-parallel group stays in an island and its devices alike, and the
//     pipeline crosses the islands) and "blocked" (replica r takes S consecutive groups in the order island,
//     host: a replica stays in an island, data parallelism crosses them, micro-batches follow each replica's
//     speed);
//   - micro-batch sizes, and micro-batches per replica, uneven (each to the replica it finishes soonest on);
//   - layers per stage, uneven: a dynamic programme over stages (the fewest layers the slowest stage can have,
//     within each rank's memory);
//   - ZeRO-1 off, on in even shares, or on in shares sized to each rank's free memory (Cephalo), where only
//     that fits (plan.zeroShares).
//
// Every structure is first costed by an estimate (each replica's 1F1B on its slowest stage, plus the part of its
// slowest data-parallel reduction no backward hides); the best `simulate` estimates are simulated in full, then
// improved by moving a layer between neighbouring stages or a micro-batch between replicas while the simulated
// step gets shorter. Nothing is enumerated by permutation: groups are placed by the two layouts' orders.
//
// Deterministic: the same inputs give the same plans in the same order on every rank.
#pragma once

#include <string>
#include <vector>

#include "planner/step_cost.h"
#include "planner/step_sim.h"
#include "trainer/config.h"
#include "trainer/error.h"
#include "trainer/memory.h"
#include "trainer/plan.h"

namespace hetcomm::planner {

struct ClusterInfo {
  std::vector<int> host, island;    // per global rank (hetcommCommRankPlacement)
  std::vector<double> speed;        // per rank: its device's speed relative to the profile's (profile.h)
  std::vector<double> memoryBytes;  // per rank: what it may hold; 0 or empty = no limit
  int nranks() const { return static_cast<int>(host.size()); }
};

struct SearchOptions {
  // Micro-batch sizes (sequences) to try; empty: the config's micro_batch, its half and its double where they
  // divide global_batch.
  std::vector<int> microBatchSizes;
  int zero = -1;                 // ZeRO-1: -1 both (only ZeRO-1 where only it fits), 0 never, 1 always
  size_t bucketBytes = 1 << 20;  // the trainer's --bucket-mb
  double optimizerBytesPerS = 4e9;
  int maxTp = 0, maxPp = 0;  // the largest TP degree and pipeline depth to consider; 0: any
  int top = 5;               // plans to report
  int simulate = 24;         // structures simulated in full, best estimates first
};

struct PlanCandidate {
  trainer::ParallelPlan plan;  // validated against the config, explicit ranks
  int microBatch = 1;          // sequences per micro-batch (the config's micro_batch for this plan)
  bool zero1 = false;
  std::string layout;  // "striped" or "blocked", with ", slowest first" where the stages run the other way
  StepPrediction prediction;
  double tokensPerS = 0;
  std::vector<trainer::MemoryNeed> memory;  // per global rank
  double peakMemoryShare = 0;               // the fullest rank's need over its limit (0 without limits)
  // With ZeRO-1 shares sized to each rank's memory (plan.zeroShares): why even shares would not do.
  std::string memoryNote;
  std::string summary() const;  // one line: shape, micro-batches, step, tokens/s, bubble
};

struct SearchReport {
  std::vector<PlanCandidate> best;  // fastest first, at most options.top
  int structures = 0;               // (TP degrees, R, layout, micro-batch size) costed by the estimate
  int simulated = 0;                // full step simulations, refinement included
  int memoryRefused = 0;            // structures or plans refused because a rank's memory cannot hold them
  // HetHub's bound: the sum over device types (equal FLOP/s) of what the type's devices reach alone, each
  // running the whole model by itself at its best micro-batch size (one replica, no communication; memory not
  // counted), in tokens/s.
  // Device types are the ranks' speeds.
  double boundTokensPerS = 0;
};

// Errors: a cluster of no ranks or of fields of other sizes; a speed that is not positive; a micro-batch size that
// does not divide global_batch; no plan within the memory limits (the detail names the least need found and
// the rank and limit it exceeded); a failed prediction.
trainer::Result<SearchReport> searchPlans(const trainer::TrainConfig& config, const ClusterInfo& cluster,
                                          const ComputeProfile& profile, const CollectiveTime& time,
                                          const SearchOptions& options = {});

}  // namespace hetcomm::planner
