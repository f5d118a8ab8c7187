// link_probe.h: what each kind of link of a communicator really costs, measured once at init.
//
// The nominal link matrix knows a link's class and its NICs' rate, not what a message pays on it (TCP through
// the kernel, a shaped veth, UCX's protocols). The probe measures alpha and bandwidth once per *link class*:
// pairs with the same class, fabric, nominal rate and transport behave alike, so one representative pair per
// class is enough, and the probe stays near a tenth of a second per class however many ranks there are. The results
// replace the nominal values of every pair of that class (LinkMatrix::setMeasured), so the cost model predicts
// from measured figures.
//
// Classes are probed one after another (a store barrier between them), so no two measurements share CPU or a
// link. Results are cached per cluster (HETCOMM_PROBE_CACHE, a directory), so later communicators of the same
// cluster, splits included, start at once. HETCOMM_PROBE=0 skips the probe; HETCOMM_PROBE=2 measures again and
// rewrites the cache.
//
// A cached figure must not mislead every later run, so a figure is cached only when it can be trusted: it
// agreed with its own repeat (two long streams within 25 %, two halves of the ping-pong within 2x) and the
// machine was not busy with other work while it was taken (ForeignLoad). Otherwise it serves this communicator only. A
// communicator whose collectives contradict cached figures by a wide margin drops the cache (Communicator), and the
// next init measures again.
//
// The same goes for each host's memory rates (probeMemoryRates): what one rank copies and reduces per second, in
// cache and out of it, which the cost model charges for the copies and reductions a schedule makes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/bootstrap/store.h"
#include "comm/transport_select.h"
#include "common/deadline.h"
#include "common/status.h"
#include "topology/cluster.h"
#include "topology/link_graph.h"
#include "topology/link_matrix.h"
#include "transports/transport.h"

namespace hetcomm::comm {

// One class of links and the pair that stands for it (a < b, the first such pair in rank order).
struct LinkClassProbe {
  std::string key;  // "IB|fabric-name|1600Mb|ucx": identifies the class in logs and in the cache
  topo::LinkClass cls = topo::LinkClass::kNone;
  int fabric = -1;
  uint64_t rateMbps = 0;
  transport::Kind kind = transport::Kind::kTcp;
  int a = -1, b = -1;
  size_t streamMsgBytes = 0;  // the stream's message size, from the nominal bandwidth (the same at both ends)
  // Filled by the probe (or the cache).
  double alphaUs = 0;
  double bwGBps = 0;
};

// The classes of the communicator's pairs. kindOf(i, j) is the transport of pair (i, j), the same on every rank.
std::vector<LinkClassProbe> linkClasses(const topo::ClusterView& view, const topo::LinkMatrix& links,
                                        const std::function<transport::Kind(int, int)>& kindOf);

// Everything the probe needs of the communicator being initialised. conns[p] is this rank's connection to p
// (null for itself); transports are the ones those connections belong to.
struct ProbeContext {
  int rank = 0;
  int nranks = 1;
  StoreClient* store = nullptr;
  std::string keyPrefix;  // the communicator's store keys
  std::vector<transport::Connection*> conns;
  std::vector<transport::Transport*> transports;
  Deadline deadline = Deadline::never();
  std::vector<int> localPids;  // the processes of this job on this machine (ForeignLoad)
  // Some machine of the job runs more ranks than it has CPUs (anyMachineOversubscribed). A waiting rank there must
  // give its CPU up for the peer to answer, so every message costs a switch: the ping-pong then sleeps between
  // messages instead of polling (HETCOMM_SPIN_US), and the cache keeps such figures apart.
  bool coresShared = false;
};

// Measures (or loads from the cache) every class, on every rank together, and writes the results into the
// classes. "source" says where they came from ("measured in 42 ms", "cache /path", "measured in 40 ms, not
// cached: ..."); *cacheFile, when the figures came from the cache or were written to it, names it (else empty).
// A cache written afresh drops what was learned against the figures it replaces. Collective.
Status probeLinkClasses(const ProbeContext& ctx, const topo::ClusterView& view, std::vector<LinkClassProbe>& classes,
                        std::string* source, std::string* cacheFile = nullptr);

// One host's memory rates, GB/s of output: memcpy, and a float32 sum of two inputs, over buffers of each size from
// 64 KiB (in a core's cache) up by 8x to `largestBytes` (larger than the caches). trusted: every size's repeats
// agreed and the thread was not held off the CPU while timing.
struct MemoryRates {
  std::vector<topo::MemoryRate> bySize;  // ascending bytes
  bool trusted = false;
  std::string why;  // when not trusted
};
MemoryRates measureMemoryRates(const std::vector<int>& ourPids, size_t largestBytes = 32 << 20);
// The rates as one line of text ("bytes copy reduce" per size), as the cache file and the ranks' exchange hold
// them, and back; parsing refuses anything but ascending sizes with positive, finite rates.
std::string formatMemoryRates(const std::vector<topo::MemoryRate>& bySize);
bool parseMemoryRates(const std::string& text, std::vector<topo::MemoryRate>* bySize);
// Every host's rates, in the view's host order: each host's first rank measures (or reads its host's cache),
// then every rank learns them all. Collective over the ranks.
Result<std::vector<MemoryRates>> probeMemoryRates(const ProbeContext& ctx, const topo::ClusterView& view);

// CPU spent on this machine by anything but our own ranks, from when it is made until busy() is asked: the
// machine's busy and stolen time (/proc/stat) less our ranks' (/proc/PID/stat). A figure taken while others used
// half a CPU or more describes the load, not the link.
class ForeignLoad {
 public:
  explicit ForeignLoad(std::vector<int> ourPids);
  double cpus() const;  // average foreign CPUs over the window
  bool busy(std::string* why) const;

 private:
  struct Sample {
    double wall = 0, busy = 0, ours = 0;
  };
  Sample sample() const;
  std::vector<int> pids_;
  Sample start_;
};

// Forgets a cache file (a communicator found it contradicted), and what was learned against its figures (the
// synthesised schedules' efficiency, synth_efficiency.h); an error says why it could not.
Status dropProbeCache(const std::string& path);
// Writes a cache file atomically (a temporary file, then rename), making its directory if need be.
Status writeCacheFile(const std::string& path, const std::string& text);

// Applies the results to every pair of each class, both directions.
Status applyProbe(const std::vector<LinkClassProbe>& classes, const topo::ClusterView& view,
                  const std::function<transport::Kind(int, int)>& kindOf, topo::LinkMatrix& links);

// Whether to probe at all (HETCOMM_PROBE != 0).
bool probeEnabled();

// What in this build changes the figures a rank measures: "" for an optimised build without instrumentation (the
// library as users run it), else its sanitizers and "unoptimised". A test suite's sanitizer passes probe the same
// links as its main build from the same home, a thread-sanitized rank at a tenth of the speed: their figures must
// not price the main build's collectives.
std::string buildFlavour();

// The cache: one text file per cluster, named by a hash of the hosts, the classes, whether cores are shared
// (ProbeContext::coresShared) and the build's flavour. Exposed for tests.
std::string probeCacheFile(const topo::ClusterView& view, const std::vector<LinkClassProbe>& classes,
                           bool coresShared = false, const std::string& flavour = buildFlavour());
// A host's memory rates' cache file ("" when caching is off), named by its id and the build's flavour.
std::string memoryCacheFile(const std::string& hostId, const std::string& flavour = buildFlavour());
// Reads cached values into classes; false when the file is missing, unreadable or does not match them exactly.
bool readProbeCache(const std::string& path, std::vector<LinkClassProbe>& classes);
// Writes atomically (temporary file, rename); an error says why.
Status writeProbeCache(const std::string& path, const std::vector<LinkClassProbe>& classes);

}  // namespace hetcomm::comm
