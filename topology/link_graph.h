// link_graph.h: the cluster as a capacitated graph, for collective bounds (bounds.h) and schedule synthesis
// (collectives/synth/). Hosts reach each other through fabrics, which act as switches, by their NICs; a NIC
// carries its rate in each direction and every rank of its host shares it. Ranks sit on hosts and move bytes to
// and from the host's memory at the host's shared-memory rate.
//
// Pure, rank-indexed data: buildLinkGraph makes it from a ClusterView and a LinkMatrix (nominal or probed), tests
// and tools may fill it by hand. The collectives layer reads it through GroupView and includes nothing else of
// topology/.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetcomm::topo {

class ClusterView;
class LinkMatrix;

// What one rank copies (memcpy) and reduces (float32 sum of two inputs) per second, GB/s of output, over buffers
// of `bytes` each.
struct MemoryRate {
  double bytes = 0, copyGBps = 0, reduceGBps = 0;
  bool operator==(const MemoryRate&) const = default;
};

struct LinkGraph {
  struct HostNode {
    std::string name;
    std::vector<int> ranks;  // ascending
    int island = 0;          // ClusterView::islandOfHost: hosts joined by an RDMA fabric
    double memGBps = 0;      // a rank to or from the host's memory (the same-host link), GB/s
    int cores = 0;           // physical cores; 0 unknown
    // What one rank of the host copies and reduces (float sum) per second alone, GB/s of output, by the size of
    // its buffers: from buffers that stay in a core's cache to ones far larger than every cache, ascending. Empty:
    // unknown (the cost model then assumes typical figures).
    std::vector<MemoryRate> memory;
  };
  // One NIC of a host on a fabric: what it carries each way (full duplex), GB/s.
  struct Port {
    int host = -1;
    int fabric = -1;
    double gbps = 0;
    std::string name;
  };
  // A message from one host to another crosses one port of each end on a fabric they share: one rail, or several
  // (multi-rail striping), each with its share of the bytes.
  struct Rail {
    int from = -1, to = -1;  // port indices
    double share = 1;
  };
  // One way a message from one host to another can go: striped over the pair's rails as a plain send goes (path
  // -1), or over one fabric they share (path i: fabric i of ClusterView::pathFabrics, which the transport takes
  // when asked by Connection::isendOn).
  struct Way {
    int path = -1;
    std::vector<Rail> rails;
  };

  std::vector<HostNode> hosts;
  std::vector<Port> ports;
  std::vector<std::string> fabrics;  // names, by index
  std::vector<int> hostOfRank;
  // Per ordered rank pair, row major: the link matrix's alpha (us) and bandwidth (GB/s), nominal or measured.
  std::vector<double> alphaUs, bwGBps;
  // ways[a * hosts + b]: how a message from host a can reach host b; way 0 is the striped default, the others one
  // per fabric they share where the pair's transport can be told which. Empty for a == b and for hosts that share
  // no fabric (routed IP, whose path nothing here can see).
  std::vector<std::vector<Way>> ways;

  int nranks() const { return static_cast<int>(hostOfRank.size()); }
  int nhosts() const { return static_cast<int>(hosts.size()); }
  const std::vector<Way>& waysOf(int a, int b) const { return ways[static_cast<size_t>(a) * hosts.size() + b]; }
  // The default way's rails (empty when the hosts share no fabric).
  const std::vector<Rail>& route(int a, int b) const;
  // Every host reaches every other through routes (hops through other hosts allowed).
  bool connected() const;
  // What one host sends (or takes in) at most per second over all its ports, GB/s.
  double hostEgressGBps(int host) const;
  // "h0 ib0 ib-a 0.200 GB/s, ..." one line per host: for logs and tests.
  std::string describe() const;
};

// From the cluster view and the link matrix (topology/cluster.h, link_matrix.h). A port's rate is its NIC's nominal
// rate scaled by what the probe measured on that fabric (measured over nominal, median over the measured pairs on
// it); a host's memory rate is its same-host link. multiRail: pairs stripe over every fabric of their best kind
// (ClusterView::railFabrics), in proportion to the rates; otherwise they use the best fabric alone. choosesPath(a,
// b): whether the transport between hosts a and b takes a message over the path it is given (one way per shared
// fabric then); null: every pair's does.
LinkGraph buildLinkGraph(const ClusterView& view, const LinkMatrix& links, bool multiRail,
                         const std::function<bool(int, int)>& choosesPath = nullptr);

// The graph of a cluster file (clusters/*.json, topology/cluster_spec.h) at its nominal rates, every pair striped
// over its rails: what hetcomm-topo --bound --cluster and hetcomm-packing read. An error names the file.
Result<LinkGraph> clusterFileGraph(const std::string& path);

}  // namespace hetcomm::topo
