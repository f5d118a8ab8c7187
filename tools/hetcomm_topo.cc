// hetcomm-topo: what hetcomm sees of this host and of the cluster.
//   hetcomm-topo                          this host, compactly (as lstopo would)
//   hetcomm-run -np N hetcomm-topo        rank 0 prints the cluster: hosts, NICs with kind and rate, fabrics,
//                                         islands, and rank-by-rank matrices of link class and transport
//   ... --json FILE                       also writes the cluster (and link matrix) as JSON
//   ... --probe                           measures latency and bandwidth of every rank pair through the real
//                                         transports and prints the alpha/beta matrix
//   ... --bound [--size 64M]              each collective's lower bound on this cluster from its link rates
//                                         (nominal, or measured with --probe): busbw and which cut binds
//   hetcomm-topo --bound --cluster FILE   the same for a cluster file (clusters/*.json), without running it
//   ... --bound-json FILE                 the bounds as JSON as well
//   hetcomm-topo --random-cluster SEED    a random valid cluster file (2-8 hosts, 1-4 ranks each, 1-3 fabrics,
//       [--max-hosts N --max-ranks K]     100-2000 Mbit/s), the same for a seed on every machine
// A client of the public API (it gathers node descriptions with hetcommAllGather) plus the topology library.
#include <hetcomm/hetcomm.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "topology/bounds.h"
#include "topology/cluster.h"
#include "topology/cluster_spec.h"
#include "topology/link_matrix.h"
#include "topology/node.h"
#include "topology/node_json.h"
#include "topology/topo_file.h"
#include "common/strings.h"

namespace {

using namespace hetcomm;

[[noreturn]] void die(const char* what, hetcommResult_t r) {
  std::fprintf(stderr, "hetcomm-topo: %s failed: %s: %s\n", what, hetcommGetErrorString(r),
               hetcommGetLastError(nullptr));
  std::exit(1);
}
#define CHECK(call)                           \
  do {                                        \
    hetcommResult_t r_ = (call);              \
    if (r_ != hetcommSuccess) die(#call, r_); \
  } while (0)

bool underLauncher() {
  for (const char* v : {"HETCOMM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return true;
  return false;
}

// Every rank's blob (a serialized node description, a transport row), in rank order (sizes first, then padded).
std::vector<std::vector<std::byte>> gatherBlobs(hetcommComm_t comm, int n, const std::vector<std::byte>& mine) {
  std::vector<uint64_t> sizes(n);
  uint64_t my = mine.size();
  CHECK(hetcommAllGather(&my, sizes.data(), 1, hetcommUint64, comm, nullptr));
  uint64_t most = 0;
  for (auto s : sizes) most = std::max(most, s);
  std::vector<std::byte> padded(most), all(most * n);
  std::memcpy(padded.data(), mine.data(), mine.size());
  CHECK(hetcommAllGather(padded.data(), all.data(), most, hetcommUint8, comm, nullptr));
  std::vector<std::vector<std::byte>> out(n);
  for (int r = 0; r < n; ++r) out[r].assign(all.begin() + r * most, all.begin() + r * most + sizes[r]);
  return out;
}

// Ping-pong of small messages (alpha) and one-way streaming of large ones (bandwidth) between every pair, one pair
// at a time while the others wait, so each figure is that link alone. Fills alpha[i*n+j] (us) and bw (GB/s).
void probe(hetcommComm_t comm, int rank, int n, std::vector<double>& alpha, std::vector<double>& bw) {
  constexpr int kPings = 50, kStreams = 5;
  constexpr size_t kBig = 4 << 20;
  std::vector<char> small(8), big(kBig);
  alpha.assign(n * n, 0);
  bw.assign(n * n, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      CHECK(hetcommAllReduce(small.data(), small.data(), 1, hetcommInt8, hetcommMax, comm, nullptr));  // barrier
      if (rank != i && rank != j) continue;
      int peer = rank == i ? j : i;
      auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < kPings; ++k) {
        if (rank == i) {
          CHECK(hetcommSend(small.data(), 8, hetcommInt8, peer, comm, nullptr));
          CHECK(hetcommRecv(small.data(), 8, hetcommInt8, peer, comm, nullptr));
        } else {
          CHECK(hetcommRecv(small.data(), 8, hetcommInt8, peer, comm, nullptr));
          CHECK(hetcommSend(small.data(), 8, hetcommInt8, peer, comm, nullptr));
        }
      }
      double pingUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < kStreams; ++k) {
        if (rank == i)
          CHECK(hetcommSend(big.data(), kBig, hetcommInt8, peer, comm, nullptr));
        else
          CHECK(hetcommRecv(big.data(), kBig, hetcommInt8, peer, comm, nullptr));
      }
      // The last receive is done when the receiver returns: one more ping closes the timing on the sender too.
      if (rank == i)
        CHECK(hetcommRecv(small.data(), 1, hetcommInt8, peer, comm, nullptr));
      else
        CHECK(hetcommSend(small.data(), 1, hetcommInt8, peer, comm, nullptr));
      double streamS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rank == i) {
        alpha[i * n + j] = pingUs / kPings / 2;
        bw[i * n + j] = static_cast<double>(kBig) * kStreams / streamS / 1e9;
      }
    }
  CHECK(hetcommAllReduce(alpha.data(), alpha.data(), n * n, hetcommFloat64, hetcommSum, comm, nullptr));
  CHECK(hetcommAllReduce(bw.data(), bw.data(), n * n, hetcommFloat64, hetcommSum, comm, nullptr));
}

// This rank's row of the transport matrix, as the communicator chose it: "name\treason\n" per rank (empty
// line for itself).
std::vector<std::byte> transportRow(hetcommComm_t comm, int rank, int n) {
  std::string row;
  for (int p = 0; p < n; ++p) {
    if (p != rank) {
      char name[16], reason[512];
      CHECK(hetcommCommPeerTransport(comm, p, name, sizeof(name), reason, sizeof(reason)));
      row += std::string(name) + "\t" + reason;
    }
    row += "\n";
  }
  auto* b = reinterpret_cast<const std::byte*>(row.data());
  return {b, b + row.size()};
}

// The rank-by-rank matrix of chosen transports, then each distinct choice with its reason and the pairs it covers.
std::string transportMatrix(const std::vector<std::vector<std::byte>>& rows) {
  const int n = static_cast<int>(rows.size());
  std::vector<std::vector<std::string>> name(n, std::vector<std::string>(n)), why(n, std::vector<std::string>(n));
  for (int i = 0; i < n; ++i) {
    std::string text(reinterpret_cast<const char*>(rows[i].data()), rows[i].size());
    size_t at = 0;
    for (int j = 0; j < n && at <= text.size(); ++j) {
      size_t end = text.find('\n', at);
      std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
      at = end == std::string::npos ? text.size() + 1 : end + 1;
      size_t tab = line.find('\t');
      name[i][j] = i == j ? "X" : line.substr(0, tab);
      if (tab != std::string::npos) why[i][j] = line.substr(tab + 1);
    }
  }
  std::string out = "transport";
  for (int j = 0; j < n; ++j) out += "  r" + std::to_string(j) + (j < 10 ? "   " : j < 100 ? "  " : " ");
  out += "\n";
  std::vector<std::pair<std::string, std::vector<std::string>>> reasons;  // "tcp: why" -> pairs
  for (int i = 0; i < n; ++i) {
    std::string row = "r" + std::to_string(i);
    row.resize(9, ' ');
    for (int j = 0; j < n; ++j) {
      std::string cell = "  " + name[i][j];
      cell.resize(7, ' ');
      row += cell;
      if (j <= i) continue;
      std::string key = name[i][j] + ": " + why[i][j];
      auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == key; });
      if (it == reasons.end()) it = reasons.insert(reasons.end(), {key, {}});
      it->second.push_back("r" + std::to_string(i) + "-r" + std::to_string(j));
    }
    out += row + "\n";
  }
  out += "why:\n";
  for (const auto& [key, pairs] : reasons) {
    std::string list;
    for (size_t k = 0; k < pairs.size() && k < 6; ++k) list += (k ? " " : "") + pairs[k];
    if (pairs.size() > 6) list += format(" ... (%zu pairs)", pairs.size());
    out += "  " + key + "  [" + list + "]\n";
  }
  return out;
}

// Each collective's bound for `size` bytes (nccl-tests' sizes), as a table; and as JSON when jsonPath is set.
void printBounds(const topo::LinkGraph& g, const std::string& source, double size, const std::string& jsonPath) {
  const int n = g.nranks();
  std::printf("bounds for %s: %d ranks on %d hosts, size %s; link rates as the graph has them:\n%s", source.c_str(), n,
              g.nhosts(), humanBytes(static_cast<uint64_t>(size)).c_str(), g.describe().c_str());
  std::printf("%-14s %12s %12s  %s\n", "collective", "time (us)", "busbw GB/s", "what binds");
  nlohmann::json out = {{"source", source}, {"nranks", n}, {"nhosts", g.nhosts()}, {"size", size}};
  for (topo::BoundKind kind : {topo::BoundKind::kAllReduce, topo::BoundKind::kAllGather,
                               topo::BoundKind::kReduceScatter, topo::BoundKind::kBroadcast, topo::BoundKind::kReduce}) {
    const topo::CollectiveBound b = topo::collectiveBound(g, kind, 0);
    std::printf("%-14s %12.0f %12.4f  %s\n", topo::boundKindName(kind), b.usPerByte * size, b.busGBps(n),
                b.binding.c_str());
    nlohmann::json row = {{"time_us", b.usPerByte * size}, {"busbw", b.busGBps(n)}, {"binding", b.binding}};
    if (kind == topo::BoundKind::kAllReduce) {
      row["cut_time_us"] = b.cutUsPerByte * size;
      row["aggregate_time_us"] = b.aggregateUsPerByte * size;
    }
    out[topo::boundKindName(kind)] = row;
  }
  std::printf("(broadcast and reduce: root 0; busbw = size / time x nccl-tests' factor)\n");
  if (!jsonPath.empty()) {
    std::ofstream(jsonPath) << out.dump(2) << "\n";
    std::printf("wrote %s\n", jsonPath.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hetcomm-topo: what hetcomm sees of this host and cluster"};
  std::string jsonPath, clusterFile, boundJson, sizeText = "64M";
  bool doProbe = false, doBound = false;
  app.add_option("--json", jsonPath, "write the cluster (and link matrix) as JSON to this file");
  app.add_flag("--probe", doProbe, "measure latency and bandwidth of every rank pair (under a launcher)");
  app.add_flag("--bound", doBound, "print each collective's lower bound from the link rates");
  app.add_option("--cluster", clusterFile, "with --bound: a cluster file (clusters/*.json) instead of the running job");
  app.add_option("--size", sizeText, "with --bound: the collective's size in bytes (K/M/G suffixes; default 64M)");
  app.add_option("--bound-json", boundJson, "with --bound: also write the bounds as JSON to this file");
  uint64_t seed = 0;
  topo::RandomClusterLimits limits;
  auto* random = app.add_option("--random-cluster", seed, "print a random valid cluster file drawn from this seed");
  app.add_option("--max-hosts", limits.maxHosts, "with --random-cluster: at most this many hosts (default 8)")
      ->check(CLI::Range(2, 1024));
  app.add_option("--max-ranks", limits.maxRanksPerHost, "with --random-cluster: at most this many ranks per host (default 4)")
      ->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);
  if (random->count()) {
    limits.minHosts = std::min(limits.minHosts, limits.maxHosts);
    std::printf("%s", topo::clusterSpecJson(topo::randomClusterSpec(seed, limits)).c_str());
    return 0;
  }
  double size = 0;
  {
    char* end = nullptr;
    size = std::strtod(sizeText.c_str(), &end);
    const std::string suffix = end ? end : "";
    const double scale = suffix.empty() ? 1 : suffix == "K" ? 1024.0 : suffix == "M" ? 1048576.0 : suffix == "G" ? 1073741824.0 : 0;
    if (!(size > 0) || scale == 0) {
      std::fprintf(stderr, "hetcomm-topo: --size %s: expected a positive byte count with an optional K, M or G\n",
                   sizeText.c_str());
      return 2;
    }
    size *= scale;
  }
  if (!clusterFile.empty()) {
    if (!doBound) {
      std::fprintf(stderr, "hetcomm-topo: --cluster goes with --bound\n");
      return 2;
    }
    auto graph = topo::clusterFileGraph(clusterFile);
    if (!graph) {
      std::fprintf(stderr, "hetcomm-topo: %s\n", graph.error().toString().c_str());
      return 1;
    }
    printBounds(*graph, "cluster file " + clusterFile, size, boundJson);
    return 0;
  }

  auto local = topo::discoverLocalNode(topo::DiscoveryOptions::fromEnvironment());
  if (!local) {
    std::fprintf(stderr, "hetcomm-topo: %s\n", local.error().toString().c_str());
    return 1;
  }
  if (!underLauncher()) {
    std::printf("%s", topo::formatNode(*local).c_str());
    if (doProbe) std::printf("(--probe needs several ranks: run under hetcomm-run, mpirun or srun)\n");
    if (doBound) std::printf("(--bound needs the cluster: run under a launcher, or give --cluster FILE)\n");
    if (!jsonPath.empty()) {
      std::ofstream(jsonPath) << topo::nodeToJson(*local).dump(2) << "\n";
      std::printf("wrote %s\n", jsonPath.c_str());
    }
    return 0;
  }

  hetcommComm_t comm;
  CHECK(hetcommCommInitFromEnv(&comm));
  int rank, n;
  CHECK(hetcommCommUserRank(comm, &rank));
  CHECK(hetcommCommCount(comm, &n));
  local->pid = static_cast<int>(getpid());
  auto blobs = gatherBlobs(comm, n, topo::serializeNode(*local));
  std::vector<topo::NodeDescription> nodes;
  for (int r = 0; r < n; ++r) {
    auto node = topo::deserializeNode(blobs[r]);
    if (!node) {
      std::fprintf(stderr, "hetcomm-topo: rank %d's node description: %s\n", r, node.error().toString().c_str());
      return 1;
    }
    nodes.push_back(std::move(*node));
  }
  auto view = topo::ClusterView::build(std::move(nodes));
  if (!view) {
    std::fprintf(stderr, "hetcomm-topo: %s\n", view.error().toString().c_str());
    return 1;
  }
  topo::LinkMatrix links = topo::LinkMatrix::nominal(*view);
  auto rows = gatherBlobs(comm, n, transportRow(comm, rank, n));
  std::vector<double> alpha, bw;
  if (doProbe) probe(comm, rank, n, alpha, bw);
  if (rank == 0) {
    std::printf("%s\n%s\n%s", view->format().c_str(), links.formatClasses().c_str(), transportMatrix(rows).c_str());
    if (doProbe) {
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if (i != j) (void)links.setMeasured(i, j, alpha[i * n + j], bw[i * n + j]);
      std::printf("\nmeasured through the transports (alpha us / bandwidth GB/s):\n%s", links.formatValues().c_str());
    }
    if (!jsonPath.empty()) {
      std::ofstream(jsonPath) << topo::dumpClusterJson(*view, &links) << "\n";
      std::printf("wrote %s\n", jsonPath.c_str());
    }
    if (doBound)
      printBounds(topo::buildLinkGraph(*view, links, true), doProbe ? "this job (probed rates)" : "this job (nominal rates)",
                  size, boundJson);
  }
  CHECK(hetcommCommFinalize(comm));
  CHECK(hetcommCommDestroy(comm));
  return 0;
}
