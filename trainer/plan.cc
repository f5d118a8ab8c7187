// plan.cc: JSON <-> ParallelPlan, the plan's checks, and the rank -> role assignment (naive and NIC-aware).
// Parsing checks types (and that an integer fits an int) and then the plan-only checks (validatePlanShape), so a
// plan built in code (uniformPlan, tests) gets the same messages as one read from a file.
#include "trainer/plan.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "trainer/json_input.h"

namespace hetcomm::trainer {
namespace {

using nlohmann::json;
using Slots = std::vector<std::vector<std::vector<int>>>;  // [replica][stage][tpRank] -> global rank

std::string str(int64_t v) { return std::to_string(v); }

// "stages[1]", "ranks[0][1][2]": the key paths errors name.
std::string indexed(const std::string& key, std::initializer_list<size_t> indices) {
  std::string path = key;
  for (size_t i : indices) {  // appended piecewise: "[" + to_string(i) + "]" trips GCC 12's -Wrestrict false positive
    path += '[';
    path += std::to_string(i);
    path += ']';
  }
  return path;
}

// Reads the plan's JSON, remembering the first error (later ones are usually consequences of it).
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  bool failed() const { return error_.has_value(); }
  const Error& error() const { return *error_; }

  void fail(const std::string& key, std::string detail) {
    if (!error_) error_ = keyError(source_, key, std::move(detail));
  }

  // Unknown keys are checked before the values (config.cc's rule): a typo ("tensor_paralel") must not silently
  // plan TP 1, and it explains a later surprise better than a range error does.
  bool onlyKnownKeys(const json& object, const std::string& prefix, std::initializer_list<const char*> known) {
    for (const auto& item : object.items()) {
      const std::string& key = item.key();  // a name, not a binding: the lambda below captures it (clang 14)
      if (std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) continue;
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      fail(prefix + key, "unknown key (known keys here: " + list + ")");
      return false;
    }
    return true;
  }

  bool integer(const json& v, const std::string& key, int& out) {
    if (!v.is_number_integer()) {
      fail(key, "must be an integer, got " + describeJson(v));
      return false;
    }
    // A value above INT64_MAX parses as unsigned and would wrap in get<int64_t>().
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max())
                                             : v.get<int64_t>() >= std::numeric_limits<int>::min() &&
                                                   v.get<int64_t>() <= std::numeric_limits<int>::max();
    if (!fits) {
      fail(key, v.dump() + " does not fit in 32 bits");
      return false;
    }
    out = v.get<int>();
    return true;
  }

  bool integers(const json& v, const std::string& key, std::vector<int>& out) {
    if (!v.is_array()) {
      fail(key, "must be an array of integers, got " + describeJson(v));
      return false;
    }
    std::vector<int> items(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      if (!integer(v[i], indexed(key, {i}), items[i])) return false;
    out = std::move(items);
    return true;
  }

 private:
  const std::string& source_;
  std::optional<Error> error_;
};

Result<ParallelPlan> planFromJson(const json& j, const std::string& source) {
  if (!j.is_object())
    return Error{.source = source, .detail = std::string("must be a JSON object, got ") + j.type_name()};
  Reader in(source);
  ParallelPlan plan;
  if (!in.onlyKnownKeys(j, "",
                        {"data_parallel", "micro_batches", "stages", "ranks", "micro_batch", "zero", "zero_shares",
                         "pipeline_depth"}))
    return in.error();

  if (auto it = j.find("data_parallel"); it != j.end()) in.integer(*it, "data_parallel", plan.dp);
  if (auto it = j.find("micro_batches"); it != j.end()) in.integers(*it, "micro_batches", plan.microBatches);
  if (auto it = j.find("micro_batch"); it != j.end()) {
    in.integer(*it, "micro_batch", plan.microBatch);
    if (!in.failed() && plan.microBatch < 1) in.fail("micro_batch", "must be positive, got " + str(plan.microBatch));
  }
  if (auto it = j.find("zero_shares"); it != j.end()) {
    if (!it->is_array()) {
      in.fail("zero_shares", "must be an array of positive numbers (one per rank), got " + describeJson(*it));
    } else {
      for (size_t i = 0; i < it->size() && !in.failed(); ++i) {
        const json& v = (*it)[i];
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
          in.fail(indexed("zero_shares", {i}), "must be a positive number, got " + describeJson(v));
        else
          plan.zeroShares.push_back(v.get<double>());
      }
    }
  }
  if (auto it = j.find("pipeline_depth"); it != j.end()) in.integer(*it, "pipeline_depth", plan.pipelineDepth);
  if (auto it = j.find("zero"); it != j.end()) {
    in.integer(*it, "zero", plan.zero);
    if (!in.failed() && plan.zero != 0 && plan.zero != 1) in.fail("zero", "must be 0 or 1, got " + str(plan.zero));
  }

  auto stages = j.find("stages");
  if (stages == j.end()) {
    in.fail("stages", "missing: a plan lists its pipeline stages, e.g. [{\"layers\": 4, \"tensor_parallel\": 2}]");
  } else if (!stages->is_array()) {
    in.fail("stages", "must be an array of stage objects, got " + describeJson(*stages));
  } else {
    for (size_t s = 0; s < stages->size() && !in.failed(); ++s) {
      const json& stage = (*stages)[s];
      const std::string key = indexed("stages", {s});
      if (!stage.is_object()) {
        in.fail(key, "must be an object {\"layers\": n, \"tensor_parallel\": t}, got " + describeJson(stage));
        break;
      }
      if (!in.onlyKnownKeys(stage, key + ".", {"layers", "tensor_parallel"})) break;
      StagePlan sp;
      if (auto it = stage.find("layers"); it != stage.end())
        in.integer(*it, key + ".layers", sp.layers);
      else
        in.fail(key + ".layers", "missing: every stage says how many transformer blocks it holds");
      if (auto it = stage.find("tensor_parallel"); it != stage.end()) in.integer(*it, key + ".tensor_parallel", sp.tp);
      plan.stages.push_back(sp);
    }
  }

  if (auto ranks = j.find("ranks"); ranks != j.end() && !in.failed()) {
    if (!ranks->is_array()) {
      in.fail("ranks",
              "must be an array (per replica) of arrays (per stage) of rank arrays, got " + describeJson(*ranks));
    } else {
      plan.ranks.resize(ranks->size());
      for (size_t d = 0; d < ranks->size() && !in.failed(); ++d) {
        const json& replica = (*ranks)[d];
        if (!replica.is_array()) {
          in.fail(indexed("ranks", {d}), "must be an array (per stage) of rank arrays, got " + describeJson(replica));
          break;
        }
        plan.ranks[d].resize(replica.size());
        for (size_t s = 0; s < replica.size() && !in.failed(); ++s)
          in.integers(replica[s], indexed("ranks", {d, s}), plan.ranks[d][s]);
      }
    }
  }

  if (in.failed()) return in.error();
  if (auto r = validatePlanShape(plan, source); !r) return r.error();
  return plan;
}

// ---- role assignment ---------------------------------------------------------------------------------------------

Slots emptySlots(const ParallelPlan& plan) {
  Slots slots(plan.dp, std::vector<std::vector<int>>(plan.stages.size()));
  for (auto& replica : slots)
    for (size_t s = 0; s < plan.stages.size(); ++s) replica[s].resize(plan.stages[s].tp);
  return slots;
}

RoleTable tableOf(Slots slots, int worldSize) {
  RoleTable table;
  table.of.resize(worldSize);
  for (size_t d = 0; d < slots.size(); ++d)
    for (size_t s = 0; s < slots[d].size(); ++s)
      for (size_t t = 0; t < slots[d][s].size(); ++t) table.of[slots[d][s][t]] = Role{int(d), int(s), int(t)};
  table.ranks = std::move(slots);
  return table;
}

// Rank order, replica-major: replica d's stage s holds ranks offset(d, s) .. offset(d, s) + tp - 1.
Slots naiveFill(const ParallelPlan& plan) {
  Slots slots = emptySlots(plan);
  int next = 0;
  for (auto& replica : slots)
    for (auto& group : replica)
      for (int& rank : group) rank = next++;
  return slots;
}

// The ranks sorted by (island, host, rank): consecutive ranks share a host where they can, consecutive hosts an
// island. Launchers number ranks in many ways (host-major, round-robin over hosts); this order undoes that.
std::vector<int> fabricOrder(const Placement& where) {
  std::vector<int> order(where.host.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(where.island[a], where.host[a], a) < std::tie(where.island[b], where.host[b], b);
  });
  return order;
}

// Candidate 1, the plain Holmes fill: walk the fabric order and fill the slots stage-major (stage 0 of every
// replica, then stage 1 of every replica, ...), each replica's TP group as the next tp ranks.
//
// Why stage-major and not replica-major: the data-parallel groups are "the same (stage, tpRank) in every
// replica", and their gradient all-reduce is the largest traffic of a step (every parameter of the stage). Filling
// stage-major puts a stage's groups for all replicas next to each other in the fabric order, so a stage lands in one
// island (as long as it fits) and its gradient all-reduces stay on the fast fabric. What crosses islands then is
// the pipeline: stage s -> s+1 sends one micro-batch's activations (micro_batch x seq_len x d_model), far less than
// a stage's gradients, and point-to-point between two groups, not a collective over every replica. Within a stage, each
// TP group is a run of consecutive ranks, so it lies on one host whenever the host has room: TP all-reduces run in
// every layer, forward and backward, and want the fastest links of all.
Slots stageMajorFill(const ParallelPlan& plan, const std::vector<int>& order) {
  Slots slots = emptySlots(plan);
  size_t next = 0;
  for (size_t s = 0; s < plan.stages.size(); ++s)
    for (int d = 0; d < plan.dp; ++d)
      for (int& rank : slots[d][s]) rank = order[next++];
  return slots;
}

// Candidates 2 and 3: where the plain fill cuts a TP group at a host boundary (uneven TP degrees, hosts whose rank
// count is not a multiple of tp), place whole groups first-fit instead: each group takes tp ranks from the first
// host, in fabric order, with that many free; a group no host can take whole takes the first free ranks in fabric
// order. Groups go in stage-major order (candidate 2) or largest tp first, stage-major among equals (candidate 3):
// big groups are the hard ones to fit, and small ones then fill the holes they leave (bin packing's
// first-fit-decreasing). Example: hosts of 3 ranks, stages at tp 1 and 2, dp 2: the plain fill gives the tp-2
// groups {2,3} and {4,5}, and {2,3} straddles hosts 0 and 1; first-fit-decreasing gives {0,1} and {3,4}, and the
// tp-1 groups take ranks 2 and 5.
Slots hostPackedFill(const ParallelPlan& plan, const Placement& where, const std::vector<int>& order,
                     bool largestFirst) {
  // Each host's ranks in fabric order, taken from the front. assignRoles checked that a host lies in one island,
  // so a host's ranks are consecutive in the fabric order.
  std::vector<std::vector<int>> hosts;
  for (int rank : order) {
    if (hosts.empty() || where.host[hosts.back().front()] != where.host[rank]) hosts.emplace_back();
    hosts.back().push_back(rank);
  }
  std::vector<size_t> taken(hosts.size(), 0);

  std::vector<std::pair<int, int>> groups;  // (stage, replica), stage-major
  for (int s = 0; s < int(plan.stages.size()); ++s)
    for (int d = 0; d < plan.dp; ++d) groups.emplace_back(s, d);
  if (largestFirst)
    std::stable_sort(groups.begin(), groups.end(),
                     [&](const auto& a, const auto& b) { return plan.stages[a.first].tp > plan.stages[b.first].tp; });

  Slots slots = emptySlots(plan);
  for (auto [s, d] : groups) {
    std::vector<int>& group = slots[d][s];
    const size_t tp = group.size();
    size_t h = 0;
    while (h < hosts.size() && hosts[h].size() - taken[h] < tp) ++h;
    if (h < hosts.size()) {  // one host has room for the whole group
      std::copy_n(hosts[h].begin() + taken[h], tp, group.begin());
      taken[h] += tp;
      continue;
    }
    size_t filled = 0;  // none has: the first free ranks, across hosts
    for (h = 0; h < hosts.size() && filled < tp; ++h)
      while (taken[h] < hosts[h].size() && filled < tp) group[filled++] = hosts[h][taken[h]++];
  }
  return slots;
}

// Holmes' assignment: the best of the candidates above by (TP groups spanning hosts, DP groups spanning islands),
// in that order of importance (TP traffic is per layer, DP per step); ties keep the earlier candidate, so the plain
// fill wins unless packing really helps. The naive rank order comes last, as a floor: a launcher that already
// numbered the ranks well is never made worse. Trying four fills and scoring them is cheap (a few thousand ranks at
// most) and keeps each fill simple and deterministic; a smarter packer can be added as one more candidate.
Slots nicAwareFill(const ParallelPlan& plan, const Placement& where) {
  const std::vector<int> order = fabricOrder(where);
  Slots best;
  std::pair<int, int> bestScore;
  for (int candidate = 0; candidate < 4; ++candidate) {
    Slots slots = candidate == 0   ? stageMajorFill(plan, order)
                  : candidate == 3 ? naiveFill(plan)
                                   : hostPackedFill(plan, where, order, candidate == 2);
    const GroupSpans spans = groupSpans(tableOf(slots, plan.worldSize()), where);
    const std::pair<int, int> score{spans.tpSpanningHosts, spans.dpSpanningIslands};
    if (candidate == 0 || score < bestScore) {
      best = std::move(slots);
      bestScore = score;
    }
  }
  return best;
}

int distinctCount(std::vector<int> ids) {
  std::sort(ids.begin(), ids.end());
  return int(std::unique(ids.begin(), ids.end()) - ids.begin());
}

}  // namespace

// ---- the plan ----------------------------------------------------------------------------------------------------

int ParallelPlan::ranksPerReplica() const {
  int n = 0;
  for (const StagePlan& s : stages) n += s.tp;
  return n;
}

int ParallelPlan::worldSize() const { return dp * ranksPerReplica(); }

int ParallelPlan::totalMicroBatches() const { return std::accumulate(microBatches.begin(), microBatches.end(), 0); }

Result<ParallelPlan> parsePlan(const std::string& text, const std::string& source) {
  auto j = parseJsonText(text, source);
  if (!j) return j.error();
  return planFromJson(*j, source);
}

Result<ParallelPlan> loadPlan(const std::string& path) {
  const std::string source = "plan " + path;
  auto text = readTextFile(path, source);
  if (!text) return text.error();
  return parsePlan(*text, source);
}

json toJson(const ParallelPlan& plan) {
  json stages = json::array();
  for (const StagePlan& s : plan.stages) stages.push_back(json{{"layers", s.layers}, {"tensor_parallel", s.tp}});
  json j{{"data_parallel", plan.dp}, {"stages", std::move(stages)}};
  if (!plan.microBatches.empty()) j["micro_batches"] = plan.microBatches;
  if (!plan.ranks.empty()) j["ranks"] = plan.ranks;
  if (plan.microBatch > 0) j["micro_batch"] = plan.microBatch;
  if (plan.zero >= 0) j["zero"] = plan.zero;
  if (plan.pipelineDepth != 1) j["pipeline_depth"] = plan.pipelineDepth;
  if (!plan.zeroShares.empty()) j["zero_shares"] = plan.zeroShares;
  return j;
}

ParallelPlan uniformPlan(const TrainConfig& config, int tp, int pp, int dp) {
  ParallelPlan plan;
  plan.dp = dp;
  const int blocks = config.model.nLayer;
  for (int s = 0; s < pp; ++s) plan.stages.push_back(StagePlan{.layers = blocks / pp + (s < blocks % pp), .tp = tp});
  const int64_t perStep = int64_t(config.microBatch) * dp;
  if (perStep > 0 && config.globalBatch > 0 && config.globalBatch % perStep == 0)
    plan.microBatches.assign(dp, int(config.globalBatch / perStep));
  return plan;
}

Result<void> validatePlanShape(const ParallelPlan& plan, const std::string& source) {
  if (plan.dp < 1) return keyError(source, "data_parallel", "must be positive, got " + str(plan.dp));
  // More than 64 would only hold more activations: the warm-up is capped by the micro-batches anyway.
  if (plan.pipelineDepth < 1 || plan.pipelineDepth > 64)
    return keyError(source, "pipeline_depth", "must be in [1, 64], got " + str(plan.pipelineDepth));
  if (plan.stages.empty()) return keyError(source, "stages", "must list at least one pipeline stage, got none");
  const size_t n = plan.stages.size();
  int64_t perReplica = 0;
  for (size_t s = 0; s < n; ++s) {
    const std::string key = indexed("stages", {s});
    const StagePlan& stage = plan.stages[s];
    if (stage.tp < 1) return keyError(source, key + ".tensor_parallel", "must be positive, got " + str(stage.tp));
    if (stage.layers < 0) return keyError(source, key + ".layers", "must be >= 0, got " + str(stage.layers));
    if (stage.layers == 0 && n == 1)
      return keyError(source, key + ".layers", "the only stage must hold at least one transformer block, got 0");
    // The first stage also runs the embedding and the last the final LayerNorm + LM head, so they have work with
    // 0 blocks (a common way to balance the head's cost); a middle stage with 0 blocks would only forward.
    if (stage.layers == 0 && s != 0 && s != n - 1)
      return keyError(source, key + ".layers",
                      "0 transformer blocks on stage " + str(s) + " of " + str(n) +
                          ": only the first stage (embedding) or the last (LayerNorm + LM head) may hold none");
    perReplica += stage.tp;
  }
  if (plan.dp * perReplica > std::numeric_limits<int>::max())
    return keyError(source, "data_parallel",
                    "data_parallel " + str(plan.dp) + " x " + str(perReplica) +
                        " ranks per replica = " + str(plan.dp * perReplica) + " ranks is more than an int counts");

  if (!plan.microBatches.empty()) {
    if (plan.microBatches.size() != size_t(plan.dp))
      return keyError(source, "micro_batches",
                      "has " + str(plan.microBatches.size()) + " entries but data_parallel is " + str(plan.dp) +
                          " (one entry per replica)");
    int64_t total = 0;
    for (size_t d = 0; d < plan.microBatches.size(); ++d) {
      if (plan.microBatches[d] < 1)
        return keyError(
            source, indexed("micro_batches", {d}),
            "replica " + str(d) + " must run at least 1 micro-batch per step, got " + str(plan.microBatches[d]));
      total += plan.microBatches[d];
    }
    if (total > std::numeric_limits<int>::max())
      return keyError(source, "micro_batches", "total " + str(total) + " is more than an int counts");
  }

  if (!plan.ranks.empty()) {
    if (plan.ranks.size() != size_t(plan.dp))
      return keyError(source, "ranks",
                      "has " + str(plan.ranks.size()) + " replicas but data_parallel is " + str(plan.dp));
    for (size_t d = 0; d < plan.ranks.size(); ++d) {
      if (plan.ranks[d].size() != n)
        return keyError(source, indexed("ranks", {d}),
                        "has " + str(plan.ranks[d].size()) + " stages but the plan has " + str(n));
      for (size_t s = 0; s < n; ++s)
        if (plan.ranks[d][s].size() != size_t(plan.stages[s].tp))
          return keyError(source, indexed("ranks", {d, s}),
                          "has " + str(plan.ranks[d][s].size()) + " ranks but stages[" + str(s) +
                              "].tensor_parallel is " + str(plan.stages[s].tp));
    }
    // dp * sum(tp) slots, each a distinct rank in [0, world): then every rank appears exactly once.
    const int world = plan.worldSize();
    std::vector<std::string> seenAt(world);
    for (size_t d = 0; d < plan.ranks.size(); ++d)
      for (size_t s = 0; s < n; ++s)
        for (size_t t = 0; t < plan.ranks[d][s].size(); ++t) {
          const int rank = plan.ranks[d][s][t];
          const std::string key = indexed("ranks", {d, s, t});
          if (rank < 0 || rank >= world)
            return keyError(source, key,
                            "rank " + str(rank) + " is outside 0.." + str(world - 1) + " (the plan's " + str(world) +
                                " ranks: data_parallel " + str(plan.dp) + " x " + str(perReplica) + " per replica)");
          if (!seenAt[rank].empty())
            return keyError(source, key, "rank " + str(rank) + " appears twice (also at " + seenAt[rank] + ")");
          seenAt[rank] = key;
        }
  }
  return {};
}

Result<void> validatePlan(ParallelPlan& plan, const TrainConfig& config, int worldSize, const std::string& source) {
  if (auto r = validatePlanShape(plan, source); !r) return r;
  const ModelConfig& model = config.model;

  int64_t layers = 0;
  std::string terms;
  for (const StagePlan& s : plan.stages) {
    layers += s.layers;
    terms += (terms.empty() ? "" : "+") + str(s.layers);
  }
  if (layers != model.nLayer)
    return keyError(source, "stages",
                    "the stages' layers " + terms + " = " + str(layers) + " but model.n_layer is " + str(model.nLayer));

  // What tensor parallelism splits (Megatron): attention by heads, the MLP's 4*d_model hidden units (implied by
  // d_model), d_model-wide activations in the sequence-parallel parts, and the embedding / LM head by vocabulary.
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const int tp = plan.stages[s].tp;
    const struct {
      const char* key;
      int value;
      const char* split;
    } dims[] = {{"n_head", model.nHead, "attention heads are split over the TP ranks"},
                {"d_model", model.dModel, "channels are split over the TP ranks"},
                {"vocab_size", model.vocabSize, "the embedding and LM head are split by vocabulary"}};
    for (const auto& dim : dims)
      if (dim.value % tp != 0)
        return keyError(source, indexed("stages", {s}) + ".tensor_parallel",
                        "tensor_parallel " + str(tp) + " does not divide model." + dim.key + " " + str(dim.value) +
                            " (" + dim.split + ")");
  }

  if (worldSize != plan.worldSize()) {
    std::string tps;
    for (const StagePlan& s : plan.stages) tps += (tps.empty() ? "" : "+") + str(s.tp);
    return Error{.source = source,
                 .detail = "the plan needs data_parallel " + str(plan.dp) + " x (tensor_parallel " + tps + " = " +
                           str(plan.ranksPerReplica()) + " ranks per replica) = " + str(plan.worldSize()) +
                           " ranks, but the world has " + str(worldSize)};
  }

  if (!plan.zeroShares.empty() && static_cast<int>(plan.zeroShares.size()) != plan.worldSize())
    return keyError(source, "zero_shares",
                    "has " + str(plan.zeroShares.size()) + " entries for the plan's " + str(plan.worldSize()) +
                        " ranks (one share per rank)");
  if (plan.microBatch > 0 && plan.microBatch != config.microBatch)
    return keyError(source, "micro_batch",
                    "the plan runs micro-batches of " + str(plan.microBatch) +
                        " sequences but the config's micro_batch "
                        "is " +
                        str(config.microBatch) + " (set it to the plan's)");
  if (config.microBatch <= 0 || config.globalBatch <= 0)
    return Error{.source = source,
                 .detail = "the config's micro_batch " + str(config.microBatch) + " and global_batch " +
                           str(config.globalBatch) + " must be positive"};
  if (plan.microBatches.empty()) {
    const int64_t perStep = int64_t(config.microBatch) * plan.dp;
    if (config.globalBatch % perStep != 0) {
      std::string hint = config.globalBatch % config.microBatch == 0
                             ? "; list micro_batches per replica (summing to " +
                                   str(config.globalBatch / config.microBatch) + ") for an uneven split"
                             : "";
      return keyError(source, "micro_batches",
                      "absent, so the replicas split the batch evenly, but global_batch " + str(config.globalBatch) +
                          " is not a multiple of micro_batch " + str(config.microBatch) + " x data_parallel " +
                          str(plan.dp) + " = " + str(perStep) + hint);
    }
    plan.microBatches.assign(plan.dp, int(config.globalBatch / perStep));  // the only change validatePlan makes
    return {};
  }
  int64_t total = 0;
  std::string counts;
  for (int m : plan.microBatches) {
    total += m;
    counts += (counts.empty() ? "" : "+") + str(m);
  }
  if (total * config.microBatch != config.globalBatch)
    return keyError(source, "micro_batches",
                    counts + " = " + str(total) + " micro-batches x micro_batch " + str(config.microBatch) + " = " +
                        str(total * config.microBatch) + " samples per step, but global_batch is " +
                        str(config.globalBatch));
  return {};
}

std::vector<double> replicaGradWeights(const ParallelPlan& plan) {
  if (plan.microBatches.empty()) return std::vector<double>(std::max(plan.dp, 0), 1.0 / plan.dp);
  const double total = plan.totalMicroBatches();
  std::vector<double> weights;
  for (int m : plan.microBatches) weights.push_back(m / total);
  return weights;
}

// ---- roles -------------------------------------------------------------------------------------------------------

Result<RoleTable> assignRoles(const ParallelPlan& plan, const Placement& where, Assignment how) {
  if (auto r = validatePlanShape(plan, "plan"); !r) return r.error();
  const int world = plan.worldSize();
  if (where.host.size() != size_t(world) || where.island.size() != size_t(world))
    return Error{.source = "placement",
                 .detail = "has " + str(where.host.size()) + " host ids and " + str(where.island.size()) +
                           " island ids, but the plan has " + str(world) + " ranks (one of each per rank)"};
  std::map<int, int> firstRankOf;  // host -> its first rank, whose island is the host's
  for (int r = 0; r < world; ++r) {
    auto [it, inserted] = firstRankOf.emplace(where.host[r], r);
    if (!inserted && where.island[it->second] != where.island[r])
      return Error{.source = "placement",
                   .detail = "host " + str(where.host[r]) + " is in island " + str(where.island[it->second]) +
                             " (rank " + str(it->second) + ") and in island " + str(where.island[r]) + " (rank " +
                             str(r) + "): a host lies in one island"};
  }

  if (!plan.ranks.empty()) return tableOf(plan.ranks, world);  // validatePlanShape made it a permutation
  return tableOf(how == Assignment::kNaive ? naiveFill(plan) : nicAwareFill(plan, where), world);
}

GroupSpans groupSpans(const RoleTable& table, const Placement& where) {
  GroupSpans spans;
  const Slots& k = table.ranks;
  if (k.empty()) return spans;
  auto hostsOf = [&](const std::vector<int>& ranks) {
    std::vector<int> ids;
    for (int r : ranks) ids.push_back(where.host[r]);
    return distinctCount(std::move(ids));
  };
  auto islandsOf = [&](const std::vector<int>& ranks) {
    std::vector<int> ids;
    for (int r : ranks) ids.push_back(where.island[r]);
    return distinctCount(std::move(ids));
  };
  for (const auto& replica : k) {
    for (size_t s = 0; s < replica.size(); ++s) {
      ++spans.tpGroups;
      spans.tpSpanningHosts += hostsOf(replica[s]) > 1;
      if (s + 1 < replica.size()) {
        std::vector<int> both = replica[s];
        both.insert(both.end(), replica[s + 1].begin(), replica[s + 1].end());
        ++spans.boundaries;
        spans.boundariesAcrossIslands += islandsOf(both) > 1;
      }
    }
  }
  for (size_t s = 0; s < k[0].size(); ++s) {
    for (size_t t = 0; t < k[0][s].size(); ++t) {
      std::vector<int> group;
      for (const auto& replica : k) group.push_back(replica[s][t]);
      ++spans.dpGroups;
      spans.dpSpanningIslands += islandsOf(group) > 1;
    }
  }
  return spans;
}

std::string formatRoleTable(const RoleTable& table, const Placement& where, const ParallelPlan& plan) {
  auto at = [](const std::vector<int>& v, size_t i) { return i < v.size() ? v[i] : -1; };
  std::string out = "rank  host  island  replica  stage  tp_rank  layers  micro_batches\n";
  char line[128];
  for (size_t r = 0; r < table.of.size(); ++r) {
    const Role& role = table.of[r];
    const int layers = role.stage < int(plan.stages.size()) ? plan.stages[role.stage].layers : -1;
    const int micro = at(plan.microBatches, role.replica);
    std::snprintf(line, sizeof line, "%4zu  %4d  %6d  %7d  %5d  %7d  %6d  %13s\n", r, at(where.host, r),
                  at(where.island, r), role.replica, role.stage, role.tpRank, layers,
                  micro < 0 ? "-" : std::to_string(micro).c_str());
    out += line;
  }
  const GroupSpans g = groupSpans(table, where);
  out += "tensor-parallel groups spanning hosts:   " + str(g.tpSpanningHosts) + " of " + str(g.tpGroups) +
         " (TP all-reduces run every layer: want 0)\n";
  out += "data-parallel groups spanning islands:   " + str(g.dpSpanningIslands) + " of " + str(g.dpGroups) +
         " (gradient all-reduces: want 0)\n";
  out += "pipeline boundaries crossing islands:    " + str(g.boundariesAcrossIslands) + " of " + str(g.boundaries) +
         " (activations only: the traffic the slow fabric should carry)\n";
  return out;
}

Shard shardOf(const ParallelPlan& plan, const Role& role) {
  int first = 0;
  for (int s = 0; s < role.stage; ++s) first += plan.stages[s].layers;
  return Shard{.firstLayer = first,
               .layers = plan.stages[role.stage].layers,
               .embedding = role.stage == 0,
               .head = role.stage + 1 == static_cast<int>(plan.stages.size()),
               .tp = plan.stages[role.stage].tp,
               .tpRank = role.tpRank};
}

}  // namespace hetcomm::trainer
