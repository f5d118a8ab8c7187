// device_staging.cc: the chunk layout of each collective, and the staging pipeline.
#include "comm/device_staging.h"

#include <algorithm>

#include "kernels/datatype.h"

namespace hetcomm::comm::staging {

Layout planCollective(const coll::Args& args, int nranks, int me, size_t chunkBytes) {
  using coll::CollKind;
  const size_t esz = kernels::sizeOf(args.dtype);
  const size_t block = args.count * esz;
  const auto n = static_cast<size_t>(nranks);
  Layout l;
  const bool rowsIn = args.kind == CollKind::kReduceScatter || args.kind == CollKind::kAlltoAll;
  const bool rowsOut = args.kind == CollKind::kAllGather || args.kind == CollKind::kAlltoAll;
  // A chunk is at most chunkBytes of staging per side: one row per rank shares it.
  const size_t per = std::max(esz, chunkBytes / (rowsIn || rowsOut ? n : 1) / esz * esz);
  const bool sends = args.kind != CollKind::kBroadcast || me == args.root;
  const bool receives = args.kind != CollKind::kReduce || me == args.root;
  l.slotSendBytes = rowsIn ? per * n : per;
  l.slotRecvBytes = rowsOut ? per * n : per;
  for (size_t off = 0; off < block; off += per) {
    const size_t c = std::min(per, block - off);
    Chunk ch;
    ch.count = c / esz;
    // One row of a plain buffer, or one row per rank: rank r's block at r * block, packed at r * c in the slot.
    auto copy = [&](bool rows) { return Copy2D{off, block, 0, c, c, rows ? n : 1}; };
    if (sends) ch.in = copy(rowsIn);
    if (receives) ch.out = copy(rowsOut);
    l.chunks.push_back(ch);
  }
  return l;
}

Status runPipeline(int chunks, int slots, CopyEngine& copies, ChunkOps& ops) {
  int waited = 0;  // ops before this one are finished
  // A failure with ops still queued: fail them (and the communicator), wait until the engine has let go of every
  // slot, and drain the copies, so the caller may free the slots.
  auto bail = [&](int firstUnopened, const Status& why) {
    if (firstUnopened < chunks) ops.abandon(firstUnopened, why);
    for (int k = waited; k < chunks; ++k) (void)ops.wait(k);
    (void)copies.finish();
    return why;
  };
  for (int j = 0; j < std::min(slots, chunks); ++j)
    if (Status st = copies.copyIn(j, j % slots); !st.ok()) return bail(0, st);
  for (int k = 0; k < chunks; ++k) {
    if (Status st = copies.waitIn(k); !st.ok()) return bail(k, st);
    ops.open(k);  // op k runs as soon as op k-1 is done: the network never waits for the copies below
    if (k == 0) continue;
    const int prev = k - 1;
    if (Status st = ops.wait(prev); !st.ok()) return bail(k + 1, st);
    waited = k;
    if (Status st = copies.copyOut(prev, prev % slots); !st.ok()) return bail(k + 1, st);
    // prev's slot takes the chunk `slots` ahead; the engine orders that copy after prev's copy out.
    if (const int next = prev + slots; next < chunks)
      if (Status st = copies.copyIn(next, next % slots); !st.ok()) return bail(k + 1, st);
  }
  if (chunks == 0) return copies.finish();
  if (Status st = ops.wait(chunks - 1); !st.ok()) return bail(chunks, st);
  waited = chunks;
  if (Status st = copies.copyOut(chunks - 1, (chunks - 1) % slots); !st.ok()) return bail(chunks, st);
  return copies.finish();
}

}  // namespace hetcomm::comm::staging
