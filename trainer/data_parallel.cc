#include "trainer/data_parallel.h"

#include <cstring>

namespace hetcomm::trainer {

Error commError(const char* call, hetcommResult_t r, hetcommComm_t comm) {
  const char* last = hetcommGetLastError(comm);
  return Error{.source = "hetcomm",
               .detail = std::string(call) + ": " + hetcommGetErrorString(r) + (last && *last ? std::string(": ") + last : "")};
}

#define TRY_COMM(call)                                          \
  do {                                                          \
    hetcommResult_t r_ = (call);                                \
    if (r_ != hetcommSuccess) return commError(#call, r_, comm_); \
  } while (0)

DataParallel::DataParallel(hetcommComm_t comm, const ParamLayout& layout, bool zero1)
    : comm_(comm), layout_(layout), zero1_(zero1) {
  hetcommCommUserRank(comm, &rank_);
  hetcommCommCount(comm, &size_);
  hetcommStreamCreate(&stream_);
  started_.assign(layout.buckets().size(), 0);
  for (const Bucket& b : layout.buckets()) {
    if (zero1_) {
      const size_t slice = b.length / size_;
      owned_.push_back({b.offset + rank_ * slice, slice});
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
  if (zero1_) {
    const size_t slice = bucket.length / size_;
    TRY_COMM(hetcommReduceScatter(base, base + rank_ * slice, slice, hetcommFloat32, hetcommSum, comm_, stream_));
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

Result<void> DataParallel::gatherParams(float* params) {
  if (!zero1_ || size_ == 1) return {};
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
  if (zero1_ && size_ > 1) {
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
