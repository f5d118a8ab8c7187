// hetcomm-train: GPT training on the CPU with data, tensor and pipeline parallelism over hetcomm.
//
//   hetcomm-run -np 2 build/bin/hetcomm-train --config configs/gpt-tiny.json --steps 200
//   hetcomm-run -np 8 build/bin/hetcomm-train --tp 2 --pp 2            (or --plan plans/FILE.json, or --plan auto)
//
// The command line (options.h), the communicator of whichever launcher started us (or this process alone), and
// the run (training.h: plan, set-up, steps, summary; report.h: what it prints).
#include <hetcomm/hetcomm.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include "trainer/data_parallel.h"
#include "trainer/devices.h"
#include "trainer/elastic.h"
#include "trainer/options.h"
#include "trainer/train_state.h"
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

int rankOf(hetcommComm_t comm) {
  int rank = 0;
  hetcommCommUserRank(comm, &rank);
  return rank;
}

// --elastic, after a rank gave up on `why`: the ranks left shrink the world and agree on where to go on from.
// Returns the new world, with o changed for it (the newest checkpoint to resume, a plan that fits, the per-rank
// lists without the lost ranks' entries). Exits when the shrink fails or nobody was lost (then `why` was not a
// lost peer, and starting again would meet it again).
hetcommComm_t recover(hetcommComm_t world, ht::Options& o, const std::string& why, const std::string& checkpointDir) {
  const int rank = rankOf(world);
  int n = 0;
  hetcommCommCount(world, &n);
  auto fatal = [&](const std::string& what) {
    std::fprintf(stderr, "hetcomm-train [rank %d]: error: %s\n", rank, what.c_str());
    std::exit(1);
  };
  std::fprintf(stderr, "hetcomm-train [rank %d]: %s; --elastic: shrinking the world\n", rank, why.c_str());
  hetcommComm_t next = nullptr;
  if (hetcommCommShrink(world, nullptr, 0, &next, nullptr, HETCOMM_SHRINK_ABORT) != hetcommSuccess)
    fatal(why + "; --elastic could not shrink the world: " + hetcommGetLastError(nullptr));
  ht::forgetComm(world);
  hetcommCommDestroy(world);
  const int newRank = rankOf(next);
  int left = 0;
  hetcommCommCount(next, &left);
  if (left == n) fatal(why + " (no rank was lost: --elastic does not start again)");
  ht::trackComm(next);
  // Who is left, by their old ranks; and the newest checkpoint, as rank 0 sees it (all resume the same one).
  std::vector<int32_t> olds(left);
  int32_t mine = rank;
  int64_t step = newRank == 0 ? ht::newestCheckpointStep(checkpointDir) : 0;
  if (hetcommAllGather(&mine, olds.data(), 1, hetcommInt32, next, nullptr) != hetcommSuccess ||
      hetcommBroadcast(&step, &step, 1, hetcommInt64, 0, next, nullptr) != hetcommSuccess)
    fatal(why + "; --elastic: the ranks left cannot agree: " + hetcommGetLastError(nullptr));
  std::vector<std::string> lost;
  for (int r = 0; r < n; ++r)
    if (std::find(olds.begin(), olds.end(), r) == olds.end()) lost.push_back(std::to_string(r));
  ht::adaptToSurvivors(o, olds, n);
  o.resume = step > 0 ? ht::checkpointPath(checkpointDir, step) : std::string();
  if (newRank == 0) {
    std::string lostList;
    for (const auto& l : lost) lostList += (lostList.empty() ? "" : ", ") + l;
    std::printf("elastic: lost rank%s %s of %d; going on with %d ranks from %s\n", lost.size() == 1 ? "" : "s",
                lostList.c_str(), n, left, step > 0 ? o.resume.c_str() : "step 0 (no checkpoint yet)");
  }
  return next;
}

}  // namespace

int main(int argc, char** argv) {
  auto parsed = ht::parseCommandLine(argc, argv);
  if (const int* exitCode = std::get_if<int>(&parsed)) return *exitCode;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // log lines reach a file or pipe as they happen
  ht::Options options = std::get<ht::Options>(parsed);
  hetcommComm_t comm = initWorld();
  std::string checkpointDir;
  if (options.elastic) {
    auto cfg = ht::configFrom(options);
    if (!cfg) {  // the run would fail on it too: say it first, not that the checkpoint directory is missing
      std::fprintf(stderr, "hetcomm-train: error: %s\n", cfg.error().message().c_str());
      return 1;
    }
    checkpointDir = cfg->checkpointDir;
    if (checkpointDir.empty()) {
      std::fprintf(stderr,
                   "hetcomm-train: error: --elastic goes back to the newest checkpoint when a rank is lost: give "
                   "--checkpoint-dir (or checkpoint_dir in the config) and --checkpoint-every\n");
      return 1;
    }
    ht::setElastic(true);
    ht::trackComm(comm);
  }
  std::chrono::steady_clock::time_point lostAt{};
  for (bool recovered = false;; recovered = true) {
    try {
      ht::Training training(options, comm);
      if (recovered && rankOf(comm) == 0)
        std::printf("elastic: set up again %.2f s after giving up; training\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - lostAt).count());
      training.run();
      break;
    } catch (const ht::RankLost& lost) {  // only under --elastic: the run has unwound, its communicators revoked
      lostAt = std::chrono::steady_clock::now();
      comm = recover(comm, options, lost.message, checkpointDir);
    }
  }
  ht::forgetComm(comm);
  hetcommCommFinalize(comm);
  hetcommCommDestroy(comm);
  return 0;
}
