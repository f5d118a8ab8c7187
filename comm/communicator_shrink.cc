// communicator_shrink.cc: going on without a lost rank (hetcommCommShrink; NCCL 2.27's ncclCommShrink, MPI ULFM's
// MPI_Comm_shrink), revoking a communicator so that nothing waits on it any more (hetcommCommRevoke), and a
// finalize barrier that a dead rank fails at once rather than at the timeout.
//
// The data paths cannot carry an agreement once a peer is gone, so the survivors agree through the rendezvous
// store, which outlives the ranks (under hetcomm-run the launcher hosts it; where rank 0's process hosts it, a
// lost rank 0 takes it along, and shrink fails saying so):
//
//   liveness   every rank owns a key in the store while its communicator lives (publishLiveness, at init); when
//              its process dies, or its host stops answering TCP keepalives, the store removes it and sets
//              "<key>/gone". So "gone" is the kernel's word that the process ended, not a guess from a timeout.
//   arrival    each caller posts "in/<rank>" under the shrink's prefix, with the ranks it excludes;
//   decision   a caller with no live caller below it (the lowest one that arrived, or the next when that one is
//              gone) waits until every rank has arrived, is gone or is excluded, or until the timeout (a rank still
//              silent then is left out: it hangs or it is too late), and creates "decision". Creating is atomic in
//              the store, so should two callers both decide (one saw a lower rank's arrival a moment late), the
//              first decision stands for everyone;
//   child      every caller reads the decision; the members build the new communicator as split does, ranked in
//              the order of their ranks here.
//
// The store is polled (a request per undecided rank per round, rounds backing off to 16 ms): shrink is a recovery
// path, taken once per failure, and this keeps the store's protocol to plain keys.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "comm/bootstrap/store_wire.h"
#include "comm/communicator.h"
#include "comm/engine.h"
#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::comm {

namespace {

// A shrink's child id: apart from every split's (whose colors are >= 0) and from every other shrink's.
constexpr int64_t kShrinkColor = -2;
constexpr auto kFirstPoll = std::chrono::milliseconds(1);
constexpr auto kLongestPoll = std::chrono::milliseconds(16);

std::vector<std::byte> encodeRanks(const std::vector<int>& ranks) {
  std::vector<std::byte> out(ranks.size() * 4);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int32_t r = ranks[i];
    std::memcpy(out.data() + 4 * i, &r, 4);
  }
  return out;
}

// The ranks in a record; false when it is malformed (a rank out of range, a size not a multiple of 4).
bool decodeRanks(const std::vector<std::byte>& raw, int nranks, std::vector<int>* out) {
  if (raw.size() % 4) return false;
  out->resize(raw.size() / 4);
  for (size_t i = 0; i < out->size(); ++i) {
    int32_t r;
    std::memcpy(&r, raw.data() + 4 * i, 4);
    if (r < 0 || r >= nranks) return false;
    (*out)[i] = r;
  }
  return true;
}

// The decision: the members, then the ranks found gone, then those that stayed silent (for the log line).
struct Decision {
  std::vector<int> members, gone, silent;
};

std::vector<std::byte> encodeDecision(const Decision& d) {
  std::vector<std::byte> out;
  for (const auto* list : {&d.members, &d.gone, &d.silent}) {
    const int32_t n = static_cast<int32_t>(list->size());
    const auto* p = reinterpret_cast<const std::byte*>(&n);
    out.insert(out.end(), p, p + 4);
    auto body = encodeRanks(*list);
    out.insert(out.end(), body.begin(), body.end());
  }
  return out;
}

bool decodeDecision(const std::vector<std::byte>& raw, int nranks, Decision* d) {
  size_t at = 0;
  for (auto* list : {&d->members, &d->gone, &d->silent}) {
    int32_t n;
    if (raw.size() - at < 4) return false;
    std::memcpy(&n, raw.data() + at, 4);
    at += 4;
    if (n < 0 || static_cast<size_t>(n) > (raw.size() - at) / 4) return false;
    std::vector<std::byte> body(raw.begin() + static_cast<ptrdiff_t>(at),
                                raw.begin() + static_cast<ptrdiff_t>(at + 4 * n));
    if (!decodeRanks(body, nranks, list)) return false;
    at += 4 * static_cast<size_t>(n);
  }
  return at == raw.size();
}

std::string listOf(const std::vector<int>& ranks) {
  std::vector<std::string> words;
  for (int r : ranks) words.push_back(std::to_string(r));
  return join(words, ", ");
}

}  // namespace

std::string Communicator::livenessKey(int rank) const { return keyPrefix() + format("/live/%d", rank); }

Status Communicator::publishLiveness() { return store_->own(livenessKey(rank_), {}); }

Status Communicator::barrierOfTheLiving(const std::string& prefix, const char* what, Deadline deadline) {
  constexpr auto kLivenessEvery = std::chrono::milliseconds(100);
  HC_TRY(store_->set(prefix + format("/in/%d", rank_), {}));
  HC_ASSIGN_OR_RETURN(int64_t arrived, store_->add(prefix + "/count", 1));
  if (arrived == nranks_) HC_TRY(store_->set(prefix + "/go", {}));
  auto poll = kFirstPoll;
  auto nextLook = std::chrono::steady_clock::now() + kLivenessEvery;
  while (true) {
    HC_ASSIGN_OR_RETURN(auto go, store_->tryGet(prefix + "/go"));
    if (go) return okStatus();
    // A rank that is gone and never arrived died on the way here: the cause. One that arrived and is gone left
    // after seeing that cause itself (the barrier failed for it too), so it is not named.
    if (std::chrono::steady_clock::now() >= nextLook) {
      for (int r = 0; r < nranks_; ++r) {
        if (r == rank_) continue;
        HC_ASSIGN_OR_RETURN(auto dead, store_->tryGet(livenessKey(r) + store_wire::kGoneSuffix));
        if (!dead) continue;
        HC_ASSIGN_OR_RETURN(auto came, store_->tryGet(prefix + format("/in/%d", r)));
        if (!came) return remoteError("rank %d: rank %d's process ended before %s", rank_, r, what);
      }
      nextLook = std::chrono::steady_clock::now() + kLivenessEvery;
    }
    if (deadline.expired())
      return timeoutError("rank %d: not every rank %s within HETCOMM_TIMEOUT (%g s)", rank_, what, options_.timeoutSec);
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, kLongestPoll);
  }
}

void Communicator::revoke() {
  log::ScopedRank scope(rank_, name());
  if (model_ || !attached_) return;
  failFromOutside(remoteError("rank %d revoked the communicator (hetcommCommRevoke)", rank_));
  Engine::get().waitUntil([this] { return idle(); });
}

Status Communicator::shrink(const std::vector<int>& exclude, bool abortFirst, const CommOptions& options,
                            std::unique_ptr<Communicator>* out) {
  log::ScopedRank scope(rank_, name());
  out->reset();
  if (model_) return invalidUsage("a model communicator (hetcommCommInitModel) cannot be shrunk");
  if (!store_) return invalidUsage("rank %d's communicator was aborted: nothing left to shrink", rank_);
  std::vector<char> excluded(nranks_, 0);
  for (size_t i = 0; i < exclude.size(); ++i) {
    const int r = exclude[i];
    if (r < 0 || r >= nranks_)
      return invalidArgument("excludeRanks[%zu] = %d is not a rank of this communicator (0..%d)", i, r, nranks_ - 1);
    if (r == rank_)
      return invalidArgument("excludeRanks[%zu] = %d is this rank: an excluded rank does not call shrink", i, r);
    if (excluded[r]++) return invalidArgument("excludeRanks[%zu] = %d is listed twice", i, r);
  }
  if (abortFirst) failFromOutside(remoteError("rank %d shrinks the communicator (HETCOMM_SHRINK_ABORT)", rank_));
  // Default mode: what is queued runs to its end first (it completes, or fails on the lost peer, or times out).
  Engine::get().waitUntil([this] { return idle(); });

  const uint64_t seq = ++shrinkSeq_;
  const std::string prefix = keyPrefix() + format("/shrink%llu", (unsigned long long)seq);
  const Deadline deadline = Deadline::afterSec(options_.timeoutSec);
  HC_ASSIGN_OR_RETURN(bool first, store_->create(prefix + format("/in/%d", rank_), encodeRanks(exclude)));
  if (!first)
    return invalidUsage("rank %d called shrink #%llu twice (or two processes share rank %d)", rank_,
                        (unsigned long long)seq, rank_);
  HC_ASSIGN_OR_RETURN(std::vector<int> members, agreeOnSurvivors(prefix, exclude, deadline));
  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end())
    return remoteError(
        "rank %d was left out of shrink #%llu: another rank's excludeRanks named it, or it came after the "
        "timeout (HETCOMM_TIMEOUT)",
        rank_, (unsigned long long)seq);
  const int newRank = static_cast<int>(me - members.begin());
  auto child = std::make_unique<Communicator>(newRank, static_cast<int>(members.size()), options);
  child->setHostsStore(hostsStore_);
  HC_TRY(child->init(id_, childCommId(commId_, seq, kShrinkColor)));
  *out = std::move(child);
  return okStatus();
}

// Every caller: the decision's members, once there is one. A caller with no live caller below it decides.
Result<std::vector<int>> Communicator::agreeOnSurvivors(const std::string& prefix, const std::vector<int>& exclude,
                                                        Deadline deadline) {
  std::vector<char> excluded(nranks_, 0), gone(nranks_, 0);
  for (int r : exclude) excluded[r] = 1;
  // A leader waits up to the timeout for silent ranks, then writes: the others wait a little longer.
  const Deadline giveUp = Deadline::afterSec(options_.timeoutSec + 10);
  auto poll = kFirstPoll;
  while (true) {
    HC_ASSIGN_OR_RETURN(auto decided, store_->tryGet(prefix + "/decision"));
    if (decided) {
      Decision d;
      if (!decodeDecision(*decided, nranks_, &d)) return remoteError("the store holds a malformed shrink decision");
      HC_WARN("shrink: %zu of %d ranks go on%s%s%s%s", d.members.size(), nranks_,
              d.gone.empty() ? "" : "; gone (process ended, or communicator closed): ", listOf(d.gone).c_str(),
              d.silent.empty() ? "" : "; silent past the timeout: ", listOf(d.silent).c_str());
      return d.members;
    }
    // Am I the lowest live caller? A rank below that arrived and is not gone decides instead.
    bool lowest = true;
    for (int r = 0; r < rank_ && lowest; ++r) {
      if (excluded[r] || gone[r]) continue;
      HC_ASSIGN_OR_RETURN(auto in, store_->tryGet(prefix + format("/in/%d", r)));
      if (!in) continue;
      HC_ASSIGN_OR_RETURN(auto dead, store_->tryGet(livenessKey(r) + store_wire::kGoneSuffix));
      if (dead)
        gone[r] = 1;
      else
        lowest = false;
    }
    if (lowest) return decideSurvivors(prefix, excluded, deadline);
    if (giveUp.expired())
      return timeoutError("rank %d: no shrink decision within HETCOMM_TIMEOUT (%g s) + 10 s", rank_,
                          options_.timeoutSec);
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, kLongestPoll);
  }
}

// The leader: waits until every rank is accounted for (arrived, gone, or excluded by some caller) or the deadline
// passes, then writes the decision. Returns the decision that stands (another leader's, if it was first).
Result<std::vector<int>> Communicator::decideSurvivors(const std::string& prefix, std::vector<char> excluded,
                                                       Deadline deadline) {
  std::vector<char> arrived(nranks_, 0), gone(nranks_, 0);
  arrived[rank_] = 1;
  auto poll = kFirstPoll;
  while (true) {
    bool pending = false;
    for (int r = 0; r < nranks_; ++r) {
      if (arrived[r] || gone[r]) continue;
      HC_ASSIGN_OR_RETURN(auto in, store_->tryGet(prefix + format("/in/%d", r)));
      if (in) {
        std::vector<int> theirs;
        if (!decodeRanks(*in, nranks_, &theirs)) return remoteError("rank %d posted a malformed shrink record", r);
        for (int x : theirs) excluded[x] = 1;
        arrived[r] = 1;
        continue;
      }
      if (excluded[r]) continue;
      HC_ASSIGN_OR_RETURN(auto dead, store_->tryGet(livenessKey(r) + store_wire::kGoneSuffix));
      if (dead)
        gone[r] = 1;
      else
        pending = true;
    }
    if (!pending || deadline.expired()) break;
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, kLongestPoll);
  }
  Decision d;
  for (int r = 0; r < nranks_; ++r) {
    if (arrived[r] && !excluded[r]) {
      // One that arrived and died since is not a member: the new communicator would wait for it.
      HC_ASSIGN_OR_RETURN(auto dead, store_->tryGet(livenessKey(r) + store_wire::kGoneSuffix));
      (dead ? d.gone : d.members).push_back(r);
    } else if (gone[r]) {
      d.gone.push_back(r);
    } else if (!arrived[r] && !excluded[r]) {
      d.silent.push_back(r);
    }
  }
  HC_ASSIGN_OR_RETURN(bool mine, store_->create(prefix + "/decision", encodeDecision(d)));
  if (!mine) HC_INFO(Init, "shrink: another rank's decision came first");
  // Every caller, this one included, takes the decision from the store: the one that was created first.
  return agreeOnSurvivors(prefix, {}, deadline);
}

}  // namespace hetcomm::comm
