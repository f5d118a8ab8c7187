#include "trainer/pipeline.h"

#include <algorithm>
#include <chrono>

#include "trainer/data_parallel.h"
#include "trainer/elastic.h"

namespace hetcomm::trainer {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

#define TRY_HC(call, comm)                                       \
  do {                                                           \
    hetcommResult_t r_ = (call);                                 \
    if (r_ != hetcommSuccess) return commError(#call, r_, comm); \
  } while (0)

class CommTp final : public TpGroup {
 public:
  CommTp(hetcommComm_t comm, double* seconds) : comm_(comm), seconds_(seconds) {}
  Result<void> sum(float* x, size_t n) override { return reduce(x, n, hetcommSum); }
  Result<void> max(float* x, size_t n) override { return reduce(x, n, hetcommMax); }

 private:
  Result<void> reduce(float* x, size_t n, hetcommRedOp_t op) {
    const auto t0 = Clock::now();
    TRY_HC(hetcommAllReduce(x, x, n, hetcommFloat32, op, comm_, nullptr), comm_);
    *seconds_ += since(t0);
    return {};
  }
  hetcommComm_t comm_;
  double* seconds_;
};

Result<hetcommComm_t> split(hetcommComm_t world, int color, int key) {
  hetcommComm_t out = nullptr;
  TRY_HC(hetcommCommSplit(world, color, key, &out, nullptr), world);
  trackComm(out);
  return out;
}

}  // namespace

Result<std::unique_ptr<HybridGroups>> HybridGroups::create(hetcommComm_t world, const ParallelPlan& plan,
                                                           const RoleTable& table) {
  int rank = 0;
  hetcommCommUserRank(world, &rank);
  std::unique_ptr<HybridGroups> g(new HybridGroups());
  g->role_ = table.of[rank];
  g->stages_ = static_cast<int>(plan.stages.size());
  g->ranks_ = table.ranks[g->role_.replica];
  const Role& r = g->role_;
  int maxTp = 1;
  for (const StagePlan& s : plan.stages) maxTp = std::max(maxTp, s.tp);
  const bool endStage = g->stages_ > 1 && (r.stage == 0 || r.stage == g->stages_ - 1);
  // Every rank takes part in every split, in this order.
  auto tp = split(world, r.replica * g->stages_ + r.stage, r.tpRank);
  if (!tp) return tp.error();
  g->tp_ = *tp;
  auto dp = split(world, r.stage * maxTp + r.tpRank, r.replica);
  if (!dp) return dp.error();
  g->dp_ = *dp;
  // Key: the first stage's ranks first, then the last's.
  auto tied = split(world, endStage ? r.replica : HETCOMM_SPLIT_NOCOLOR, r.stage * maxTp + r.tpRank);
  if (!tied) return tied.error();
  g->tied_ = *tied;
  auto fwd = split(world, 0, rank);
  if (!fwd) return fwd.error();
  g->fwd_ = *fwd;
  auto bwd = split(world, 0, rank);
  if (!bwd) return bwd.error();
  g->bwd_ = *bwd;
  if (plan.stages[r.stage].tp > 1) g->tpGroup_ = std::make_unique<CommTp>(g->tp_, &g->tpSeconds);
  return g;
}

HybridGroups::~HybridGroups() {
  for (hetcommComm_t c : {tp_, dp_, tied_, fwd_, bwd_})
    if (c) {
      forgetComm(c);
      hetcommCommFinalize(c);
      hetcommCommDestroy(c);
    }
}

int StageShape::warmup() const {
  return static_cast<int>(std::min<int64_t>(int64_t(depth) * (stages - stage - 1), microBatches));
}

int StageShape::slots() const { return std::max(1, std::min(warmup() + 1, microBatches)); }

int StageShape::boundaryBuffers() const {
  return std::max(1, std::min(microBatches, std::max(slots() + 1, depth + 1)));
}

size_t Pipeline::bufferBytes(const ModelConfig& cfg, int maxBatch, const StageShape& shape) {
  const size_t act = size_t(maxBatch) * cfg.seqLen * cfg.dModel;  // as the constructor's
  const size_t buffers = size_t(shape.boundaryBuffers());
  const bool sends = shape.stage + 1 < shape.stages, receives = shape.stage > 0;
  const size_t floats = act * (buffers * (sends + receives) + 3) + (sends ? act : 0);
  return floats * sizeof(float);
}

Pipeline::Pipeline(HybridGroups& groups, StageModel& model, const ModelConfig& cfg, int maxBatch, int microBatches,
                   int depth)
    : g_(groups),
      model_(model),
      C_(cfg.dModel),
      T_(cfg.seqLen),
      stage_(groups.role().stage),
      stages_(groups.stages()),
      depth_(depth) {
  const size_t act = size_t(maxBatch) * T_ * C_;
  hetcommStreamCreate(&fwdStream_);
  hetcommStreamCreate(&bwdStream_);
  const int buffers = StageShape{stage_, stages_, microBatches, depth_}.boundaryBuffers();
  outs_.assign(buffers, std::vector<float>(stage_ + 1 < stages_ ? act : 0));
  dins_.assign(buffers, std::vector<float>(stage_ > 0 ? act : 0));
  in_.resize(act);
  dout_.resize(act);
  slice_.resize(act);
  evalOut_.resize(stage_ + 1 < stages_ ? act : 0);
}

Pipeline::~Pipeline() {
  hetcommStreamDestroy(fwdStream_);
  hetcommStreamDestroy(bwdStream_);
}

// This rank sends the slices of `buf` that toStage's ranks j with j mod (our TP degree) == our TP rank take.
Result<void> Pipeline::sendBoundary(const float* buf, size_t floats, int toStage, hetcommComm_t comm,
                                    hetcommStream_t stream) {
  const std::vector<int>& to = g_.stageRanks(toStage);
  const int mine = static_cast<int>(g_.stageRanks(stage_).size()), k = g_.role().tpRank;
  const size_t n = floats / to.size();
  for (size_t j = 0; j < to.size(); ++j)
    if (static_cast<int>(j) % mine == k) TRY_HC(hetcommSend(buf + j * n, n, hetcommFloat32, to[j], comm, stream), comm);
  return {};
}

// This rank's slice from fromStage, then the TP group's all-gather of the slices into the whole buffer.
Result<void> Pipeline::recvBoundary(float* buf, size_t floats, int fromStage, hetcommComm_t comm) {
  const std::vector<int>& from = g_.stageRanks(fromStage);
  const int mine = static_cast<int>(g_.stageRanks(stage_).size()), k = g_.role().tpRank;
  const size_t n = floats / mine;
  const auto t0 = Clock::now();
  if (mine == 1) {
    TRY_HC(hetcommRecv(buf, n, hetcommFloat32, from[0], comm, nullptr), comm);
  } else {
    TRY_HC(hetcommRecv(slice_.data(), n, hetcommFloat32, from[k % from.size()], comm, nullptr), comm);
    TRY_HC(hetcommAllGather(slice_.data(), buf, n, hetcommFloat32, g_.tp(), nullptr), g_.tp());
  }
  g_.p2pSeconds += since(t0);
  return {};
}

Result<double> Pipeline::step(const float* params, float* grads, float lossScale, const std::vector<MicroBatch>& micro,
                              const std::function<void(int)>& groupDone,
                              const std::function<void(double, double)>& computeHook) {
  const int M = static_cast<int>(micro.size());
  const StageShape shape{stage_, stages_, M, depth_};
  const int warmup = shape.warmup(), slots = shape.slots();
  const bool first = stage_ == 0, last = stage_ + 1 == stages_;
  double lossSum = 0;
  // Runs one forward or backward of the model and reports its compute time apart from its TP reductions.
  auto timed = [&](auto&& run) {
    const auto t0 = Clock::now();
    const double tp0 = g_.tpSeconds;
    auto r = run();
    if (r && computeHook) computeHook(since(t0) - (g_.tpSeconds - tp0), g_.tpSeconds - tp0);
    return r;
  };

  // Boundary buffers are reused round-robin, micro-batch i in buffer i mod K (K = boundaryBuffers()). A buffer is
  // written again only when its last send has been received:
  //   - an activation sent in forward(i - K): this stage has since finished backward(i - 1 - warmup), whose
  //     gradient the next stage computed from all of activation i - 1 - warmup >= i - K (K >= warmup + 1);
  //   - an input gradient sent in backward(i - K): in the 1F1B loop, with the previous stage depth ahead (its
  //     warm-up depth (stages - stage) not capped by M), this stage's forward(i + warmup) took an activation the
  //     previous stage sent after its backward(i - 1 - depth) >= backward(i - K) (K >= depth + 1). Elsewhere
  //     (the cool-down, or warm-ups capped by M) nothing says so, and the backward stream is drained first.
  const int K = static_cast<int>(outs_.size());
  const bool previousAhead = int64_t(depth_) * (stages_ - stage_) <= M;
  auto forward = [&](int i) -> Result<void> {
    const size_t floats = size_t(micro[i].sequences) * T_ * C_;
    float* out = last ? nullptr : outs_[i % K].data();
    if (!first)
      if (auto r = recvBoundary(in_.data(), floats, stage_ - 1, g_.fwd()); !r) return r;
    auto loss = timed([&] {
      return model_.forwardStage(i % slots, params, micro[i].tokens, in_.data(), micro[i].targets, micro[i].sequences,
                                 out);
    });
    if (!loss) return loss.error();
    lossSum += *loss * micro[i].sequences;
    if (!last) return sendBoundary(out, floats, stage_ + 1, g_.fwd(), fwdStream_);
    return {};
  };
  auto backward = [&](int i, bool inLoop) -> Result<void> {
    const size_t floats = size_t(micro[i].sequences) * T_ * C_;
    if (!last)
      if (auto r = recvBoundary(dout_.data(), floats, stage_ + 1, g_.bwd()); !r) return r;
    float* din = first ? nullptr : dins_[i % K].data();
    if (din && i >= K && !(inLoop && previousAhead)) TRY_HC(hetcommStreamSynchronize(bwdStream_), g_.bwd());
    if (auto r = timed([&] {
          return model_.backwardStage(i % slots, params, grads, lossScale, dout_.data(), din,
                                      i + 1 == M ? groupDone : nullptr);
        });
        !r)
      return r;
    if (!first) return sendBoundary(din, floats, stage_ - 1, g_.bwd(), bwdStream_);
    return {};
  };

  for (int i = 0; i < warmup; ++i)
    if (auto r = forward(i); !r) return r.error();
  for (int i = warmup; i < M; ++i) {
    if (auto r = forward(i); !r) return r.error();
    if (auto r = backward(i - warmup, true); !r) return r.error();
  }
  for (int i = M - warmup; i < M; ++i)
    if (auto r = backward(i, false); !r) return r.error();
  // The sent buffers are reused next step.
  TRY_HC(hetcommStreamSynchronize(fwdStream_), g_.fwd());
  TRY_HC(hetcommStreamSynchronize(bwdStream_), g_.bwd());
  return last ? lossSum : 0.0;
}

Result<double> Pipeline::evaluate(const float* params, const std::vector<MicroBatch>& micro) {
  const bool first = stage_ == 0, last = stage_ + 1 == stages_;
  double lossSum = 0;
  for (const MicroBatch& mb : micro) {
    const size_t floats = size_t(mb.sequences) * T_ * C_;
    if (!first)
      if (auto r = recvBoundary(in_.data(), floats, stage_ - 1, g_.fwd()); !r) return r.error();
    auto loss = model_.forwardStage(0, params, mb.tokens, in_.data(), mb.targets, mb.sequences, evalOut_.data());
    if (!loss) return loss.error();
    lossSum += *loss * mb.sequences;
    if (!last)
      if (auto r = sendBoundary(evalOut_.data(), floats, stage_ + 1, g_.fwd(), nullptr); !r) return r.error();
  }
  return last ? lossSum : 0.0;
}

}  // namespace hetcomm::trainer
