#include "comm/launch_env.h"

#include <algorithm>
#include <vector>

#include "common/param.h"
#include "common/strings.h"

namespace hetcomm::comm {

namespace {

using param::env;

Result<int> intVar(const char* name, int lo) {
  auto v = env(name);
  if (!v) return invalidArgument("%s is not set", name);
  auto n = param::parseInt(*v);
  if (!n || *n < lo || *n > (1 << 24)) return invalidArgument("%s=%s is not a valid number", name, v->c_str());
  return static_cast<int>(*n);
}

Result<uint16_t> portVar(const char* name) {
  auto v = env(name);
  auto n = v ? param::parseInt(*v) : std::nullopt;
  if (!n || *n < 1 || *n > 65535) return invalidArgument("%s=%s is not a port number", name, v ? v->c_str() : "");
  return static_cast<uint16_t>(*n);
}

// Every rank of one job sees the same values here, and other jobs see different ones.
crypto::Secret deriveSecret(const std::string& addr, uint16_t port) {
  std::string ident = addr + ":" + std::to_string(port);
  for (const char* name : {"TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid",
                           "PMIX_NAMESPACE", "SLURM_JOB_ID", "SLURM_STEP_ID"})
    if (auto v = env(name)) ident += std::string("|") + name + "=" + *v;
  std::vector<uint8_t> bytes(ident.begin(), ident.end());
  static const uint8_t label[] = "hetcomm-derived-secret";
  crypto::Mac mac = crypto::hmacSha256(std::span<const uint8_t>(label, sizeof(label) - 1), bytes);
  crypto::Secret s;
  std::copy_n(mac.begin(), s.size(), s.begin());
  return s;
}

Status fillAddress(LaunchEnv& e, const char* fallbackAddr, const char* fallbackPort, int portOffset) {
  if (auto a = env("HETCOMM_MASTER_ADDR")) {
    e.masterAddr = *a;
  } else if (fallbackAddr && env(fallbackAddr)) {
    e.masterAddr = *env(fallbackAddr);
  } else if (e.nranks == 1 && !env("HETCOMM_MASTER_PORT")) {
    // One rank needs no rendezvous with anyone: its own store on loopback, any free port.
    e.masterAddr = "127.0.0.1";
    e.masterPort = 0;
    return okStatus();
  } else {
    return invalidArgument("%s: set HETCOMM_MASTER_ADDR (or MASTER_ADDR) to the address of the host of rank 0",
                           e.launcher.c_str());
  }
  if (env("HETCOMM_MASTER_PORT")) {
    HC_ASSIGN_OR_RETURN(e.masterPort, portVar("HETCOMM_MASTER_PORT"));
  } else if (fallbackPort && env(fallbackPort)) {
    HC_ASSIGN_OR_RETURN(uint16_t p, portVar(fallbackPort));
    if (p + portOffset > 65535)
      return invalidArgument("%s=%u leaves no room for hetcomm's store port", fallbackPort, p);
    e.masterPort = static_cast<uint16_t>(p + portOffset);
  } else {
    e.masterPort = kDefaultMasterPort;
  }
  return okStatus();
}

}  // namespace

Result<LaunchEnv> readLaunchEnv() {
  LaunchEnv e;
  if (env("HETCOMM_RANK") || env("HETCOMM_WORLD_SIZE")) {
    e.launcher = "hetcomm-run";
    HC_ASSIGN_OR_RETURN(e.rank, intVar("HETCOMM_RANK", 0));
    HC_ASSIGN_OR_RETURN(e.nranks, intVar("HETCOMM_WORLD_SIZE", 1));
    if (env("HETCOMM_LOCAL_RANK")) {
      HC_ASSIGN_OR_RETURN(e.localRank, intVar("HETCOMM_LOCAL_RANK", 0));
    }
    HC_TRY(fillAddress(e, nullptr, nullptr, 0));
    e.externalStore = env("HETCOMM_STORE").value_or("") == "external";
  } else if (env("RANK") && env("WORLD_SIZE")) {
    e.launcher = "torchrun";
    HC_ASSIGN_OR_RETURN(e.rank, intVar("RANK", 0));
    HC_ASSIGN_OR_RETURN(e.nranks, intVar("WORLD_SIZE", 1));
    if (env("LOCAL_RANK")) {
      HC_ASSIGN_OR_RETURN(e.localRank, intVar("LOCAL_RANK", 0));
    }
    // MASTER_PORT+2, not +1: torch's own store holds MASTER_PORT, which torch takes by binding port 0, and Linux
    // gives bind(0) odd ports and connect() even ones. MASTER_PORT+1 was thus a port any outgoing connection on the
    // host could hold ("cannot listen: Address already in use", seen in the torchrun test); +2 keeps the parity.
    HC_TRY(fillAddress(e, "MASTER_ADDR", "MASTER_PORT", 2));
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    e.launcher = "Open MPI";
    HC_ASSIGN_OR_RETURN(e.rank, intVar("OMPI_COMM_WORLD_RANK", 0));
    HC_ASSIGN_OR_RETURN(e.nranks, intVar("OMPI_COMM_WORLD_SIZE", 1));
    if (env("OMPI_COMM_WORLD_LOCAL_RANK")) {
      HC_ASSIGN_OR_RETURN(e.localRank, intVar("OMPI_COMM_WORLD_LOCAL_RANK", 0));
    }
    HC_TRY(fillAddress(e, "MASTER_ADDR", "MASTER_PORT", 0));
  } else if (env("SLURM_PROCID")) {
    e.launcher = "Slurm";
    HC_ASSIGN_OR_RETURN(e.rank, intVar("SLURM_PROCID", 0));
    HC_ASSIGN_OR_RETURN(e.nranks, intVar("SLURM_NTASKS", 1));
    if (env("SLURM_LOCALID")) {
      HC_ASSIGN_OR_RETURN(e.localRank, intVar("SLURM_LOCALID", 0));
    }
    HC_TRY(fillAddress(e, "MASTER_ADDR", "MASTER_PORT", 0));
  } else if (env("RANK") || env("WORLD_SIZE")) {
    // Half of torchrun's variables is a launcher's mistake, not a lone process.
    return invalidArgument("torchrun: %s is not set (RANK and WORLD_SIZE go together)",
                           env("RANK") ? "WORLD_SIZE" : "RANK");
  } else {
    // Started bare, as nccl-tests runs without mpirun: one rank.
    e.launcher = "no launcher (one rank)";
    HC_TRY(fillAddress(e, nullptr, nullptr, 0));
  }
  if (e.rank >= e.nranks)
    return invalidArgument("%s: rank %d is not below the world size %d", e.launcher.c_str(), e.rank, e.nranks);
  if (auto s = env("HETCOMM_SECRET")) {
    if (!fromHex(*s, e.secret.data(), e.secret.size()))
      return invalidArgument("HETCOMM_SECRET must be %zu hex digits", 2 * e.secret.size());
  } else if (e.masterPort == 0) {  // a store of its own: a fresh secret
    HC_TRY(crypto::randomBytes(e.secret));
  } else {
    e.secret = deriveSecret(e.masterAddr, e.masterPort);
    e.secretDerived = true;
  }
  return e;
}

}  // namespace hetcomm::comm
