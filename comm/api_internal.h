// api_internal.h: what the files of the C API share (api.cc, the extern "C" layer; api_support.cc, handles,
// argument checks and the error boundary; api_ops.cc, operations, groups and streams; api_init.cc, communicator
// creation). Internal to libhetcomm: nothing here is public.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "comm/op.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "hetcomm/hetcomm.h"

namespace hetcomm::transports::cuda {
class Runtime;
}

struct hetcommComm {};    // opaque handle: points at a Communicator
struct hetcommStream {};  // opaque handle: points at a Stream

namespace hetcomm::comm {

HC_PARAM_INT(timeoutParam, "TIMEOUT", 300)

namespace api {

// ---- the error boundary (api_support.cc) ----
extern thread_local std::string tLastError;
extern thread_local int tApiRank;  // the rank of the communicator the current call named, for its log lines
// The error the current call returns is a communicator's sticky error, which the communicator logged when it
// decided it: the boundary must not log it again.
extern thread_local bool tErrorLogged;
Status alreadyLogged(Status st);
inline hetcommResult_t toResult(Code c) { return static_cast<hetcommResult_t>(static_cast<int>(c)); }

// Every entry point has one shape: guard() runs a lambda returning Status, maps its code to hetcommResult_t, keeps
// the message for hetcommGetLastError, and turns any stray exception into hetcommInternalError.
template <class F>
hetcommResult_t guard(const char* fn, F&& body) {
  tApiRank = -1;
  tErrorLogged = false;
  try {
    Status st = body();
    log::ScopedRank scope(tApiRank);
    if (st.ok()) return hetcommSuccess;
    if (st.code() != Code::kInProgress) {
      tLastError = std::string(fn) + ": " + std::string(st.message());
      // Operation failures are logged once where they were decided (the communicator); argument and usage errors
      // are decided here.
      if (!tErrorLogged && (st.code() == Code::kInvalidArgument || st.code() == Code::kInvalidUsage))
        HC_WARN("%s", tLastError.c_str());
    }
    return toResult(st.code());
  } catch (const std::exception& e) {
    tLastError = std::string(fn) + ": internal error: " + e.what();
  } catch (...) {
    tLastError = std::string(fn) + ": internal error: unknown exception";
  }
  HC_WARN("%s", tLastError.c_str());
  return hetcommInternalError;
}

// ---- live handles: a destroyed or made-up handle is refused, not dereferenced (api_support.cc) ----
void registerComm(Communicator* c);
bool unregisterComm(Communicator* c);
bool isLiveComm(const void* c);
Result<Communicator*> liveComm(hetcommComm_t handle, const char* what = "comm");
// A communicator that can take operations now.
Result<Communicator*> readyComm(hetcommComm_t handle);
// The same, but a communicator that failed (a lost peer, a revoke) is fine: for shrink, revoke.
Result<Communicator*> initializedComm(hetcommComm_t handle);
Stream* createStream();
void destroyStream(Stream* s);
Result<Stream*> streamOf(hetcommStream_t s);

// ---- argument checks (api_support.cc) ----
Status checkType(hetcommDataType_t t);
Status checkOp(hetcommRedOp_t op);
Status checkBuf(const void* p, size_t count, const char* name);
Status checkRank(int r, int n, const char* what);
// Sizes in bytes must fit in memory with room to spare: a count near SIZE_MAX (a negative int passed as size_t,
// say) is an argument error, not an allocation failure later.
Status checkCount(size_t count, size_t elemSize, int blocks);

// ---- operations, groups, streams (api_ops.cc) ----
Status collective(coll::CollKind kind, const void* send, void* recv, size_t count, hetcommDataType_t dtype,
                  hetcommRedOp_t redop, int root, hetcommComm_t comm, hetcommStream_t stream);
Status p2p(bool isSend, const void* buf, size_t count, hetcommDataType_t dtype, int peer, hetcommComm_t comm,
           hetcommStream_t stream);
void groupStart();
Status groupEnd();
// Waits for the stream's last operation; returns (and clears) the first error of any operation on it.
Status syncStream(Stream* s);
// Queues op now (it is first held back until GroupEnd inside a group) on comm.
Status submit(Communicator* c, const std::shared_ptr<Op>& op);

// ---- device buffers and CUDA streams: staging (api_device.cc) ----
struct Staging {
  bool staged = false;
  int device = -1;                          // the GPU of the device buffer, -1 when none
  transports::cuda::Runtime* rt = nullptr;  // null: host buffers staged by memcpy (HETCOMM_STAGE_HOST_BUFFERS)
};
struct StagedJob;
// Whether a call with these buffers on stream s is staged; a bad pointer, or a device buffer without a usable CUDA
// runtime, is an argument error.
Result<Staging> stagingFor(const void* send, size_t sendBytes, const void* recv, size_t recvBytes, Stream* s);
// Queues proto (a collective, or one send or receive, with its arguments checked and its buffers the user's) as
// staged chunks; blocking when s is not a CUDA stream.
Status launchStaged(Communicator* c, const Op& proto, const Staging& how, Stream* s);
// Starts jobs whose ops are queued: a blocking one outside a group on this thread (returning its result), the
// others on job threads. A group's jobs are ordered on their CUDA streams together.
Status startJobs(const std::vector<std::shared_ptr<StagedJob>>& jobs, bool fromGroup);
bool jobIsAsync(const StagedJob& job);
Status waitJob(StagedJob& job);
bool inGroup();
// Inside a group: op (chunk k of job) is held until GroupEnd, which starts the job after queueing its ops.
void holdForGroup(Communicator* c, std::shared_ptr<Op> op, std::shared_ptr<StagedJob> job, int chunk);
// Where fusing a group's sends and receives folded a job's op into another, the job follows it.
void retargetJob(StagedJob& job, int chunk, const std::shared_ptr<Op>& op);

// ---- communicator creation (api_init.cc) ----
Result<CommOptions> optionsFrom(const hetcommConfig_t* config);
// A child's (split, shrink): the parent's options, or those of config where one is given.
Result<CommOptions> childOptions(const Communicator& parent, const hetcommConfig_t* config);
// Hands a new communicator to the caller: a live handle from now on.
hetcommComm_t publishComm(std::unique_ptr<Communicator> comm);
Status initRank(hetcommComm_t* out, int nranks, const UniqueIdContent& id, uint64_t commId, int rank,
                const hetcommConfig_t* config);
Status getUniqueId(hetcommUniqueId* id);
Status initFromEnv(hetcommComm_t* out);
Status initAll(hetcommComm_t* comms, int ndev);

}  // namespace api
}  // namespace hetcomm::comm
