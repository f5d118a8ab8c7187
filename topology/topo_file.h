// topo_file.h: topology files. Two kinds of JSON document live here.
//
// 1. The override file HETCOMM_TOPO_FILE names: what discovery cannot see, per host. An emulated cluster's
//    veth pairs look like 10 Gb/s Ethernet to sysfs; the file says "this one is InfiniBand at 100 Gb/s on fabric
//    ib-a". Discovery applies it after hwloc and sysfs (node.h), so every rank publishes the corrected
//    description and every output marks those values as coming from the file. Schema (example-topo.json is a
//    full example; // comments are allowed, unknown fields are errors):
//
//    {
//      "version": 1,                    optional; 1 is the only version
//      "description": "text",           optional, ignored
//      "hosts": [                       required; entries apply in file order, a later entry wins
//        {
//          "hostId": "h0",              the host identity (host_identity.h; HETCOMM_HOSTID), or "*" for any
//          "hostName": "node17",        the short host name, or "*"; an entry needs hostId or hostName, and
//                                       matches a host when every one it gives matches
//          "nics": [                    optional
//            {"name": "veth-ib0",       required: the netdev name ("mlx5_0:1" for an RDMA port without one)
//             "kind": "ib",             optional: ib | roce | eth
//             "rateMbps": 100000,       optional: link rate in Mbit/s (integer)
//             "fabric": "ib-a",         optional: NICs with the same fabric name reach each other
//             "state": "up"}            optional: up | down
//          ],                           a NIC discovery did not find is added (kind eth and state up unless given)
//          "gpus": [                    optional: entry i sets the fields it gives on the host's GPU i; entries
//            {"model": "A100-40GB",     past the discovered GPUs add GPUs
//             "peakTflops": 312,        dense peak at training precision
//             "memoryBytes": "40G",     integer, or string with binary suffix K M G T
//             "count": 4}               optional, default 1: the entry stands for this many consecutive GPUs
//          ]
//        }
//      ]
//    }
//
// 2. A cluster dump (hetcomm-topo --json): {"version": 1, "ranks": [<one node per rank, node_json.h>],
//    "derived": {"fabrics": [...], "islands": [...], "links": [[...]]}}. "derived" is for readers and is
//    recomputed on load; loadClusterDump gives back the ranks' NodeDescriptions, so a dumped (or hand-written)
//    cluster can be rebuilt with ClusterView::build anywhere, without its hardware.
//
// Errors name the file, the JSON path and the problem:
//   "topo file /etc/hc.json: $.hosts[1].nics[0].kind: expected one of ib, roce, eth, got \"infiniband\"".
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/cluster.h"
#include "topology/link_matrix.h"
#include "topology/node.h"

namespace hetcomm::topo {

struct NicOverride {
  std::string name;
  std::optional<NicKind> kind;
  std::optional<uint64_t> rateMbps;
  std::optional<std::string> fabric;
  std::optional<NicState> state;
};

struct GpuOverride {
  std::optional<std::string> model;
  std::optional<double> peakTflops;
  std::optional<uint64_t> memoryBytes;
  int count = 1;
};
// One "gpus" entry of a topology file or a cluster file ({"model", "peakTflops", "memoryBytes", "count"}, every
// key optional); path names it in errors ("$.hosts[0].gpus[1]").
Result<GpuOverride> gpuOverrideFromJson(const nlohmann::json& v, const std::string& path);

struct HostOverride {
  std::optional<std::string> hostId;    // "*" matches any
  std::optional<std::string> hostName;  // "*" matches any
  std::vector<NicOverride> nics;
  std::vector<GpuOverride> gpus;
  bool matches(const NodeDescription& node) const;
};

class TopoFile {
 public:
  static Result<TopoFile> load(const std::string& path);
  // source names the text in errors (a path, or "<test>").
  static Result<TopoFile> parse(std::string_view text, const std::string& source);

  // Applies every entry matching the node's host id / name, in file order, and records the file in
  // node.topoFile when one matched. Touched NICs and GPUs get fromTopoFile; NICs stay sorted by name.
  // Returns the number of entries that matched.
  int apply(NodeDescription& node) const;

  const std::string& source() const { return source_; }
  const std::vector<HostOverride>& hosts() const { return hosts_; }

 private:
  std::string source_;
  std::vector<HostOverride> hosts_;
};

// The dump of a cluster: every rank's description plus, for readers, its fabrics, islands and (when given)
// links. Pretty-printed JSON.
std::string dumpClusterJson(const ClusterView& view, const LinkMatrix* links = nullptr);
// The ranks' descriptions from a dump (the "derived" part is skipped: ClusterView::build recomputes it).
Result<std::vector<NodeDescription>> parseClusterDump(std::string_view text, const std::string& source);
Result<std::vector<NodeDescription>> loadClusterDump(const std::string& path);

}  // namespace hetcomm::topo
