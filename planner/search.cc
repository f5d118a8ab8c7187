#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "trainer/param_layout.h"

namespace hetcomm::planner {
namespace {

using trainer::Error;
using trainer::Result;

constexpr double kInf = std::numeric_limits<double>::infinity();
// The deepest pipeline the refinement tries: depth 2 already hides transfers up to a whole stage's compute.
constexpr int kMaxDepth = 4;

Error bad(const std::string& field, const std::string& detail) {
  return Error{.source = "planner", .field = field, .detail = detail};
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// The library's predictions, each asked once: the search asks about the same groups again and again. Groups on
// the same hosts in the same order are taken to cost the same (the ranks of a host share its NICs and memory),
// so the TP ranks of a stage, whose data-parallel groups lie on the same hosts, ask once between them.
class CachedTime {
 public:
  CachedTime(const CollectiveTime& time, const std::vector<int>& hostOf) : time_(time), hostOf_(hostOf) {}
  CollectiveTime fn() {
    return [this](hetcommCollective_t coll, size_t count, const std::vector<int>& ranks) -> Result<double> {
      std::vector<int> hosts(ranks.size());
      for (size_t i = 0; i < ranks.size(); ++i) hosts[i] = hostOf_[ranks[i]];
      auto key = std::make_tuple(static_cast<int>(coll), count, std::move(hosts));
      if (auto it = seen_.find(key); it != seen_.end()) return it->second;
      auto t = time_(coll, count, ranks);
      if (t) seen_.emplace(std::move(key), *t);
      return t;
    };
  }

 private:
  const CollectiveTime& time_;
  const std::vector<int>& hostOf_;
  std::map<std::tuple<int, size_t, std::vector<int>>, double> seen_;
};

// A tensor-parallel group: ranks of one host, fastest devices first.
struct Group {
  std::vector<int> ranks;
  int host = 0, islandOrder = 0;
  double rate = 0;       // its slowest device's speed
  double memory = kInf;  // its smallest memory limit
};

// How a plan keeps the optimizer state: whole on every rank, ZeRO-1 in even shares, or ZeRO-1 in shares sized to
// each rank's free memory (Cephalo).
enum class Zero { kOff, kEven, kByMemory };

// A way to lay groups out: replica r, stage s -> a group, with its estimate.
struct Structure {
  std::string layout;
  int R = 1, S = 1, microBatch = 1;
  std::vector<std::vector<int>> at;  // [replica][stage] -> index into groups
  std::vector<int> layers, micro;
  Zero zero = Zero::kOff;   // how the optimizer state is kept (the estimate's choice; the simulation may try more)
  int depth = 1;            // the pipeline depth (the estimate's is 1; refining may deepen it)
  bool reversed = false;    // stages in the other order (refining may turn them round): the slowest groups first
  double pipelineS = kInf;  // the estimate's 1F1B part: a lower bound of estimateS
  std::vector<double> lastBackwardS;  // per stage, replica 0's
  double estimateS = kInf;
  size_t groupsOf = 0;  // which policy's group list (index into the search's lists)
};

struct Candidate {
  Structure st;
  PlanCandidate plan;
  // Shares by memory: the rank even shares would overfill the most, its need and need / limit.
  int evenRank = -1;
  double evenNeed = 0, evenShare = 1;
};

class Search {
 public:
  Search(const trainer::TrainConfig& config, const ClusterInfo& cluster, const ComputeProfile& profile,
         const CollectiveTime& time, const SearchOptions& options)
      : config_(config),
        cluster_(cluster),
        profile_(profile),
        cached_(time, cluster.host),
        time_(cached_.fn()),
        options_(options) {}

  Result<SearchReport> run() {
    if (auto ok = checkInputs(); !ok) return ok.error();
    tpDegrees_ = validTpDegrees();
    buildHosts();
    auto sizes = microBatchSizes();
    if (!sizes) return sizes.error();
    // Structures of every TP policy and layout, costed by the estimate.
    std::vector<Structure> all;
    for (const std::vector<int>& policy : tpPolicies()) {
      if (options_.maxTp > 0 && *std::max_element(policy.begin(), policy.end()) > options_.maxTp) continue;
      groupLists_.push_back(cutGroups(policy));
      const size_t list = groupLists_.size() - 1;
      const int G = static_cast<int>(groupLists_[list].size());
      for (const char* layout : {"striped", "blocked"})
        for (int R = 1; R <= G; ++R) {
          if (G % R) continue;
          const int S = G / R;
          if (S > model().nLayer || (options_.maxPp > 0 && S > options_.maxPp)) continue;
          if (std::string(layout) == "blocked" && (S == 1 || R == 1)) continue;  // the same as striped
          Structure st;
          st.layout = layout;
          st.R = R, st.S = S, st.groupsOf = list;
          if (!place(st)) continue;
          for (int mb : *sizes) {
            if (config_.globalBatch / mb < R) continue;
            st.microBatch = mb;
            ++report_.structures;
            auto e = estimate(st);
            if (!e) return e.error();
            if (*e) all.push_back(**e);
          }
        }
    }
    // The reductions only where they can still matter: in order of the 1F1B part (which the whole estimate is at
    // least), until that part alone is slower than the `simulate` best whole estimates so far.
    std::stable_sort(all.begin(), all.end(),
                     [](const Structure& a, const Structure& b) { return a.pipelineS < b.pipelineS; });
    std::priority_queue<double> kept;  // the best `simulate` whole estimates (the worst of them on top)
    size_t costed = 0;
    for (; costed < all.size(); ++costed) {
      if (static_cast<int>(kept.size()) >= options_.simulate && all[costed].pipelineS >= kept.top()) break;
      if (auto ok = addReductions(all[costed]); !ok) return ok.error();
      kept.push(all[costed].estimateS);
      if (static_cast<int>(kept.size()) > options_.simulate) kept.pop();
    }
    all.resize(costed);
    std::stable_sort(all.begin(), all.end(),
                     [](const Structure& a, const Structure& b) { return a.estimateS < b.estimateS; });
    // The best estimates in full, then the best of those refined.
    std::vector<Candidate> done;
    for (size_t i = 0; i < all.size() && static_cast<int>(i) < options_.simulate; ++i)
      for (Zero zero : zeroChoices(all[i])) {
        Structure st = all[i];
        st.zero = zero;
        auto c = simulate(st);
        if (!c) return c.error();
        if (*c) done.push_back(std::move(**c));
      }
    if (done.empty()) return noPlanFits();
    sortByStep(done);
    const size_t refine = std::min<size_t>(done.size(), 3);
    for (size_t i = 0; i < refine; ++i) {
      auto better = improve(done[i]);
      if (!better) return better.error();
      done.push_back(std::move(*better));
    }
    sortByStep(done);
    // Distinct plans only (a refinement may land on a plan already found).
    std::vector<std::string> seen;
    for (Candidate& c : done) {
      const std::string key = trainer::toJson(c.plan.plan).dump() + std::to_string(c.plan.microBatch);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      report_.best.push_back(std::move(c.plan));
      if (static_cast<int>(report_.best.size()) >= options_.top) break;
    }
    auto bound = hetHubBound(*sizes);
    if (!bound) return bound.error();
    report_.boundTokensPerS = *bound;
    return report_;
  }

 private:
  const trainer::ModelConfig& model() const { return config_.model; }
  double tokensPerStep() const { return double(config_.globalBatch) * model().seqLen; }
  bool limited() const { return !cluster_.memoryBytes.empty(); }
  double limitOf(int rank) const {
    if (!limited() || cluster_.memoryBytes[rank] <= 0) return kInf;
    return cluster_.memoryBytes[rank];
  }

  Result<void> checkInputs() const {
    const int n = cluster_.nranks();
    if (n < 1) return bad("cluster", "has no ranks");
    if (static_cast<int>(cluster_.island.size()) != n || static_cast<int>(cluster_.speed.size()) != n)
      return bad("cluster", "host, island and speed need one entry per rank (" + std::to_string(n) + " hosts, " +
                                std::to_string(cluster_.island.size()) + " islands, " +
                                std::to_string(cluster_.speed.size()) + " speeds)");
    if (limited() && static_cast<int>(cluster_.memoryBytes.size()) != n)
      return bad("cluster.memoryBytes",
                 "has " + std::to_string(cluster_.memoryBytes.size()) + " entries for " + std::to_string(n) + " ranks");
    for (int r = 0; r < n; ++r)
      if (!(cluster_.speed[r] > 0) || !std::isfinite(cluster_.speed[r]))
        return bad("cluster.speed[" + std::to_string(r) + "]",
                   "must be a positive speed, got " + num(cluster_.speed[r]));
    if (options_.top < 1) return bad("top", "must be >= 1, got " + std::to_string(options_.top));
    return {};
  }

  // TP degrees the model splits by: heads, channels and the vocabulary.
  std::vector<int> validTpDegrees() const {
    std::vector<int> out;
    for (int t = 1; t <= model().nHead; ++t)
      if (model().nHead % t == 0 && model().dModel % t == 0 && model().vocabSize % t == 0) out.push_back(t);
    return out;
  }

  Result<std::vector<int>> microBatchSizes() const {
    std::vector<int> sizes = options_.microBatchSizes;
    if (sizes.empty()) {
      for (int mb : {config_.microBatch / 2, config_.microBatch, config_.microBatch * 2})
        if (mb >= 1 && config_.globalBatch % mb == 0) sizes.push_back(mb);
      if (sizes.empty()) sizes.push_back(1);
    }
    for (int mb : sizes)
      if (mb < 1 || config_.globalBatch % mb)
        return bad("microBatchSizes", "micro-batch size " + std::to_string(mb) + " does not divide global_batch " +
                                          std::to_string(config_.globalBatch));
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    return sizes;
  }

  // Hosts with their ranks (fastest device first), islands ordered by their fastest device.
  void buildHosts() {
    std::map<int, std::vector<int>> byHost;
    for (int r = 0; r < cluster_.nranks(); ++r) byHost[cluster_.host[r]].push_back(r);
    std::map<int, double> islandBest;
    for (int r = 0; r < cluster_.nranks(); ++r)
      islandBest[cluster_.island[r]] = std::max(islandBest[cluster_.island[r]], cluster_.speed[r]);
    std::vector<std::pair<double, int>> islands;
    for (auto [id, best] : islandBest) islands.push_back({-best, id});
    std::sort(islands.begin(), islands.end());
    std::map<int, int> order;
    for (size_t i = 0; i < islands.size(); ++i) order[islands[i].second] = static_cast<int>(i);
    for (auto& [host, ranks] : byHost) {
      std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) { return cluster_.speed[a] > cluster_.speed[b]; });
      hosts_.push_back({host, order[cluster_.island[ranks[0]]], ranks});
    }
  }

  // TP degree per host: for each valid degree t, the largest valid degree up to t that divides the host's ranks;
  // with two kinds of host (device rates), every pair of degrees for the two kinds too (FlashFlex: per-stage TP).
  std::vector<std::vector<int>> tpPolicies() const {
    auto fit = [&](int t, int ranks) {
      int best = 1;
      for (int d : tpDegrees_)
        if (d <= t && ranks % d == 0) best = d;
      return best;
    };
    std::set<double> kinds;
    for (const HostRanks& h : hosts_) kinds.insert(hostRate(h));
    std::set<std::vector<int>> policies;
    for (int t : tpDegrees_) {
      std::vector<int> p;
      for (const HostRanks& h : hosts_) p.push_back(fit(t, static_cast<int>(h.ranks.size())));
      policies.insert(p);
    }
    if (kinds.size() == 2)
      for (int fast : tpDegrees_)
        for (int slow : tpDegrees_) {
          std::vector<int> p;
          for (const HostRanks& h : hosts_)
            p.push_back(fit(hostRate(h) == *kinds.rbegin() ? fast : slow, static_cast<int>(h.ranks.size())));
          policies.insert(p);
        }
    return {policies.begin(), policies.end()};
  }

  struct HostRanks {
    int host = 0, islandOrder = 0;
    std::vector<int> ranks;
  };
  double hostRate(const HostRanks& h) const {
    double rate = kInf;
    for (int r : h.ranks) rate = std::min(rate, cluster_.speed[r]);
    return rate;
  }

  // Each host's ranks cut into groups of its degree, in the layouts' order: island, device rate (fastest
  // first), host.
  std::vector<Group> cutGroups(const std::vector<int>& policy) const {
    std::vector<Group> groups;
    for (size_t h = 0; h < hosts_.size(); ++h) {
      const int t = policy[h];
      for (size_t i = 0; i + t <= hosts_[h].ranks.size(); i += t) {
        Group g;
        g.ranks.assign(hosts_[h].ranks.begin() + i, hosts_[h].ranks.begin() + i + t);
        g.host = hosts_[h].host, g.islandOrder = hosts_[h].islandOrder;
        g.rate = kInf;
        for (int r : g.ranks) g.rate = std::min(g.rate, cluster_.speed[r]), g.memory = std::min(g.memory, limitOf(r));
        groups.push_back(std::move(g));
      }
    }
    std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
      return std::make_tuple(a.islandOrder, -a.rate, a.host) < std::make_tuple(b.islandOrder, -b.rate, b.host);
    });
    return groups;
  }

  // Replica r, stage s -> group: striped (stage s = groups sR .. sR + R - 1) or blocked (replica r = groups
  // rS .. rS + S - 1). False when a stage's groups would differ in TP degree (a plan has one per stage).
  bool place(Structure& st) const {
    const std::vector<Group>& groups = groupLists_[st.groupsOf];
    st.at.assign(st.R, std::vector<int>(st.S));
    for (int r = 0; r < st.R; ++r)
      for (int s = 0; s < st.S; ++s) st.at[r][s] = st.layout == "striped" ? s * st.R + r : r * st.S + s;
    for (int s = 0; s < st.S; ++s)
      for (int r = 1; r < st.R; ++r)
        if (groups[st.at[r][s]].ranks.size() != groups[st.at[0][s]].ranks.size()) return false;
    return true;
  }

  trainer::TrainConfig configFor(int microBatch) const {
    trainer::TrainConfig c = config_;
    c.microBatch = microBatch;
    return c;
  }

  Result<StageTiming> timing(const Group& g, int microBatch) {
    auto key = std::make_pair(g.ranks, microBatch);
    if (auto it = timings_.find(key); it != timings_.end()) return it->second;
    auto t = stageTiming(configFor(microBatch), g.ranks, g.rate, profile_, time_);
    if (t) timings_.emplace(std::move(key), *t);
    return t;
  }

  // Bytes one rank of stage s holds with k blocks, as two lines base + k * perBlock (exact at 1 and 2 blocks,
  // linear beyond: each block adds the same parameters and activations): everything but the optimizer state
  // (parameters, gradients, activations, buffers), and the optimizer state of the whole stage (one rank's under
  // plain data parallelism; ZeRO-1 divides it among the DP group). microBatches: the replica's per step (its
  // slots and boundary buffers; the estimate assumes an even split, the full simulation checks the real one).
  struct Line {
    double base = 0, perBlock = 0;
    double at(double k) const { return base + k * perBlock; }
  };
  std::pair<Line, Line> memoryLines(const Structure& st, int s, int microBatches) const {
    const int tp = static_cast<int>(groupLists_[st.groupsOf][st.at[0][s]].ranks.size());
    // A plan whose blocks sum to the model's (a layout's last stage holds every block after its first): stage s
    // with k, another stage with the rest.
    auto need = [&](int k) {
      trainer::ParallelPlan p;
      p.dp = st.R;
      for (int i = 0; i < st.S; ++i) p.stages.push_back({i == s ? k : 0, tp});
      if (st.S > 1) p.stages[s == st.S - 1 ? 0 : st.S - 1].layers = model().nLayer - k;
      const trainer::Shard shard = trainer::shardOf(p, {0, s, 0});
      const trainer::ParamLayout layout(model(), shard, options_.bucketBytes, st.R);
      const trainer::MemoryNeed n = trainer::memoryNeed(configFor(st.microBatch), shard, layout, layout.totalFloats(),
                                                        {s, st.S, microBatches, st.depth});
      return std::make_pair(n.total() - n.optimizer, n.optimizer);
    };
    if (st.S == 1) {  // the only stage holds every block
      const auto [rest, optimizer] = need(model().nLayer);
      return {{rest, 0}, {optimizer, 0}};
    }
    const auto [rest1, opt1] = need(1);
    const auto [rest2, opt2] = need(2);
    return {{2 * rest1 - rest2, rest2 - rest1}, {2 * opt1 - opt2, opt2 - opt1}};
  }

  // The estimate: layers by the min-max programme within memory, micro-batches greedily, each replica's 1F1B,
  // the unhidden tail of the slowest stage's reduction, the optimizer. Empty when no layer split fits memory.
  Result<std::optional<Structure>> estimate(Structure st) {
    const std::vector<Group>& groups = groupLists_[st.groupsOf];
    const int R = st.R, S = st.S, L = model().nLayer;
    const int total = config_.globalBatch / st.microBatch;
    std::vector<std::vector<StageTiming>> t(R, std::vector<StageTiming>(S));
    for (int r = 0; r < R; ++r)
      for (int s = 0; s < S; ++s) {
        auto tm = timing(groups[st.at[r][s]], st.microBatch);
        if (!tm) return tm.error();
        t[r][s] = *tm;
      }
    // Per stage: time per block and extras (slowest replica), the most blocks memory allows.
    std::vector<double> perBlock(S, 0), extra(S, 0);
    std::vector<int> maxBlocks(S, L), minBlocks(S, 1);
    // The blocks each stage may hold within its ranks' memory, under one way of keeping the optimizer state:
    // whole on every rank, ZeRO-1 in even shares, or ZeRO-1 in shares sized to each rank's room (Cephalo).
    auto fits = [&](Zero mode) {
      int capacity = 0;
      for (int s = 0; s < S; ++s) {
        double limit = kInf, sum = 0;
        int tightest = groups[st.at[0][s]].ranks[0];
        for (int r = 0; r < R; ++r) {
          if (groups[st.at[r][s]].memory < limit)
            limit = groups[st.at[r][s]].memory, tightest = groups[st.at[r][s]].ranks[0];
          sum += groups[st.at[r][s]].memory;
        }
        minBlocks[s] = (S >= 2 && (s == 0 || s == S - 1)) ? 0 : 1;
        maxBlocks[s] = L;
        if (limit < kInf) {
          const auto [rest, opt] = memoryLines(st, s, (total + R - 1) / R);
          // The most blocks k with a + k * b <= room, for each condition the mode sets.
          auto most = [&](double a, double b, double room) {
            return b > 0 ? std::floor((room - a) / b) : (a <= room ? double(L) : -1.0);
          };
          double k = 0;
          switch (mode) {
            case Zero::kOff:
              k = most(rest.base + opt.base, rest.perBlock + opt.perBlock, limit);
              break;
            case Zero::kEven:
              k = most(rest.base + opt.base / R, rest.perBlock + opt.perBlock / R, limit);
              break;
            case Zero::kByMemory:  // every rank holds the rest; together they hold the optimizer state once
              k = std::min(most(rest.base, rest.perBlock, limit),
                           most(R * rest.base + opt.base, R * rest.perBlock + opt.perBlock, sum));
              break;
          }
          maxBlocks[s] = static_cast<int>(std::clamp(k, -1.0, double(L)));
          if (maxBlocks[s] < minBlocks[s]) {
            const double ownShare = mode == Zero::kOff ? 1.0 : 1.0 / R;
            noteExcess(tightest, rest.at(minBlocks[s]) + ownShare * opt.at(minBlocks[s]), limit);
          }
        }
        if (maxBlocks[s] < minBlocks[s]) return false;
        capacity += maxBlocks[s];
      }
      return capacity >= L;
    };
    std::vector<Zero> modes;
    if (options_.zero != 1 || R == 1) modes.push_back(Zero::kOff);
    if (options_.zero != 0 && R > 1) modes.push_back(Zero::kEven);
    if (options_.zero != 0 && R > 1 && limited()) modes.push_back(Zero::kByMemory);
    bool fitted = false;
    for (Zero mode : modes)
      if (fits(mode)) {
        fitted = true;
        st.zero = mode;
        break;
      }
    if (!fitted) {
      ++report_.memoryRefused;
      return std::optional<Structure>{};
    }
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < R; ++r) {
        perBlock[s] = std::max(perBlock[s], t[r][s].blockForwardS + t[r][s].blockBackwardS);
        extra[s] =
            std::max(extra[s], t[r][s].forwardS(0, s == 0, s == S - 1) + t[r][s].backwardS(0, s == 0, s == S - 1));
      }
    st.layers = splitLayers(perBlock, extra, minBlocks, maxBlocks);
    if (st.layers.empty()) {
      ++report_.memoryRefused;
      return std::optional<Structure>{};
    }
    // Each replica: its stages' times, its pipeline's transfers; micro-batches to whichever finishes soonest.
    std::vector<double> slowest(R, 0), sum(R, 0);
    for (int r = 0; r < R; ++r) {
      for (int s = 0; s < S; ++s) {
        const double c =
            t[r][s].forwardS(st.layers[s], s == 0, s == S - 1) + t[r][s].backwardS(st.layers[s], s == 0, s == S - 1);
        slowest[r] = std::max(slowest[r], c);
        sum[r] += c;
        if (s + 1 < S) {
          auto there =
              stageTransfer(configFor(st.microBatch), groups[st.at[r][s]].ranks, groups[st.at[r][s + 1]].ranks, time_);
          if (!there) return there.error();
          sum[r] += 2 * *there;
        }
      }
    }
    st.micro = splitMicroBatches(slowest, sum, total);
    st.pipelineS = 0;
    for (int r = 0; r < R; ++r) st.pipelineS = std::max(st.pipelineS, (st.micro[r] - 1) * slowest[r] + sum[r]);
    st.lastBackwardS.resize(S);
    for (int s = 0; s < S; ++s) st.lastBackwardS[s] = t[0][s].backwardS(st.layers[s], s == 0, s == S - 1);
    return std::optional<Structure>{st};
  }

  // The rest of the estimate: the data-parallel reduction of each stage's gradients (replica 0's TP rank 0
  // group), less the last backward it overlaps, and the optimizer of the largest stage.
  Result<void> addReductions(Structure& st) {
    const std::vector<Group>& groups = groupLists_[st.groupsOf];
    const int R = st.R, S = st.S;
    double tail = 0, optimizer = 0;
    for (int s = 0; s < S; ++s) {
      trainer::ParallelPlan p;
      p.dp = R;
      for (int i = 0; i < S; ++i)
        p.stages.push_back({st.layers[i], static_cast<int>(groups[st.at[0][i]].ranks.size())});
      const trainer::ParamLayout layout(model(), trainer::shardOf(p, {0, s, 0}), options_.bucketBytes, R);
      const double floats = double(layout.totalFloats());
      optimizer = std::max(optimizer, (st.zero != Zero::kOff ? floats / R : floats) * 28 / options_.optimizerBytesPerS);
      if (R < 2) continue;
      std::vector<int> dp;
      for (int r = 0; r < R; ++r) dp.push_back(groups[st.at[r][s]].ranks[0]);
      auto reduce = time_(hetcommCollAllReduce, layout.totalFloats(), dp);
      if (!reduce) return reduce.error();
      tail = std::max(tail, *reduce - st.lastBackwardS[s]);
    }
    st.estimateS = st.pipelineS + std::max(0.0, tail) + optimizer;
    return {};
  }

  // Blocks per stage minimising the slowest stage (extra[s] + k * perBlock[s]) with minBlocks <= k <= maxBlocks:
  // best[s][l] = the least slowest-stage time of stages 0..s holding l blocks. Empty when none fits.
  std::vector<int> splitLayers(const std::vector<double>& perBlock, const std::vector<double>& extra,
                               const std::vector<int>& minBlocks, const std::vector<int>& maxBlocks) const {
    const int S = static_cast<int>(perBlock.size()), L = model().nLayer;
    std::vector<std::vector<double>> best(S, std::vector<double>(L + 1, kInf));
    std::vector<std::vector<int>> take(S, std::vector<int>(L + 1, -1));
    for (int s = 0; s < S; ++s)
      for (int l = 0; l <= L; ++l)
        for (int k = std::max(0, minBlocks[s]); k <= std::min(l, maxBlocks[s]); ++k) {
          const double before = s == 0 ? (l == k ? 0 : kInf) : best[s - 1][l - k];
          if (before == kInf) continue;
          const double worst = std::max(before, extra[s] + k * perBlock[s]);
          if (worst < best[s][l] - 1e-15) best[s][l] = worst, take[s][l] = k;
        }
    if (best[S - 1][L] == kInf) return {};
    std::vector<int> layers(S);
    for (int s = S - 1, l = L; s >= 0; --s) {
      layers[s] = take[s][l];
      l -= layers[s];
    }
    return layers;
  }

  // total micro-batches over the replicas, one at least each, every next one to the replica it finishes soonest
  // on: replica r with m takes (m - 1) * slowest[r] + sum[r].
  static std::vector<int> splitMicroBatches(const std::vector<double>& slowest, const std::vector<double>& sum,
                                            int total) {
    const int R = static_cast<int>(slowest.size());
    std::vector<int> m(R, 1);
    using Next = std::pair<double, int>;  // (time with one more, replica)
    std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
    for (int r = 0; r < R; ++r) next.push({slowest[r] + sum[r], r});
    for (int left = total - R; left > 0; --left) {
      const int r = next.top().second;
      next.pop();
      ++m[r];
      next.push({m[r] * slowest[r] + sum[r], r});
    }
    return m;
  }

  // The ways to keep the optimizer state worth simulating: the estimate's, and ZeRO-1 too where plain data
  // parallelism fits (it may be faster: each rank updates 1/R of the state).
  std::vector<Zero> zeroChoices(const Structure& st) const {
    if (st.zero == Zero::kOff && options_.zero == -1 && st.R > 1) return {Zero::kOff, Zero::kEven};
    return {st.zero};
  }

  // The structure as a plan, simulated; empty when a rank's memory cannot hold it.
  Result<std::optional<Candidate>> simulate(const Structure& st) {
    const std::vector<Group>& groups = groupLists_[st.groupsOf];
    trainer::TrainConfig cfg = configFor(st.microBatch);
    trainer::ParallelPlan plan;
    plan.dp = st.R;
    plan.microBatches = st.micro;
    plan.microBatch = st.microBatch;
    plan.zero = st.zero == Zero::kOff ? 0 : 1;
    plan.pipelineDepth = st.depth;
    for (int s = 0; s < st.S; ++s)
      plan.stages.push_back({st.layers[s], static_cast<int>(groups[st.at[0][s]].ranks.size())});
    plan.ranks.assign(st.R, std::vector<std::vector<int>>(st.S));
    for (int r = 0; r < st.R; ++r)
      for (int s = 0; s < st.S; ++s) plan.ranks[r][s] = groups[st.at[r][s]].ranks;
    if (auto ok = trainer::validatePlan(plan, cfg, cluster_.nranks(), "searched plan"); !ok) return ok.error();
    trainer::Placement where{cluster_.host, cluster_.island};
    auto roles = trainer::assignRoles(plan, where, trainer::Assignment::kNicAware);
    if (!roles) return roles.error();
    StepInputs in{cfg,
                  plan,
                  *roles,
                  cluster_.speed,
                  profile_,
                  options_.bucketBytes,
                  st.zero != Zero::kOff,
                  options_.optimizerBytesPerS};
    ++report_.simulated;
    Candidate c{st, {}};
    c.plan.memory = rankMemory(in);
    if (st.zero == Zero::kByMemory) {
      // Where even shares would not fit, say so; then each rank's share of its group's optimizer state in
      // proportion to the room the rest leaves it.
      for (int r = 0; r < cluster_.nranks(); ++r)
        if (c.plan.memory[r].total() > limitOf(r) && c.plan.memory[r].total() / limitOf(r) > c.evenShare)
          c.evenShare = c.plan.memory[r].total() / limitOf(r), c.evenRank = r, c.evenNeed = c.plan.memory[r].total();
      double plenty = 0;
      for (const trainer::MemoryNeed& m : c.plan.memory) plenty = std::max(plenty, m.optimizer * plan.dp);
      in.plan.zeroShares.resize(cluster_.nranks());
      for (int r = 0; r < cluster_.nranks(); ++r) {
        const double rest = c.plan.memory[r].total() - c.plan.memory[r].optimizer;
        in.plan.zeroShares[r] = std::max(1e-6 * plenty, std::min(plenty, limitOf(r) - rest));
      }
      plan.zeroShares = in.plan.zeroShares;
      c.plan.memory = rankMemory(in);
    }
    for (int r = 0; r < cluster_.nranks(); ++r) {
      const double limit = limitOf(r);
      if (limit == kInf) continue;
      c.plan.peakMemoryShare = std::max(c.plan.peakMemoryShare, c.plan.memory[r].total() / limit);
      if (c.plan.memory[r].total() > limit) {
        ++report_.memoryRefused;
        noteExcess(r, c.plan.memory[r].total(), limit);
        return std::optional<Candidate>{};
      }
    }
    in.where = where;
    auto prediction = predictStep(in, time_);
    if (!prediction) return prediction.error();
    c.plan.plan = std::move(plan);
    c.plan.microBatch = st.microBatch;
    c.plan.zero1 = st.zero != Zero::kOff;
    if (c.evenRank >= 0)
      c.plan.memoryNote = "even ZeRO-1 shards would need " + trainer::bytesText(c.evenNeed) + " on rank " +
                          std::to_string(c.evenRank) + " (limit " + trainer::bytesText(limitOf(c.evenRank)) +
                          "); shards sized to each rank's free memory fit";
    c.plan.layout = st.reversed ? st.layout + ", slowest first" : st.layout;
    c.plan.prediction = std::move(*prediction);
    c.plan.tokensPerS = tokensPerStep() / c.plan.prediction.stepS;
    return std::optional<Candidate>{std::move(c)};
  }

  // Hill climbing from a simulated plan, on its bottlenecks: a block from the busiest stage (the most compute in
  // the step, over the replicas) to either neighbour or to the least busy stage, a micro-batch from the replica
  // whose pipeline ends last to the one that ends first, and one more micro-batch in flight per pipeline boundary
  // (where the boundaries' transfers hold up plain 1F1B, and memory allows), and the stages in the other order;
  // the first move that shortens the simulated step is taken, until none does.
  Result<Candidate> improve(Candidate best) {
    for (int round = 0; round < 4 * model().nLayer + 16; ++round) {
      const Structure& st = best.st;
      const StepPrediction& p = best.plan.prediction;
      std::vector<Structure> moves;
      int busiest = 0, idlest = 0;
      std::vector<double> busy(st.S, 0);
      for (int s = 0; s < st.S; ++s) {
        for (int r = 0; r < st.R; ++r) busy[s] = std::max(busy[s], p.busyS[r][s]);
        if (busy[s] > busy[busiest]) busiest = s;
        if (busy[s] < busy[idlest]) idlest = s;
      }
      for (int to : {busiest - 1, busiest + 1, idlest}) {
        if (to < 0 || to >= st.S || to == busiest || st.layers[busiest] == 0) continue;
        Structure m = st;
        --m.layers[busiest], ++m.layers[to];
        if (m.layers[busiest] == 0 && busiest != 0 && busiest != st.S - 1) continue;
        moves.push_back(m);
      }
      int last = 0, first = 0;
      for (int r = 0; r < st.R; ++r) {
        if (p.pipelineEndS[r].back() > p.pipelineEndS[last].back()) last = r;
        if (p.pipelineEndS[r].back() < p.pipelineEndS[first].back()) first = r;
      }
      if (last != first && st.micro[last] > 1) {
        Structure m = st;
        --m.micro[last], ++m.micro[first];
        moves.push_back(m);
      }
      if (st.S > 1 && st.depth < kMaxDepth) {
        Structure m = st;
        ++m.depth;
        moves.push_back(m);
      }
      if (st.S > 1) {
        // The stages in the other order: the layouts put the fastest groups first, so the slowest hold the LM
        // head and the loss, the heaviest stage after the blocks; the other way round the slow devices hold the
        // embedding, the lightest, and more micro-batches in flight (1F1B's first stage), memory permitting.
        Structure m = st;
        for (std::vector<int>& stages : m.at) std::reverse(stages.begin(), stages.end());
        std::reverse(m.layers.begin(), m.layers.end());
        m.reversed = !m.reversed;
        moves.push_back(m);
      }
      bool moved = false;
      for (const Structure& m : moves) {
        auto c = simulate(m);
        if (!c) return c.error();
        if (*c && (*c)->plan.prediction.stepS < best.plan.prediction.stepS * (1 - 1e-9)) {
          best = std::move(**c);
          moved = true;
          break;
        }
      }
      if (!moved) break;
    }
    return best;
  }

  static void sortByStep(std::vector<Candidate>& c) {
    std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
      return a.plan.prediction.stepS < b.plan.prediction.stepS;
    });
  }

  // The plan or stage that missed its rank's memory by the least (for the error when nothing fits).
  void noteExcess(int rank, double need, double limit) {
    if (need / limit < leastExcess_) leastExcess_ = need / limit, leastExcessRank_ = rank, leastExcessNeed_ = need;
  }

  Error noPlanFits() const {
    std::string detail = "no plan fits the ranks' memory";
    if (leastExcessRank_ >= 0)
      detail += ": the closest needs " + trainer::bytesText(leastExcessNeed_) + " on rank " +
                std::to_string(leastExcessRank_) + ", whose limit is " + trainer::bytesText(limitOf(leastExcessRank_)) +
                " (every TP, PP and DP degree and layout tried" + (options_.zero != 0 ? ", with ZeRO-1 too)" : ")");
    return bad("memory", detail);
  }

  // Sum over device types of count x the tokens/s one such device reaches alone.
  // Each device alone at its best micro-batch size among those searched.
  Result<double> hetHubBound(const std::vector<int>& sizes) const {
    std::map<double, int> types;
    for (double v : cluster_.speed) ++types[v];
    double bound = 0;
    for (auto [speed, count] : types) {
      double best = 0;
      for (int mb : sizes) {
        StepInputs in;
        in.config = configFor(mb);
        in.plan = trainer::uniformPlan(in.config, 1, 1, 1);
        if (auto ok = trainer::validatePlan(in.plan, in.config, 1, "single-device plan"); !ok) return ok.error();
        trainer::Placement one{{0}, {0}};
        auto roles = trainer::assignRoles(in.plan, one, trainer::Assignment::kNaive);
        if (!roles) return roles.error();
        in.roles = *roles;
        in.rankSpeed = {speed};
        in.profile = profile_;
        in.bucketBytes = options_.bucketBytes;
        in.optimizerBytesPerS = options_.optimizerBytesPerS;
        // One device alone: no group of two, so the library is never asked.
        CollectiveTime none = [](hetcommCollective_t, size_t, const std::vector<int>&) -> Result<double> {
          return 0.0;
        };
        auto cost = stepCost(in, none);
        if (!cost) return cost.error();
        auto p = simulateStep(*cost);
        if (!p) return p.error();
        best = std::max(best, tokensPerStep() / p->stepS);
      }
      bound += count * best;
    }
    return bound;
  }

  const trainer::TrainConfig& config_;
  const ClusterInfo& cluster_;
  const ComputeProfile& profile_;
  CachedTime cached_;
  CollectiveTime time_;
  const SearchOptions& options_;
  std::vector<int> tpDegrees_;
  std::vector<HostRanks> hosts_;
  std::vector<std::vector<Group>> groupLists_;
  std::map<std::pair<std::vector<int>, int>, StageTiming> timings_;
  SearchReport report_;
  double leastExcess_ = kInf, leastExcessNeed_ = 0;  // the least need / limit of a refused plan
  int leastExcessRank_ = -1;
};

}  // namespace

namespace {

// "6,7x3,4": runs of three or more equal values as value x count, so a 64-stage plan fits a line.
std::string runs(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    const size_t n = j - i;
    for (size_t k = 0; k < (n >= 3 ? 1 : n); ++k) out += (out.empty() ? "" : sep) + std::to_string(v[i]);
    if (n >= 3) out += "x" + std::to_string(n);
    i = j;
  }
  return out;
}

}  // namespace

std::string PlanCandidate::summary() const {
  std::vector<int> tps, blocks;
  for (const auto& s : plan.stages) tps.push_back(s.tp), blocks.push_back(s.layers);
  const std::string tp = runs(tps, "/"), layers = runs(blocks, ","), micro = runs(plan.microBatches, ",");
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "DP %d x PP %zu x TP %s (%s), layers [%s], micro-batches [%s] of %d%s%s: step %.2f ms, %.0f tok/s, "
                "bubble %.1f%%",
                plan.dp, plan.stages.size(), tp.c_str(), layout.c_str(), layers.c_str(), micro.c_str(), microBatch,
                plan.pipelineDepth > 1 ? (", depth " + std::to_string(plan.pipelineDepth)).c_str() : "",
                zero1 ? (plan.zeroShares.empty() ? ", ZeRO-1" : ", ZeRO-1 by memory") : "", prediction.stepS * 1e3,
                tokensPerS, prediction.bubble * 100);
  return buf;
}

Result<SearchReport> searchPlans(const trainer::TrainConfig& config, const ClusterInfo& cluster,
                                 const ComputeProfile& profile, const CollectiveTime& time,
                                 const SearchOptions& options) {
  return Search(config, cluster, profile, time, options).run();
}

}  // namespace hetcomm::planner
