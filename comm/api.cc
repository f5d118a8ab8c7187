// api.cc: the public C API, a thin layer: each entry point checks its arguments through guard() (api_internal.h)
// and calls the operation, creation or handle code of api_ops.cc, api_init.cc and api_support.cc. Validation here
// never touches a communicator's data path.
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/api_internal.h"
#include "comm/communicator.h"
#include "comm/engine.h"
#include "common/strings.h"
#include "hetcomm/hetcomm.h"
#include "kernels/datatype.h"
#include "topology/cluster_spec.h"
#include "transports/cuda/cuda_runtime.h"

using hetcomm::Code;
using hetcomm::Status;
using hetcomm::comm::Communicator;
using hetcomm::comm::Op;
using hetcomm::comm::Stream;
namespace coll = hetcomm::coll;
namespace kernels = hetcomm::kernels;

using namespace hetcomm::comm;       // NOLINT: the definitions below are the C API
using namespace hetcomm::comm::api;  // NOLINT

extern "C" {

hetcommResult_t hetcommGetVersion(int* version) {
  return guard("hetcommGetVersion", [&]() -> Status {
    if (!version) return hetcomm::invalidArgument("version is NULL");
    *version = HETCOMM_VERSION_CODE;
    return hetcomm::okStatus();
  });
}

const char* hetcommGetErrorString(hetcommResult_t r) {
  switch (r) {
    case hetcommSuccess:
      return "no error";
    case hetcommUnhandledError:
      return "unhandled error";
    case hetcommSystemError:
      return "unhandled system error (run with HETCOMM_DEBUG=INFO for details)";
    case hetcommInternalError:
      return "internal error - please report this issue to the hetcomm developers";
    case hetcommInvalidArgument:
      return "invalid argument (HETCOMM_DEBUG=INFO logs more)";
    case hetcommInvalidUsage:
      return "invalid usage (HETCOMM_DEBUG=INFO logs more)";
    case hetcommRemoteError:
      return "remote process exited or there was a network error";
    case hetcommInProgress:
      return "operation in progress";
    case hetcommTimeout:
      return "operation timed out (HETCOMM_TIMEOUT)";
    default:
      return "unknown result code";
  }
}

const char* hetcommGetLastError(hetcommComm_t comm) {
  if (tLastError.empty() && comm && isLiveComm(comm)) {
    Status st = reinterpret_cast<Communicator*>(comm)->asyncError();
    if (!st.ok()) tLastError = std::string(st.message());
  }
  return tLastError.c_str();
}

hetcommResult_t hetcommGetUniqueId(hetcommUniqueId* uniqueId) {
  return guard("hetcommGetUniqueId", [&] { return getUniqueId(uniqueId); });
}

hetcommResult_t hetcommCommInitRankConfig(hetcommComm_t* comm, int nranks, hetcommUniqueId commId, int rank,
                                          hetcommConfig_t* config) {
  return guard("hetcommCommInitRank", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(UniqueIdContent id, decodeUniqueId(commId));
    return initRank(comm, nranks, id, id.commId, rank, config);
  });
}

hetcommResult_t hetcommCommInitRank(hetcommComm_t* comm, int nranks, hetcommUniqueId commId, int rank) {
  return hetcommCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

hetcommResult_t hetcommCommInitFromEnv(hetcommComm_t* comm) {
  return guard("hetcommCommInitFromEnv", [&] { return initFromEnv(comm); });
}

hetcommResult_t hetcommCommInitModel(hetcommComm_t* comm, const char* clusterJson) {
  return guard("hetcommCommInitModel", [&]() -> Status {
    if (!comm) return hetcomm::invalidArgument("comm (the output pointer) is NULL");
    if (!clusterJson) return hetcomm::invalidArgument("clusterJson is NULL");
    HC_ASSIGN_OR_RETURN(hetcomm::topo::ClusterSpec spec,
                        hetcomm::topo::parseClusterSpec(clusterJson, "(hetcommCommInitModel)"));
    auto c = std::make_unique<Communicator>(0, spec.nranks(), CommOptions{});
    HC_TRY(c->initModel(spec.nodes()));
    *comm = publishComm(std::move(c));
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommInitAll(hetcommComm_t* comms, int ndev, const int* /*devlist*/) {
  return guard("hetcommCommInitAll", [&] { return initAll(comms, ndev); });
}

hetcommResult_t hetcommCommSplit(hetcommComm_t comm, int color, int key, hetcommComm_t* newcomm,
                                 hetcommConfig_t* config) {
  return guard("hetcommCommSplit", [&]() -> Status {
    if (!newcomm) return hetcomm::invalidArgument("newcomm is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    if (color < 0 && color != HETCOMM_SPLIT_NOCOLOR)
      return hetcomm::invalidArgument("color %d must be >= 0 or HETCOMM_SPLIT_NOCOLOR", color);
    HC_ASSIGN_OR_RETURN(CommOptions options, childOptions(*c, config));
    std::unique_ptr<Communicator> child;
    HC_TRY(c->split(color, key, options, &child));
    *newcomm = child ? publishComm(std::move(child)) : nullptr;
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommShrink(hetcommComm_t comm, const int* excludeRanks, int excludeCount, hetcommComm_t* newcomm,
                                  hetcommConfig_t* config, int shrinkFlags) {
  return guard("hetcommCommShrink", [&]() -> Status {
    if (!newcomm) return hetcomm::invalidArgument("newcomm is NULL");
    *newcomm = nullptr;
    if (excludeCount < 0) return hetcomm::invalidArgument("excludeCount %d is negative", excludeCount);
    if (excludeCount > 0 && !excludeRanks)
      return hetcomm::invalidArgument("excludeRanks is NULL but excludeCount is %d", excludeCount);
    if (shrinkFlags != HETCOMM_SHRINK_DEFAULT && shrinkFlags != HETCOMM_SHRINK_ABORT)
      return hetcomm::invalidArgument("shrinkFlags %d: HETCOMM_SHRINK_DEFAULT (0) or HETCOMM_SHRINK_ABORT (1)",
                                      shrinkFlags);
    HC_ASSIGN_OR_RETURN(Communicator * c, initializedComm(comm));
    HC_ASSIGN_OR_RETURN(CommOptions options, childOptions(*c, config));
    std::vector<int> exclude(excludeRanks, excludeRanks + excludeCount);
    std::unique_ptr<Communicator> child;
    HC_TRY(c->shrink(exclude, shrinkFlags == HETCOMM_SHRINK_ABORT, options, &child));
    *newcomm = publishComm(std::move(child));
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommRevoke(hetcommComm_t comm, int revokeFlags) {
  return guard("hetcommCommRevoke", [&]() -> Status {
    if (revokeFlags != 0) return hetcomm::invalidArgument("revokeFlags %d must be 0", revokeFlags);
    HC_ASSIGN_OR_RETURN(Communicator * c, initializedComm(comm));
    c->revoke();
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommFinalize(hetcommComm_t comm) {
  return guard("hetcommCommFinalize", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    return c->finalize();
  });
}

hetcommResult_t hetcommCommDestroy(hetcommComm_t comm) {
  return guard("hetcommCommDestroy", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    unregisterComm(c);
    Status st = c->destroy();
    delete c;
    return st;
  });
}

hetcommResult_t hetcommCommAbort(hetcommComm_t comm) {
  return guard("hetcommCommAbort", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    unregisterComm(c);
    c->abort();
    delete c;
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommGetAsyncError(hetcommComm_t comm, hetcommResult_t* asyncError) {
  return guard("hetcommCommGetAsyncError", [&]() -> Status {
    if (!asyncError) return hetcomm::invalidArgument("asyncError is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    switch (c->state()) {
      case Communicator::kInitializing:
        *asyncError = hetcommInProgress;
        break;
      case Communicator::kInitFailed:
        *asyncError = toResult(c->initError.code());
        break;
      default:
        *asyncError = toResult(c->asyncError().code());
    }
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommCount(const hetcommComm_t comm, int* count) {
  return guard("hetcommCommCount", [&]() -> Status {
    if (!count) return hetcomm::invalidArgument("count is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    *count = c->nranks();
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommUserRank(const hetcommComm_t comm, int* rank) {
  return guard("hetcommCommUserRank", [&]() -> Status {
    if (!rank) return hetcomm::invalidArgument("rank is NULL");
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    *rank = c->rank();
    return hetcomm::okStatus();
  });
}

namespace {
// What hetcommCommGetAlgorithm and hetcommCommPredict ask about, checked.
hetcomm::Result<coll::Args> predictionArgs(hetcommCollective_t coll, size_t count, hetcommDataType_t datatype,
                                           char* name, size_t nameLen, bool sendRecv) {
  if (!name && nameLen) return hetcomm::invalidArgument("name is NULL but nameLen is %zu", nameLen);
  HC_TRY(checkType(datatype));
  const hetcommCollective_t last = sendRecv ? hetcommCollSendRecv : hetcommCollAlltoAll;
  if (coll < hetcommCollAllReduce || coll > last)
    return hetcomm::invalidArgument(
        "collective %d is not a hetcommCollective_t%s", static_cast<int>(coll),
        coll == hetcommCollSendRecv ? " here (only hetcommCommPredict takes sendrecv)" : "");
  coll::Args a;
  a.kind = static_cast<coll::CollKind>(coll);
  a.count = count;
  a.dtype = static_cast<kernels::DataType>(datatype);
  return a;
}

void writeSelection(const coll::Selection& sel, char* name, size_t nameLen, double* predictedUs) {
  if (nameLen) {
    size_t n = std::min(nameLen - 1, sel.algo->name().size());
    std::memcpy(name, sel.algo->name().data(), n);
    name[n] = '\0';
  }
  if (predictedUs) *predictedUs = sel.predictedUs;
}
}  // namespace

hetcommResult_t hetcommCommGetAlgorithm(const hetcommComm_t comm, hetcommCollective_t coll, size_t count,
                                        hetcommDataType_t datatype, char* name, size_t nameLen, double* predictedUs) {
  return guard("hetcommCommGetAlgorithm", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    HC_ASSIGN_OR_RETURN(coll::Args a, predictionArgs(coll, count, datatype, name, nameLen, false));
    HC_ASSIGN_OR_RETURN(coll::Selection sel, c->selectFor(a));
    writeSelection(sel, name, nameLen, predictedUs);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommPredict(const hetcommComm_t comm, hetcommCollective_t coll, size_t count,
                                   hetcommDataType_t datatype, const int* ranks, int nranks, char* name, size_t nameLen,
                                   double* predictedUs) {
  return guard("hetcommCommPredict", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, readyComm(comm));
    if (nranks < 1) return hetcomm::invalidArgument("nranks is %d; a group needs 1 rank at least", nranks);
    if (!ranks) return hetcomm::invalidArgument("ranks is NULL but nranks is %d", nranks);
    HC_ASSIGN_OR_RETURN(coll::Args a, predictionArgs(coll, count, datatype, name, nameLen, true));
    HC_ASSIGN_OR_RETURN(coll::Selection sel, c->predictFor(std::vector<int>(ranks, ranks + nranks), a));
    writeSelection(sel, name, nameLen, predictedUs);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommPeerTransport(const hetcommComm_t comm, int peer, char* name, size_t nameLen, char* reason,
                                         size_t reasonLen) {
  return guard("hetcommCommPeerTransport", [&]() -> Status {
    if ((!name && nameLen) || (!reason && reasonLen))
      return hetcomm::invalidArgument("a NULL buffer with a non-zero length (name %zu bytes, reason %zu bytes)",
                                      nameLen, reasonLen);
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    if (c->state() != Communicator::kReady && c->state() != Communicator::kFinalized)
      return hetcomm::invalidUsage("the communicator is not initialized yet");
    if (peer < 0 || peer >= c->nranks() || peer == c->rank())
      return hetcomm::invalidArgument("peer %d: must be another rank of the communicator, in [0, %d)", peer,
                                      c->nranks());
    const hetcomm::comm::PairChoice& choice = c->transportTo(peer);
    auto put = [](char* out, size_t len, std::string_view text) {
      if (!len) return;
      size_t n = std::min(len - 1, text.size());
      std::memcpy(out, text.data(), n);
      out[n] = '\0';
    };
    put(name, nameLen, hetcomm::transport::kindName(choice.kind));
    put(reason, reasonLen, choice.why);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommRankPlacement(const hetcommComm_t comm, int rank, int* host, int* island) {
  return guard("hetcommCommRankPlacement", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    if (c->state() != Communicator::kReady && c->state() != Communicator::kFinalized)
      return hetcomm::invalidUsage("the communicator is not initialized yet");
    if (rank < 0 || rank >= c->nranks())
      return hetcomm::invalidArgument("rank %d: must be a rank of the communicator, in [0, %d)", rank, c->nranks());
    if (host) *host = c->hostOf(rank);
    if (island) *island = c->islandOf(rank);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommCommRankDevice(const hetcommComm_t comm, int rank, double* peakTflops, size_t* memoryBytes) {
  return guard("hetcommCommRankDevice", [&]() -> Status {
    HC_ASSIGN_OR_RETURN(Communicator * c, liveComm(comm));
    if (c->state() != Communicator::kReady && c->state() != Communicator::kFinalized)
      return hetcomm::invalidUsage("the communicator is not initialized yet");
    if (rank < 0 || rank >= c->nranks())
      return hetcomm::invalidArgument("rank %d: must be a rank of the communicator, in [0, %d)", rank, c->nranks());
    const hetcomm::topo::Gpu* gpu = c->gpuOf(rank);
    if (peakTflops) *peakTflops = gpu ? gpu->peakTflops : 0;
    if (memoryBytes) *memoryBytes = gpu ? static_cast<size_t>(gpu->memoryBytes) : 0;
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommAllReduce(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                                 hetcommRedOp_t op, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommAllReduce", [&] {
    return collective(coll::CollKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
  });
}

hetcommResult_t hetcommBroadcast(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                                 int root, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommBroadcast", [&] {
    return collective(coll::CollKind::kBroadcast, sendbuff, recvbuff, count, datatype, hetcommSum, root, comm, stream);
  });
}

hetcommResult_t hetcommReduce(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                              hetcommRedOp_t op, int root, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommReduce", [&] {
    return collective(coll::CollKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  });
}

hetcommResult_t hetcommAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, hetcommDataType_t datatype,
                                 hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommAllGather", [&] {
    return collective(coll::CollKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, hetcommSum, 0, comm, stream);
  });
}

hetcommResult_t hetcommReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, hetcommDataType_t datatype,
                                     hetcommRedOp_t op, hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommReduceScatter", [&] {
    return collective(coll::CollKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
  });
}

hetcommResult_t hetcommAlltoAll(const void* sendbuff, void* recvbuff, size_t count, hetcommDataType_t datatype,
                                hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommAlltoAll", [&] {
    return collective(coll::CollKind::kAlltoAll, sendbuff, recvbuff, count, datatype, hetcommSum, 0, comm, stream);
  });
}

hetcommResult_t hetcommSend(const void* sendbuff, size_t count, hetcommDataType_t datatype, int peer,
                            hetcommComm_t comm, hetcommStream_t stream) {
  return guard("hetcommSend", [&] { return p2p(true, sendbuff, count, datatype, peer, comm, stream); });
}

hetcommResult_t hetcommRecv(void* recvbuff, size_t count, hetcommDataType_t datatype, int peer, hetcommComm_t comm,
                            hetcommStream_t stream) {
  return guard("hetcommRecv", [&] { return p2p(false, recvbuff, count, datatype, peer, comm, stream); });
}

hetcommResult_t hetcommGroupStart(void) {
  return guard("hetcommGroupStart", [&] {
    groupStart();
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommGroupEnd(void) {
  return guard("hetcommGroupEnd", [&] { return groupEnd(); });
}

hetcommResult_t hetcommStreamCreate(hetcommStream_t* stream) {
  return guard("hetcommStreamCreate", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    *stream = reinterpret_cast<hetcommStream_t>(createStream());
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommStreamCreateForCuda(hetcommStream_t* stream, void* cudaStream) {
  return guard("hetcommStreamCreateForCuda", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    if (!hetcomm::transports::cuda::Runtime::get())
      return hetcomm::invalidUsage("a CUDA stream needs the CUDA runtime: %s",
                                   hetcomm::transports::cuda::Runtime::unavailable().c_str());
    Stream* s = createStream();
    s->wrapsCuda = true;
    s->cuda = cudaStream;
    *stream = reinterpret_cast<hetcommStream_t>(s);
    return hetcomm::okStatus();
  });
}

hetcommResult_t hetcommStreamSynchronize(hetcommStream_t stream) {
  return guard("hetcommStreamSynchronize", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
    return syncStream(s);
  });
}

hetcommResult_t hetcommStreamQuery(hetcommStream_t stream) {
  return guard("hetcommStreamQuery", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
    std::lock_guard<std::mutex> lock(s->mu);
    if ((s->last && !s->last->finished()) || s->pending.load() > 0) return Status(Code::kInProgress, "work pending");
    return s->firstError;
  });
}

hetcommResult_t hetcommStreamDestroy(hetcommStream_t stream) {
  return guard("hetcommStreamDestroy", [&]() -> Status {
    if (!stream) return hetcomm::invalidArgument("stream is NULL");
    HC_ASSIGN_OR_RETURN(Stream * s, streamOf(stream));
    (void)syncStream(s);  // its errors were the caller's to collect with synchronize
    destroyStream(s);
    return hetcomm::okStatus();
  });
}

}  // extern "C"
