// step_loop.cc: hetcomm-train's steps, evaluations, checkpoints and summary (training_state.h).
#include "trainer/training_state.h"

namespace hetcomm::trainer {

// Checkpoints hold the whole model by tensor name, whatever the plan, so a run can resume under another: the ranks
// of replica 0 add their shards into whole-model buffers (each parameter once: addToFull skips the copies the
// gradient norm skips), the world sums them onto rank 0, and rank 0 writes.
std::vector<float> Training::State::wholeOnLead(const std::vector<float>& mine) {
  std::vector<float> whole(full->totalFloats(), 0.0f);
  if (role.replica == 0) addToFull(*layout, mine.data(), *full, whole.data());
  if (world > 1)
    if (hetcommResult_t r =
            hetcommReduce(whole.data(), whole.data(), whole.size(), hetcommFloat32, hetcommSum, 0, comm, nullptr);
        r != hetcommSuccess)
      die(rank, commError("hetcommReduce (checkpoint)", r, comm).message());
  if (!lead) whole = {};  // one whole-model buffer at a time off rank 0
  return whole;
}

void Training::State::saveCheckpoint(int64_t atStep) {
  if (cfg.checkpointDir.empty()) return;
  TrainState st;
  st.step = atStep;
  st.adamSteps = adam->steps();
  st.data = train->position();
  st.params = wholeOnLead(params);
  st.m = wholeOnLead(check(rank, dp->gatherOwned(adam->m())));
  st.v = wholeOnLead(check(rank, dp->gatherOwned(adam->v())));
  if (!lead) return;
  std::filesystem::create_directories(cfg.checkpointDir);
  const std::string path = checkpointPath(cfg.checkpointDir, atStep);
  check(rank, saveTrainState(path, *full, st, cfg));
  std::printf("checkpoint: %s\n", path.c_str());
}

// Mean validation loss over the first eval_batches * micro_batch windows of the validation split, each replica
// taking a contiguous share (weighted by its count, so any plan gives the same figure) through its pipeline.
double Training::State::evaluate() {
  const int64_t total = std::min<int64_t>(int64_t(cfg.evalBatches) * cfg.microBatch, val->windowsPerEpoch());
  const int64_t begin = total * role.replica / plan.dp, end = total * (role.replica + 1) / plan.dp;
  std::vector<Batch> batches;
  std::vector<MicroBatch> micro;
  for (int64_t at = begin; at < end; at += cfg.microBatch) {
    std::vector<int64_t> samples;
    for (int64_t i = at; i < std::min(end, at + cfg.microBatch); ++i) samples.push_back(i);
    batches.push_back(check(rank, val->makeBatch(samples)));
  }
  for (size_t i = 0; i < batches.size(); ++i) {
    const int B = static_cast<int>(std::min<int64_t>(cfg.microBatch, end - begin - int64_t(i) * cfg.microBatch));
    micro.push_back({batches[i].inputs.data(), batches[i].targets.data(), B});
  }
  const double lossSum = check(rank, pipeline->evaluate(params.data(), micro));
  std::vector<double> sums{countsLoss ? lossSum : 0.0, countsLoss ? double(end - begin) : 0.0};
  worldSum(sums);
  return sums[0] / sums[1];
}

// The tied embedding: the first stage's wte and the last stage's copy for the LM head get the sum of both
// gradients (each rank puts its rows into a whole-table buffer; the tied group sums it).
static Result<void> sumTiedCopies(const ParamLayout& layout, float* grads, hetcommComm_t tied, int C, int V) {
  const ParamTensor& t = layout.find(layout.shard().embedding ? "wte" : "lm_head.weight");
  std::vector<float> whole(size_t(V) * C, 0.0f);
  size_t at = t.offset;
  for (auto [b, e] : t.rows) {
    std::copy(grads + at, grads + at + size_t(e - b) * C, whole.begin() + b * C);
    at += size_t(e - b) * C;
  }
  if (hetcommResult_t r =
          hetcommAllReduce(whole.data(), whole.data(), whole.size(), hetcommFloat32, hetcommSum, tied, nullptr);
      r != hetcommSuccess)
    return commError("hetcommAllReduce (tied embedding)", r, tied);
  at = t.offset;
  for (auto [b, e] : t.rows) {
    std::copy(whole.begin() + b * C, whole.begin() + e * C, grads + at);
    at += size_t(e - b) * C;
  }
  return {};
}

void Training::State::run() {
  std::unique_ptr<StepLog> log;
  if (lead) log = check(rank, StepLog::open(o.logJson, o.progress, cfg.logEvery, o.appendLog));
  const int T = cfg.model.seqLen;
  const double tokensPerStep = double(cfg.globalBatch) * T;
  const float lossScale = static_cast<float>(1.0 / tokensPerStep);
  double totalCompute = 0, totalComm = 0, totalTime = 0, lastLoss = NAN, lastVal = NAN;
  double totalBusy = 0, totalPipe = 0;  // this rank's forward/backward time and 1F1B wall time (bubble)
  double totalTp = 0, totalP2p = 0;     // ... in tensor-parallel collectives and pipeline transfers
  int64_t timedSteps = 0;
  int64_t replicaOffset = 0;  // this replica's first sample in the global batch
  for (int d = 0; d < role.replica; ++d) replicaOffset += int64_t(plan.microBatches[d]) * cfg.microBatch;
  // Device-speed emulation: a device of relative speed v takes 1/v of the measured compute time (the emulated
  // stage's waits already run at the device's speed).
  const double stretchSpeed = o.emulateCompute ? 1.0 : speed;
  double busyS = 0;
  auto computeHook = [&](double computeS, double tpS) {
    if (stretchSpeed < 1) std::this_thread::sleep_for(std::chrono::duration<double>(computeS * (1 / stretchSpeed - 1)));
    busyS += computeS / stretchSpeed + tpS;
  };
  const auto runStart = Clock::now();
  const int64_t firstStep = step;
  for (; step < cfg.steps; ++step) {
    const auto t0 = Clock::now();
    const std::vector<int64_t> samples = train->nextSamples(cfg.globalBatch);
    double commS = 0;
    std::vector<Batch> batches;
    std::vector<MicroBatch> micro;
    for (int m = 0; m < accum; ++m) {
      const auto at = std::span(samples).subspan(replicaOffset + int64_t(m) * cfg.microBatch, cfg.microBatch);
      batches.push_back(check(rank, train->makeBatch(at)));
    }
    for (auto& b : batches) micro.push_back({b.inputs.data(), b.targets.data(), cfg.microBatch});
    // Buckets go out as the last micro-batch's backward completes them, except the tied embedding's: its two
    // copies are summed first, after the pipeline.
    auto onGroup = [&](int g) {
      if (tiedGroup >= 0 && layout->bucketOfGroup(g) == layout->bucketOfGroup(tiedGroup)) return;
      check(rank, dp->groupDone(g, grads.data()));
    };
    groups->tpSeconds = groups->p2pSeconds = 0;
    busyS = 0;
    const double lossSum =
        check(rank, pipeline->step(params.data(), grads.data(), lossScale, micro, onGroup, computeHook));
    const double computeS = secondsSince(t0);
    auto c0 = Clock::now();
    if (groups->tied())
      check(rank, sumTiedCopies(*layout, grads.data(), groups->tied(), cfg.model.dModel, cfg.model.vocabSize));
    check(rank, dp->finishGradients(grads.data()));
    // Loss (sum over sequences, from each replica's last stage) and the squared gradient norm, each parameter
    // counted once: without ZeRO every replica holds the same gradients, so only replica 0's count.
    std::vector<double> sums{countsLoss ? lossSum : 0.0,
                             (dp->zero1() || dp->rank() == 0) ? adam->normSquared(grads.data()) : 0.0};
    worldSum(sums);
    commS += secondsSince(c0);
    const double loss = sums[0] / cfg.globalBatch, norm = std::sqrt(sums[1]);
    const float clip = cfg.gradClip > 0 && norm > cfg.gradClip ? static_cast<float>(cfg.gradClip / (norm + 1e-6)) : 1;
    const double lr = schedule->lrAt(step);
    adam->step(params.data(), grads.data(), static_cast<float>(lr), clip);
    c0 = Clock::now();
    check(rank, dp->gatherParams(params.data()));
    commS += secondsSince(c0);
    std::fill(grads.begin(), grads.end(), 0.0f);
    const double stepS = secondsSince(t0);
    lastLoss = loss;
    if (step > firstStep) {  // the first step warms caches and allocators
      totalCompute += computeS, totalComm += commS, totalTime += stepS, ++timedSteps;
      totalBusy += busyS, totalPipe += computeS;
      totalTp += groups->tpSeconds, totalP2p += groups->p2pSeconds;
    }

    const bool evalNow =
        !o.emulateCompute && ((cfg.evalEvery > 0 && (step + 1) % cfg.evalEvery == 0) || step + 1 == cfg.steps);
    std::optional<double> valLoss;
    if (evalNow) lastVal = *(valLoss = evaluate());
    if (cfg.checkpointEvery > 0 && (step + 1) % cfg.checkpointEvery == 0 && step + 1 < cfg.steps)
      saveCheckpoint(step + 1);
    if (!lead) continue;
    StepRecord r;
    r.step = step + 1, r.steps = cfg.steps;
    // What the log shows: nothing is computed under --emulate-compute (NaN: "-", null in the JSON).
    r.loss = o.emulateCompute ? NAN : loss, r.norm = o.emulateCompute ? NAN : norm, r.lr = lr;
    r.tokensPerS = tokensPerStep / stepS;
    r.mfu = Gpt::flopsPerToken(cfg.model) * r.tokensPerS / (peakGflops * 1e9);
    r.computeS = computeS, r.commS = commS, r.stepS = stepS, r.tpS = groups->tpSeconds, r.p2pS = groups->p2pSeconds;
    r.valLoss = valLoss, r.hybrid = hybrid, r.emulated = emulated;
    log->record(r, secondsSince(runStart) / double(step + 1 - firstStep) * double(cfg.steps - step - 1));
  }
  if (log) log->clearProgress();
  saveCheckpoint(step);

  // Means over the ranks: the pipeline's idle share and the time in each kind of group; the slowest rank's 1F1B.
  std::vector<double> means{totalPipe - totalBusy, totalPipe, totalTp, totalP2p, totalComm};
  worldSum(means);
  const double slowestPipe = worldMax(timedSteps ? totalPipe / double(timedSteps) : 0);
  if (!lead) return;
  SummaryInfo s;
  s.world = world, s.stages = S, s.hybridOrDp = hybrid || plan.dp > 1;
  s.minMicroBatches = *std::min_element(plan.microBatches.begin(), plan.microBatches.end());
  s.emulated = emulated, s.emulateCompute = o.emulateCompute;
  s.steps = cfg.steps - firstStep, s.timedSteps = timedSteps, s.tokensPerStep = tokensPerStep;
  s.runS = secondsSince(runStart);
  s.tokensPerS = timedSteps ? tokensPerStep * double(timedSteps) / totalTime : 0;
  s.mfu = Gpt::flopsPerToken(cfg.model) * s.tokensPerS / (peakGflops * 1e9);
  s.computeShare = totalTime > 0 ? totalCompute / totalTime : 0;
  s.commShare = totalTime > 0 ? totalComm / totalTime : 0;
  s.bubble = means[1] > 0 ? means[0] / means[1] : 0;
  const double perStep = timedSteps ? 1e3 / double(world) / double(timedSteps) : 0;
  s.tpMs = means[2] * perStep, s.p2pMs = means[3] * perStep, s.dpMs = means[4] * perStep;
  s.lastLoss = lastLoss, s.lastVal = lastVal, s.unigramNats = unigramNats;
  const double stepS = timedSteps ? totalTime / double(timedSteps) : 0;
  s.measured =
      StepBreakdown{stepS, slowestPipe, s.bubble, stepS - slowestPipe, s.tokensPerS, s.tpMs / 1e3, s.p2pMs / 1e3};
  s.predicted = predicted;
  printSummary(s);
  if (!o.summaryJson.empty()) {
    std::ofstream out(o.summaryJson, std::ios::trunc);
    out << summaryJson(s).dump(1) << "\n";
    if (!out) die(rank, "cannot write --summary-json " + o.summaryJson);
  }
}

}  // namespace hetcomm::trainer
