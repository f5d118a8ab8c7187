#include "trainer/data_parallel.h"

#include <cmath>
#include <cstring>

namespace hetcomm::trainer {

Error commError(const char* call, hetcommResult_t r, hetcommComm_t comm) {
  const char* last = hetcommGetLastError(comm);
  return Error{
      .source = "hetcomm",
      .detail = std::string(call) + ": " + hetcommGetErrorString(r) + (last && *last ? std::string(": ") + last : "")};
}

#define TRY_COMM(call)                                            \
  do {                                                            \
    hetcommResult_t r_ = (call);                                  \
    if (r_ != hetcommSuccess) return commError(#call, r_, comm_); \
  } while (0)

DataParallel::DataParallel(hetcommComm_t comm, const ParamLayout& layout, bool zero1, std::vector<double> shares)
    : comm_(comm), layout_(layout), zero1_(zero1) {
  hetcommCommUserRank(comm, &rank_);
  hetcommCommCount(comm, &size_);
  hetcommStreamCreate(&stream_);
  started_.assign(layout.buckets().size(), 0);
  if (zero1_ && static_cast<int>(shares.size()) == size_)
    for (double x : shares) even_ = even_ && x == shares[0];
  // Cumulative shares: rank r's slice of a bucket of n floats is [n * c_r, n * c_(r+1)), rounded.
  std::vector<double> cum(size_ + 1, 0.0);
  if (!even_) {
    double total = 0;
    for (double x : shares) total += x;
    for (int r = 0; r < size_; ++r) cum[r + 1] = cum[r] + shares[r] / total;
    cum[size_] = 1.0;
  }
  for (const Bucket& b : layout.buckets()) {
    if (zero1_ && even_) {
      const size_t slice = b.length / size_;
      owned_.push_back({b.offset + rank_ * slice, slice});
    } else if (zero1_) {
      std::vector<size_t> cut(size_ + 1);
      for (int r = 0; r <= size_; ++r) cut[r] = static_cast<size_t>(std::llround(cum[r] * double(b.length)));
      owned_.push_back({b.offset + cut[rank_], cut[rank_ + 1] - cut[rank_]});
      cut_.push_back(std::move(cut));
    } else {
      owned_.push_back({b.offset, b.length});
    }
    ownedFloats_ += owned_.back().second;
  }
}

DataParallel::~DataParallel() {
  if (stream_) hetcommStreamDestroy(stream_);
}

Result<void> DataParallel::startBucket(size_t b, float* grads) {
  if (started_[b]) return {};
  started_[b] = 1;
  if (size_ == 1) return {};
  const Bucket& bucket = layout_.buckets()[b];
  float* base = grads + bucket.offset;
  if (zero1_ && even_) {
    const size_t slice = bucket.length / size_;
    TRY_COMM(hetcommReduceScatter(base, base + rank_ * slice, slice, hetcommFloat32, hetcommSum, comm_, stream_));
  } else if (zero1_) {
    const std::vector<size_t>& cut = cut_[b];
    for (int r = 0; r < size_; ++r)
      if (cut[r + 1] > cut[r])
        TRY_COMM(hetcommReduce(base + cut[r], base + cut[r], cut[r + 1] - cut[r], hetcommFloat32, hetcommSum, r, comm_,
                               stream_));
  } else {
    TRY_COMM(hetcommAllReduce(base, base, bucket.length, hetcommFloat32, hetcommSum, comm_, stream_));
  }
  return {};
}

Result<void> DataParallel::groupDone(int group, float* grads) {
  const int b = layout_.bucketOfGroup(group);
  // Backward finishes a bucket's groups from its last to its first: the first one done means all are.
  if (group == layout_.buckets()[b].firstGroup) return startBucket(b, grads);
  return {};
}

Result<void> DataParallel::finishGradients(float* grads) {
  for (size_t b = 0; b < started_.size(); ++b)
    if (auto r = startBucket(b, grads); !r) return r;
  std::fill(started_.begin(), started_.end(), 0);
  TRY_COMM(hetcommStreamSynchronize(stream_));
  return {};
}

Result<void> DataParallel::broadcastSlices(float* buffer) {
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    const std::vector<size_t>& cut = cut_[b];
    float* base = buffer + layout_.buckets()[b].offset;
    for (int r = 0; r < size_; ++r)
      if (cut[r + 1] > cut[r])
        TRY_COMM(
            hetcommBroadcast(base + cut[r], base + cut[r], cut[r + 1] - cut[r], hetcommFloat32, r, comm_, stream_));
  }
  TRY_COMM(hetcommStreamSynchronize(stream_));
  return {};
}

Result<void> DataParallel::gatherParams(float* params) {
  if (!zero1_ || size_ == 1) return {};
  if (!even_) return broadcastSlices(params);
  for (const Bucket& bucket : layout_.buckets()) {
    const size_t slice = bucket.length / size_;
    float* base = params + bucket.offset;
    TRY_COMM(hetcommAllGather(base + rank_ * slice, base, slice, hetcommFloat32, comm_, stream_));
  }
  TRY_COMM(hetcommStreamSynchronize(stream_));
  return {};
}

Result<std::vector<float>> DataParallel::gatherOwned(const std::vector<float>& shard) {
  std::vector<float> whole(layout_.totalFloats(), 0.0f);
  size_t at = 0;
  for (size_t b = 0; b < owned_.size(); ++b) {
    std::memcpy(whole.data() + owned_[b].first, shard.data() + at, owned_[b].second * sizeof(float));
    at += owned_[b].second;
  }
  if (zero1_ && size_ > 1 && !even_) {
    if (auto ok = broadcastSlices(whole.data()); !ok) return ok.error();
  } else if (zero1_ && size_ > 1) {
    for (const Bucket& bucket : layout_.buckets()) {
      const size_t slice = bucket.length / size_;
      float* base = whole.data() + bucket.offset;
      TRY_COMM(hetcommAllGather(base + rank_ * slice, base, slice, hetcommFloat32, comm_, stream_));
    }
    TRY_COMM(hetcommStreamSynchronize(stream_));
  }
  return whole;
}

Result<double> DataParallel::sum(double value) {
  std::vector<double> v{value};
  if (auto r = sum(v); !r) return r.error();
  return v[0];
}

Result<void> DataParallel::sum(std::vector<double>& values) {
  if (size_ == 1) return {};
  TRY_COMM(hetcommAllReduce(values.data(), values.data(), values.size(), hetcommFloat64, hetcommSum, comm_, nullptr));
  return {};
}

}  // namespace hetcomm::trainer
