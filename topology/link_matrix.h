// link_matrix.h: per rank pair, what joins the two ranks (LinkClass) and what moving bytes between them costs in
// the alpha-beta model: time(n bytes) = alphaUs + n * betaUsPerByte(). Nominal values come from the cluster view
// (the best fabric two hosts share and its NICs' rate); a probe replaces them with measured ones (setMeasured).
// The collectives' cost model reads it; hetcomm-topo prints it like `nvidia-smi topo -m`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/cluster.h"

namespace hetcomm::topo {

enum class LinkClass : uint8_t { kSelf, kSameHost, kIb, kRoce, kEth, kNone };
// Matrix cell labels: "X", "SHM", "IB", "ROCE", "ETH", "NONE".
const char* linkClassLabel(LinkClass cls);

// Nominal costs. Same host: shared memory. Across hosts the latency is the kind's typical one-way small-message
// latency (eth: TCP through the kernel, as collectives' default link) and the bandwidth is the link rate / 8.
constexpr double kShmAlphaUs = 1.0, kShmBwGBps = 25.0;
constexpr double kIbAlphaUs = 2.0, kRoceAlphaUs = 3.0, kEthAlphaUs = 20.0;
// When no NIC on a fabric says its rate (veth, some drivers), this is assumed and the link says so.
constexpr uint64_t kAssumedIbMbps = 100000, kAssumedRoceMbps = 100000, kAssumedEthMbps = 10000;
// Hosts with no fabric in common may still reach each other through routed IP; cost that as slow Ethernet.
constexpr double kNoneAlphaUs = kEthAlphaUs, kNoneBwGBps = 1.25;

struct Link {
  LinkClass cls = LinkClass::kNone;
  int fabric = -1;           // the ClusterView fabric for kIb / kRoce / kEth; -1 otherwise
  double alphaUs = 0;        // latency, microseconds
  double bwGBps = 0;         // bandwidth, GB/s (1e9 bytes per second); beta is its inverse
  bool measured = false;     // from a probe (setMeasured), not nominal
  bool rateAssumed = false;  // nominal bandwidth from kAssumed*Mbps: no NIC said its rate
  int rails = 1;             // fabrics the pair stripes over (ClusterView::railFabrics); bwGBps is their sum
  // Microseconds per byte.
  double betaUsPerByte() const { return 1e-3 / bwGBps; }
};

class LinkMatrix {
 public:
  // Nominal links for every rank pair of the view. Self: 0 us and shared-memory bandwidth. multiRail: a pair's
  // bandwidth is the sum of its rails' (ClusterView::railFabrics), as when its transport stripes over them;
  // otherwise that of the best shared fabric alone.
  static LinkMatrix nominal(const ClusterView& view, bool multiRail = false);

  int size() const { return n_; }
  // i, j in [0, size()).
  const Link& at(int i, int j) const { return links_[static_cast<size_t>(i) * n_ + j]; }
  // Replaces link i -> j (one direction: a probe measures each way) with measured values; the class stays.
  // Fails on ranks out of range, alphaUs < 0 or bwGBps <= 0 (not finite counts as bad too).
  Status setMeasured(int i, int j, double alphaUs, double bwGBps);

  // The class of every pair as a rank-by-rank table with each rank's host, and a legend.
  std::string formatClasses() const;
  // "alpha/bandwidth" of every pair (us / GB/s); '*' marks measured values, '?' an assumed link rate.
  std::string formatValues() const;

 private:
  int n_ = 0;
  std::vector<Link> links_;              // row-major, n_ * n_
  std::vector<std::string> hostOfRank_;  // host names, for the tables
};

}  // namespace hetcomm::topo
