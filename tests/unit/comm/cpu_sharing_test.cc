// Whether ranks that may run on this rank's CPUs outnumber them: unbound, bound one to a core, bound round robin,
// other hosts, and lists that say nothing.
#include "comm/cpu_sharing.h"

#include <gtest/gtest.h>

namespace hetcomm::comm {
namespace {

const std::vector<bool> kOneHost(4, true);

TEST(CpuSharing, UnboundRanksShareTheHostsCpus) {
  const std::vector<std::string> cpus(4, "0,1");
  const CpuSharing s = cpuSharing(cpus, kOneHost, 2);
  EXPECT_EQ(s.ranks, 4);
  EXPECT_EQ(s.cpus, 2);
  EXPECT_TRUE(s.oversubscribed());
  EXPECT_FALSE(cpuSharing({"0,1", "0,1"}, {true, true}, 0).oversubscribed());
}

TEST(CpuSharing, RanksBoundToCoresOfTheirOwnShareNothing) {
  const CpuSharing s = cpuSharing({"0", "1", "2", "3"}, kOneHost, 1);
  EXPECT_EQ(s.ranks, 1);
  EXPECT_EQ(s.cpus, 1);
  EXPECT_FALSE(s.oversubscribed());
  // Two hardware threads of one core each.
  EXPECT_FALSE(cpuSharing({"0,4", "1,5", "2,6", "3,7"}, kOneHost, 3).oversubscribed());
}

TEST(CpuSharing, RanksBoundRoundRobinToFewerCoresShareThem) {
  const CpuSharing s = cpuSharing({"0", "1", "0", "1"}, kOneHost, 2);
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.cpus, 1);
  EXPECT_TRUE(s.oversubscribed());
}

TEST(CpuSharing, RanksOnOtherHostsDoNotCount) {
  const CpuSharing s = cpuSharing({"0,1", "0,1", "0,1", "0,1"}, {true, true, false, false}, 0);
  EXPECT_EQ(s.ranks, 2);
  EXPECT_FALSE(s.oversubscribed());
}

TEST(CpuSharing, AnEmptyOrMalformedListSaysNothing) {
  EXPECT_FALSE(cpuSharing({"", "0", "0"}, {true, true, true}, 0).oversubscribed());
  // A peer's unreadable items are left out; its readable ones still count.
  const CpuSharing s = cpuSharing({"0", "x,0", "99999999,zero"}, {true, true, true}, 0);
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.cpus, 1);
  const cpu_set_t set = parseCpuList("3,,1,-2,1x");
  EXPECT_EQ(CPU_COUNT(&set), 2);
  EXPECT_TRUE(CPU_ISSET(1, &set) && CPU_ISSET(3, &set));
}

TEST(CpuSharing, AnyMachineOversubscribedLooksAtEveryMachine) {
  // Two machines of 2 CPUs: 2 unbound ranks each fit, a third on one of them does not.
  EXPECT_FALSE(anyMachineOversubscribed({"0,1", "0,1", "0,1", "0,1"}, {"a", "a", "b", "b"}));
  EXPECT_TRUE(anyMachineOversubscribed({"0,1", "0,1", "0,1", "0,1", "0,1"}, {"a", "a", "b", "b", "b"}));
  // The crowded machine need not hold rank 0.
  EXPECT_TRUE(anyMachineOversubscribed({"0", "0,1", "0,1", "0,1"}, {"a", "b", "b", "b"}));
  // Bound to a core each: 4 ranks on 4 cores share nothing; two of them on one core do.
  EXPECT_FALSE(anyMachineOversubscribed({"0", "1", "2", "3"}, {"a", "a", "a", "a"}));
  EXPECT_TRUE(anyMachineOversubscribed({"0", "1", "1", "3"}, {"a", "a", "a", "a"}));
  // Ranks whose list says nothing count as having a CPU of their own.
  EXPECT_FALSE(anyMachineOversubscribed({"", "", "0"}, {"a", "a", "a"}));
  EXPECT_FALSE(anyMachineOversubscribed({}, {}));
}

TEST(CpuSharing, ThisProcessAffinityReadsBack) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  const cpu_set_t back = parseCpuList(affinityList());
  EXPECT_TRUE(CPU_EQUAL(&mask, &back));
}

}  // namespace
}  // namespace hetcomm::comm
