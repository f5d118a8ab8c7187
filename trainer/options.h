// options.h: hetcomm-train's command line: what it reads, and the run's config from the config file with the
// command line's overrides on top.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trainer/config.h"
#include "trainer/error.h"

namespace hetcomm::trainer {

struct Options {
  std::string config = "configs/gpt-tiny.json";
  std::optional<int64_t> steps, warmup, evalEvery, logEvery, checkpointEvery;
  std::optional<int> nLayer, nHead, dModel, seqLen, microBatch, globalBatch, evalBatches;
  std::optional<double> lr, minLr, weightDecay, gradClip;
  std::optional<uint64_t> seed;
  std::vector<std::string> data;
  std::string checkpointDir, resume, logJson, summaryJson;
  std::optional<int> zero;  // --zero; absent: the plan's, else 0
  std::optional<int> pipelineDepth;  // --pipeline-depth; absent: the plan's, else 1
  double bucketMb = 1.0;
  int threads = 0;
  bool progress = true;
  std::string plan;  // a plan file, or "auto" (the planner chooses at start)
  std::string assignment = "nic";
  int tp = 1, pp = 1;
  std::vector<std::string> deviceSpeeds;  // --device-speeds' entries: numbers, or "topo"
  bool emulateCompute = false;
  double referenceGflops = 0;
  std::vector<uint64_t> memoryLimits;
  int planTop = 3;                   // --plan auto: plans shown
  int planMaxTp = 0, planMaxPp = 0;  // --plan auto: the largest TP degree and pipeline depth (0: any)
  bool predict = false;              // --predict: the planner's prediction for the plan, against the measured step
  bool elastic = false;              // --elastic: a lost rank shrinks the world; the run goes on from a checkpoint
  bool appendLog = false;            // --log-json continues the file (set by --elastic after a shrink)
};

// Parses argv. Returns the options, or the exit code when the program should stop (--help: 0, a bad option: the
// usage error, already printed by CLI11).
std::variant<Options, int> parseCommandLine(int argc, char** argv);

// --elastic, after a shrink: the options for the ranks left (survivors: their ranks in the old world, in their new
// order; oldWorld: its size). Per-rank lists (--memory-limits, numeric --device-speeds) keep the survivors'
// entries; a plan file (written for the old world) gives way to --plan auto, and so do --tp/--pp when tp x pp no
// longer divides the world.
void adaptToSurvivors(Options& o, const std::vector<int32_t>& survivors, int oldWorld);

// The config file with the command line's overrides (validated with data-parallel size 1; the plan's checks come
// later).
Result<TrainConfig> configFrom(const Options& o);

}  // namespace hetcomm::trainer
