// device_staging.h: operations on buffers the network cannot read (CUDA device memory) run as host operations over
// pinned staging buffers, chunk by chunk, so that copies in, the network and reduction, and copies out overlap:
//
//   chunk k:   copy in ──► host op k (engine) ──► copy out
//   chunk k+1:        copy in ──► host op k+1 ──► copy out
//
// Two pieces, each testable without a GPU:
//   - the layout: which bytes of the user's buffers chunk k reads and writes, as 2-D copies (allgather's output,
//     reduce-scatter's input and alltoall's both are one row per rank);
//   - the pipeline: the order of copies and host operations through a few staging slots, over a CopyEngine (CUDA
//     copies on internal streams, or memcpy in tests) and a ChunkOps (the queued host operations).
//
// Chunking depends only on the collective's shape, never on this rank's memory type... except that host buffers
// are not staged at all: a collective where some ranks pass device buffers and others host buffers is split on
// the first and not on the second, which the communicator's consistency check reports as a mismatch. Point-to-
// point calls are staged whole (one chunk), so they pair with any peer.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/args.h"
#include "common/status.h"

namespace hetcomm::comm::staging {

// height rows of width bytes: row r at userOffset + r * userPitch in the user's buffer, and at stageOffset + r *
// stagePitch in the staging slot.
struct Copy2D {
  size_t userOffset = 0, userPitch = 0;
  size_t stageOffset = 0, stagePitch = 0;
  size_t width = 0, height = 0;
  bool empty() const { return width == 0 || height == 0; }
};

struct Chunk {
  size_t count = 0;  // the host op's count argument (elements per block)
  Copy2D in;         // user send buffer -> slot's send area (empty when this rank sends nothing)
  Copy2D out;        // slot's recv area -> user recv buffer (empty when this rank receives nothing)
};

struct Layout {
  std::vector<Chunk> chunks;
  size_t slotSendBytes = 0;  // each slot's send area
  size_t slotRecvBytes = 0;  // and receive area
};

// Chunks of at most chunkBytes of staging per direction (a whole number of elements, at least one per row) for a
// collective of args (kind, count, dtype, root) on rank me of nranks. Not for kSendRecv.
Layout planCollective(const coll::Args& args, int nranks, int me, size_t chunkBytes);

// Moves chunks between the user's buffers and staging slots. Copies in and out are asynchronous; copyIn(j, slot)
// must not overwrite slot before that slot's last copyOut has read it (CUDA: the in-stream waits for the
// out-stream's event), nor start before the work the caller ordered before the operation.
class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  virtual Status copyIn(int chunk, int slot) = 0;
  virtual Status waitIn(int chunk) = 0;  // chunk's copy in is complete: its host op may read the slot
  virtual Status copyOut(int chunk, int slot) = 0;
  virtual Status finish() = 0;  // every copy out is complete
};

// The host operations, one per chunk, queued in order and each held back until open(k).
class ChunkOps {
 public:
  virtual ~ChunkOps() = default;
  virtual void open(int chunk) = 0;
  virtual Status wait(int chunk) = 0;  // until chunk's op finished; its error
  // A copy failed: the ops still held back can never run. Fails them (and the communicator: the peers' halves of
  // them would wait forever).
  virtual void abandon(int fromChunk, const Status& why) = 0;
};

// Runs chunks 0..n-1 through slots staging slots (>= 2). Returns the first error; after a copy error the unopened
// ops are abandoned, after an op's error the communicator has failed them already.
Status runPipeline(int chunks, int slots, CopyEngine& copies, ChunkOps& ops);

}  // namespace hetcomm::comm::staging
