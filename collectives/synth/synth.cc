#include "collectives/synth/synth.h"

#include <algorithm>

#include "collectives/group_cache.h"

namespace hetcomm::coll::synth {

bool applies(const GroupView& g) {
  return g.graph && g.graph->nhosts() >= 2 && g.graph->nranks() == g.nranks && g.graph->connected();
}

namespace {
// Per host, its share of the data: all of it at rootHost, or (-1) its rank count.
std::vector<double> demandFor(const topo::LinkGraph& graph, int rootHost) {
  std::vector<double> demand(graph.nhosts(), 0.0);
  for (int h = 0; h < graph.nhosts(); ++h)
    if (rootHost < 0 || h == rootHost) demand[h] = rootHost < 0 ? static_cast<double>(graph.hosts[h].ranks.size()) : 1;
  return demand;
}
}  // namespace

std::shared_ptr<const Packing> packingFor(const GroupView& g, TreeUse use, int rootHost) {
  const topo::LinkGraph& graph = *g.graph;
  auto derive = [&] { return sharedPacking(graph, use, demandFor(graph, rootHost)); };
  if (!g.cache) return derive();
  const std::pair<int, int> key{static_cast<int>(use), use == TreeUse::kBoth ? -1 : rootHost};
  {
    std::lock_guard<std::mutex> lock(g.cache->mu);
    if (auto it = g.cache->packings.find(key); it != g.cache->packings.end()) return it->second;
  }
  auto p = derive();  // outside the lock: it may take milliseconds
  std::lock_guard<std::mutex> lock(g.cache->mu);
  return g.cache->packings.emplace(key, p).first->second;
}

namespace {
// The share of the packing's rate a synthesised schedule gets where nothing better is known, as NCCL's model gives
// each algorithm and protocol its own efficiency. Its NICs carry several trees' segments at once, each a stream of
// its own, and a host forwards a segment only once it has all of it; on the emulated clusters (2026-11-26,
// perf/README.md) it ran at 0.84-1.01 of the plain packing rate at 64 MiB on the Xeon, 0.92 in the mean, where the
// ring and the chain ran at 0.94-1.0 of theirs. Without it the model picked a synthesised schedule over the chain
// for a 2% gain on paper that was a 9% loss measured (broadcast on clusters/eth-4x2.json). On the AMD EPYC VM the
// same schedules ran at 1.0-1.04 of their packing: the share depends on the machines, so the communicator learns it
// from its own calls (comm/synth_efficiency.h) and this default prices only until it has.
constexpr double kDefaultTreeEfficiency = 0.92;
// A learned share above 1 says the probe's figures understate the links a little (on the emulated clusters the
// schedules ran at up to 1.04 of their packing); much above, that the probe was wrong, which would flatter the
// synthesised schedules alone against every other algorithm priced from the same figures.
constexpr double kMostTreeEfficiency = 1.05;
}  // namespace

double treeEfficiency(const GroupView& g, CollKind kind) {
  const double learned = g.learnedTreeEfficiency[static_cast<size_t>(kind)];
  return learned > 0 ? std::min(learned, kMostTreeEfficiency) : kDefaultTreeEfficiency;
}

double estimateUs(const GroupView& g, const Packing& p, FlowMode mode, double unitBytes, double flowBytes,
                  size_t flows, double efficiency) {
  const double dataBytes = flowBytes * static_cast<double>(flows);
  const topo::LinkGraph& graph = *g.graph;
  const double network = p.usPerByte * unitBytes / efficiency;
  // Per host, the children a segment's owner takes partial sums from, averaged over the trees by weight and demand.
  std::vector<double> children(graph.nhosts(), 0.0);
  double demandSum = 0;
  for (size_t r = 0; r < p.byRoot.size(); ++r) demandSum += p.byRoot[r].empty() ? 0 : p.demand[r];
  for (size_t r = 0; r < p.byRoot.size(); ++r)
    for (const WeightedTree& wt : p.byRoot[r])
      for (size_t turn = 0; turn < wt.turnCount(); ++turn)
        for (int h = 0; h < graph.nhosts(); ++h)
          children[h] += p.demand[r] / demandSum * wt.weight / static_cast<double>(wt.turnCount()) *
                         static_cast<double>(wt.upAt(turn).children[h].size());
  const int phases = mode == FlowMode::kAllReduce ? 2 : 1;
  double local = 0;
  for (int h = 0; h < graph.nhosts(); ++h) {
    const auto& host = graph.hosts[h];
    const double k = static_cast<double>(host.ranks.size());
    const int r = host.ranks.front();
    const double reduced = mode == FlowMode::kBroadcast ? 0 : dataBytes * (k - 1 + children[h]) / k;
    const double shm = k > 1 ? phases * dataBytes * (k - 1) / k / (host.memGBps * 1e3) : 0;
    local = std::max(local, shm + memoryUs(g, r, 0, reduced, dataBytes));
  }
  return std::max(network, local) + flowShape(g, graph, p, mode, static_cast<size_t>(flowBytes), flows).fillUs;
}

double SynthAlgorithm::estimateUs(const Args& a, const GroupView& g) const {
  const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
  const size_t flows = perRank() ? static_cast<size_t>(g.nranks) : 1;
  return synth::estimateUs(g, *packingFor(g, use(), rootHost(a, g)), mode(), bytes, bytes, flows,
                           treeEfficiency(g, a.kind));
}

Result<Schedule> SynthAlgorithm::plan(const Args& a, const GroupView& g) const {
  auto packing = packingFor(g, use(), rootHost(a, g));
  Schedule s = newSchedule(a, g);
  prologue(a, g, s);
  std::vector<Flow> flows;
  for (int i = 0; i < (perRank() ? g.nranks : 1); ++i) flows.push_back(flow(a, g, *packing, i));
  emitFlows(s, g, *g.graph, *packing, mode(), flows);
  return s;
}

Flow wholeBuffer(const Args& a, const std::vector<WeightedTree>& trees, int fixedRank, bool spread) {
  const size_t esz = kernels::sizeOf(a.dtype);
  Flow f;
  f.count = a.count;
  f.fixedRank = fixedRank;
  f.spread = spread;
  f.trees = &trees;
  f.in = [esz](int, size_t lo, size_t n) { return Slice{Buf::kSend, lo * esz, n * esz}; };
  f.out = [esz](int, size_t lo, size_t n) { return Slice{Buf::kRecv, lo * esz, n * esz}; };
  return f;
}

Result<PackingTimes> packingTimes(const topo::LinkGraph& graph, CollKind kind, int rootRank, double bytes) {
  if (graph.nhosts() < 2 || !graph.connected())
    return invalidArgument("packingTimes: a packing needs two hosts or more that reach each other (%d hosts)",
                           graph.nhosts());
  if ((kind == CollKind::kBroadcast || kind == CollKind::kReduce) && (rootRank < 0 || rootRank >= graph.nranks()))
    return invalidArgument("packingTimes: root %d is not a rank of the graph's %d", rootRank, graph.nranks());
  TreeUse use = TreeUse::kBoth;
  int rootHost = -1;
  double unitBytes = bytes;  // the bytes of one unit of demand
  switch (kind) {
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:  // a unit: one rank's block of the whole (nccl-tests' size)
      use = kind == CollKind::kAllGather ? TreeUse::kOut : TreeUse::kIn;
      unitBytes = bytes / graph.nranks();
      break;
    case CollKind::kBroadcast:
    case CollKind::kReduce:
      use = kind == CollKind::kBroadcast ? TreeUse::kOut : TreeUse::kIn;
      rootHost = graph.hostOfRank[rootRank];
      break;
    case CollKind::kAllReduce:
      break;
    default:
      return invalidArgument("packingTimes: %s has no tree packing", name(kind));
  }
  const std::shared_ptr<const Packing> p = sharedPacking(graph, use, demandFor(graph, rootHost));
  return PackingTimes{p->lowerUsPerByte * unitBytes, p->usPerByte * unitBytes, p->describe(graph)};
}

}  // namespace hetcomm::coll::synth
