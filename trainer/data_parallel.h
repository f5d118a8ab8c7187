// data_parallel.h: gradients summed over the data-parallel ranks in buckets that start during the backward pass,
// on an asynchronous hetcomm stream, so communication of the last layers overlaps the backward of the first.
//
// Plain DP: each bucket is allreduced in place; every rank then holds the whole summed gradient and updates every
// parameter. ZeRO-1 (--zero 1): each bucket is reduce-scattered instead, rank r keeping the r-th slice of every
// bucket; it keeps optimizer state for its slices only, updates them, and an allgather per bucket gives every rank
// the new parameters. Same arithmetic, 1/D of the optimizer memory, the same bytes on the wire.
//
// ZeRO-1 with uneven shares (Cephalo: optimizer state sized to each rank's memory, not its compute): rank r keeps
// the share s_r of every bucket. Its slice's sum reaches it by a reduce rooted at it, and the updated slice goes
// out by a broadcast from it: one reduce and one broadcast per rank and bucket, the same bytes as the even
// reduce-scatter and all-gather.
#pragma once

#include <hetcomm/hetcomm.h>

#include <string>
#include <utility>
#include <vector>

#include "trainer/error.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {

// hetcomm's result as a trainer error, with the call and hetcomm's own message.
Error commError(const char* call, hetcommResult_t r, hetcommComm_t comm);

class DataParallel {
 public:
  // comm: the data-parallel communicator (not owned); it must outlive this object. shares: with zero1, each DP
  // rank's share of the optimizer state, in DP rank order (positive; normalised here; the same on every rank);
  // empty or all equal: even slices.
  DataParallel(hetcommComm_t comm, const ParamLayout& layout, bool zero1, std::vector<double> shares = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool zero1() const { return zero1_; }
  bool evenShares() const { return even_; }
  hetcommComm_t comm() const { return comm_; }

  // The ranges of the flat buffer this rank updates: its slice of every bucket under ZeRO-1, every bucket
  // otherwise. In bucket order.
  const std::vector<std::pair<size_t, size_t>>& ownedRanges() const { return owned_; }
  size_t ownedFloats() const { return ownedFloats_; }

  // From the backward pass of the last micro-batch: group g's gradients are final. Starts the reduction of a
  // bucket once all of its groups are.
  Result<void> groupDone(int group, float* grads);
  // Waits for every started reduction (and starts any bucket not started, e.g. with one rank). Afterwards the
  // owned ranges of grads hold the sum over ranks.
  Result<void> finishGradients(float* grads);
  // ZeRO-1: gives every rank the parameters the others updated. No-op otherwise.
  Result<void> gatherParams(float* params);
  // ZeRO-1: a whole-buffer copy of state kept in owned-range order (optimizer moments), for checkpoints.
  Result<std::vector<float>> gatherOwned(const std::vector<float>& shard);

  // Sums over the ranks (losses, squared norms), blocking.
  Result<double> sum(double value);
  Result<void> sum(std::vector<double>& values);

 private:
  Result<void> startBucket(size_t b, float* grads);
  // Uneven shares: every rank's slice of every bucket, in place at its owner (gatherParams, gatherOwned).
  Result<void> broadcastSlices(float* buffer);

  hetcommComm_t comm_;
  const ParamLayout& layout_;
  bool zero1_;
  int rank_ = 0, size_ = 1;
  hetcommStream_t stream_ = nullptr;
  std::vector<char> started_;
  std::vector<std::pair<size_t, size_t>> owned_;
  size_t ownedFloats_ = 0;
  bool even_ = true;
  // Uneven shares: per bucket, rank r's slice [cut[b][r], cut[b][r + 1]) relative to the bucket's offset.
  std::vector<std::vector<size_t>> cut_;
};

}  // namespace hetcomm::trainer
