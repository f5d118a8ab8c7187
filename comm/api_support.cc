// api_support.cc: the C API's live-handle registry, argument checks and per-thread error state.
#include <mutex>
#include <unordered_set>

#include "comm/api_internal.h"
#include "kernels/datatype.h"

namespace hetcomm::comm::api {

thread_local std::string tLastError;
thread_local int tApiRank = -1;
thread_local bool tErrorLogged = false;

Status alreadyLogged(Status st) {
  if (!st.ok()) tErrorLogged = true;
  return st;
}

namespace {
std::mutex gHandlesMu;
std::unordered_set<const void*> gComms, gStreams;
}  // namespace

void registerComm(Communicator* c) {
  std::lock_guard<std::mutex> lock(gHandlesMu);
  gComms.insert(c);
}
bool unregisterComm(Communicator* c) {
  std::lock_guard<std::mutex> lock(gHandlesMu);
  return gComms.erase(c) > 0;
}
bool isLiveComm(const void* c) {
  std::lock_guard<std::mutex> lock(gHandlesMu);
  return gComms.count(c) > 0;
}

Result<Communicator*> liveComm(hetcommComm_t handle, const char* what) {
  if (!handle) return invalidArgument("%s is NULL", what);
  if (!isLiveComm(handle))
    return invalidUsage("%s %p is not a live communicator (destroyed or never created)", what,
                        static_cast<void*>(handle));
  auto* c = reinterpret_cast<Communicator*>(handle);
  tApiRank = c->rank();
  return c;
}

Result<Communicator*> readyComm(hetcommComm_t handle) {
  HC_ASSIGN_OR_RETURN(Communicator * c, initializedComm(handle));
  HC_TRY(alreadyLogged(c->asyncError()));
  return c;
}

Result<Communicator*> initializedComm(hetcommComm_t handle) {
  HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(handle));
  switch (c->state()) {
    case Communicator::kInitializing:
      return invalidUsage("the communicator is still initializing; poll hetcommCommGetAsyncError until success");
    case Communicator::kInitFailed:
      return c->initError;
    case Communicator::kFinalized:
      return invalidUsage("the communicator was finalized");
    case Communicator::kReady:
      break;
  }
  return c;
}

Status checkType(hetcommDataType_t t) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= kernels::kNumDataTypes)
    return invalidArgument("unknown datatype %d (valid: 0..%d)", static_cast<int>(t), kernels::kNumDataTypes - 1);
  return okStatus();
}
Status checkOp(hetcommRedOp_t op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= kernels::kNumRedOps)
    return invalidArgument("unknown reduction op %d (valid: 0..%d)", static_cast<int>(op), kernels::kNumRedOps - 1);
  return okStatus();
}
Status checkBuf(const void* p, size_t count, const char* name) {
  if (!p && count > 0) return invalidArgument("%s is NULL", name);
  return okStatus();
}
Status checkRank(int r, int n, const char* what) {
  if (r < 0 || r >= n) return invalidArgument("%s %d is out of range for a communicator of %d ranks", what, r, n);
  return okStatus();
}
Status checkCount(size_t count, size_t elemSize, int blocks) {
  constexpr size_t kMaxBytes = size_t{1} << 46;  // 64 TiB
  if (count > kMaxBytes / elemSize / static_cast<size_t>(blocks))
    return invalidArgument("count %zu is too large (%zu-byte elements, %d block%s; was a negative number passed?)",
                           count, elemSize, blocks, blocks == 1 ? "" : "s");
  return okStatus();
}

Result<Stream*> streamOf(hetcommStream_t s) {
  if (!s) return static_cast<Stream*>(nullptr);
  std::lock_guard<std::mutex> lock(gHandlesMu);
  if (!gStreams.count(s)) return invalidUsage("stream %p is not a live stream (destroyed?)", static_cast<void*>(s));
  return reinterpret_cast<Stream*>(s);
}

Stream* createStream() {
  auto* s = new Stream();
  std::lock_guard<std::mutex> lock(gHandlesMu);
  gStreams.insert(s);
  return s;
}

void destroyStream(Stream* s) {
  {
    std::lock_guard<std::mutex> lock(gHandlesMu);
    gStreams.erase(s);
  }
  delete s;
}

}  // namespace hetcomm::comm::api
