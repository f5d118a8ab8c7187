// api_test_util.h: helpers for the C API tests. Public header only, like any user program: ranks are threads (or
// one thread driving every rank inside a group), and every communicator a test makes is destroyed when it ends.
#pragma once

#include <gtest/gtest.h>
#include <hetcomm/hetcomm.h>

#include <string>
#include <thread>
#include <vector>

namespace hetcomm_test {

inline std::string lastError() { return hetcommGetLastError(nullptr); }

// Asserts that a call succeeded, printing the library's message when it did not.
#define HC_ASSERT_OK(call) ASSERT_EQ((call), hetcommSuccess) << #call << ": " << ::hetcomm_test::lastError()
#define HC_EXPECT_OK(call) EXPECT_EQ((call), hetcommSuccess) << #call << ": " << ::hetcomm_test::lastError()

// The communicators of one group of ranks; destroyed (in rank order) when it goes out of scope.
struct Comms {
  std::vector<hetcommComm_t> c;
  Comms() = default;
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;
  ~Comms() { destroy(); }
  void destroy() {
    for (auto& x : c)
      if (x) {
        hetcommCommDestroy(x);
        x = nullptr;
      }
  }
  hetcommComm_t operator[](size_t i) const { return c[i]; }
  int size() const { return static_cast<int>(c.size()); }
};

// n ranks in this process through hetcommCommInitAll.
inline void initAll(Comms& comms, int n) {
  comms.c.assign(n, nullptr);
  HC_ASSERT_OK(hetcommCommInitAll(comms.c.data(), n, nullptr));
  for (int r = 0; r < n; ++r) ASSERT_NE(comms.c[r], nullptr);
}

// n ranks through hetcommGetUniqueId + hetcommCommInitRankConfig, one thread per rank, with a short timeout so
// a test that waits for an error does not wait for the default HETCOMM_TIMEOUT.
inline void initWithTimeout(Comms& comms, int n, int timeoutSec, const char* name = nullptr) {
  hetcommUniqueId id;
  HC_ASSERT_OK(hetcommGetUniqueId(&id));
  comms.c.assign(n, nullptr);
  std::vector<hetcommResult_t> rc(n, hetcommInternalError);
  std::vector<std::string> msg(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      hetcommConfig_t cfg = HETCOMM_CONFIG_INITIALIZER;
      cfg.timeoutSec = timeoutSec;
      cfg.commName = name;
      rc[r] = hetcommCommInitRankConfig(&comms.c[r], n, id, r, &cfg);
      msg[r] = lastError();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_EQ(rc[r], hetcommSuccess) << "rank " << r << ": " << msg[r];
}

}  // namespace hetcomm_test
