// communicator_init.cc: how a communicator comes up (Communicator::init), step by step, each step a function:
//
//   1. listenAll        every transport this rank may need starts listening; its record says how to reach it
//   2. exchangeRecords  the records of all ranks through the store; from their nodes, the cluster view and the
//                       nominal link matrix, the same on every rank
//   3. choosePairs      a transport for every peer (transport_select.h), the same at both ends
//   4. routeTcpPaths    tcp's paths to each peer: the fabric chosen first, then the others the hosts share
//   5. connectPeers     every transport connects the peers it serves
//   6. probeLinks       each class of link measured (or taken from the cache) into the link matrix
//   7. joinEngine       the cost model's view of the group, how many ranks share this rank's CPUs, then the
//                       progress engine starts serving it
//
// and initModel, the same view for a cluster described in a file, with no processes behind it.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "comm/comm_params.h"
#include "comm/communicator.h"
#include "comm/cpu_sharing.h"
#include "comm/engine.h"
#include "comm/link_probe.h"
#include "comm/transport_select.h"
#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "topology/cluster.h"
#include "topology/host_identity.h"
#include "topology/link_matrix.h"
#include "topology/node.h"
#include "topology/node_json.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/ucx/ucx_transport.h"
#include "transports/verbs/verbs_transport.h"

namespace hetcomm::comm {

HC_PARAM_STR(ibHcaSpec, "IB_HCA", "")

namespace {

// What every rank publishes at init: where it runs, what it forces, what it can run (the Offer), and how each of
// its transports reaches it (blobs, by transport kind; empty for one it does not run).
struct PeerInfo {
  std::string hostName;
  std::string settings;  // what every rank must have alike (sharedSettings)
  int pid = 0;
  std::string cpus;             // the CPUs its process may run on: "0,1,5"
  std::string bootId;           // its kernel's boot id: ranks with the same one share the CPUs cpus names
  std::vector<std::byte> node;  // the serialized topo::NodeDescription
  Offer offer;
  std::array<std::vector<std::byte>, kKinds> blobs;
};

void putString(std::vector<std::byte>& out, std::string_view s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  auto* p = reinterpret_cast<const std::byte*>(&n);
  out.insert(out.end(), p, p + 4);
  auto* q = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), q, q + s.size());
}

bool getString(std::span<const std::byte>& in, std::string* s) {
  uint32_t n;
  if (in.size() < 4) return false;
  std::memcpy(&n, in.data(), 4);
  if (in.size() - 4 < n) return false;
  s->assign(reinterpret_cast<const char*>(in.data() + 4), n);
  in = in.subspan(4 + n);
  return true;
}

std::string_view asText(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

std::vector<std::byte> encodePeer(const PeerInfo& p) {
  std::vector<std::byte> out;
  // Named, not temporaries: a temporary in a range-for's initializer is gone before the loop body runs (C++20).
  const std::string ports = join(p.offer.verbsPorts, ","), pid = std::to_string(p.pid);
  for (std::string_view field :
       {std::string_view(p.offer.hostId), std::string_view(p.hostName), std::string_view(p.settings),
        std::string_view(pid), asText(p.node), std::string_view(p.offer.ucx ? "1" : "0"),
        std::string_view(p.offer.ucxWhy), std::string_view(ports), std::string_view(p.offer.verbsWhy),
        std::string_view(p.cpus), std::string_view(p.bootId)})
    putString(out, field);
  for (const auto& b : p.blobs) putString(out, asText(b));
  return out;
}

Result<PeerInfo> decodePeer(const std::vector<std::byte>& raw, int rank) {
  PeerInfo p;
  std::span<const std::byte> in(raw);
  std::string pid, node, ucx, ports;
  bool ok = getString(in, &p.offer.hostId) && getString(in, &p.hostName) && getString(in, &p.settings) &&
            getString(in, &pid) && getString(in, &node) && getString(in, &ucx) && getString(in, &p.offer.ucxWhy) &&
            getString(in, &ports) && getString(in, &p.offer.verbsWhy) && getString(in, &p.cpus) &&
            getString(in, &p.bootId);
  std::array<std::string, kKinds> blobs;
  for (auto& b : blobs) ok = ok && getString(in, &b);
  if (!ok) return remoteError("rank %d published a malformed peer record", rank);
  p.pid = std::atoi(pid.c_str());
  p.node = textBytes(node);
  p.offer.ucx = ucx == "1";
  for (const auto& port : split(ports, ','))
    if (!port.empty()) p.offer.verbsPorts.push_back(port);
  for (int k = 0; k < kKinds; ++k) p.blobs[k] = textBytes(blobs[k]);
  return p;
}

using TransportPtr = std::unique_ptr<transport::Transport>;

bool listed(transport::Kind k, const std::vector<transport::Kind>& forced) {
  return std::find(forced.begin(), forced.end(), k) != forced.end();
}

// Starts every transport this rank may need and fills in its offer and blobs. shm and tcp must start; verbs and
// UCX are optional, and the offer says why one did not.
Result<std::array<TransportPtr, kKinds>> startTransports(const transport::Config& tc,
                                                         const std::vector<transport::Kind>& forced,
                                                         const topo::NodeDescription& node, PeerInfo& me) {
  using transport::Kind;
  std::array<TransportPtr, kKinds> ts;
  auto listen = [&](Kind k, TransportPtr t) -> Status {
    HC_ASSIGN_OR_RETURN(me.blobs[static_cast<int>(k)], t->listen());
    ts[static_cast<int>(k)] = std::move(t);
    return okStatus();
  };
  me.offer.hostId = tc.hostId;
  if (mayNeed(Kind::kTcp, forced, node)) {
    HC_ASSIGN_OR_RETURN(auto t, transport::tcp::TcpTransport::create(tc));
    HC_TRY(listen(Kind::kTcp, std::move(t)));
  }
  if (mayNeed(Kind::kShm, forced, node)) {
    HC_ASSIGN_OR_RETURN(auto t, transport::shm::ShmTransport::create(tc));
    HC_TRY(listen(Kind::kShm, std::move(t)));
  }
  me.offer.verbsWhy = "no RDMA NIC on this host";
  if (mayNeed(Kind::kVerbs, forced, node)) {
    transport::verbs::Availability av = transport::verbs::discover(ibHcaSpec());
    Status st = okStatus();
    if (av.ports.empty()) {
      st = Status(av.code, av.reason);
    } else if (auto t = transport::verbs::VerbsTransport::create(tc, av); !t) {
      st = t.error();
    } else {
      st = listen(Kind::kVerbs, std::move(*t));
    }
    if (st.ok()) {
      for (const auto& port : av.ports) me.offer.verbsPorts.push_back(port.device + ":" + std::to_string(port.port));
    } else {
      me.offer.verbsWhy = "verbs unavailable: " + std::string(st.message());
      HC_INFO(Init, "%s; RDMA peers fall back to UCX or tcp", me.offer.verbsWhy.c_str());
    }
  }
  me.offer.ucxWhy = "UCX not started (no RDMA NIC on this host, and HETCOMM_TRANSPORT does not list ucx)";
  if (mayNeed(Kind::kUcx, forced, node)) {
    if (!listed(Kind::kUcx, forced) && !me.offer.verbsPorts.empty()) {
      me.offer.ucxWhy = "UCX not started: verbs serves this host's RDMA ports";
    } else {
      auto t = transport::ucx::UcxTransport::create(tc);
      Status st = t ? listen(Kind::kUcx, std::move(*t)) : t.error();
      me.offer.ucx = st.ok();
      if (!st.ok()) {
        me.offer.ucxWhy = "UCX unavailable: " + std::string(st.message());
        HC_INFO(Init, "%s", me.offer.ucxWhy.c_str());
      }
    }
  }
  return ts;
}

// This host as hwloc and sysfs see it, with HETCOMM_TOPO_FILE applied: discovered once per process (hwloc takes
// tens of milliseconds), reused by every communicator.
Result<topo::NodeDescription> localNode() {
  static const Result<topo::NodeDescription> node = topo::discoverLocalNode(topo::DiscoveryOptions::fromEnvironment());
  return node;
}

// The machine each rank runs on, as a name its machine's ranks share: CPUs are shared by the ranks of one kernel,
// which may be several hosts of the topology (an emulated cluster's network namespaces, containers), so by boot id
// where every rank reports one, else by host.
std::vector<std::string> machinesOf(const std::vector<PeerInfo>& peers, const topo::ClusterView& cluster) {
  const bool byBoot = std::none_of(peers.begin(), peers.end(), [](const PeerInfo& p) { return p.bootId.empty(); });
  std::vector<std::string> out;
  for (size_t p = 0; p < peers.size(); ++p)
    out.push_back(byBoot ? peers[p].bootId : format("host %d", cluster.hostOf(static_cast<int>(p))));
  return out;
}

std::vector<std::string> cpuListsOf(const std::vector<PeerInfo>& peers) {
  std::vector<std::string> out;
  for (const PeerInfo& p : peers) out.push_back(p.cpus);
  return out;
}

}  // namespace

// What init's steps hand on to each other.
struct Communicator::InitState {
  std::string forced;  // HETCOMM_TRANSPORT
  std::vector<transport::Kind> forcedKinds;
  transport::Config config;
  PeerInfo me;
  std::array<TransportPtr, kKinds> started;  // by kind: the transports this rank listens on
  std::vector<PeerInfo> peers;               // every rank's record
  std::vector<std::string> hosts;            // distinct host ids, for the log
  std::vector<std::string> machines;         // by rank: the machine it runs on (machinesOf), once the cluster is known
  std::vector<Offer> offers;
  std::array<std::vector<std::vector<std::byte>>, kKinds> blobs;  // by kind, by peer: the blob to connect with
  std::array<int, kKinds> served{};                               // by kind: peers it serves
};

Status Communicator::init(const UniqueIdContent& id, uint64_t commId) {
  log::ScopedRank scope(rank_, name());
  id_ = id;
  commId_ = commId;
  const Deadline deadline = Deadline::afterSec(options_.timeoutSec);
  HC_ASSIGN_OR_RETURN(store_, StoreClient::connect(id.addr, id.port, id.secret, deadline));
  InitState s;
  HC_TRY(listenAll(s));
  HC_TRY(exchangeRecords(s, deadline));
  HC_TRY(publishLiveness());
  HC_TRY(choosePairs(s));
  routeTcpPaths(s);
  HC_TRY(connectPeers(s, deadline));
  s.machines = machinesOf(s.peers, *cluster_);
  if (probeEnabled() && nranks_ > 1)
    HC_TRY(probeLinks(s, deadline));
  HC_TRY(joinEngine(s));
  logInit(s);
  return okStatus();
}

// Every transport this rank may need listens; after the exchange each pair uses one of them, chosen the same way
// at both ends from the same data (transport_select.h).
Status Communicator::listenAll(InitState& s) {
  s.forced = transportName();
  HC_ASSIGN_OR_RETURN(s.forcedKinds, parseTransportList(s.forced));
  transport::Config& tc = s.config;
  tc.rank = rank_;
  tc.nranks = nranks_;
  tc.secret = id_.secret;
  tc.commId = commId_;
  tc.timeoutSec = options_.timeoutSec;
  tc.hostId = topo::hostIdentity();
  HC_ASSIGN_OR_RETURN(topo::NodeDescription node, localNode());
  node.pid = static_cast<int>(getpid());
  s.me.hostName = topo::hostName();
  s.me.settings = sharedSettings();
  s.me.pid = node.pid;
  s.me.cpus = affinityList();
  s.me.bootId = topo::kernelBootId();
  s.me.node = topo::serializeNode(node);
  HC_ASSIGN_OR_RETURN(s.started, startTransports(tc, s.forcedKinds, node, s.me));
  return okStatus();
}

// Every rank's record through the store; every rank builds the same view of the cluster from the same records.
Status Communicator::exchangeRecords(InitState& s, Deadline deadline) {
  HC_ASSIGN_OR_RETURN(auto raw, store_->allGather(keyPrefix() + "/peers", rank_, nranks_, encodePeer(s.me), deadline));
  s.peers.resize(nranks_);
  std::vector<topo::NodeDescription> nodes(nranks_);
  for (int p = 0; p < nranks_; ++p) {
    HC_ASSIGN_OR_RETURN(s.peers[p], decodePeer(raw[p], p));
    if (s.peers[p].settings != s.me.settings)
      return invalidUsage("rank %d has %s but rank %d has %s: every rank must have the same (it picks transports and "
                          "plans collectives with its peers alike)",
                          rank_, s.me.settings.c_str(), p, s.peers[p].settings.c_str());
    if (std::find(s.hosts.begin(), s.hosts.end(), s.peers[p].offer.hostId) == s.hosts.end())
      s.hosts.push_back(s.peers[p].offer.hostId);
    auto n = topo::deserializeNode(s.peers[p].node);
    if (!n)
      return Status(n.error().code(),
                    format("rank %d's node description: %s", p, std::string(n.error().message()).c_str()));
    nodes[p] = std::move(*n);
  }
  HC_ASSIGN_OR_RETURN(topo::ClusterView view, topo::ClusterView::build(std::move(nodes)));
  cluster_ = std::make_shared<const topo::ClusterView>(std::move(view));
  links_ = std::make_shared<topo::LinkMatrix>(topo::LinkMatrix::nominal(*cluster_, multiRail() != 0));
  s.offers.resize(nranks_);
  for (int p = 0; p < nranks_; ++p) s.offers[p] = s.peers[p].offer;
  return okStatus();
}

// A transport for every peer, and which pairs of hosts talk over tcp (the transport that takes a message over the
// fabric it is told to: the link graph offers schedules a way per shared fabric only there).
Status Communicator::choosePairs(InitState& s) {
  choices_.assign(nranks_, PairChoice{});
  for (auto& b : s.blobs) b.resize(nranks_);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    choices_[p] = choose(*cluster_, s.offers, s.forcedKinds, rank_, p);
    const int k = static_cast<int>(choices_[p].kind);
    if (s.peers[p].blobs[k].empty() || !s.started[k])
      return internalError("transport selection chose %s for ranks %d and %d, which one of them does not run",
                           transport::kindName(choices_[p].kind), rank_, p);
    s.blobs[k][p] = s.peers[p].blobs[k];
    ++s.served[k];
  }
  const int nh = cluster_->nhosts();
  tcpBetweenHosts_.assign(static_cast<size_t>(nh) * nh, 0);
  for (int a = 0; a < nh; ++a)
    for (int b = 0; b < nh; ++b)
      if (a != b)
        tcpBetweenHosts_[static_cast<size_t>(a) * nh + b] =
            choose(*cluster_, s.offers, s.forcedKinds, cluster_->hosts()[a].ranks[0], cluster_->hosts()[b].ranks[0])
                .kind == transport::Kind::kTcp;
  return okStatus();
}

// TCP dials each peer first at its address on the fabric chosen for the pair and, where the two hosts share
// several fabrics of that kind (multi-rail), stripes over all of them in proportion to their rates. Every other
// fabric the two share is a path too (weight 0), for the messages a synthesised schedule sends over it: path i is
// ClusterView::pathFabrics' fabric i, as the link graph numbers it (topo::LinkGraph::Way::path).
void Communicator::routeTcpPaths(InitState& s) {
  TransportPtr& tcp = s.started[static_cast<int>(transport::Kind::kTcp)];
  if (!tcp) return;
  std::vector<std::vector<transport::Transport::Path>> paths(nranks_);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || choices_[p].fabric < 0) continue;
    const int me = cluster_->hostOf(rank_), them = cluster_->hostOf(p);
    topo::ClusterView::PairPaths pp = cluster_->pathFabrics(me, them, multiRail() != 0);
    if (pp.fabrics.empty() || pp.fabrics.front() != choices_[p].fabric) pp = {{choices_[p].fabric}, 1};
    for (size_t i = 0; i < pp.fabrics.size(); ++i) {
      const int f = pp.fabrics[i];
      const double weight =
          i < pp.rails ? std::max<double>(1, static_cast<double>(cluster_->pairRateMbps(f, me, them))) : 0;
      for (const topo::NicRef& ref : cluster_->fabrics()[f].nics)
        if (ref.host == them)
          for (const std::string& cidr : cluster_->nic(ref).addresses)
            paths[p].push_back({cidr.substr(0, cidr.find('/')), weight, static_cast<int>(i)});
    }
  }
  tcp->preferPaths(std::move(paths));
}

// Every rank connects in the same order (shm, verbs, ucx, tcp), and a transport's connectAll only waits for peers
// it serves, so no two ranks wait on each other crosswise. Transports that serve nobody are dropped.
Status Communicator::connectPeers(InitState& s, Deadline deadline) {
  conns_.resize(nranks_);
  for (transport::Kind kind :
       {transport::Kind::kShm, transport::Kind::kVerbs, transport::Kind::kUcx, transport::Kind::kTcp}) {
    const int k = static_cast<int>(kind);
    if (!s.served[k]) continue;
    auto* shm = kind == transport::Kind::kShm ? static_cast<transport::shm::ShmTransport*>(s.started[k].get()) : nullptr;
    const bool slots = shm && shareHostSlots(s);
    if (slots) shm->shareHostRegion(HostSlots::regionBytes(nranks_));
    HC_ASSIGN_OR_RETURN(auto c, s.started[k]->connectAll(s.blobs[k], deadline));
    if (slots) {
      slots_ = std::make_unique<HostSlots>(shm->hostRegion(), rank_, nranks_);
      slots_->setWake([shm](int peer) { shm->wakePeer(peer); });
    }
    for (int p = 0; p < nranks_; ++p)
      if (c[p]) conns_[p] = std::move(c[p]);
    transports_.push_back(std::move(s.started[k]));
  }
  connPtrs_.resize(nranks_);
  for (int p = 0; p < nranks_; ++p) connPtrs_[p] = conns_[p].get();
  return okStatus();
}

// Small collectives go through host slots when every rank is on this host and every pair talks over shm: decided
// from what every rank knows alike (the cluster view, the offers, HETCOMM_TRANSPORT), so all decide the same.
bool Communicator::shareHostSlots(const InitState& s) const {
  if (nranks_ < 2 || nranks_ > HostSlots::kMaxRanks || cluster_->nhosts() != 1) return false;
  for (int a = 0; a < nranks_; ++a)
    for (int b = a + 1; b < nranks_; ++b)
      if (choose(*cluster_, s.offers, s.forcedKinds, a, b).kind != transport::Kind::kShm) return false;
  return true;
}

// The cost model's view of the whole group, then the engine starts serving the communicator: it is ready.
Status Communicator::joinEngine(const InitState& s) {
  std::vector<int> sameHosts(cluster_->nhosts());
  std::iota(sameHosts.begin(), sameHosts.end(), 0);
  group_ = groupView(rank_, *cluster_, *links_, sameHosts);
  group_.lateReceiveFree.assign(nranks_, 0);
  if (slots_) group_.hostSlotBytes = HostSlots::kSlotBytes;
  for (int p = 0; p < nranks_; ++p)
    if (conns_[p]) group_.lateReceiveFree[p] = conns_[p]->lateReceiveIsFree(chunkBytes_);
  sendSeq_.assign(nranks_, 0);
  recvSeq_.assign(nranks_, 0);
  for (auto& t : transports_) waitFds_.push_back(t->waitFd());
  std::vector<bool> sameMachine(nranks_);
  for (int p = 0; p < nranks_; ++p) sameMachine[p] = s.machines[p] == s.machines[rank_];
  const CpuSharing sharing = cpuSharing(cpuListsOf(s.peers), sameMachine, rank_);
  Engine::get().noteCpuSharing(sharing.ranks, sharing.cpus);
  HC_TRY(Engine::get().attach(this, waitFds_));
  attached_ = true;
  setState(kReady);
  return okStatus();
}

void Communicator::logInit(const InitState& s) const {
  if (rank_ == 0 || log::enabled(log::kTrace, log::kInit)) {
    HC_INFO(Init, "init: %d ranks on %zu host%s, comm id %016llx; chunk %s, algo %s%s", nranks_, s.hosts.size(),
            s.hosts.size() == 1 ? "" : "s", (unsigned long long)commId_, humanBytes(chunkBytes_).c_str(),
            forcedAlgo_.empty() ? "auto" : forcedAlgo_.c_str(),
            s.forced.empty() ? "" : (", HETCOMM_TRANSPORT=" + s.forced).c_str());
    logTransportChoices();
  }
  if (rank_ == 0 && log::enabled(log::kInfo, log::kTopo)) {
    for (const auto& line : hetcomm::split(cluster_->format(), '\n'))
      if (!line.empty()) HC_INFO(Topo, "%s", line.c_str());
    for (const auto& line : hetcomm::split(links_->formatClasses(), '\n'))
      if (!line.empty()) HC_INFO(Topo, "%s", line.c_str());
  }
  for (int p = 0; p < nranks_; ++p)
    if (conns_[p])
      HC_TRACE(Init, "peer %d (pid %d on %s): %s: %s", p, s.peers[p].pid, s.peers[p].hostName.c_str(),
               conns_[p]->describe().c_str(), choices_[p].why.c_str());
  if (rank_ == 0 && log::enabled(log::kInfo, log::kColl)) logAlgorithmTable();
}

// Measures each class of link (or takes the cached figures) and puts the results into the link matrix.
Status Communicator::probeLinks(const InitState& s, Deadline deadline) {
  // Every rank needs the transport of every pair to name the classes alike: choose() is the same pure function
  // each end used for its own pairs.
  std::vector<transport::Kind> kinds(size_t(nranks_) * nranks_, transport::Kind::kShm);
  for (int i = 0; i < nranks_; ++i)
    for (int j = i + 1; j < nranks_; ++j)
      kinds[size_t(i) * nranks_ + j] = kinds[size_t(j) * nranks_ + i] =
          choose(*cluster_, s.offers, s.forcedKinds, i, j).kind;
  auto kindOf = [&](int i, int j) { return kinds[size_t(i) * nranks_ + j]; };
  std::vector<LinkClassProbe> classes = linkClasses(*cluster_, *links_, kindOf);
  ProbeContext ctx;
  ctx.rank = rank_;
  ctx.nranks = nranks_;
  ctx.store = store_.get();
  ctx.keyPrefix = keyPrefix();
  ctx.conns = connPtrs_;
  for (auto& t : transports_) ctx.transports.push_back(t.get());
  ctx.deadline = deadline;
  // The processes of this job that load this rank's CPUs are those on its machine (one kernel), not those of its
  // host name: two machines cloned from one image share a name, and an emulated cluster's hosts share a kernel.
  ctx.coresShared = anyMachineOversubscribed(cpuListsOf(s.peers), s.machines);
  for (int r = 0; r < nranks_; ++r)
    if (s.machines[r] == s.machines[rank_]) ctx.localPids.push_back(s.peers[r].pid);
  std::string source;
  HC_TRY(probeLinkClasses(ctx, *cluster_, classes, &source, &probeCacheFile_));
  if (rank_ == 0)
    for (const LinkClassProbe& c : classes) {
      const topo::Link& nominal = links_->at(c.a, c.b);
      HC_INFO(Init, "link probe (%s): %s: %.1f us, %.3f GB/s (nominal %.1f us, %.3f GB/s; pair %d-%d)", source.c_str(),
              c.key.c_str(), c.alphaUs, c.bwGBps, nominal.alphaUs, nominal.bwGBps, c.a, c.b);
    }
  HC_ASSIGN_OR_RETURN(memoryRates_, probeMemoryRates(ctx, *cluster_));
  HC_TRY(loadSynthEfficiency(deadline));
  return applyProbe(classes, *cluster_, kindOf, *links_);
}

Status Communicator::loadSynthEfficiency(Deadline deadline) {
  if (probeCacheFile_.empty()) return okStatus();  // the same on every rank: nothing kept, nothing learned
  std::string text;  // rank 0's learned figures, one per kind; empty where it does not learn
  if (rank_ == 0 && synthLearning()) {
    efficiencyFile_ = synthEfficiencyFile(probeCacheFile_, *cluster_);
    if (auto log = readSynthEfficiency(efficiencyFile_))
      efficiency_ = std::move(*log);
    else
      HC_INFO(Init, "%s: learning it afresh", std::string(log.error().message()).c_str());
    for (double v : efficiency_.learnedAll()) text += format("%.17g ", v);
  }
  HC_ASSIGN_OR_RETURN(auto all, store_->allGather(keyPrefix() + "/synth-efficiency", rank_, nranks_,
                                                  textBytes(text),
                                                  deadline));
  if (all[0].empty()) return okStatus();
  std::istringstream in(bytesText(all[0]));
  std::string line;
  for (size_t k = 0; k < coll::kCollKinds; ++k) {
    double v = -1;
    if (!(in >> v) || !std::isfinite(v) || v < 0 || v > SynthEfficiency::kHighest)
      return remoteError("rank 0 sent a malformed synthesised-schedule efficiency (kind %zu)", k);
    learnedEfficiency_[k] = v;
    if (rank_ == 0 && v > 0)
      line += format(" %s %.2f (%zu calls)", coll::name(static_cast<coll::CollKind>(k)), v,
                     efficiency_.observations(static_cast<coll::CollKind>(k)));
  }
  if (!line.empty()) HC_INFO(Init, "synthesised schedules' efficiency, learned in %s:%s", efficiencyFile_.c_str(), line.c_str());
  return okStatus();
}

Status Communicator::initModel(std::vector<topo::NodeDescription> nodes) {
  if (static_cast<int>(nodes.size()) != nranks_)
    return internalError("initModel: %zu node descriptions for %d ranks", nodes.size(), nranks_);
  HC_ASSIGN_OR_RETURN(topo::ClusterView view, topo::ClusterView::build(std::move(nodes)));
  cluster_ = std::make_shared<const topo::ClusterView>(std::move(view));
  links_ = std::make_shared<topo::LinkMatrix>(topo::LinkMatrix::nominal(*cluster_, multiRail() != 0));
  const int nh = cluster_->nhosts();
  tcpBetweenHosts_.assign(static_cast<size_t>(nh) * nh, 1);
  for (int h = 0; h < nh; ++h) tcpBetweenHosts_[static_cast<size_t>(h) * nh + h] = 0;
  choices_.assign(nranks_, PairChoice{});
  for (int p = 0; p < nranks_; ++p) {
    const bool local = cluster_->hostOf(p) == cluster_->hostOf(rank_);
    choices_[p] = {local ? transport::Kind::kShm : transport::Kind::kTcp,
                   local ? "model: same host" : "model: any fabric the hosts share", -1};
  }
  std::vector<int> sameHosts(nh);
  std::iota(sameHosts.begin(), sameHosts.end(), 0);
  group_ = groupView(rank_, *cluster_, *links_, sameHosts);
  group_.lateReceiveFree.assign(nranks_, 0);
  model_ = true;
  setState(kReady);
  return okStatus();
}

// One INFO line per (transport, reason) this rank uses: "rank 0: transport shm to ranks 1-3: same host".
void Communicator::logTransportChoices() const {
  std::vector<std::pair<const PairChoice*, std::vector<int>>> groups;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    const PairChoice& c = choices_[p];
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first->kind == c.kind && g.first->why == c.why; });
    if (it == groups.end())
      groups.push_back({&c, {p}});
    else
      it->second.push_back(p);
  }
  for (const auto& [c, ranks] : groups)
    HC_INFO(Init, "rank %d: transport %s to rank%s %s: %s", rank_, transport::kindName(c->kind),
            ranks.size() == 1 ? "" : "s", topo::formatRankList(ranks).c_str(), c->why.c_str());
}

// One INFO line per collective: the algorithm the selection picks, with its predicted time, at a few sizes.
void Communicator::logAlgorithmTable() const {
  const coll::GroupView& g = group_;
  for (int k = 0; k <= static_cast<int>(coll::CollKind::kAlltoAll); ++k) {
    std::string line;
    for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{1} << 20, size_t{64} << 20}) {
      coll::Args a;
      a.kind = static_cast<coll::CollKind>(k);
      a.count = bytes / 4;
      auto sel = coll::selectAlgorithm(a, g, forcedAlgo_);
      if (!sel) continue;
      line += format("  %s: %.*s ~%.0f us", humanBytes(bytes).c_str(), (int)sel->algo->name().size(),
                     sel->algo->name().data(), sel->predictedUs);
    }
    HC_INFO(Coll, "algorithm %-13s%s", coll::name(static_cast<coll::CollKind>(k)), line.c_str());
  }
}

}  // namespace hetcomm::comm
