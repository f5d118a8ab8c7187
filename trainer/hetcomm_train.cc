// hetcomm-train: GPT training on the CPU with data, tensor and pipeline parallelism over hetcomm.
//
//   hetcomm-run -np 2 build/bin/hetcomm-train --config configs/gpt-tiny.json --steps 200
//   hetcomm-run -np 8 build/bin/hetcomm-train --tp 2 --pp 2            (or --plan plans/FILE.json, or --plan auto)
//
// The command line (options.h), the communicator of whichever launcher started us (or this process alone), and
// the run (training.h: plan, set-up, steps, summary; report.h: what it prints).
#include <hetcomm/hetcomm.h>

#include <cstdio>
#include <cstdlib>
#include <variant>

#include "trainer/data_parallel.h"
#include "trainer/devices.h"
#include "trainer/options.h"
#include "trainer/training.h"

namespace ht = hetcomm::trainer;

namespace {

// The launcher's ranks, or this process alone.
hetcommComm_t initWorld() {
  hetcommComm_t comm = nullptr;
  hetcommResult_t rc;
  if (ht::launchedByALauncher()) {
    rc = hetcommCommInitFromEnv(&comm);
  } else {
    hetcommUniqueId id;
    rc = hetcommGetUniqueId(&id);
    if (rc == hetcommSuccess) rc = hetcommCommInitRank(&comm, 1, id, 0);
  }
  if (rc != hetcommSuccess) {
    std::fprintf(stderr, "hetcomm-train [rank -1]: error: %s\n",
                 ht::commError("communicator init", rc, nullptr).message().c_str());
    std::exit(1);
  }
  return comm;
}

}  // namespace

int main(int argc, char** argv) {
  auto parsed = ht::parseCommandLine(argc, argv);
  if (const int* exitCode = std::get_if<int>(&parsed)) return *exitCode;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // log lines reach a file or pipe as they happen
  hetcommComm_t comm = initWorld();
  {
    ht::Training training(std::get<ht::Options>(parsed), comm);
    training.run();
  }
  hetcommCommFinalize(comm);
  hetcommCommDestroy(comm);
  return 0;
}
