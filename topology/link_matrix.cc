#include "topology/link_matrix.h"

#include <algorithm>
#include <cmath>

#include "common/strings.h"

namespace hetcomm::topo {
namespace {

LinkClass classOf(NicKind kind) {
  switch (kind) {
    case NicKind::kIb:
      return LinkClass::kIb;
    case NicKind::kRoce:
      return LinkClass::kRoce;
    case NicKind::kEth:
      return LinkClass::kEth;
  }
  return LinkClass::kNone;
}

double alphaOf(NicKind kind) {
  return kind == NicKind::kIb ? kIbAlphaUs : kind == NicKind::kRoce ? kRoceAlphaUs : kEthAlphaUs;
}

uint64_t assumedRate(NicKind kind) {
  return kind == NicKind::kIb ? kAssumedIbMbps : kind == NicKind::kRoce ? kAssumedRoceMbps : kAssumedEthMbps;
}

// Between two hosts: the best fabric they share (with its sibling rails when multiRail), else kNone.
Link hostPairLink(const ClusterView& view, int hostA, int hostB, bool multiRail) {
  Link link;
  std::vector<int> shared = view.sharedFabrics(hostA, hostB);
  if (shared.empty()) {
    link.cls = LinkClass::kNone;
    link.alphaUs = kNoneAlphaUs;
    link.bwGBps = kNoneBwGBps;
    return link;
  }
  const Fabric& f = view.fabrics()[shared[0]];
  link.cls = classOf(f.kind);
  link.fabric = shared[0];
  link.alphaUs = alphaOf(f.kind);
  const std::vector<int> rails = multiRail ? view.railFabrics(hostA, hostB) : std::vector<int>{shared[0]};
  link.rails = static_cast<int>(rails.size());
  for (int r : rails) {
    uint64_t mbps = view.pairRateMbps(r, hostA, hostB);
    if (mbps == 0) {
      link.rateAssumed = true;
      mbps = assumedRate(view.fabrics()[r].kind);
    }
    link.bwGBps += static_cast<double>(mbps) / 8000.0;  // Mbit/s -> GB/s
  }
  return link;
}

}  // namespace

const char* linkClassLabel(LinkClass cls) {
  switch (cls) {
    case LinkClass::kSelf:
      return "X";
    case LinkClass::kSameHost:
      return "SHM";
    case LinkClass::kIb:
      return "IB";
    case LinkClass::kRoce:
      return "ROCE";
    case LinkClass::kEth:
      return "ETH";
    case LinkClass::kNone:
      return "NONE";
  }
  return "?";
}

LinkMatrix LinkMatrix::nominal(const ClusterView& view, bool multiRail) {
  LinkMatrix m;
  m.n_ = view.nranks();
  m.links_.resize(static_cast<size_t>(m.n_) * m.n_);
  for (int r = 0; r < m.n_; ++r) m.hostOfRank_.push_back(view.hosts()[view.hostOf(r)].name);

  // Host pairs first: ranks on the same two hosts share one answer.
  int nh = view.nhosts();
  std::vector<Link> hostLinks(static_cast<size_t>(nh) * nh);
  for (int a = 0; a < nh; ++a) {
    for (int b = 0; b < nh; ++b) {
      if (a != b) hostLinks[static_cast<size_t>(a) * nh + b] = hostPairLink(view, a, b, multiRail);
    }
  }
  for (int i = 0; i < m.n_; ++i) {
    for (int j = 0; j < m.n_; ++j) {
      Link& link = m.links_[static_cast<size_t>(i) * m.n_ + j];
      int hi = view.hostOf(i), hj = view.hostOf(j);
      if (i == j) {
        link = Link{LinkClass::kSelf, -1, 0.0, kShmBwGBps};
      } else if (hi == hj) {
        link = Link{LinkClass::kSameHost, -1, kShmAlphaUs, kShmBwGBps};
      } else {
        link = hostLinks[static_cast<size_t>(hi) * nh + hj];
      }
    }
  }
  return m;
}

Status LinkMatrix::setMeasured(int i, int j, double alphaUs, double bwGBps) {
  if (i < 0 || i >= n_ || j < 0 || j >= n_)
    return invalidArgument("link matrix: rank pair (%d, %d) out of range for %d ranks", i, j, n_);
  if (!std::isfinite(alphaUs) || alphaUs < 0 || !std::isfinite(bwGBps) || bwGBps <= 0)
    return invalidArgument(
        "link matrix: measured %d -> %d: alpha %g us, bandwidth %g GB/s (need alpha >= 0, "
        "bandwidth > 0)",
        i, j, alphaUs, bwGBps);
  Link& link = links_[static_cast<size_t>(i) * n_ + j];
  link.alphaUs = alphaUs;
  link.bwGBps = bwGBps;
  link.measured = true;
  link.rateAssumed = false;
  return okStatus();
}

std::string LinkMatrix::formatClasses() const {
  int width = std::max<int>(6, static_cast<int>(format("r%d", n_ - 1).size()) + 2);
  std::string out = format("%-*s", width, "");
  for (int j = 0; j < n_; ++j) out += format("%-*s", width, format("r%d", j).c_str());
  out += "host\n";
  for (int i = 0; i < n_; ++i) {
    out += format("%-*s", width, format("r%d", i).c_str());
    for (int j = 0; j < n_; ++j) out += format("%-*s", width, linkClassLabel(at(i, j).cls));
    out += hostOfRank_[i] + "\n";
  }
  out +=
      "\nLegend:\n"
      "  X    = self\n"
      "  SHM  = same host (shared memory)\n"
      "  IB   = InfiniBand fabric\n"
      "  ROCE = RoCE fabric\n"
      "  ETH  = Ethernet / IP fabric\n"
      "  NONE = no shared fabric seen (routed IP may still connect them)\n";
  return out;
}

std::string LinkMatrix::formatValues() const {
  auto cell = [&](const Link& l) {
    return format("%.3g/%.3g%s", l.alphaUs, l.bwGBps, l.measured ? "*" : l.rateAssumed ? "?" : "");
  };
  int width = 8;
  for (const Link& l : links_) width = std::max(width, static_cast<int>(cell(l).size()) + 2);
  auto endRow = [](std::string& s) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
    s += "\n";
  };
  std::string out = format("%-*s", width, "");
  for (int j = 0; j < n_; ++j) out += format("%-*s", width, format("r%d", j).c_str());
  endRow(out);
  for (int i = 0; i < n_; ++i) {
    out += format("%-*s", width, format("r%d", i).c_str());
    for (int j = 0; j < n_; ++j) out += format("%-*s", width, cell(at(i, j)).c_str());
    endRow(out);
  }
  out += "\nalpha us / bandwidth GB/s; * measured, ? link rate unknown (assumed), others nominal\n";
  return out;
}

}  // namespace hetcomm::topo
