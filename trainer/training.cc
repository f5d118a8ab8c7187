#include "trainer/training.h"

#include "trainer/training_state.h"

namespace hetcomm::trainer {

void Training::State::setUp() {
  hetcommCommUserRank(comm, &rank);
  hetcommCommCount(comm, &world);
  lead = rank == 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = o.threads > 0 ? o.threads : std::max(1, cores / localRanks());
  Gpt::setThreads(threads);
  cfg = check(rank, configFrom(o));
  resolveDevices();
  resolveReferenceRate();
  choosePlan();
  buildRanks();
  loadData();
  buildModel();
  checkMemory();
  resume();
  // MFU's peak: the sum over ranks of each one's measured fp32 GEMM rate (or, emulating, the reference rate),
  // times its device speed.
  std::vector<double> gemm{(o.emulateCompute ? referenceGflops : measureGemmGflops([&] {
                             std::vector<double> z{0.0};
                             worldSum(z);
                           })) *
                           speed};
  worldSum(gemm);
  peakGflops = gemm[0];
  if (lead) printStartup();
}

// Device speeds: given one per rank, or "topo": the topology's GPU peaks over the fastest.
void Training::State::resolveDevices() {
  speeds = check(rank, deviceSpeeds(comm, o.deviceSpeeds));
  speed = speeds.speeds.empty() ? 1.0 : speeds.speeds[rank];
  emulated = !speeds.speeds.empty() || o.emulateCompute;  // figures say so
  if (!o.memoryLimits.empty() && o.memoryLimits.size() != 1 && static_cast<int>(o.memoryLimits.size()) != world)
    die(rank, "--memory-limits has " + std::to_string(o.memoryLimits.size()) + " entries for " + std::to_string(world) +
                  " ranks: give one for every rank, or one for all");
  if (o.emulateCompute && (!cfg.checkpointDir.empty() || !o.resume.empty()))
    die(rank, "--emulate-compute computes no parameters: it takes no --checkpoint-dir, checkpoint_dir or --resume");
}

// Reference rate of a speed-1 device for --emulate-compute: given, the topology's fastest GPU, or rank 0's GEMM
// rate measured while the others wait (a core of its own, as an emulated device has).
void Training::State::resolveReferenceRate() {
  referenceGflops = o.referenceGflops > 0 ? o.referenceGflops : speeds.topoPeakTflops * 1e3;
  if (o.emulateCompute && referenceGflops == 0) {
    std::vector<double> r{lead ? measureGemmGflops([] {}) : 0.0};
    worldSum(r);
    referenceGflops = r[0];
  }
}

void Training::State::choosePlan() {
  // The compute profile, measured by every rank at once when it is measured (as they will compute: a rank alone
  // on the host would find the memory bus to itself).
  if (o.plan == "auto" || o.predict) computeProfile = profile();
  if (o.plan == "auto") {
    if (o.tp > 1 || o.pp > 1) die(rank, "--plan auto and --tp/--pp both given: the planner chooses both");
    planAutomatically();
  } else if (!o.plan.empty()) {
    if (o.tp > 1 || o.pp > 1) die(rank, "--plan and --tp/--pp both given: the plan file says both");
    planSource = "plan " + o.plan;
    plan = check(rank, loadPlan(o.plan));
  } else {
    planSource = "--tp " + std::to_string(o.tp) + " --pp " + std::to_string(o.pp);
    if (world % (o.tp * o.pp) != 0)
      die(rank, planSource + ": tp x pp = " + std::to_string(o.tp * o.pp) + " does not divide the " +
                    std::to_string(world) + " ranks");
    plan = uniformPlan(cfg, o.tp, o.pp, world / (o.tp * o.pp));
  }
  // A plan that says its micro-batch size and ZeRO runs with them (the command line's --zero wins).
  if (plan.microBatch > 0 && plan.microBatch != cfg.microBatch) {
    if (lead && o.microBatch)
      std::printf("note: the plan's micro_batch %d replaces --micro-batch %d\n", plan.microBatch, *o.microBatch);
    cfg.microBatch = plan.microBatch;
  }
  zero1 = o.zero ? *o.zero == 1 : plan.zero == 1;
  const int plannedDepth = plan.pipelineDepth;
  if (o.pipelineDepth) plan.pipelineDepth = *o.pipelineDepth;
  check(rank, validatePlan(plan, cfg, world, planSource));
  if (o.plan == "auto" && plan.pipelineDepth != plannedDepth) {
    // The planner predicted its own depth: the run's is predicted again, so the end of the run compares like
    // with like.
    if (lead)
      predictionText += "--pipeline-depth " + std::to_string(plan.pipelineDepth) + " replaces the planner's " +
                        std::to_string(plannedDepth) + ", ";
    predict();
  } else if (o.predict && o.plan != "auto") {
    predict();
  }
}

// Each rank's speed as the planner counts it: its device speed, and with real compute its share of the host's cores
// when the ranks on a host want more BLAS threads than it has (they compute at once).
std::vector<double> Training::State::plannedSpeeds() const {
  std::vector<double> v = speeds.speeds.empty() ? std::vector<double>(world, 1.0) : speeds.speeds;
  if (!o.emulateCompute) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const double share = std::min(1.0, double(cores) / (double(localRanks()) * threads));
    for (double& x : v) x *= share;
  }
  return v;
}

// The compute the planner counts: the emulated devices' waits, or this host's kernels measured (cached).
planner::ComputeProfile Training::State::profile() {
  if (o.emulateCompute) return planner::ComputeProfile::fromFlops(referenceGflops * 1e9);
  std::vector<int> sizes;
  for (int mb : {cfg.microBatch / 2, cfg.microBatch, cfg.microBatch * 2})
    if (mb >= 1 && cfg.globalBatch % mb == 0) sizes.push_back(mb);
  const std::vector<int> tps = check(rank, planner::profiledTpDegrees(comm, cfg.model));
  return check(rank, planner::measureProfile(cfg.model, sizes, tps, threads, planner::profileCacheDir()));
}

// Rank 0 searches (the others wait in the broadcast), every rank takes its plan.
void Training::State::planAutomatically() {
  std::string text;
  if (lead) {
    planner::PlanRequest request;
    request.speeds = plannedSpeeds();
    std::string memorySource;
    request.memoryLimits = check(rank, memoryLimits(comm, o.memoryLimits, true, &memorySource));
    request.profile = *computeProfile;
    request.options.top = o.planTop;
    request.options.maxTp = o.planMaxTp;
    request.options.maxPp = o.planMaxPp;
    request.options.bucketBytes = static_cast<size_t>(o.bucketMb * (1 << 20));
    if (o.zero) request.options.zero = *o.zero;
    const auto t0 = Clock::now();
    auto report = planner::planWorld(comm, cfg, request);
    if (!report) {
      text = "error: " + report.error().message();
    } else {
      const planner::PlanCandidate& best = report->best[0];
      text = toJson(best.plan).dump();
      char line[160];
      std::snprintf(line, sizeof line, "plan auto: searched in %.2f s%s%s\n", secondsSince(t0),
                    request.memoryLimits.empty() ? "" : "; memory limits from ",
                    request.memoryLimits.empty() ? "" : memorySource.c_str());
      predictionText = line + planner::formatReport(*report, request);
      const planner::StepPrediction& p = best.prediction;
      predicted = StepBreakdown{p.stepS,         p.pipelineS, p.bubble,       p.stepS - p.pipelineS,
                                best.tokensPerS, p.tpCommS,   p.pipelineCommS};
    }
  }
  text = fromLead(text);
  if (text.rfind("error: ", 0) == 0) die(rank, "--plan auto: " + text.substr(7));
  plan = check(rank, parsePlan(text, "--plan auto"));
  planSource = "--plan auto";
}

// The planner's prediction for the plan given (lead rank; --predict).
void Training::State::predict() {
  if (!lead) return;
  Placement at = check(rank, placementOf(comm));
  RoleTable roles =
      check(rank, assignRoles(plan, at, o.assignment == "naive" ? Assignment::kNaive : Assignment::kNicAware));
  planner::StepInputs in{
      cfg, plan, roles, plannedSpeeds(), *computeProfile, static_cast<size_t>(o.bucketMb * (1 << 20)), zero1};
  in.where = at;
  auto p = planner::predictStep(in, planner::predictedBy(comm));
  if (!p) die(rank, "--predict: " + p.error().message());
  predicted = StepBreakdown{p->stepS,
                            p->pipelineS,
                            p->bubble,
                            p->stepS - p->pipelineS,
                            double(cfg.globalBatch) * cfg.model.seqLen / p->stepS,
                            p->tpCommS,
                            p->pipelineCommS};
  char line[200];
  std::snprintf(line, sizeof line, "predicted: step %.1f ms, 1F1B %.1f ms, bubble %.1f%%, %s tok/s (%s)\n",
                p->stepS * 1e3, p->pipelineS * 1e3, p->bubble * 100, human(predicted->tokensPerS).c_str(),
                in.profile.source().c_str());
  predictionText += line;
}

void Training::State::buildRanks() {
  where = check(rank, placementOf(comm));
  table = check(rank, assignRoles(plan, where, o.assignment == "naive" ? Assignment::kNaive : Assignment::kNicAware));
  groups = check(rank, HybridGroups::create(comm, plan, table));
  role = groups->role();
  S = static_cast<int>(plan.stages.size());
  hybrid = S > 1 || plan.stages[0].tp > 1;
  accum = plan.microBatches[role.replica];
  countsLoss = role.stage + 1 == S && role.tpRank == 0;
  tiedGroup = groups->tied() ? (role.stage == 0 ? 0 : cfg.model.nLayer + 1) : -1;
}

void Training::State::loadData() {
  files = cfg.dataFiles;
  if (files.empty()) files = check(rank, defaultCorpusFiles());
  dataset = std::make_unique<Dataset>(check(rank, Dataset::fromFiles(files, cfg.valFraction, cfg.model.seqLen)));
  train = std::make_unique<DataLoader>(*dataset, Split::kTrain, cfg.seed);
  val = std::make_unique<DataLoader>(*dataset, Split::kVal, cfg.seed, /*shuffle=*/false);
  unigramNats = unigramEntropyNats(dataset->tokens(Split::kTrain));
}

// This rank's stage and TP shard, its pipeline, optimizer and data parallelism.
void Training::State::buildModel() {
  const size_t bucketBytes = static_cast<size_t>(o.bucketMb * (1 << 20));
  layout = std::make_unique<ParamLayout>(cfg.model, shardOf(plan, role), bucketBytes, plan.dp);
  std::vector<double> shares;  // this rank's DP group's (the same role in every replica), in replica order
  if (!plan.zeroShares.empty())
    for (int d = 0; d < plan.dp; ++d) shares.push_back(plan.zeroShares[table.ranks[d][role.stage][role.tpRank]]);
  dp = std::make_unique<DataParallel>(groups->dp(), *layout, zero1, shares);
  const int slots = StageShape{role.stage, S, accum, plan.pipelineDepth}.slots();
  if (o.emulateCompute)
    model = std::make_unique<EmulatedStage>(cfg.model, layout->shard(), cfg.microBatch, slots, groups->tpGroup(),
                                            speed * referenceGflops * 1e9);
  else
    model = std::make_unique<Gpt>(cfg.model, *layout, cfg.microBatch, slots, groups->tpGroup());
  pipeline = std::make_unique<Pipeline>(*groups, *model, cfg.model, cfg.microBatch, accum, plan.pipelineDepth);
  adam = std::make_unique<AdamW>(cfg, *layout, dp->ownedRanges());
  schedule = std::make_unique<LrSchedule>(cfg);
  params.assign(layout->totalFloats(), 0.0f);
  grads.assign(layout->totalFloats(), 0.0f);
  full = std::make_unique<ParamLayout>(cfg.model, bucketBytes, 1);  // the whole model: initialisation, checkpoints
  if (!o.emulateCompute) {  // every rank initialises the whole model from the seed and keeps its part: any plan
                            // starts identically
    std::vector<float> whole(full->totalFloats());
    Gpt(cfg.model, *full, 1).initParams(whole.data(), cfg.seed);
    sliceFromFull(*full, whole.data(), *layout, params.data());
  }
}

// The checkpoint holds the whole model (any plan wrote it): each rank takes its part.
void Training::State::resume() {
  if (o.resume.empty()) return;
  TrainState st = check(rank, loadTrainState(o.resume, *full, cfg));
  auto part = [&](const std::vector<float>& whole) {
    std::vector<float> mine(layout->totalFloats(), 0.0f);
    sliceFromFull(*full, whole.data(), *layout, mine.data());
    return mine;
  };
  params = part(st.params);
  st.m = part(st.m);
  st.v = part(st.v);
  size_t at = 0;
  for (auto [off, len] : dp->ownedRanges()) {
    std::copy(st.m.begin() + off, st.m.begin() + off + len, adam->m().begin() + at);
    std::copy(st.v.begin() + off, st.v.begin() + off + len, adam->v().begin() + at);
    at += len;
  }
  adam->setSteps(st.adamSteps);
  check(rank, train->seek(st.data));
  step = st.step;
  if (lead) std::printf("resumed from %s at step %lld\n", o.resume.c_str(), (long long)step);
}

void Training::State::printStartup() {
  StartupInfo s;
  s.world = world, s.threads = threads, s.zero1 = dp->zero1(), s.hybrid = hybrid;
  s.emulateCompute = o.emulateCompute, s.plan = &plan, s.planSource = planSource, s.assignment = o.assignment;
  if (hybrid || plan.dp > 1) s.roleTable = formatRoleTable(table, where, plan);
  s.deviceSpeeds = speeds.speeds, s.speedSource = speeds.source;
  s.referenceGflops = referenceGflops, s.peakGflops = peakGflops, s.config = &cfg;
  s.parameters = int64_t(layout->parameterCount());
  s.files = files.size(), s.buckets = layout->buckets().size(), s.bucketMb = o.bucketMb;
  s.trainTokens = double(dataset->tokens(Split::kTrain).size());
  s.valTokens = double(dataset->tokens(Split::kVal).size());
  s.unigramNats = unigramNats, s.memoryLine = memoryLine;
  std::printf("%s", predictionText.c_str());
  trainer::printStartup(s);
}

Training::Training(const Options& options, hetcommComm_t comm) : s_(std::make_unique<State>()) {
  s_->o = options;
  s_->comm = comm;
  s_->setUp();
}

Training::~Training() = default;

void Training::run() { s_->run(); }

}  // namespace hetcomm::trainer
