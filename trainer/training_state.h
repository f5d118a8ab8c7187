// training_state.h: what one hetcomm-train run holds (training.h's Training::State), shared by the files that
// make it up: training.cc (the plan and the set-up), memory_check.cc (every rank's memory against its limit),
// step_loop.cc (the steps, evaluation, checkpoints, the summary). Private to the trainer program.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kernels/nn/nn.h"
#include "planner/world_plan.h"
#include "trainer/checkpoint.h"
#include "trainer/data.h"
#include "trainer/data_parallel.h"
#include "trainer/devices.h"
#include "trainer/elastic.h"
#include "trainer/emulated_stage.h"
#include "trainer/lr_schedule.h"
#include "trainer/memory.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/param_layout.h"
#include "trainer/pipeline.h"
#include "trainer/plan.h"
#include "trainer/report.h"
#include "trainer/train_state.h"
#include "trainer/training.h"

namespace hetcomm::trainer {

namespace training_detail {

namespace nn = hetcomm::kernels::nn;

using Clock = std::chrono::steady_clock;
inline double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Under --elastic the run unwinds instead (elastic.h): nothing it made waits on a lost peer, and the program
// shrinks the world and starts again.
[[noreturn]] inline void die(int rank, const std::string& message) {
  if (elastic()) {
    revokeTracked();
    throw RankLost{message};
  }
  std::fprintf(stderr, "hetcomm-train [rank %d]: error: %s\n", rank, message.c_str());
  std::exit(1);
}

template <class T>
T check(int rank, Result<T> r) {
  if (!r) die(rank, r.error().message());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

// Ranks on this host, from whichever launcher started us (for the BLAS thread share).
inline int localRanks() {
  for (const char* v :
       {"HETCOMM_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* s = std::getenv(v); s && std::atoi(s) > 0) return std::atoi(s);
  return 1;
}

// fp32 GEMM rate of this rank with its BLAS threads, every rank measuring at once (as they will train): the
// "peak" MFU is measured against. sync: a barrier over every rank.
inline double measureGemmGflops(const std::function<void()>& sync) {
  constexpr int n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  sync();  // start together
  nn::linearForward(c.data(), a.data(), b.data(), nullptr, n, n, n);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    constexpr int reps = 8;
    for (int i = 0; i < reps; ++i) nn::linearForward(c.data(), a.data(), b.data(), nullptr, n, n, n);
    best = std::max(best, 2.0 * n * n * n * reps / secondsSince(t0) / 1e9);
  }
  return best;
}

}  // namespace training_detail

using namespace training_detail;

struct Training::State {
  Options o;
  hetcommComm_t comm = nullptr;
  int rank = 0, world = 1, threads = 1;
  bool lead = true;
  TrainConfig cfg;
  ParallelPlan plan;
  std::string planSource;
  DeviceSpeeds speeds;
  double speed = 1.0, referenceGflops = 0, peakGflops = 0;
  bool emulated = false, zero1 = false;
  Placement where;
  RoleTable table;
  std::unique_ptr<HybridGroups> groups;
  Role role;
  int S = 1, accum = 1, tiedGroup = -1;
  bool hybrid = false, countsLoss = false;
  std::vector<std::string> files;
  std::unique_ptr<Dataset> dataset;
  std::unique_ptr<DataLoader> train, val;
  double unigramNats = 0;
  std::unique_ptr<ParamLayout> layout, full;
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<StageModel> model;
  std::unique_ptr<Pipeline> pipeline;
  std::unique_ptr<AdamW> adam;
  std::unique_ptr<LrSchedule> schedule;
  std::vector<float> params, grads;
  int64_t step = 0;
  std::string memoryLine;
  std::optional<planner::ComputeProfile> computeProfile;  // --plan auto, --predict
  std::optional<StepBreakdown> predicted;                 // --plan auto, --predict (lead rank)
  std::string predictionText;                             // what the lead prints before the steps

  void worldSum(std::vector<double>& v) const {
    if (world == 1) return;
    if (hetcommResult_t r = hetcommAllReduce(v.data(), v.data(), v.size(), hetcommFloat64, hetcommSum, comm, nullptr);
        r != hetcommSuccess)
      die(rank, commError("hetcommAllReduce (world sum)", r, comm).message());
  }
  double worldMax(double v) const {
    if (world > 1)
      if (hetcommResult_t r = hetcommAllReduce(&v, &v, 1, hetcommFloat64, hetcommMax, comm, nullptr);
          r != hetcommSuccess)
        die(rank, commError("hetcommAllReduce (world max)", r, comm).message());
    return v;
  }
  // The lead's text on every rank (length, then bytes).
  std::string fromLead(std::string text) const {
    if (world == 1) return text;
    uint64_t n = text.size();
    if (hetcommResult_t r = hetcommBroadcast(&n, &n, 1, hetcommUint64, 0, comm, nullptr); r != hetcommSuccess)
      die(rank, commError("hetcommBroadcast (plan)", r, comm).message());
    text.resize(n);
    if (hetcommResult_t r = hetcommBroadcast(text.data(), text.data(), n, hetcommUint8, 0, comm, nullptr);
        r != hetcommSuccess)
      die(rank, commError("hetcommBroadcast (plan)", r, comm).message());
    return text;
  }

  void setUp();
  void resolveDevices();
  void resolveReferenceRate();
  void choosePlan();
  std::vector<double> plannedSpeeds() const;
  planner::ComputeProfile profile();
  void planAutomatically();
  void predict();
  void buildRanks();
  void checkMemory();
  void loadData();
  void buildModel();
  void resume();
  void printStartup();
  std::vector<float> wholeOnLead(const std::vector<float>& mine);
  void saveCheckpoint(int64_t atStep);
  double evaluate();
  void run();
};

}  // namespace hetcomm::trainer
