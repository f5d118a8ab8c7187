// communicator.h: a communicator is a group of ranks with a connection to each peer, a queue of operations, and
// a sticky error. Life: init (bootstrap through the store, connect the transport), operations, then finalize /
// destroy / abort. Everything on the data path (connections, the running executor, scratch) belongs to the
// progress engine thread; API threads only queue ops and read state.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/executor.h"
#include "comm/bootstrap/store.h"
#include "comm/host_slots.h"
#include "comm/link_probe.h"
#include "comm/op.h"
#include "comm/synth_efficiency.h"
#include "comm/transport_select.h"
#include "comm/unique_id.h"
#include "common/deadline.h"
#include "transports/transport.h"

namespace hetcomm::topo {
class ClusterView;
struct Gpu;
class LinkMatrix;
}  // namespace hetcomm::topo

namespace hetcomm::comm {

struct CommOptions {
  double timeoutSec = 300;  // HETCOMM_TIMEOUT unless the config says otherwise
  std::string name;         // config commName, for logs
};

// A child communicator's id (split, shrink): the same on every member, different for every call and color.
uint64_t childCommId(uint64_t parent, uint64_t seq, int64_t color);

// Whether `rank`'s own time of a call is the whole call's, which the cost model predicts: it holds its result only
// once every rank's data has come (allreduce, allgather, reduce-scatter, alltoall, a reduce it roots, a broadcast
// rooted on another host). A broadcast's root, or a rank on the root's host, is done once the data has left the
// host, and a reduce's other ranks once their part has: the root of a 1 MiB broadcast on an emulated cluster took
// 0.2-0.4 ms against the 41 ms predicted for the whole call (dualnic-4 at 0.3 of its rates), and dropped the
// probe's cache (checkPrediction) at every run that broadcast.
bool timesWholeCall(const coll::Args& a, const coll::GroupView& g, int rank);

class Communicator {
 public:
  enum State : int { kInitializing, kReady, kInitFailed, kFinalized };

  Communicator(int rank, int nranks, CommOptions options);
  ~Communicator();

  // Collective over the ranks: joins the store at id, exchanges addresses, connects. commId names this
  // communicator's keys and connections.
  Status init(const UniqueIdContent& id, uint64_t commId);
  // A model communicator (hetcommCommInitModel): the cluster the nodes describe, one rank per node, with nominal
  // link figures and no processes behind it. Planning calls answer as on the real cluster (this is its rank 0);
  // operations, split and finalize are refused. Every pair of hosts is assumed to take the tcp transport's paths
  // (a message may take any fabric the two share), as on the emulated clusters.
  Status initModel(std::vector<topo::NodeDescription> nodes);
  bool isModel() const { return model_; }
  // Collective over this communicator; *out is null for HETCOMM_SPLIT_NOCOLOR.
  Status split(int color, int key, const CommOptions& options, std::unique_ptr<Communicator>* out);
  // Collective over the ranks that go on (communicator_shrink.cc): the survivors agree, through the store, on
  // who is left (every rank but those excluded by any caller, those whose process is gone, and those that did not
  // come within the timeout) and build a communicator of them, in the order of their ranks here. abortFirst fails
  // this communicator's queued and running operations first (HETCOMM_SHRINK_ABORT).
  Status shrink(const std::vector<int>& exclude, bool abortFirst, const CommOptions& options,
                std::unique_ptr<Communicator>* out);
  // Fails every queued and running operation and every later one, tells the peers, and returns when none is left
  // running; the communicator stays, to be shrunk or destroyed (hetcommCommRevoke).
  void revoke();

  // Queues op (validated by the caller). Returns the comm's sticky error instead if it has one.
  Status enqueue(std::shared_ptr<Op> op);
  // A lone blocking send or receive (no stream, no group) while nothing else is queued or running: issued and
  // polled on the calling thread, with no Op and no queue (a small message's latency is mostly that bookkeeping).
  //   kDone: it finished here.
  //   kHandedOver: it was issued but needs longer, or failed: *op is now the current operation, waited for as any
  //     other (the timeout, a peer's failure and abort apply as usual).
  //   kNotTaken: nothing was issued (another thread is in a pass, the communicator is busy or failed, the peer is
  //     this rank): queue an Op.
  // The send or receive takes its sequence number here when it is issued.
  enum class Here { kNotTaken, kDone, kHandedOver };
  Here sendRecvHere(bool isSend, std::byte* buf, size_t bytes, kernels::DataType dtype, int peer,
                    std::shared_ptr<Op>* op);
  // The same for a blocking allreduce that the host slots run (every rank on this host over shm, the buffer fits,
  // the cost model or HETCOMM_ALGO chooses slots): args as the Op's; the collective sequence number is taken here.
  Here allReduceHere(const coll::Args& args, const void* send, void* recv, std::shared_ptr<Op>* op);
  uint64_t nextCollectiveSeq();
  uint32_t nextP2pSeq(int peer, bool send);
  // Gives back the sequence numbers of point-to-point calls that were refused before being queued (the last ones
  // taken for those peers), so later calls still pair up with the peers' calls.
  void releaseP2pSeqs(const std::vector<coll::P2pOp>& ops);

  Status finalize();
  // Waits for queued work (bounded by the timeout), then leaves the engine and closes everything.
  Status destroy();
  // Fails queued work now, tells the peers, leaves the engine, closes everything.
  void abort();

  // Any thread: fails the communicator with why at the engine's next pass (a staging copy failed: the operations
  // queued behind it can never run, and the peers must hear why).
  void failFromOutside(const Status& why);

  // No operation queued or running (any thread).
  bool idle();
  // The thread running a pass (Engine) only: advance the current operation; true when anything moved.
  bool progressOnce();
  // Engine thread only: the deadline of the running operation (never when idle).
  Deadline deadline() const;
  // Engine thread only, right before it sleeps: false when a transport has work waiting. Starts the running
  // operation's timeout if it has not started yet.
  bool readyToSleep();

  // The algorithm a call with these arguments would run, and its predicted time (after init; any thread).
  Result<coll::Selection> selectFor(const coll::Args& args) const {
    return coll::selectAlgorithm(args, group_, forcedAlgo_);
  }  // The selection a communicator of exactly these ranks of this one, in this order, would make (ranks[0] its rank
  // 0), from this one's topology and link figures, without building it: what a planner asks of candidate groups
  // (hetcommCommPredict). A kSendRecv args with no p2p ops means one message of args.count elements from the
  // group's rank 0 to its rank 1. The views of the last groups asked about are kept, so asking again at another
  // size is cheap. Errors: an empty list, a rank out of range or listed twice, sendrecv on fewer than 2 ranks.
  Result<coll::Selection> predictFor(const std::vector<int>& ranks, coll::Args args);

  // Where rank r runs: its host and island, numbered densely from 0 (after init).
  int hostOf(int r) const { return group_.hostOf(r); }
  int islandOf(int r) const { return group_.islandOf(r); }
  // The GPU rank r drives, from the topology; nullptr when its host has none (after init).
  const topo::Gpu* gpuOf(int r) const;

  // The transport chosen for a peer and why (after init).
  const PairChoice& transportTo(int peer) const { return choices_[peer]; }

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  State state() const { return static_cast<State>(state_.load(std::memory_order_acquire)); }
  void setState(State s) { state_.store(s, std::memory_order_release); }
  Status asyncError() const;
  const char* name() const { return options_.name.empty() ? nullptr : options_.name.c_str(); }
  const CommOptions& options() const { return options_; }

  // This process serves the rendezvous store the communicator uses: finalize then waits until every rank is
  // past its barrier, so the store does not vanish under a rank still reading from it.
  void setHostsStore(bool hosts) { hostsStore_ = hosts; }

  // Non-blocking init (config blocking = 0) runs init on this thread.
  std::thread initThread;
  Status initError;

 private:
  void setBusy(bool busy);
  // init's steps, in order (communicator_init.cc); InitState is what they hand on.
  struct InitState;
  Status listenAll(InitState& s);
  Status exchangeRecords(InitState& s, Deadline deadline);
  Status choosePairs(InitState& s);
  void routeTcpPaths(InitState& s);
  Status connectPeers(InitState& s, Deadline deadline);
  bool shareHostSlots(const InitState& s) const;
  Status publishLiveness();
  // A store barrier of every rank that fails at once, naming the rank, when one's process ends before it arrives
  // (instead of waiting out the deadline). `what`: "it reached finalize".
  Status barrierOfTheLiving(const std::string& prefix, const char* what, Deadline deadline);
  std::string livenessKey(int rank) const;
  Result<std::vector<int>> agreeOnSurvivors(const std::string& prefix, const std::vector<int>& exclude,
                                            Deadline deadline);
  Result<std::vector<int>> decideSurvivors(const std::string& prefix, std::vector<char> excluded, Deadline deadline);
  Status joinEngine(const InitState& s);
  void logInit(const InitState& s) const;
  void logAlgorithmTable() const;
  void logTransportChoices() const;
  // rank: this rank's number in the view's group; parentHost[h]: this communicator's host number of view's host h
  // (its own view: h itself).
  coll::GroupView groupView(int rank, const topo::ClusterView& view, const topo::LinkMatrix& links,
                            const std::vector<int>& parentHost) const;
  // Rank 0: a finished collective's time against its prediction; figures from the probe cache that collectives
  // contradict by a wide margin, again and again, are dropped so that the next init measures afresh.
  bool checksPrediction(const Op& op) const;  // a collective large enough that its time tests the link figures
  void checkPrediction(const Op& op);
  // What the synthesised schedules reach of their packing here (synth_efficiency.h): rank 0 reads what earlier
  // communicators of the cluster learned and every rank takes it (collective, at init); rank 0 learns from its
  // large synthesised collectives and writes the file (at most once a second while it runs, and at the end).
  Status loadSynthEfficiency(Deadline deadline);
  void learnEfficiency(const Op& op);
  void saveEfficiency();
  Status probeLinks(const InitState& s, Deadline deadline);
  void fail(const Status& why);  // engine thread, or a thread that detached the comm
  void finishOp(const std::shared_ptr<Op>& op, Status st);
  // What runs the current operation: exec_ (a schedule), slots_, or one_ (a lone send or receive, which needs
  // neither a schedule nor an executor: its latency is every small message's).
  enum class Runner : uint8_t { kSchedule, kSlots, kOne };
  // sendRecvHere / allReduceHere: with the pass lock held, claims the idle communicator (nothing current, queued or
  // failed) for the calling thread, running take() under mu_ (it takes the call's sequence number).
  template <class Take>
  bool claimIdle(Take&& take);
  // ... and makes a call that needs longer (or failed with failure) the current operation, to be waited for.
  Here handOver(std::shared_ptr<Op> rest, Runner runner, const Status& failure, std::shared_ptr<Op>* op);
  // The error an operation that failed while running fails the communicator with.
  Status opFailed(const Op& op, const Status& why) const;
  uint64_t stepCollectiveSeq();  // under mu_
  Status startOp(const std::shared_ptr<Op>& op);
  bool startOne(const Op& op, Status* st);  // a lone send or receive: issued at once
  void markRunning(Op& op);
  Result<bool> advanceCurrent(bool* moved);
  std::string waitingOn() const;
  Result<std::shared_ptr<const coll::Schedule>> planFor(Op& op);  // and sets op.predictedUs
  std::string keyPrefix() const;
  // The settings every rank must share to choose the same transports and build the same schedules
  // (HETCOMM_TRANSPORT, _ALGO, _CHUNK_BYTES, _MULTIRAIL), as text: init compares every rank's.
  std::string sharedSettings() const;
  // What a collective tells its ring neighbour, so that ranks calling different collectives fail at once.
  using DescriptorBytes = HostSlots::Descriptor;
  DescriptorBytes descriptor(const Op& op) const;
  Status checkDescriptor(const Op& mine, std::span<const std::byte> theirs, int from) const;
  void closeConnections(const Status& why);
  Status progressTransports();

  const int rank_, nranks_;
  CommOptions options_;
  std::atomic<int> state_{kInitializing};
  uint64_t commId_ = 0;
  UniqueIdContent id_;
  std::unique_ptr<StoreClient> store_;
  std::vector<std::unique_ptr<transport::Transport>> transports_;  // those that serve at least one peer
  std::vector<std::unique_ptr<transport::Connection>> conns_;      // by rank
  std::vector<transport::Connection*> connPtrs_;
  std::vector<PairChoice> choices_;  // by rank: the transport to each peer, and why
  std::vector<int> waitFds_;
  coll::GroupView group_;                             // what planners see: late receives, hosts, islands, links
  std::shared_ptr<const topo::ClusterView> cluster_;  // who is where, built at init from every rank's node
  std::shared_ptr<topo::LinkMatrix> links_;           // nominal alpha/beta per pair, for the cost model
  std::vector<MemoryRates> memoryRates_;              // per host (probed), for the cost model's memory terms
  std::string probeCacheFile_;                        // the cache the link figures came from or went to
  std::array<double, coll::kCollKinds> learnedEfficiency_{};  // per kind, learned at init (0: the default)
  std::string efficiencyFile_;                                // rank 0, where learning: the file it keeps
  SynthEfficiency efficiency_;                                // rank 0: its observations, those read included
  bool efficiencyDirty_ = false;
  double efficiencyWrittenSec_ = 0;
  std::vector<char> tcpBetweenHosts_;                 // per host pair: its transport is tcp (it takes a path)
  std::mutex predictMu_;                              // guards predicted_
  // predictFor's views of the groups asked about last, most recent last; at most kPredictedGroups.
  std::list<std::pair<std::vector<int>, std::shared_ptr<coll::GroupView>>> predicted_;
  std::map<std::vector<int>, decltype(predicted_)::iterator> predictedAt_;  // by ranks
  bool attached_ = false;
  bool hostsStore_ = false;
  bool model_ = false;  // initModel: no connections, no engine

  // Queue (API threads push, engine pops).
  std::mutex mu_;
  std::deque<std::shared_ptr<Op>> queue_;
  Status error_;       // sticky, under mu_
  bool busy_ = false;  // an op is running (under mu_): idle() must not see an empty queue as done
  std::atomic<bool> failed_{false};
  std::atomic<bool> outsideFailure_{false};
  Status outsideError_;  // under mu_
  uint64_t collSeq_ = 0;
  std::vector<uint32_t> sendSeq_, recvSeq_;
  uint64_t splitSeq_ = 0;
  uint64_t shrinkSeq_ = 0;

  // Engine thread only.
  std::shared_ptr<Op> current_;
  std::unique_ptr<coll::Executor> exec_;  // kept from one operation to the next (Executor::reset)
  std::unique_ptr<HostSlots> slots_;      // when every rank is on this host over shm (shareHostSlots)
  Runner runner_ = Runner::kSchedule;  // what runs current_ (see Runner)
  transport::Request one_;
  std::vector<std::byte*> bufs_;          // startOp's: the buffers of the operation it starts
  Deadline currentDeadline_ = Deadline::never();
  uint32_t idlePasses_ = 0;  // passes that moved nothing: the deadline is checked on every few
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  using ScratchPtr = std::unique_ptr<std::byte[], AlignedDelete>;
  ScratchPtr scratch_;
  size_t scratchBytes_ = 0;
  // Schedules of the collectives called so far, by their arguments.
  struct PlanKey {
    size_t count;
    uint8_t kind, dtype, op;
    bool inPlace;
    int root;
    bool operator==(const PlanKey&) const = default;
  };
  struct PlanKeyHash {
    size_t operator()(const PlanKey& k) const noexcept {
      uint64_t h = k.count * 0x9e3779b97f4a7c15ull;
      h ^= (uint64_t{k.kind} << 40) ^ (uint64_t{k.dtype} << 32) ^ (uint64_t{k.op} << 24) ^ (uint64_t{k.inPlace} << 20) ^
           static_cast<uint32_t>(k.root);
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  struct CachedPlan {
    std::shared_ptr<const coll::Schedule> plan;
    double predictedUs = 0;
    std::string_view algorithm;
  };
  std::unordered_map<PlanKey, CachedPlan, PlanKeyHash> plans_;
  std::string forcedAlgo_;
  size_t chunkBytes_ = 0;
  double currentStartSec_ = 0;
  int contradictions_ = 0;  // consecutive collectives far off their prediction (checkPrediction)
};

}  // namespace hetcomm::comm
