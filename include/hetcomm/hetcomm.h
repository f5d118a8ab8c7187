/*
 * hetcomm.h: the public C API of hetcomm, a collective-communication library for clusters that mix
 * GPU types and network fabrics. Shaped like nccl.h: same argument order, same result-code meanings,
 * with hetcommStream_t in place of cudaStream_t.
 *
 * Buffers are host memory, or CUDA memory (device, managed or pinned host), told apart per buffer; device buffers are
 * staged through pinned host memory in chunks (HETCOMM_CUDA_CHUNK_BYTES). The CUDA runtime is loaded at run time:
 * where there is none, a pointer that is not host memory is refused. Every call returns a hetcommResult_t and never throws; the human message of
 * the last failure on the calling thread is hetcommGetLastError(NULL).
 *
 * Streams: a NULL stream makes a call return when the operation is complete. A stream made with
 * hetcommStreamCreate makes it asynchronous: the call returns once the operation is queued, and the
 * communicator's progress engine runs the stream's operations in issue order. hetcommStreamSynchronize
 * waits for them and reports their first error.
 */
#ifndef HETCOMM_HETCOMM_H_
#define HETCOMM_HETCOMM_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HETCOMM_API __attribute__((visibility("default")))
#else
#define HETCOMM_API
#endif

#define HETCOMM_MAJOR 0
#define HETCOMM_MINOR 1
#define HETCOMM_PATCH 0
#define HETCOMM_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define HETCOMM_VERSION_CODE HETCOMM_VERSION(HETCOMM_MAJOR, HETCOMM_MINOR, HETCOMM_PATCH)

typedef struct hetcommComm* hetcommComm_t;
typedef struct hetcommStream* hetcommStream_t;
#define HETCOMM_COMM_NULL NULL

#define HETCOMM_UNIQUE_ID_BYTES 128
/* Made by hetcommGetUniqueId on one rank and handed to the others out of band. It carries the rendezvous
 * address and a random secret every connection of the job must prove it knows. Treat it as a password. */
typedef struct {
  char internal[HETCOMM_UNIQUE_ID_BYTES];
} hetcommUniqueId;

/* The enums below are ints in C. In C++ they get int as their stated underlying type, so every int a caller passes
 * is a value of the type (out of an unstated range it would be undefined behaviour) and the library's checks
 * reject what is not a known code. */
#ifdef __cplusplus
#define HETCOMM_ENUM_INT : int
#else
#define HETCOMM_ENUM_INT
#endif

typedef enum HETCOMM_ENUM_INT {
  hetcommSuccess = 0,
  hetcommUnhandledError = 1,  /* an error from an external library we could not classify */
  hetcommSystemError = 2,     /* a system call failed (socket, memory, ...) */
  hetcommInternalError = 3,   /* a bug in hetcomm */
  hetcommInvalidArgument = 4, /* a bad argument; the call had no effect and the communicator is still usable */
  hetcommInvalidUsage = 5,    /* the call is not allowed now (destroyed communicator, mismatched collectives) */
  hetcommRemoteError = 6,     /* a peer died, aborted or spoke garbage */
  hetcommInProgress = 7,      /* a non-blocking operation has not finished yet */
  hetcommTimeout = 8,         /* a wait ran past HETCOMM_TIMEOUT */
  hetcommNumResults = 9
} hetcommResult_t;

typedef enum HETCOMM_ENUM_INT {
  hetcommInt8 = 0,
  hetcommChar = 0,
  hetcommUint8 = 1,
  hetcommInt32 = 2,
  hetcommInt = 2,
  hetcommUint32 = 3,
  hetcommInt64 = 4,
  hetcommUint64 = 5,
  hetcommFloat16 = 6,
  hetcommHalf = 6,
  hetcommFloat32 = 7,
  hetcommFloat = 7,
  hetcommFloat64 = 8,
  hetcommDouble = 8,
  hetcommBfloat16 = 9,
  hetcommNumTypes = 10
} hetcommDataType_t;

typedef enum HETCOMM_ENUM_INT {
  hetcommSum = 0,
  hetcommProd = 1,
  hetcommMax = 2,
  hetcommMin = 3,
  hetcommAvg = 4, /* sum divided by the number of ranks; integer types truncate */
  hetcommNumOps = 5
} hetcommRedOp_t;

#define HETCOMM_SPLIT_NOCOLOR -1
#define HETCOMM_CONFIG_UNDEF_INT INT_MIN

/* Communicator options; make one with HETCOMM_CONFIG_INITIALIZER and change the fields you need. */
typedef struct {
  size_t size;          /* set by the initializer; lets later versions add fields */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  int blocking;         /* 1 (default): init returns when done. 0: init returns hetcommInProgress; poll
                           hetcommCommGetAsyncError until it says hetcommSuccess */
  int timeoutSec;       /* bound on every wait of this communicator; default HETCOMM_TIMEOUT */
  const char* commName; /* shown in log lines; default none */
} hetcommConfig_t;

#define HETCOMM_CONFIG_MAGIC 0x68636663u /* "hcfc" */
#define HETCOMM_CONFIG_INITIALIZER                                                                 \
  {                                                                                                \
    sizeof(hetcommConfig_t), HETCOMM_CONFIG_MAGIC, HETCOMM_VERSION_CODE, HETCOMM_CONFIG_UNDEF_INT, \
        HETCOMM_CONFIG_UNDEF_INT, NULL                                                             \
  }

/* ---- version and errors ---- */
HETCOMM_API hetcommResult_t hetcommGetVersion(int* version);
HETCOMM_API const char* hetcommGetErrorString(hetcommResult_t result);
/* Message of the last failed call on this thread (comm may be NULL); "" when none. */
HETCOMM_API const char* hetcommGetLastError(hetcommComm_t comm);

/* ---- communicators ---- */
HETCOMM_API hetcommResult_t hetcommGetUniqueId(hetcommUniqueId* uniqueId);
HETCOMM_API hetcommResult_t hetcommCommInitRank(hetcommComm_t* comm, int nranks, hetcommUniqueId commId, int rank);
HETCOMM_API hetcommResult_t hetcommCommInitRankConfig(hetcommComm_t* comm, int nranks, hetcommUniqueId commId, int rank,
                                                      hetcommConfig_t* config);
/* Rank, size and rendezvous from the launcher's variables: hetcomm-run (HETCOMM_RANK, ...), torchrun (RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS,
 * with HETCOMM_MASTER_ADDR). */
HETCOMM_API hetcommResult_t hetcommCommInitFromEnv(hetcommComm_t* comm);
/* hetcomm extension, for planners: a communicator of the cluster a cluster description gives (the JSON of a
 * cluster file in clusters/: hosts with their ranks, NICs, fabrics and optional GPUs), with no processes behind it.
 * Its link figures are the NICs' nominal rates. It is rank 0 of that cluster: hetcommCommCount,
 * hetcommCommPredict, hetcommCommGetAlgorithm, hetcommCommRankPlacement and hetcommCommRankDevice answer as
 * for the real cluster; operations, split and finalize are refused. Free it with hetcommCommDestroy. Errors
 * name the JSON path and the problem. */
HETCOMM_API hetcommResult_t hetcommCommInitModel(hetcommComm_t* comm, const char* clusterJson);
/* ndev ranks in this process (ranks as threads); devlist is ignored for host buffers and may be NULL. */
HETCOMM_API hetcommResult_t hetcommCommInitAll(hetcommComm_t* comms, int ndev, const int* devlist);
/* Collective over comm: ranks with the same color form a new communicator, ordered by key then old rank.
 * color HETCOMM_SPLIT_NOCOLOR gives *newcomm = NULL. config NULL inherits comm's. */
HETCOMM_API hetcommResult_t hetcommCommSplit(hetcommComm_t comm, int color, int key, hetcommComm_t* newcomm,
                                             hetcommConfig_t* config);
/* Going on without lost ranks (NCCL 2.27's ncclCommShrink, MPI ULFM's MPI_Comm_shrink). Every rank that goes on
 * calls it; a rank in excludeRanks does not. The callers agree through the rendezvous store on who is left: every
 * rank except those in any caller's excludeRanks, those whose process has ended (the store sees its connection
 * close; a host that stops answering is noticed by TCP keepalive, in about 16 s), and those that did not call it
 * within the timeout. *newcomm gets a communicator of them, ranked in their order in comm. comm may have failed
 * (a peer died); it stays valid and is destroyed as usual. HETCOMM_SHRINK_ABORT fails comm's queued and running
 * operations first; HETCOMM_SHRINK_DEFAULT lets them end (complete, fail or time out). config NULL inherits
 * comm's. The store must survive: under hetcomm-run the launcher hosts it; where rank 0's process hosts it
 * (hetcommGetUniqueId, torchrun-style variables), losing rank 0 ends the job. A rank left out gets
 * hetcommRemoteError. */
#define HETCOMM_SHRINK_DEFAULT 0x00
#define HETCOMM_SHRINK_ABORT 0x01
HETCOMM_API hetcommResult_t hetcommCommShrink(hetcommComm_t comm, const int* excludeRanks, int excludeCount,
                                              hetcommComm_t* newcomm, hetcommConfig_t* config, int shrinkFlags);
/* Fails comm's queued and running operations (hetcommRemoteError, on the peers too) and every later one, and
 * returns once none runs: comm can then be shrunk or destroyed without waiting on anything (NCCL 2.28's
 * ncclCommRevoke). revokeFlags must be 0. */
HETCOMM_API hetcommResult_t hetcommCommRevoke(hetcommComm_t comm, int revokeFlags);
/* Waits for every queued operation of comm, then for every rank to reach finalize. */
HETCOMM_API hetcommResult_t hetcommCommFinalize(hetcommComm_t comm);
HETCOMM_API hetcommResult_t hetcommCommDestroy(hetcommComm_t comm);
/* Stops queued and running operations (they fail with hetcommRemoteError on the peers) and frees comm. */
HETCOMM_API hetcommResult_t hetcommCommAbort(hetcommComm_t comm);
HETCOMM_API hetcommResult_t hetcommCommGetAsyncError(hetcommComm_t comm, hetcommResult_t* asyncError);
HETCOMM_API hetcommResult_t hetcommCommCount(const hetcommComm_t comm, int* count);
HETCOMM_API hetcommResult_t hetcommCommUserRank(const hetcommComm_t comm, int* rank);
/* hetcomm extension: the transport this rank uses to reach peer ("shm", "tcp", "ucx" or "verbs") and why it was
 * chosen ("same host", "fabric ib0 (ib, 100 Gb/s): verbs on mlx5_0:1 / mlx5_0:1", ...), each written
 * NUL-terminated and truncated to its buffer (either buffer may be NULL when its length is 0). */
/* hetcomm extension: the algorithm comm runs for a collective of count elements (as the count argument of that
 * call) and the time its cost model predicts, in microseconds. name gets the algorithm's HETCOMM_ALGO name,
 * NUL-terminated and truncated to nameLen; either output may be NULL. */
typedef enum HETCOMM_ENUM_INT {
  hetcommCollAllReduce = 0,
  hetcommCollBroadcast = 1,
  hetcommCollReduce = 2,
  hetcommCollAllGather = 3,
  hetcommCollReduceScatter = 4,
  hetcommCollAlltoAll = 5,
  hetcommCollSendRecv = 6 /* hetcommCommPredict only: one message of count elements from ranks[0] to ranks[1] */
} hetcommCollective_t;
HETCOMM_API hetcommResult_t hetcommCommGetAlgorithm(const hetcommComm_t comm, hetcommCollective_t coll, size_t count,
                                                    hetcommDataType_t datatype, char* name, size_t nameLen,
                                                    double* predictedUs);
/* hetcomm extension, for planners: the same for a group of comm's ranks, as a communicator split from comm with
 * exactly those ranks, in that order, would run it (ranks[0] is its rank 0, the root of a broadcast or reduce):
 * from comm's topology and link figures, locally, without building that communicator. ranks: nranks distinct
 * ranks of comm. Asking about the same group again (at another size, say) is cheap. */
HETCOMM_API hetcommResult_t hetcommCommPredict(const hetcommComm_t comm, hetcommCollective_t coll, size_t count,
                                               hetcommDataType_t datatype, const int* ranks, int nranks, char* name,
                                               size_t nameLen, double* predictedUs);
HETCOMM_API hetcommResult_t hetcommCommPeerTransport(const hetcommComm_t comm, int peer, char* name, size_t nameLen,
                                                     char* reason, size_t reasonLen);
/* hetcomm extension: where a rank of comm runs, from the topology: its host and its island (hosts joined by one
 * fast fabric), each numbered densely from 0, the same on every rank. For placing work: tensor-parallel groups
 * within a host, data-parallel groups within an island. Either output may be NULL. */
HETCOMM_API hetcommResult_t hetcommCommRankPlacement(const hetcommComm_t comm, int rank, int* host, int* island);
/* hetcomm extension: the accelerator a rank of comm drives, as the topology knows it (HETCOMM_TOPO_FILE's "gpus"
 * entries, or discovery): its dense peak in TFLOP/s at the training precision and its memory in bytes; 0 where
 * unknown or where the rank's host has no GPU. For planning: relative device speeds, memory per rank. Either
 * output may be NULL. */
HETCOMM_API hetcommResult_t hetcommCommRankDevice(const hetcommComm_t comm, int rank, double* peakTflops,
                                                  size_t* memoryBytes);

/* ---- collectives (in place when sendbuff == recvbuff, or as noted) ---- */
HETCOMM_API hetcommResult_t hetcommAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                             hetcommDataType_t datatype, hetcommRedOp_t op, hetcommComm_t comm,
                                             hetcommStream_t stream);
HETCOMM_API hetcommResult_t hetcommBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                             hetcommDataType_t datatype, int root, hetcommComm_t comm,
                                             hetcommStream_t stream);
HETCOMM_API hetcommResult_t hetcommReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          hetcommDataType_t datatype, hetcommRedOp_t op, int root, hetcommComm_t comm,
                                          hetcommStream_t stream);
/* recvbuff holds nranks * sendcount; in place when sendbuff == recvbuff + rank * sendcount. */
HETCOMM_API hetcommResult_t hetcommAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                             hetcommDataType_t datatype, hetcommComm_t comm, hetcommStream_t stream);
/* sendbuff holds nranks * recvcount; in place when recvbuff == sendbuff + rank * recvcount. */
HETCOMM_API hetcommResult_t hetcommReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                 hetcommDataType_t datatype, hetcommRedOp_t op, hetcommComm_t comm,
                                                 hetcommStream_t stream);
/* Block j of sendbuff (count elements) goes to rank j; block i of recvbuff comes from rank i. */
HETCOMM_API hetcommResult_t hetcommAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                            hetcommDataType_t datatype, hetcommComm_t comm, hetcommStream_t stream);
/* Point to point; the n-th send to a peer matches the peer's n-th recv from this rank. Group sends and recvs
 * that depend on each other between hetcommGroupStart/End. */
HETCOMM_API hetcommResult_t hetcommSend(const void* sendbuff, size_t count, hetcommDataType_t datatype, int peer,
                                        hetcommComm_t comm, hetcommStream_t stream);
HETCOMM_API hetcommResult_t hetcommRecv(void* recvbuff, size_t count, hetcommDataType_t datatype, int peer,
                                        hetcommComm_t comm, hetcommStream_t stream);

/* ---- groups: calls in between are queued together at GroupEnd (sends/recvs of one group run concurrently);
 * GroupEnd waits for the operations whose stream is NULL. Groups nest. ---- */
HETCOMM_API hetcommResult_t hetcommGroupStart(void);
HETCOMM_API hetcommResult_t hetcommGroupEnd(void);

/* ---- streams: ordered queues of asynchronous operations ---- */
HETCOMM_API hetcommResult_t hetcommStreamCreate(hetcommStream_t* stream);
/* hetcomm extension: a stream whose operations are ordered on a CUDA stream (cudaStream_t; NULL is CUDA's legacy
 * default stream), as NCCL's are: a call returns at once, its work starts after the work already queued on that
 * stream, and later work queued there waits for it, without blocking a host thread. Needs the CUDA runtime and a
 * GPU. hetcommStreamSynchronize waits for hetcomm's part and reports its errors; the CUDA stream stays the
 * caller's. */
HETCOMM_API hetcommResult_t hetcommStreamCreateForCuda(hetcommStream_t* stream, void* cudaStream);
/* Waits for every operation queued on stream; returns the first error any of them hit. */
HETCOMM_API hetcommResult_t hetcommStreamSynchronize(hetcommStream_t stream);
/* hetcommSuccess when all queued work is done, hetcommInProgress while some runs, or the first error. */
HETCOMM_API hetcommResult_t hetcommStreamQuery(hetcommStream_t stream);
/* Waits for the stream's work, then frees it. */
HETCOMM_API hetcommResult_t hetcommStreamDestroy(hetcommStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // HETCOMM_HETCOMM_H_
