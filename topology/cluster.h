// cluster.h: the cluster as every rank sees it, built from all ranks' NodeDescriptions (gathered through the
// bootstrap at communicator init). Pure and deterministic: the same input gives the same view on every rank,
// whatever order each rank's NICs were listed in.
//
//   hosts    ranks with the same host id, in order of their lowest rank (rank 0's host is host 0)
//   fabrics  which NICs of which hosts reach each other: NICs with the same fabric name (a topology file names
//            it), else NICs of the same kind with an address in the same IP network. Only NICs that are up and
//            not loopback take part; link-local addresses are ignored (every link has one).
//   islands  hosts joined by RDMA fabrics (ib, roce): the connected components of the hosts over those
//            fabrics, so every host is in exactly one island, alone when no RDMA fabric joins it to another. The
//            one definition: collectives, hetcommCommRankPlacement and hetcomm-topo all read it from here.
//
// What it does not do: choose transports or algorithms (comm/ and collectives/ do, from this and the link matrix).
#pragma once

#include <compare>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/node.h"

namespace hetcomm::topo {

struct NicRef {
  int host = -1;  // index into ClusterView::hosts()
  int nic = -1;   // index into that host's node.nics (sorted by name)
  auto operator<=>(const NicRef&) const = default;
};

struct Host {
  std::string id;
  std::string name;
  std::vector<int> ranks;  // ascending
  NodeDescription node;    // as published by the host's lowest rank; the host-wide parts of the others are unused
};

struct Fabric {
  std::string name;    // the NICs' fabric name, or "<kind>:<network>" ("eth:10.1.0.0/24") when inferred
  bool named = false;  // from a fabric name (topology file), not inferred from subnets
  NicKind kind = NicKind::kEth;
  std::vector<NicRef> nics;  // sorted
  std::vector<int> hosts;    // sorted, unique
};

enum class IslandKind : uint8_t { kHost, kIb, kRoce, kEth };
const char* islandKindName(IslandKind kind);  // "host", "ib", "roce", "eth"

struct Island {
  IslandKind kind = IslandKind::kHost;
  std::vector<int> ranks;    // ascending
  std::vector<int> hosts;    // ascending
  std::vector<int> fabrics;  // the RDMA fabrics joining these hosts; empty for a host alone
};

class ClusterView {
 public:
  // nodes[r] is rank r's description. Fails on an empty input, a rank with an empty host id, or one fabric name
  // given to NICs of different kinds; the message names the ranks or hosts involved.
  static Result<ClusterView> build(std::vector<NodeDescription> nodes);

  int nranks() const { return static_cast<int>(nodes_.size()); }
  int nhosts() const { return static_cast<int>(hosts_.size()); }
  const std::vector<Host>& hosts() const { return hosts_; }
  // Sorted by kind (ib, roce, eth), then name.
  const std::vector<Fabric>& fabrics() const { return fabrics_; }
  // In order of their lowest host (host 0's island first). kind: the best fabric kind joining the island's hosts
  // (kHost for a host alone).
  const std::vector<Island>& islands() const { return islands_; }
  int islandOfHost(int host) const { return islandOfHost_[host]; }

  // Rank r's description as published (NICs sorted by name). r must be in [0, nranks()).
  const NodeDescription& node(int rank) const { return nodes_[rank]; }
  int hostOf(int rank) const { return hostOfRank_[rank]; }
  // The rank's position among its host's ranks.
  int localRank(int rank) const { return localRank_[rank]; }
  const Nic& nic(NicRef ref) const { return hosts_[ref.host].node.nics[ref.nic]; }

  // Fabrics both hosts have an up NIC on, best first: kind (ib, roce, eth), then rate, then name. Empty when
  // they share none (they may still reach each other through IP routing, which the view cannot see).
  std::vector<int> sharedFabrics(int hostA, int hostB) const;
  // The fabrics two hosts stripe large messages over (multi-rail): the best fabric they share and every other
  // shared fabric of the same kind (a host's second InfiniBand rail, say), best first. Ethernet beside an RDMA
  // fabric is not a rail: it is the slow path, and between islands the one every host's traffic already needs.
  // Empty when they share none.
  std::vector<int> railFabrics(int hostA, int hostB) const;
  // The fabrics a pair's messages may take, in the order transports number them as paths: the best fabric they
  // share and, with multiRail, its rails (railFabrics), which ordinary messages stripe over; then every other
  // fabric they share, which only messages a schedule sends over it on purpose take (Connection::isendOn). Empty
  // when they share none.
  struct PairPaths {
    std::vector<int> fabrics;
    size_t rails = 0;  // the first `rails` of them
  };
  PairPaths pathFabrics(int hostA, int hostB, bool multiRail) const;
  // The fastest of the host's NICs on the fabric, in Mbit/s; 0 when unknown or the host is not on it.
  uint64_t rateOnFabric(int fabric, int host) const;
  // What the two hosts' NICs on the fabric can carry between them: the slower side's rate, ignoring a side whose
  // rate is unknown; 0 when both are unknown.
  uint64_t pairRateMbps(int fabric, int hostA, int hostB) const;
  // The GPU a rank drives: its host's GPU number localRank % count; nullptr when the host has none.
  const Gpu* gpuOf(int rank) const;

  // Hosts with ranks and NICs, fabrics, islands: for hetcomm-topo and the INFO summary at init. Values from a
  // topology file are marked '*' and the file is named (emulated or hand-written, not discovered).
  std::string format() const;

 private:
  Status buildFabrics();
  void buildIslands();

  std::vector<NodeDescription> nodes_;
  std::vector<Host> hosts_;
  std::vector<int> hostOfRank_, localRank_;
  std::vector<Fabric> fabrics_;
  std::vector<Island> islands_;
  std::vector<int> islandOfHost_;
};

// "0-3", "0,2,4-6": a sorted rank list, compactly.
std::string formatRankList(const std::vector<int>& ranks);

}  // namespace hetcomm::topo
