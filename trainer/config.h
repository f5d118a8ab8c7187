// config.h: what a training run is: the GPT model's shape and the optimisation settings, loaded from a JSON
// file, validated with messages that name the key and the numbers, and written back as JSON (toJson) so that
// checkpoints and logs carry the exact run they came from.
//
// The file's layout (every key optional; a missing key keeps the default below; an unknown key is an error):
//   { "model": {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 128, "vocab_size": 256},
//     "micro_batch": 8, "global_batch": 16, "steps": 1000, "lr": 6e-4, "min_lr": 6e-5, "warmup_steps": 100, ... }
// JSON keys are snake_case (as in nanoGPT / llm.c configs); the C++ fields are their camelCase twins.
//
// Not here: the parallel layout (tensor, pipeline, data parallel sizes come from the launcher and the command
// line), the model's parameters, the training loop.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "trainer/error.h"

namespace hetcomm::trainer {

// A GPT-2 block model (pre-LayerNorm, GELU MLP of width 4*dModel, learned positions, LM head tied to wte).
// The defaults are a ~0.84M-parameter model a 2-core CPU trains in minutes (configs/gpt-tiny.json), not
// GPT-2 small (124M): the trainer's byte-level tokenizer and this machine make that the useful default.
struct ModelConfig {
  int nLayer = 4;       // transformer blocks
  int nHead = 4;        // attention heads; dModel % nHead == 0
  int dModel = 128;     // channels C
  int seqLen = 128;     // context length T (positions in wpe)
  int vocabSize = 256;  // V; >= 256 because tokens are bytes (data.h); larger pads the embedding table
  bool operator==(const ModelConfig&) const = default;
};

// Optimisation defaults are GPT-2 / nanoGPT's (AdamW 0.9/0.95, weight decay 0.1, clip 1.0, min_lr = lr/10).
// Batches count samples (sequences of seqLen tokens), never tokens.
struct TrainConfig {
  ModelConfig model;
  int microBatch = 8;         // samples per forward/backward on one rank
  int globalBatch = 16;       // samples per optimizer step over all data-parallel ranks and micro-batches
  int64_t steps = 1000;       // optimizer steps
  double lr = 6e-4;           // peak learning rate, reached at the end of warmup
  double minLr = 6e-5;        // ABSOLUTE learning rate the cosine decay ends at (not a fraction of lr); <= lr
  int64_t warmupSteps = 100;  // linear warmup steps; <= steps
  double weightDecay = 0.1;   // AdamW decoupled weight decay (applied to 2-D weights; the trainer decides which)
  double beta1 = 0.9;         // AdamW first-moment decay, in [0,1)
  double beta2 = 0.95;        // AdamW second-moment decay, in [0,1)
  double eps = 1e-8;          // AdamW denominator epsilon, > 0
  double gradClip = 1.0;      // clip the global gradient L2 norm to this; 0 = no clipping
  uint64_t seed = 1337;       // parameter init and data shuffle
  int64_t evalEvery = 100;    // validation loss every this many steps; 0 = never
  int evalBatches = 8;        // micro-batches of validation samples per evaluation, >= 1
  double valFraction = 0.1;   // tail fraction of the corpus held out for validation, in (0,1)
  int64_t logEvery = 10;      // a training log line every this many steps, >= 1
  std::vector<std::string> dataFiles;  // corpus text files; empty = the fortunes package (data.h)
  std::string checkpointDir;           // where checkpoints go; empty = write none
  int64_t checkpointEvery = 0;         // checkpoint every this many steps; 0 = only after the last step
  bool operator==(const TrainConfig&) const = default;
};

// Parameters of the model: wte V*C + wpe T*C + per block (2 LayerNorms 4C, qkv 3C*C+3C, attention proj C*C+C,
// fc 4C*C+4C, fc proj 4C*C+C) + final LayerNorm 2C. The LM head is tied to wte and adds nothing.
int64_t parameterCount(const ModelConfig& model);

// Range and consistency checks that need nothing but the model: positive sizes, dModel % nHead, vocabSize >= 256.
Result<void> validate(const ModelConfig& model, const std::string& source = "config");
// All checks, including that globalBatch splits evenly into micro-batches over dpSize data-parallel ranks:
// globalBatch % (microBatch * dpSize) == 0. loadConfig checks dpSize 1; the trainer calls this again once it
// knows the data-parallel size.
Result<void> validate(const TrainConfig& config, int dpSize = 1, const std::string& source = "config");
// Micro-batches each rank runs per step: globalBatch / (microBatch * dpSize); meaningful once validate(config,
// dpSize) passed (0 for a non-positive microBatch or dpSize).
int gradAccumSteps(const TrainConfig& config, int dpSize);

// Reads and validates (dpSize 1) a JSON config file. Errors name the file, the key ("key 'model.n_head'") and,
// for syntax errors, the byte offset.
Result<TrainConfig> loadConfig(const std::string& path);
// The same from JSON text (tests, --config-json); `source` names it in errors.
Result<TrainConfig> parseConfig(const std::string& text, const std::string& source = "config");
// The same from a parsed JSON value (a config embedded in a checkpoint's metadata).
Result<TrainConfig> configFromJson(const nlohmann::json& json, const std::string& source = "config");
// Every key, defaults included: configFromJson(toJson(c)) == c.
nlohmann::json toJson(const ModelConfig& model);
nlohmann::json toJson(const TrainConfig& config);

}  // namespace hetcomm::trainer
