// plan.h: the parallel plan of a hybrid tensor (TP) x pipeline (PP) x data (DP) parallel run, Megatron style
// with FlashFlex's uneven stages and Holmes' NIC-aware placement: how many data-parallel replicas, how many
// micro-batches each replica runs per step, which transformer blocks each pipeline stage holds and at which
// tensor-parallel degree, and which global rank plays which (replica, stage, tp rank) role.
//
// Pure: reading a plan file is the only I/O; no hetcomm calls. The trainer turns a RoleTable into communicators.
//
// The file's layout (JSON, snake_case keys; an unknown key is an error; this layout is stable):
//   { "data_parallel": 2,                        optional, default 1: DP replicas
//     "micro_batches": [3, 1],                   optional: micro-batches each replica runs per optimizer step, one
//                                                entry per replica (so data_parallel entries); default: the global
//                                                batch split evenly, global_batch / (micro_batch * data_parallel)
//     "stages": [                                required, in pipeline order, at least one
//       {"layers": 1, "tensor_parallel": 2},     layers required: transformer blocks on the stage;
//       {"layers": 3, "tensor_parallel": 1} ],   tensor_parallel optional, default 1 (may differ between stages)
//     "ranks": [[[0,1],[2]], [[3,4],[5]]],       optional: ranks[replica][stage] = the global ranks of that
//                                                stage's TP group, in TP order; a permutation of 0..world-1;
//                                                absent = assigned by assignRoles()
//     "micro_batch": 2,                          optional: sequences per micro-batch; the run's config must
//                                                agree (the trainer takes it over); absent = the config's
//     "zero": 1,                                 optional: ZeRO-1 on (1) or off (0); absent = the command line's
//     "pipeline_depth": 2,                       optional, default 1 (plain 1F1B): each stage starts with depth
//                                                forwards more than the next one does (StageShape::warmup), so a
//                                                boundary keeps depth micro-batches in flight and hides its
//                                                transfers behind compute, for depth more micro-batches'
//                                                activations on the early stages
//     "zero_shares": [2, 2, 1, 1, 2, 2, 1, 1] }  optional, with ZeRO-1: each global rank's share of its data-
//                                                parallel group's optimizer state (positive; a group's shares are
//                                                normalised among its ranks); absent = even (Cephalo: sized to
//                                                each rank's memory)
// The embedding lives on stage 0 and the final LayerNorm + LM head on the last stage, so with >= 2 stages the
// first or last stage may hold 0 blocks; any other stage needs at least one.
//
// The C++ fields are the keys' camelCase twins (dp, microBatches, stages[i].layers, stages[i].tp, ranks,
// microBatch, zero, pipelineDepth, zeroShares).
//
// Not here: building communicators, running the pipeline schedule, the model's split into stage parameters.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {

struct StagePlan {
  int layers = 0;  // transformer blocks on this stage (the embedding / LM head come with the first / last stage)
  int tp = 1;      // tensor-parallel degree of the stage; divides n_head, d_model and vocab_size
  bool operator==(const StagePlan&) const = default;
};

struct ParallelPlan {
  int dp = 1;  // data-parallel replicas
  // Per replica: micro-batches it runs per optimizer step. Empty = uniform; validatePlan fills it.
  std::vector<int> microBatches{};
  std::vector<StagePlan> stages{};  // pipeline stages in order
  // Optional explicit roles: ranks[replica][stage][tpRank] = global rank. Empty = assignRoles() decides.
  std::vector<std::vector<std::vector<int>>> ranks{};
  int microBatch = 0;                // sequences per micro-batch; 0 = the config's micro_batch
  int zero = -1;                     // ZeRO-1: 1 on, 0 off, -1 = not said (the command line decides)
  int pipelineDepth = 1;             // forwards each stage runs ahead of the next one; 1 = plain 1F1B
  std::vector<double> zeroShares{};  // per global rank: its share of its DP group's optimizer state; empty = even

  int ranksPerReplica() const;    // sum of the stages' tp: the ranks one pipeline replica occupies
  int worldSize() const;          // dp * ranksPerReplica()
  int totalMicroBatches() const;  // sum of microBatches (0 while it is empty)
  bool operator==(const ParallelPlan&) const = default;
};

// Parses a plan and checks what needs neither the model nor the world size (validatePlanShape). `source` names it
// in errors ("plan plans/mixed.json"); errors name the key path ("key 'stages[1].tensor_parallel'") and the
// numbers; syntax errors give the byte offset.
Result<ParallelPlan> parsePlan(const std::string& text, const std::string& source = "plan");
// The same from a file; the source in errors is "plan <path>".
Result<ParallelPlan> loadPlan(const std::string& path);
// Every key the plan sets (micro_batches and ranks only when non-empty): parsePlan(toJson(p).dump()) == p.
nlohmann::json toJson(const ParallelPlan& plan);

// Shorthand for the regular case: pp stages with the blocks split as evenly as possible (the first nLayer % pp
// stages take one more: 5 blocks on 2 stages = 3 + 2), every stage at TP degree tp, dp replicas with the global
// batch split evenly. microBatches is filled when globalBatch divides by microBatch * dp, and left empty otherwise
// so that validatePlan says why. No checks here (pp > nLayer gives 0-block stages): call validatePlan.
ParallelPlan uniformPlan(const TrainConfig& config, int tp, int pp, int dp);

// The checks that need only the plan: dp >= 1; pipeline_depth in [1, 64]; at least one stage; tp >= 1; layers
// >= 0, and 0 only on the first or last of >= 2 stages; micro_batches with dp entries, each >= 1, when given;
// explicit ranks with the shape [dp][stages][tp] holding each of 0..worldSize()-1 once, when given. parsePlan
// runs these.
Result<void> validatePlanShape(const ParallelPlan& plan, const std::string& source = "plan");
// All checks against the run: validatePlanShape, then the stages' layers sum to model.n_layer; each tp divides
// n_head (heads split over TP ranks), d_model (and so 4*d_model, the MLP width) and vocab_size (the
// vocab-parallel embedding / LM head); worldSize == plan.worldSize(); zero_shares, when given, has one positive
// entry per rank; the plan's micro_batch, when given, is the config's; the batch: with micro_batches given,
// sum(micro_batches) * micro_batch == global_batch, and without, global_batch % (micro_batch * dp) == 0.
// On success an empty plan.microBatches is filled with dp copies of global_batch / (micro_batch * dp), so every
// later reader sees explicit counts; on error the plan is left as it was. `config` is assumed valid
// (validate(TrainConfig)); `source` names the plan in errors.
Result<void> validatePlan(ParallelPlan& plan, const TrainConfig& config, int worldSize,
                          const std::string& source = "plan");

// Weight of replica d's mean gradient in the step's gradient: microBatches[d] / totalMicroBatches(). Each
// replica averages over its own microBatches[d] * micro_batch samples, so sum_d weight[d] * mean_d is the mean
// over the whole global batch, exactly as with uniform replicas (where every weight is 1/dp). An empty
// microBatches gives 1/dp each.
std::vector<double> replicaGradWeights(const ParallelPlan& plan);

// Who a global rank is.
struct Role {
  int replica = 0;  // data-parallel replica
  int stage = 0;    // pipeline stage
  int tpRank = 0;   // rank within the stage's tensor-parallel group
  bool operator==(const Role&) const = default;
};

// The part of the model a role holds: its stage's blocks (after the blocks of the stages before it), the
// embedding on the first stage, the final LayerNorm and head on the last, cut for its TP rank.
Shard shardOf(const ParallelPlan& plan, const Role& role);

struct RoleTable {
  std::vector<Role> of{};                              // per global rank
  std::vector<std::vector<std::vector<int>>> ranks{};  // [replica][stage][tpRank] -> global rank
  bool operator==(const RoleTable&) const = default;
};

// Where the ranks run. Ranks of hosts joined by a fast fabric (an RDMA island: IB, RoCE) share an island id; the
// islands talk over the slow fabric (Ethernet). A host lies in one island.
struct Placement {
  std::vector<int> host{};    // per global rank: host id
  std::vector<int> island{};  // per global rank: island id
};

enum class Assignment {
  kNicAware,  // Holmes: TP groups inside a host, DP groups inside an island, pipeline boundaries across islands
  kNaive,     // plain rank order: tp rank fastest, then stage, then replica (DP outermost); ignores the placement
};

// The role of every rank. plan.ranks, when given, wins over both modes. Errors: a plan that fails
// validatePlanShape, a placement whose sizes are not plan.worldSize(), a host listed in two islands. The result
// is a pure function of its arguments (every rank computes the same table).
Result<RoleTable> assignRoles(const ParallelPlan& plan, const Placement& where, Assignment how);

// How well a table fits the cluster: groups that leave the fabric they should stay on.
struct GroupSpans {
  int tpGroups = 0;                 // (replica, stage) tensor-parallel groups
  int tpSpanningHosts = 0;          // ... of them with ranks on more than one host
  int dpGroups = 0;                 // (stage, tpRank) data-parallel groups (the same role in every replica)
  int dpSpanningIslands = 0;        // ... of them with ranks in more than one island
  int boundaries = 0;               // pipeline boundaries (replica, stage -> stage+1)
  int boundariesAcrossIslands = 0;  // ... whose two TP groups do not all lie in one island
};
// Precondition: table and where come from a successful assignRoles (sizes agree).
GroupSpans groupSpans(const RoleTable& table, const Placement& where);

// One line per rank (rank, host, island, replica, stage, tp rank, layers of its stage, micro-batches of its
// replica) under a header, then one summary line per kind of group (groupSpans). For the trainer's log.
std::string formatRoleTable(const RoleTable& table, const Placement& where, const ParallelPlan& plan);

}  // namespace hetcomm::trainer
