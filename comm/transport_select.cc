#include "comm/transport_select.h"

#include <algorithm>

#include "common/strings.h"

namespace hetcomm::comm {

using transport::Kind;

namespace {

bool isRdma(topo::NicKind k) { return k == topo::NicKind::kIb || k == topo::NicKind::kRoce; }

bool has(const std::vector<std::string>& ports, const std::string& port) {
  return !port.empty() && std::find(ports.begin(), ports.end(), port) != ports.end();
}

// "mlx5_0:1" for the host's RDMA port on the fabric: one of `verbsPorts` when the host has several ports there
// (rails into one fabric, HETCOMM_IB_HCA naming some), else its first; empty when its NICs there have no RDMA
// device behind them (emulated or Ethernet-only NICs).
std::string rdmaPortOn(const topo::ClusterView& view, const topo::Fabric& f, int host,
                       const std::vector<std::string>& verbsPorts) {
  std::string first;
  for (const auto& ref : f.nics) {
    if (ref.host != host) continue;
    const topo::Nic& nic = view.nic(ref);
    if (nic.rdmaDevice.empty()) continue;
    std::string port = nic.rdmaDevice + ":" + std::to_string(nic.rdmaPort);
    if (has(verbsPorts, port)) return port;
    if (first.empty()) first = port;
  }
  return first;
}

// A shared RDMA fabric (best first) on which both ends run verbs on their port; -1 when there is none.
int verbsFabric(const topo::ClusterView& view, const Offer& A, const Offer& B, int a, int b) {
  const int ha = view.hostOf(a), hb = view.hostOf(b);
  for (int fi : view.sharedFabrics(ha, hb)) {
    const topo::Fabric& f = view.fabrics()[fi];
    if (isRdma(f.kind) && has(A.verbsPorts, rdmaPortOn(view, f, ha, A.verbsPorts)) &&
        has(B.verbsPorts, rdmaPortOn(view, f, hb, B.verbsPorts)))
      return fi;
  }
  return -1;
}

std::string describeFabric(const topo::ClusterView& view, const topo::Fabric& f, int ha, int hb) {
  uint64_t rate = view.pairRateMbps(static_cast<int>(&f - view.fabrics().data()), ha, hb);
  return format("fabric %s (%s%s%s)", f.name.c_str(), topo::nicKindName(f.kind), rate ? ", " : "",
                rate ? topo::formatRateMbps(rate).c_str() : "");
}

// Empty when the kind can carry the pair's traffic; else why not.
std::string cannotServe(const topo::ClusterView& view, Kind k, const Offer& A, const Offer& B, int a, int b) {
  switch (k) {
    case Kind::kShm:
      return A.hostId == B.hostId ? "" : "shm reaches one host only";
    case Kind::kTcp:
      return "";
    case Kind::kUcx:
      if (!A.ucx) return format("rank %d: %s", a, A.ucxWhy.c_str());
      if (!B.ucx) return format("rank %d: %s", b, B.ucxWhy.c_str());
      return "";
    case Kind::kVerbs:
      if (A.verbsPorts.empty()) return format("rank %d: %s", a, A.verbsWhy.c_str());
      if (B.verbsPorts.empty()) return format("rank %d: %s", b, B.verbsWhy.c_str());
      // Verbs at both ends is not enough: RDMA needs a fabric that joins a port of each.
      if (verbsFabric(view, A, B, a, b) < 0) return "no shared RDMA fabric joins ports verbs runs on at both ends";
      return "";
  }
  return "unknown transport";
}

PairChoice automatic(const topo::ClusterView& view, const Offer& A, const Offer& B, int a, int b) {
  if (A.hostId == B.hostId) return {Kind::kShm, "same host"};
  const int ha = view.hostOf(a), hb = view.hostOf(b);
  const std::vector<int> shared = view.sharedFabrics(ha, hb);
  if (shared.empty()) return {Kind::kTcp, "no shared fabric in the topology: tcp over IP routing"};
  std::string rdmaNote;  // why the best RDMA fabric was not used with RDMA
  // Verbs on any shared RDMA fabric (best first), then UCX on one.
  for (Kind k : {Kind::kVerbs, Kind::kUcx})
    for (int fi : shared) {
      const topo::Fabric& f = view.fabrics()[fi];
      if (!isRdma(f.kind)) continue;
      std::string pa = rdmaPortOn(view, f, ha, A.verbsPorts), pb = rdmaPortOn(view, f, hb, B.verbsPorts);
      const bool ok = k == Kind::kVerbs ? has(A.verbsPorts, pa) && has(B.verbsPorts, pb) : A.ucx && B.ucx && !pa.empty() && !pb.empty();
      if (ok)
        return {k,
                format("%s: %s on %s / %s", describeFabric(view, f, ha, hb).c_str(), transport::kindName(k),
                       pa.c_str(), pb.c_str()),
                fi};
      if (!rdmaNote.empty()) continue;
      if (pa.empty() || pb.empty())
        rdmaNote = format("rank %d's NIC on it has no RDMA device", pa.empty() ? a : b);
      else if (A.verbsPorts.empty() || B.verbsPorts.empty())
        rdmaNote = format("rank %d: %s", A.verbsPorts.empty() ? a : b,
                          (A.verbsPorts.empty() ? A.verbsWhy : B.verbsWhy).c_str());
      else
        rdmaNote = "verbs cannot use its ports";
    }
  const topo::Fabric& best = view.fabrics()[shared.front()];
  std::string why = describeFabric(view, best, ha, hb) + ": tcp";
  if (isRdma(best.kind)) why += " (no RDMA at both ends: " + rdmaNote + ")";
  return {Kind::kTcp, why, shared.front()};
}

}  // namespace

Result<std::vector<Kind>> parseTransportList(const std::string& spec) {
  std::vector<Kind> out;
  for (std::string word : split(spec, ',')) {
    // Blanks around a name are not part of it: "shm, tcp" is how lists get written.
    word.erase(0, word.find_first_not_of(" \t"));
    word.erase(word.find_last_not_of(" \t") + 1);
    if (word.empty()) continue;
    bool found = false;
    for (Kind k : {Kind::kShm, Kind::kTcp, Kind::kUcx, Kind::kVerbs})
      if (word == transport::kindName(k)) {
        if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
        found = true;
      }
    if (!found)
      return invalidArgument("HETCOMM_TRANSPORT=%s: '%s' is not a transport (shm, tcp, ucx, verbs, or a comma list)",
                             spec.c_str(), word.c_str());
  }
  return out;
}

PairChoice choose(const topo::ClusterView& view, const std::vector<Offer>& offers, const std::vector<Kind>& forced,
                  int a, int b) {
  if (a > b) std::swap(a, b);  // the same answer at both ends
  const Offer& A = offers[a];
  const Offer& B = offers[b];
  std::string refused;
  for (Kind k : forced) {
    std::string whyNot = cannotServe(view, k, A, B, a, b);
    if (whyNot.empty()) {
      // Over the fastest fabric the hosts share (the first, best first), whatever the transport.
      const auto shared = view.sharedFabrics(view.hostOf(a), view.hostOf(b));
      const bool remote = A.hostId != B.hostId && !shared.empty();
      return {k,
              format("HETCOMM_TRANSPORT forces %s%s%s%s", transport::kindName(k), refused.empty() ? "" : " [",
                     refused.c_str(), refused.empty() ? "" : "]"),
              remote ? shared.front() : -1};
    }
    refused += format("%s%s: %s", refused.empty() ? "" : "; ", transport::kindName(k), whyNot.c_str());
  }
  PairChoice c = automatic(view, A, B, a, b);
  if (!refused.empty()) c.why += " [HETCOMM_TRANSPORT cannot serve this pair: " + refused + "]";
  return c;
}

bool mayNeed(Kind kind, const std::vector<Kind>& forced, const topo::NodeDescription& local) {
  if (std::find(forced.begin(), forced.end(), kind) != forced.end()) return true;
  // A list that starts with tcp serves every pair with it; nothing else listens.
  if (!forced.empty() && forced.front() == Kind::kTcp) return false;
  switch (kind) {
    case Kind::kShm:
    case Kind::kTcp:
      return true;
    case Kind::kUcx:
    case Kind::kVerbs:
      return std::any_of(local.nics.begin(), local.nics.end(), [](const topo::Nic& n) {
        return isRdma(n.kind) && !n.rdmaDevice.empty() && n.state == topo::NicState::kUp;
      });
  }
  return false;
}

}  // namespace hetcomm::comm
