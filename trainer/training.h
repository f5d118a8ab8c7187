// training.h: one hetcomm-train run on a communicator, from the command line's options to the summary:
//
//   plan        a plan file, --tp/--pp, or --plan auto (the planner's best for the live cluster, chosen on rank 0
//               and sent to every rank), with the device speeds and memory limits it runs under;
//   set-up      roles, groups, data, this rank's model shard, the memory check, a checkpoint to resume;
//   steps       every rank draws the same global batch; each replica runs its micro-batches 1F1B, the last
//               backward starting each gradient bucket's reduction; the tied embedding's sum, the norm, AdamW
//               (ZeRO-1: on this rank's slices, then an all-gather); evaluation and checkpoints on schedule;
//   summary     throughput, bubble, communication per kind of group, and with --plan auto or --predict the
//               planner's prediction for the plan against what was measured, term by term.
//
// Errors exit the process with a message naming the rank; collective decisions (the memory check, the plan) are
// taken on every rank so none is left waiting.
#pragma once

#include <hetcomm/hetcomm.h>

#include <memory>

#include "trainer/options.h"

namespace hetcomm::trainer {

class Training {
 public:
  // Everything before the first step. comm: every rank (not owned).
  Training(const Options& options, hetcommComm_t comm);
  ~Training();
  // The steps, then the last checkpoint and the summary.
  void run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace hetcomm::trainer
