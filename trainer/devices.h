// devices.h: what runs where, from the communicator (hetcomm's public placement and device calls): each rank's
// host and island, its device's relative speed (--device-speeds: numbers, or 'topo' for the topology's GPU
// peaks), and what memory it may use (--memory-limits, or the topology's GPU memory). Shared by hetcomm-train
// and hetcomm-plan, so that both read the same flags the same way.
#pragma once

#include <hetcomm/hetcomm.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/error.h"
#include "trainer/plan.h"

namespace hetcomm::trainer {

struct DeviceSpeeds {
  std::vector<double> speeds;  // per rank, in (0, 1]; empty: none given (every device as this host's)
  std::string source;          // where they came from: "--device-speeds", "the topology file's GPU peaks"
  double topoPeakTflops = 0;   // the fastest GPU peak when the topology gives every rank one, else 0
};

// text: --device-speeds' entries, one number per rank in (0, 1], or the one word "topo" (each rank's GPU peak over
// the fastest); empty: no speeds. Errors name the entry and what was wrong, or the rank without a GPU peak.
Result<DeviceSpeeds> deviceSpeeds(hetcommComm_t comm, const std::vector<std::string>& text);

// Each rank's memory limit in bytes: given (--memory-limits: one for every rank, or one per rank), or with none
// given and fromTopology, each rank's GPU memory when the topology gives every rank one. Empty: no limits.
Result<std::vector<double>> memoryLimits(hetcommComm_t comm, const std::vector<uint64_t>& given, bool fromTopology,
                                         std::string* source = nullptr);

// Whether a launcher started this process (hetcomm-run, torchrun, Open MPI, PMIx, Slurm set a rank variable), so
// hetcommCommInitFromEnv will find its ranks.
bool launchedByALauncher();

// Every rank's host and island (hetcommCommRankPlacement).
Result<Placement> placementOf(hetcommComm_t comm);

}  // namespace hetcomm::trainer
