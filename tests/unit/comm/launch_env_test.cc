// readLaunchEnv: rank, size and rendezvous from hetcomm-run, torchrun, Open MPI and Slurm variables, their
// precedence, and the errors for missing or malformed ones. Each test starts from an environment with none of the
// variables set and puts the original values back afterwards.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/launch_env.h"
#include "common/strings.h"

namespace hetcomm::comm {
namespace {

class LaunchEnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {
      "HETCOMM_RANK", "HETCOMM_WORLD_SIZE", "HETCOMM_LOCAL_RANK", "HETCOMM_MASTER_ADDR", "HETCOMM_MASTER_PORT",
      "HETCOMM_SECRET", "HETCOMM_STORE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
      "SLURM_LOCALID", "TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid",
      "PMIX_NAMESPACE", "SLURM_JOB_ID", "SLURM_STEP_ID"};

  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (auto& [name, value] : saved_) {
      if (value) ::setenv(name, value->c_str(), 1);
      else ::unsetenv(name);
    }
  }
  static void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto& [k, v] : vars) ::setenv(k, v, 1);
  }
  // The error of readLaunchEnv, which must fail.
  static Status errorOf() {
    auto e = readLaunchEnv();
    EXPECT_FALSE(e) << "unexpectedly succeeded with launcher " << (e ? e->launcher : "");
    return e ? Status() : e.error();
  }

  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

constexpr const char* kHexSecret = "00112233445566778899aabbccddeeff";

TEST_F(LaunchEnvTest, HetcommRun) {
  set({{"HETCOMM_RANK", "2"}, {"HETCOMM_WORLD_SIZE", "4"}, {"HETCOMM_LOCAL_RANK", "1"},
       {"HETCOMM_MASTER_ADDR", "10.0.0.1"}, {"HETCOMM_MASTER_PORT", "1234"}, {"HETCOMM_SECRET", kHexSecret}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "hetcomm-run");
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->nranks, 4);
  EXPECT_EQ(e->localRank, 1);
  EXPECT_EQ(e->masterAddr, "10.0.0.1");
  EXPECT_EQ(e->masterPort, 1234);
  EXPECT_FALSE(e->secretDerived);
  EXPECT_EQ(toHex(e->secret.data(), e->secret.size()), kHexSecret);
  EXPECT_FALSE(e->externalStore);
}

TEST_F(LaunchEnvTest, HetcommRunDefaultsAndExternalStore) {
  set({{"HETCOMM_RANK", "0"}, {"HETCOMM_WORLD_SIZE", "1"}, {"HETCOMM_MASTER_ADDR", "host0"},
       {"HETCOMM_STORE", "external"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->masterPort, kDefaultMasterPort);
  EXPECT_EQ(e->localRank, 0);
  EXPECT_TRUE(e->externalStore);
  EXPECT_TRUE(e->secretDerived);
}

TEST_F(LaunchEnvTest, HetcommRunWithoutMasterAddressNamesTheVariable) {
  set({{"HETCOMM_RANK", "0"}, {"HETCOMM_WORLD_SIZE", "2"}});
  Status st = errorOf();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("HETCOMM_MASTER_ADDR"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, HetcommRunWithOnlyTheSizeNamesTheMissingRank) {
  set({{"HETCOMM_WORLD_SIZE", "2"}, {"HETCOMM_MASTER_ADDR", "h"}});
  Status st = errorOf();
  EXPECT_NE(st.message().find("HETCOMM_RANK is not set"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, Torchrun) {
  set({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "trainer-0"},
       {"MASTER_PORT", "29500"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "torchrun");
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->nranks, 2);
  EXPECT_EQ(e->localRank, 1);
  EXPECT_EQ(e->masterAddr, "trainer-0");
  EXPECT_EQ(e->masterPort, 29502);  // MASTER_PORT + 2: torch's own store holds MASTER_PORT
  EXPECT_TRUE(e->secretDerived);
}

TEST_F(LaunchEnvTest, TorchrunPortAtTheTopLeavesNoRoom) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}});
  Status st = errorOf();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("MASTER_PORT=65535"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, HetcommAddressAndPortOverrideTorchrunsExactly) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "torch-host"}, {"MASTER_PORT", "29500"},
       {"HETCOMM_MASTER_ADDR", "hc-host"}, {"HETCOMM_MASTER_PORT", "40000"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->masterAddr, "hc-host");
  EXPECT_EQ(e->masterPort, 40000);  // no offset for hetcomm's own variable
}

// Half of torchrun's variables is a launcher's mistake, not a lone process: the error names what is missing.
TEST_F(LaunchEnvTest, TorchrunNeedsBothRankAndWorldSize) {
  set({{"RANK", "0"}, {"MASTER_ADDR", "h"}});
  Status st = errorOf();
  EXPECT_NE(st.message().find("WORLD_SIZE is not set"), std::string::npos) << st.message();
  ::unsetenv("RANK");
  set({{"WORLD_SIZE", "2"}});
  st = errorOf();
  EXPECT_NE(st.message().find("RANK is not set"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, OpenMpi) {
  set({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"HETCOMM_MASTER_ADDR", "10.1.1.1"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "Open MPI");
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->nranks, 8);
  EXPECT_EQ(e->localRank, 1);
  EXPECT_EQ(e->masterAddr, "10.1.1.1");
  EXPECT_EQ(e->masterPort, kDefaultMasterPort);
}

TEST_F(LaunchEnvTest, OpenMpiTakesMasterAddrAndPortWithoutOffset) {
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "5000"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->masterAddr, "m");
  EXPECT_EQ(e->masterPort, 5000);
}

TEST_F(LaunchEnvTest, OpenMpiWithoutSizeNamesIt) {
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"HETCOMM_MASTER_ADDR", "h"}});
  Status st = errorOf();
  EXPECT_NE(st.message().find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, Slurm) {
  set({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}, {"MASTER_ADDR", "node7"},
       {"MASTER_PORT", "4000"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "Slurm");
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->nranks, 6);
  EXPECT_EQ(e->localRank, 2);
  EXPECT_EQ(e->masterAddr, "node7");
  EXPECT_EQ(e->masterPort, 4000);
}

TEST_F(LaunchEnvTest, SlurmWithoutAddressNamesHetcommMasterAddr) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  Status st = errorOf();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("HETCOMM_MASTER_ADDR"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Slurm"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, PrecedenceHetcommRunTorchrunOpenMpiSlurm) {
  set({{"HETCOMM_RANK", "1"}, {"HETCOMM_WORLD_SIZE", "9"}, {"HETCOMM_MASTER_ADDR", "a"}, {"RANK", "2"},
       {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "b"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "7"},
       {"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "6"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "hetcomm-run");
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->nranks, 9);

  ::unsetenv("HETCOMM_RANK");
  ::unsetenv("HETCOMM_WORLD_SIZE");
  e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "torchrun");
  EXPECT_EQ(e->nranks, 8);
  EXPECT_EQ(e->masterAddr, "a");  // HETCOMM_MASTER_ADDR still wins over MASTER_ADDR

  ::unsetenv("RANK");
  e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "Open MPI");
  EXPECT_EQ(e->rank, 3);

  ::unsetenv("OMPI_COMM_WORLD_RANK");
  e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "Slurm");
  EXPECT_EQ(e->rank, 4);
}

TEST_F(LaunchEnvTest, RankNotBelowSizeIsRefused) {
  set({{"HETCOMM_RANK", "4"}, {"HETCOMM_WORLD_SIZE", "4"}, {"HETCOMM_MASTER_ADDR", "h"}});
  Status st = errorOf();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 4 is not below the world size 4"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, MalformedNumbersAreNamed) {
  set({{"HETCOMM_RANK", "-1"}, {"HETCOMM_WORLD_SIZE", "4"}, {"HETCOMM_MASTER_ADDR", "h"}});
  Status st = errorOf();
  EXPECT_NE(st.message().find("HETCOMM_RANK=-1"), std::string::npos) << st.message();
  set({{"HETCOMM_RANK", "0"}, {"HETCOMM_WORLD_SIZE", "0"}});
  st = errorOf();
  EXPECT_NE(st.message().find("HETCOMM_WORLD_SIZE=0"), std::string::npos) << st.message();
  set({{"HETCOMM_WORLD_SIZE", "four"}});
  st = errorOf();
  EXPECT_NE(st.message().find("HETCOMM_WORLD_SIZE=four"), std::string::npos) << st.message();
  set({{"HETCOMM_WORLD_SIZE", "4"}, {"HETCOMM_MASTER_PORT", "70000"}});
  st = errorOf();
  EXPECT_NE(st.message().find("HETCOMM_MASTER_PORT=70000 is not a port number"), std::string::npos) << st.message();
}

TEST_F(LaunchEnvTest, BadSecretIsRefused) {
  set({{"HETCOMM_RANK", "0"}, {"HETCOMM_WORLD_SIZE", "2"}, {"HETCOMM_MASTER_ADDR", "h"}});
  for (const char* bad : {"xyz", "0011", "00112233445566778899aabbccddeeffaa", "g0112233445566778899aabbccddeeff"}) {
    SCOPED_TRACE(bad);
    ::setenv("HETCOMM_SECRET", bad, 1);
    Status st = errorOf();
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("HETCOMM_SECRET must be 32 hex digits"), std::string::npos) << st.message();
  }
}

// Started bare (as nccl-tests runs without mpirun): one rank, its own store on loopback, a fresh secret.
TEST_F(LaunchEnvTest, NoVariablesAtAllIsOneRank) {
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->nranks, 1);
  EXPECT_EQ(e->masterAddr, "127.0.0.1");
  EXPECT_EQ(e->masterPort, 0);
  EXPECT_FALSE(e->secretDerived);
  EXPECT_NE(e->launcher.find("one rank"), std::string::npos) << e->launcher;
}

// One rank under a launcher needs no master address either; two do, and the error names the variable.
TEST_F(LaunchEnvTest, OneRankNeedsNoMasterAddress) {
  set({{"HETCOMM_RANK", "0"}, {"HETCOMM_WORLD_SIZE", "1"}});
  auto e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->masterPort, 0);
  ::unsetenv("HETCOMM_RANK");
  ::unsetenv("HETCOMM_WORLD_SIZE");
  set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  e = readLaunchEnv();
  ASSERT_TRUE(e) << e.error().toString();
  EXPECT_EQ(e->launcher, "torchrun");
  EXPECT_EQ(e->masterAddr, "127.0.0.1");
}

TEST_F(LaunchEnvTest, DerivedSecretIsTheSameForOneJobAndDiffersBetweenJobs) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "n0"}, {"SLURM_JOB_ID", "100"}});
  auto a = readLaunchEnv();
  ::setenv("SLURM_PROCID", "1", 1);  // another rank of the same job
  auto b = readLaunchEnv();
  ::setenv("SLURM_JOB_ID", "101", 1);  // another job
  auto c = readLaunchEnv();
  ::setenv("SLURM_JOB_ID", "100", 1);
  ::setenv("MASTER_ADDR", "n1", 1);  // same job id, other master
  auto d = readLaunchEnv();
  ASSERT_TRUE(a && b && c && d);
  EXPECT_TRUE(a->secretDerived);
  EXPECT_EQ(a->secret, b->secret);
  EXPECT_NE(a->secret, c->secret);
  EXPECT_NE(a->secret, d->secret);
  EXPECT_NE(a->secret, crypto::Secret{});
}

}  // namespace
}  // namespace hetcomm::comm
