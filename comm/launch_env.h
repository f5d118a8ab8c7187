// launch_env.h: rank, size and rendezvous from whichever launcher started this process. In order of precedence:
//   hetcomm-run  HETCOMM_RANK, HETCOMM_WORLD_SIZE, HETCOMM_MASTER_ADDR, HETCOMM_MASTER_PORT, HETCOMM_SECRET
//   torchrun     RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (hetcomm's store uses MASTER_PORT+2: torch's own
//                store may hold MASTER_PORT; +2 keeps its parity, see launch_env.cc)
//   Open MPI     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, plus HETCOMM_MASTER_ADDR (or MASTER_ADDR)
//   Slurm        SLURM_PROCID, SLURM_NTASKS, plus HETCOMM_MASTER_ADDR (or MASTER_ADDR)
// HETCOMM_MASTER_ADDR / HETCOMM_MASTER_PORT override the address under any launcher (default port 29411).
// Without HETCOMM_SECRET every rank derives the same secret from the job's identity (job id, master address):
// enough to keep jobs apart, not a defence against a local attacker; set HETCOMM_SECRET for that.
#pragma once

#include <cstdint>
#include <string>

#include "common/crypto.h"
#include "common/status.h"

namespace hetcomm::comm {

struct LaunchEnv {
  int rank = 0;
  int nranks = 1;
  int localRank = 0;
  std::string masterAddr;
  uint16_t masterPort = 0;  // 0: one rank, no address given: it serves its own store on loopback, any port
  crypto::Secret secret{};
  bool secretDerived = false;  // no HETCOMM_SECRET: derived from the job identity
  bool externalStore = false;  // the launcher hosts the store; rank 0 must not start one
  std::string launcher;        // "hetcomm-run", "torchrun", "Open MPI", "Slurm"
};

constexpr uint16_t kDefaultMasterPort = 29411;

// Reads the environment; every missing or malformed variable is named in the error.
Result<LaunchEnv> readLaunchEnv();

}  // namespace hetcomm::comm
