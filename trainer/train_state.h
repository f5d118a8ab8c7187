// train_state.h: everything a resumed run needs to continue exactly where a saved one stopped, in one
// safetensors file: the parameters (by tensor name, readable by other tools), AdamW's moments of every
// parameter ("optim.m.<name>", "optim.v.<name>"), and in the metadata the step, the optimizer's step count, the
// training data's position and the config it ran with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/error.h"
#include "trainer/param_layout.h"

namespace hetcomm::trainer {

struct TrainState {
  int64_t step = 0;                 // steps completed
  int64_t adamSteps = 0;            // AdamW's t
  DataPosition data;                // the training loader's position after `step` steps
  std::vector<float> params, m, v;  // whole flat buffers (ParamLayout order, padding zero)
};

// Written atomically (see checkpoint.h). configJson is stored as is; a resume checks that the model matches.
Result<void> saveTrainState(const std::string& path, const ParamLayout& layout, const TrainState& state,
                            const TrainConfig& cfg);
// Refuses a file that is corrupt, truncated, of another model shape, or lacks any tensor or field; the message
// names the file and what was wrong.
Result<TrainState> loadTrainState(const std::string& path, const ParamLayout& layout, const TrainConfig& cfg);

// Where the trainer keeps the checkpoint after `step` steps: dir/step<step>.safetensors.
std::string checkpointPath(const std::string& dir, int64_t step);
// The largest step with a checkpoint in dir (temporary files of an interrupted write do not count); 0 when none.
int64_t newestCheckpointStep(const std::string& dir);

}  // namespace hetcomm::trainer
