#include "planner/step_cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "trainer/memory.h"
#include "trainer/model.h"
#include "trainer/param_layout.h"

namespace hetcomm::planner {
namespace {

using trainer::Error;
using trainer::Result;

Error bad(const std::string& field, const std::string& detail) {
  return Error{.source = "planner inputs", .field = field, .detail = detail};
}

trainer::Shard stageShard(const trainer::ParallelPlan& plan, int stage, int tpRank) {
  return trainer::shardOf(plan, trainer::Role{.replica = 0, .stage = stage, .tpRank = tpRank});
}

// How much each group's collectives are slowed by the others sharing its hosts' links (predictStep): by the
// group's ranks as the step's costs ask about them.
using Sharing = std::map<std::vector<int>, double>;

// How long each group of the 1F1B part keeps its links busy in a step (TP groups by their ranks, transfers by
// their sending and receiving groups' ranks together).
using Usage = std::map<std::vector<int>, double>;

class Builder {
 public:
  Builder(const StepInputs& in, const CollectiveTime& time, const Sharing* sharing = nullptr, Usage* usage = nullptr)
      : in_(in), time_(time), sharing_(sharing), usage_(usage) {
    scaled_ = [this](hetcommCollective_t coll, size_t count, const std::vector<int>& ranks) -> Result<double> {
      auto t = time_(coll, count, ranks);
      if (!t || !sharing_) return t;
      auto it = sharing_->find(ranks);
      return it == sharing_->end() ? *t : *t * it->second;
    };
  }

  Result<StepCost> build() {
    const trainer::ParallelPlan& plan = in_.plan;
    const int R = plan.dp, S = static_cast<int>(plan.stages.size());
    if (static_cast<int>(in_.rankSpeed.size()) != plan.worldSize())
      return bad("rankSpeed", "has " + std::to_string(in_.rankSpeed.size()) + " speeds for " +
                                  std::to_string(plan.worldSize()) + " ranks");
    for (size_t r = 0; r < in_.rankSpeed.size(); ++r)
      if (!(in_.rankSpeed[r] > 0))
        return bad("rankSpeed[" + std::to_string(r) + "]", "must be positive, got " + std::to_string(in_.rankSpeed[r]));
    if (static_cast<int>(in_.roles.ranks.size()) != R || static_cast<int>(plan.microBatches.size()) != R)
      return bad("roles", "not of the plan's shape (" + std::to_string(R) + " replicas); validate and assign first");
    StepCost cost;
    cost.pipelineDepth = plan.pipelineDepth;
    for (int r = 0; r < R; ++r) {
      ReplicaCost rep;
      rep.microBatches = plan.microBatches[r];
      for (int s = 0; s < S; ++s) {
        auto st = stageCost(r, s);
        if (!st) return st.error();
        rep.stages.push_back(*st);
      }
      cost.replicas.push_back(std::move(rep));
    }
    const size_t tableFloats = size_t(model().vocabSize) * model().dModel;
    if (S >= 2) {  // the tied sum of the slowest replica's first and last stages
      for (int r = 0; r < R; ++r) {
        std::vector<int> tied = in_.roles.ranks[r][0];
        tied.insert(tied.end(), in_.roles.ranks[r][S - 1].begin(), in_.roles.ranks[r][S - 1].end());
        auto t = time(hetcommCollAllReduce, tableFloats, tied);
        if (!t) return t.error();
        cost.tiedSumS = std::max(cost.tiedSumS, *t);
      }
    }
    std::vector<int> world(plan.worldSize());
    for (int i = 0; i < plan.worldSize(); ++i) world[i] = i;
    auto sum = time(hetcommCollAllReduce, 4, world);  // the loss and the norm: two doubles
    if (!sum) return sum.error();
    cost.worldSumS = *sum;
    cost.buckets.resize(R > 1 ? S : 0);
    cost.optimizerS.resize(S);
    for (int s = 0; s < S; ++s)
      if (auto ok = stageReductions(s, cost); !ok) return ok.error();
    cost.tpCommS = tpComm_ / plan.worldSize();
    cost.pipelineCommS = pipelineComm_ / plan.worldSize();
    return cost;
  }

 private:
  const trainer::ModelConfig& model() const { return in_.config.model; }

  Result<double> time(hetcommCollective_t coll, size_t count, const std::vector<int>& ranks) const {
    if (ranks.size() < 2 && coll != hetcommCollSendRecv) return 0.0;
    return scaled_(coll, count, ranks);
  }

  Result<StageCost> stageCost(int r, int s) {
    const trainer::ParallelPlan& plan = in_.plan;
    const int S = static_cast<int>(plan.stages.size());
    const std::vector<int>& group = in_.roles.ranks[r][s];
    const int layers = plan.stages[s].layers;
    double speed = in_.rankSpeed[group[0]];
    for (int g : group) speed = std::min(speed, in_.rankSpeed[g]);
    auto timing = stageTiming(in_.config, group, speed, in_.profile, scaled_);
    if (!timing) return timing.error();
    const bool first = s == 0, last = s == S - 1;
    StageCost c;
    c.ranks = plan.stages[s].tp;
    c.forwardS = timing->forwardS(layers, first, last);
    c.backwardS = timing->backwardS(layers, first, last);
    if (s + 1 < S) {
      auto fwd = stageTransfer(in_.config, in_.roles.ranks[r][s], in_.roles.ranks[r][s + 1], scaled_);
      if (!fwd) return fwd.error();
      auto back = stageTransfer(in_.config, in_.roles.ranks[r][s + 1], in_.roles.ranks[r][s], scaled_);
      if (!back) return back.error();
      c.transferS = *fwd;
      c.gradientTransferS = *back;
      if (usage_) (*usage_)[boundary(r, s)] += (*fwd + *back) * plan.microBatches[r];
      // Both sides' ranks wait in each transfer.
      pipelineComm_ += (*fwd + *back) * plan.microBatches[r] * (plan.stages[s].tp + plan.stages[s + 1].tp);
    }
    if (usage_) (*usage_)[group] += timing->sumsS(layers, first, last) * plan.microBatches[r];
    tpComm_ += timing->sumsS(layers, first, last) * plan.microBatches[r] * plan.stages[s].tp;
    backwardShares_[{r, s}] = groupShares(s, c.backwardS, *timing);
    return c;
  }

  // Per group of the model (0 embeddings, 1 + layer, nLayer + 1 the head's), the share of the stage's backward
  // run when its gradients are final: the head first, then the blocks from the last, then the embedding.
  std::vector<double> groupShares(int s, double backwardS, const StageTiming& timing) const {
    const int groups = model().nLayer + 2;
    std::vector<double> at(groups, 1.0);
    const trainer::Shard sh = stageShard(in_.plan, s, 0);
    double t = 0;
    if (sh.head) {
      t += timing.lastBackwardS;
      at[model().nLayer + 1] = t;
    }
    for (int i = sh.layers - 1; i >= 0; --i) {
      t += timing.blockBackwardS;
      at[1 + sh.firstLayer + i] = t;
    }
    at[0] = backwardS;
    for (double& a : at) a = backwardS > 0 ? std::min(1.0, a / backwardS) : 1.0;
    return at;
  }

  // The stage's buckets over its DP groups (the slowest TP rank's), and its optimizer.
  Result<void> stageReductions(int s, StepCost& cost) {
    const trainer::ParallelPlan& plan = in_.plan;
    const int R = plan.dp, S = static_cast<int>(plan.stages.size()), tp = plan.stages[s].tp;
    const int tiedGroup = S >= 2 ? (s == 0 ? 0 : (s == S - 1 ? model().nLayer + 1 : -1)) : -1;
    double optimizer = 0;
    for (int t = 0; t < tp; ++t) {
      const trainer::ParamLayout layout(model(), stageShard(plan, s, t), in_.bucketBytes, R);
      std::vector<int> dp;
      for (int r = 0; r < R; ++r) dp.push_back(in_.roles.ranks[r][s][t]);
      std::vector<Bucket> buckets;
      double gather = 0;
      // Buckets are mostly of one size: each size asked once (reduce, gather).
      std::map<size_t, std::pair<double, double>> bySize;
      std::vector<double> shares;  // uneven ZeRO-1 shares of the DP group, in replica order
      if (in_.zero1 && !plan.zeroShares.empty())
        for (int r = 0; r < R; ++r) shares.push_back(zeroShare(in_, dp[r]));
      for (const trainer::Bucket& b : layout.buckets()) {
        auto known = bySize.find(b.length);
        if (known == bySize.end()) {
          auto cost = shares.empty() ? bucketCost(b.length, dp) : unevenBucketCost(b.length, dp, shares);
          if (!cost) return cost.error();
          known = bySize.emplace(b.length, *cost).first;
        }
        const double reduce = known->second.first;
        gather += known->second.second;
        // Replica 0's share: every replica's stage runs the same blocks (at its own devices' rate).
        const double share = backwardShares_.at({0, s})[b.firstGroup];
        buckets.push_back({share, reduce, tiedGroup >= b.firstGroup && tiedGroup <= b.lastGroup});
      }
      if (R > 1 && (cost.buckets[s].empty() || total(buckets) > total(cost.buckets[s]))) cost.buckets[s] = buckets;
      const double floats = double(in_.zero1 ? layout.totalFloats() / R : layout.totalFloats());
      // AdamW reads a parameter, its gradient and two moments and writes three: 28 bytes a float.
      optimizer = std::max(optimizer, floats * 28 / in_.optimizerBytesPerS + gather);
    }
    cost.optimizerS[s] = optimizer;
    return {};
  }

  // A bucket's reduction and (ZeRO-1) gather: an all-reduce, or a reduce-scatter and an all-gather.
  Result<std::pair<double, double>> bucketCost(size_t length, const std::vector<int>& dp) const {
    const int R = static_cast<int>(dp.size());
    auto reduce =
        time(in_.zero1 ? hetcommCollReduceScatter : hetcommCollAllReduce, in_.zero1 ? length / R : length, dp);
    if (!reduce) return reduce.error();
    if (!in_.zero1) return std::make_pair(*reduce, 0.0);
    auto gathered = time(hetcommCollAllGather, length / R, dp);
    if (!gathered) return gathered.error();
    return std::make_pair(*reduce, *gathered);
  }

  // Uneven ZeRO-1 shares (trainer/data_parallel.h): a reduce rooted at each rank of its slice, and a broadcast
  // of it from there; slices cut as the trainer cuts them. Each is asked about rooted at the group's first rank:
  // rooted elsewhere it is the same group in another order, which would cost the library a view (and a schedule
  // synthesis) per root.
  Result<std::pair<double, double>> unevenBucketCost(size_t length, const std::vector<int>& dp,
                                                     const std::vector<double>& shares) const {
    const int R = static_cast<int>(dp.size());
    double reduce = 0, gather = 0, cum = 0;
    size_t begin = 0;
    for (int r = 0; r < R; ++r) {
      cum += shares[r];
      const size_t end = r + 1 == R ? length : static_cast<size_t>(std::llround(cum * double(length)));
      if (end > begin) {
        auto red = time(hetcommCollReduce, end - begin, dp);
        if (!red) return red.error();
        auto bc = time(hetcommCollBroadcast, end - begin, dp);
        if (!bc) return bc.error();
        reduce += *red, gather += *bc;
      }
      begin = end;
    }
    return std::make_pair(reduce, gather);
  }

  static double total(const std::vector<Bucket>& b) {
    double t = 0;
    for (const Bucket& k : b) t += k.reduceS;
    return t;
  }

  // The ranks on both sides of replica r's boundary s -> s + 1.
  std::vector<int> boundary(int r, int s) const {
    std::vector<int> both = in_.roles.ranks[r][s];
    both.insert(both.end(), in_.roles.ranks[r][s + 1].begin(), in_.roles.ranks[r][s + 1].end());
    return both;
  }

  const StepInputs& in_;
  const CollectiveTime& time_;
  const Sharing* sharing_;
  Usage* usage_;
  CollectiveTime scaled_;
  std::map<std::pair<int, int>, std::vector<double>> backwardShares_;  // (replica, stage) -> per group
  double tpComm_ = 0, pipelineComm_ = 0;                               // summed over ranks
};

// The links a group's traffic takes: (host, whether the group spans islands) for each host of a group that
// spans hosts; none for a group inside one host.
std::set<std::pair<int, bool>> linksOf(const std::vector<int>& ranks, const trainer::Placement& where) {
  std::set<int> hosts, islands;
  for (int r : ranks) hosts.insert(where.host[r]), islands.insert(where.island[r]);
  std::set<std::pair<int, bool>> out;
  if (hosts.size() < 2) return out;
  for (int h : hosts) out.insert({h, islands.size() > 1});
  return out;
}

// The reduction phase's sharing: a stage's data-parallel groups (one per TP rank) reduce the same buckets at the
// same moments, so each gets 1 / (the most of them on any of its links). Other stages' groups reduce at other
// moments of the pipeline's drain, and are not counted.
void shareReductions(const StepInputs& in, Sharing& sharing) {
  const trainer::ParallelPlan& plan = in.plan;
  const int R = plan.dp, S = static_cast<int>(plan.stages.size());
  for (int s = 0; s < S && R > 1; ++s) {
    std::vector<std::vector<int>> groups;
    for (int t = 0; t < plan.stages[s].tp; ++t) {
      std::vector<int> dp;
      for (int r = 0; r < R; ++r) dp.push_back(in.roles.ranks[r][s][t]);
      groups.push_back(std::move(dp));
    }
    std::map<std::pair<int, bool>, int> users;
    for (const auto& g : groups)
      for (const auto& link : linksOf(g, in.where)) ++users[link];
    for (const auto& g : groups) {
      int most = 1;
      for (const auto& link : linksOf(g, in.where)) most = std::max(most, users[link]);
      if (most > 1) sharing[g] = most;
    }
  }
}

// The 1F1B part's sharing, from a simulation without it: each TP group or transfer is slowed by 1 + the sum over
// the others on any of its links of the share of the 1F1B part they keep them busy.
void sharePipeline(const StepInputs& in, const Usage& usage, double pipelineS, Sharing& sharing) {
  if (pipelineS <= 0) return;
  std::vector<const std::vector<int>*> ranks;
  std::vector<double> busy;                                 // share of the 1F1B part each keeps its links busy
  std::map<std::pair<int, bool>, std::vector<int>> onLink;  // link -> the users on it
  std::vector<std::set<std::pair<int, bool>>> links;
  for (const auto& [r, b] : usage) {
    const int i = static_cast<int>(ranks.size());
    ranks.push_back(&r);
    busy.push_back(std::min(1.0, b / pipelineS));
    links.push_back(linksOf(r, in.where));
    for (const auto& link : links.back()) onLink[link].push_back(i);
  }
  std::vector<int> seen(ranks.size(), -1);  // the last user i that counted j
  for (size_t i = 0; i < ranks.size(); ++i) {
    double slow = 1;
    for (const auto& link : links[i])
      for (int j : onLink[link])
        if (j != static_cast<int>(i) && seen[j] != static_cast<int>(i)) {
          seen[j] = static_cast<int>(i);
          slow += busy[j];
        }
    if (slow <= 1) continue;
    const std::vector<int>& r = *ranks[i];
    sharing[r] = slow;
    // A transfer's messages are asked about pair by pair: each pair of its two groups' ranks.
    for (size_t a = 0; a < r.size(); ++a)
      for (size_t b = 0; b < r.size(); ++b)
        if (a != b && !sharing.count({r[a], r[b]})) sharing[{r[a], r[b]}] = slow;
  }
}

}  // namespace

double zeroShare(const StepInputs& in, int rank) {
  const trainer::ParallelPlan& plan = in.plan;
  if (plan.zeroShares.empty()) return 1.0 / plan.dp;
  const trainer::Role& role = in.roles.of[rank];
  double total = 0;
  for (int d = 0; d < plan.dp; ++d) total += plan.zeroShares[in.roles.ranks[d][role.stage][role.tpRank]];
  return plan.zeroShares[rank] / total;
}

Result<StageTiming> stageTiming(const trainer::TrainConfig& config, const std::vector<int>& group, double speed,
                                const ComputeProfile& profile, const CollectiveTime& time) {
  const trainer::ModelConfig& m = config.model;
  const int tp = static_cast<int>(group.size());
  const double tokens = double(config.microBatch) * m.seqLen;
  const PartTimes part = profile.at(m, config.microBatch, tp);
  auto sum = [&](size_t count) -> Result<double> {
    if (tp < 2) return 0.0;
    return time(hetcommCollAllReduce, count, group);
  };
  auto stream = sum(size_t(tokens) * m.dModel);
  if (!stream) return stream.error();
  StageTiming t;
  t.streamSumS = *stream;
  const double share = 1.0 / speed;
  // Two sums a block each way (the attention's and the MLP's outputs; their inputs' gradients).
  t.blockForwardS = part.blockForwardS * share + 2 * *stream;
  t.blockBackwardS = part.blockBackwardS * share + 2 * *stream;
  t.firstForwardS = *stream;  // the vocabulary-parallel embedding's sum
  t.firstBackwardS = 0;
  t.lastForwardS = part.headForwardS * share;
  if (tp > 1) {  // the vocabulary-parallel softmax: a max over tokens, then two sums per token
    auto mx = sum(size_t(tokens)), two = sum(2 * size_t(tokens));
    if (!mx) return mx.error();
    if (!two) return two.error();
    t.lastForwardS += *mx + *two;
    t.headSumsS = *mx + *two;
  }
  t.lastBackwardS = part.headBackwardS * share + *stream;
  return t;
}

Result<double> stageTransfer(const trainer::TrainConfig& config, const std::vector<int>& from,
                             const std::vector<int>& to, const CollectiveTime& time) {
  const size_t stream = size_t(config.microBatch) * config.model.seqLen * config.model.dModel,
               slice = stream / to.size();
  double slowest = 0;
  for (size_t j = 0; j < to.size(); ++j) {
    auto t = time(hetcommCollSendRecv, slice, {from[j % from.size()], to[j]});
    if (!t) return t.error();
    slowest = std::max(slowest, *t);
  }
  if (to.size() < 2) return slowest;
  auto gather = time(hetcommCollAllGather, slice, to);
  if (!gather) return gather.error();
  return slowest + *gather;
}

CollectiveTime predictedBy(hetcommComm_t world) {
  return [world](hetcommCollective_t coll, size_t count, const std::vector<int>& ranks) -> Result<double> {
    double us = 0;
    if (hetcommResult_t rc = hetcommCommPredict(world, coll, count, hetcommFloat32, ranks.data(),
                                                static_cast<int>(ranks.size()), nullptr, 0, &us);
        rc != hetcommSuccess)
      return Error{.source = "planner", .field = "hetcommCommPredict", .detail = hetcommGetLastError(world)};
    return us * 1e-6;
  };
}

Result<StepCost> stepCost(const StepInputs& in, const CollectiveTime& time) { return Builder(in, time).build(); }

Result<StepPrediction> predictStep(const StepInputs& in, const CollectiveTime& time) {
  if (in.where.host.empty()) {
    auto cost = stepCost(in, time);
    if (!cost) return cost.error();
    return simulateStep(*cost);
  }
  if (static_cast<int>(in.where.host.size()) != in.plan.worldSize() || in.where.island.size() != in.where.host.size())
    return bad("where", "has " + std::to_string(in.where.host.size()) + " hosts and " +
                            std::to_string(in.where.island.size()) + " islands for " +
                            std::to_string(in.plan.worldSize()) + " ranks");
  Usage usage;
  auto alone = Builder(in, time, nullptr, &usage).build();
  if (!alone) return alone.error();
  auto first = simulateStep(*alone);
  if (!first) return first.error();
  Sharing sharing;
  shareReductions(in, sharing);
  sharePipeline(in, usage, first->pipelineS, sharing);
  auto shared = Builder(in, time, &sharing).build();
  if (!shared) return shared.error();
  return simulateStep(*shared);
}

std::vector<trainer::MemoryNeed> rankMemory(const StepInputs& in) {
  const trainer::ParallelPlan& plan = in.plan;
  const int S = static_cast<int>(plan.stages.size());
  std::vector<trainer::MemoryNeed> need(plan.worldSize());
  // Every replica's rank of a (stage, TP rank) holds the same; only its micro-batches and its share of the
  // optimizer state differ.
  std::map<std::tuple<int, int, int, double>, trainer::MemoryNeed> known;
  for (int g = 0; g < plan.worldSize() && g < static_cast<int>(in.roles.of.size()); ++g) {
    const trainer::Role& role = in.roles.of[g];
    const int micro = plan.microBatches[role.replica];
    const double share = in.zero1 ? zeroShare(in, g) : 1.0;
    const auto key = std::make_tuple(role.stage, role.tpRank, micro, share);
    if (auto it = known.find(key); it != known.end()) {
      need[g] = it->second;
      continue;
    }
    const trainer::Shard shard = trainer::shardOf(plan, role);
    const trainer::ParamLayout layout(in.config.model, shard, in.bucketBytes, plan.dp);
    const size_t owned = static_cast<size_t>(std::llround(double(layout.totalFloats()) * share));
    need[g] = known[key] =
        trainer::memoryNeed(in.config, shard, layout, owned, {role.stage, S, micro, plan.pipelineDepth});
  }
  return need;
}

}  // namespace hetcomm::planner
