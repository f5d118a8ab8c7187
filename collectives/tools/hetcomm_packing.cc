// hetcomm-packing: where a collective stays below its bound on a cluster, which is at fault. For each collective
// that schedule synthesis serves, three times on the cluster file's links:
//   bound     the cut or aggregate bound (topology/bounds.h; hetcomm-topo --bound prints the same)
//   best      no tree packing is faster: the packing's linear program's dual bound (collectives/synth/packing_lp.h;
//             on up to 32 hosts, where the tree searches are exact; an allreduce on more than 16: among the trees
//             into and out of the 16 hosts with the most NIC rate, which the synthesised allreduce chooses from)
//   packing   the packing the synthesised schedule runs (pruned to a few trees per root)
// best above the bound: the bound is not tight (no schedule of trees reaches it); packing above best: the
// packing is; both at the bound: whatever a measured schedule loses is its execution (or another algorithm's plan).
//
//   hetcomm-packing --cluster FILE [--size 64M] [--json FILE]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "collectives/synth/synth.h"
#include "common/strings.h"
#include "topology/bounds.h"
#include "topology/link_graph.h"

namespace {

using namespace hetcomm;

// Above this ratio one time is counted as slower than another: the column generation stops within 0.5 % of the
// optimum, and the library keeps Frank-Wolfe's packing where the program's is not 1 % lighter.
constexpr double kSlack = 1.0105;

std::string atFault(double bestOverBound, double packingOverBest, bool bestKnown) {
  std::string what;
  if (bestKnown && bestOverBound > kSlack) what = format("bound: trees reach %.3f of it at best", 1 / bestOverBound);
  if (!bestKnown) what = "not known: the best packing is computed on up to 32 hosts (and where the simplex succeeds)";
  if (bestKnown && packingOverBest > kSlack)
    what += format("%spacking: %.3f times the best", what.empty() ? "" : "; ", packingOverBest);
  return what.empty() ? "execution: the packing reaches the bound" : what;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hetcomm-packing: a cluster's tree packings against its bounds (which is at fault below a bound)"};
  std::string clusterFile, jsonPath;
  int64_t size = int64_t{64} << 20;  // signed: a negative size is an error, not a wrapped one
  app.add_option("--cluster", clusterFile, "a cluster file (clusters/*.json)")->required();
  app.add_option("--size", size, "the collective's size in bytes (nccl-tests' size; K/M/G suffixes; default 64M)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--json", jsonPath, "also write the table as JSON to this file");
  bool showTrees = false;
  app.add_flag("--trees", showTrees, "also print each packing's trees and its ports' loads over the bottleneck");
  CLI11_PARSE(app, argc, argv);
  if (size <= 0) {
    std::fprintf(stderr, "hetcomm-packing: --size %lld: expected a positive byte count\n",
                 static_cast<long long>(size));
    return 2;
  }

  auto graph = topo::clusterFileGraph(clusterFile);  // the links as hetcomm-topo --bound takes them
  if (!graph) {
    std::fprintf(stderr, "hetcomm-packing: %s\n", graph.error().toString().c_str());
    return 1;
  }
  const topo::LinkGraph& g = *graph;
  const double bytes = static_cast<double>(size);
  std::printf("packings for cluster file %s: %d ranks on %d hosts, size %s; times in us\n", clusterFile.c_str(),
              g.nranks(), g.nhosts(), humanBytes(size).c_str());
  std::printf("%-14s %11s %11s %11s %8s %8s  %s\n", "collective", "bound", "best", "packing", "best/", "packing/",
              "at fault below the bound");
  nlohmann::json out = {{"source", clusterFile}, {"nranks", g.nranks()}, {"nhosts", g.nhosts()}, {"size", size}};
  const std::pair<topo::BoundKind, coll::CollKind> kinds[] = {
      {topo::BoundKind::kAllReduce, coll::CollKind::kAllReduce},
      {topo::BoundKind::kAllGather, coll::CollKind::kAllGather},
      {topo::BoundKind::kReduceScatter, coll::CollKind::kReduceScatter},
      {topo::BoundKind::kBroadcast, coll::CollKind::kBroadcast},
      {topo::BoundKind::kReduce, coll::CollKind::kReduce}};
  std::vector<std::string> trees;
  for (const auto& [boundKind, collKind] : kinds) {
    const double boundUs = topo::collectiveBound(g, boundKind, 0).usPerByte * bytes;
    auto t = coll::synth::packingTimes(g, collKind, 0, bytes);
    if (!t) {
      std::fprintf(stderr, "hetcomm-packing: %s: %s\n", clusterFile.c_str(), t.error().toString().c_str());
      return 1;
    }
    trees.push_back(t->trees);
    const bool bestKnown = t->lowerUs > 0;
    const double bestOverBound = t->lowerUs / boundUs, packingOverBound = t->packingUs / boundUs;
    const std::string fault = atFault(bestOverBound, bestKnown ? t->packingUs / t->lowerUs : 0, bestKnown);
    std::printf("%-14s %11.0f %11s %11.0f %8s %8.3f  %s\n", topo::boundKindName(boundKind), boundUs,
                bestKnown ? format("%.0f", t->lowerUs).c_str() : "-", t->packingUs,
                bestKnown ? format("%.3f", bestOverBound).c_str() : "-", packingOverBound, fault.c_str());
    out[topo::boundKindName(boundKind)] = {
        {"bound_us", boundUs},
        {"best_us", bestKnown ? nlohmann::json(t->lowerUs) : nlohmann::json()},
        {"packing_us", t->packingUs},
        {"best_over_bound", bestKnown ? nlohmann::json(bestOverBound) : nlohmann::json()},
        {"packing_over_bound", packingOverBound},
        {"at_fault", fault}};
  }
  std::printf("(best/ and packing/: over the bound; broadcast and reduce: root 0)\n");
  for (size_t i = 0; showTrees && i < trees.size(); ++i)
    std::printf("\n%s:\n%s", topo::boundKindName(kinds[i].first), trees[i].c_str());
  if (!jsonPath.empty()) {
    std::ofstream f(jsonPath);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "hetcomm-packing: cannot write %s\n", jsonPath.c_str());
      return 1;
    }
  }
  return 0;
}
