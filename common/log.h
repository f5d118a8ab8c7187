// log.h: hetcomm's logging. HETCOMM_DEBUG=WARN|INFO|TRACE picks the level, HETCOMM_DEBUG_SUBSYS=INIT,NET,...
// (a leading ^ inverts the list) the subsystems, HETCOMM_DEBUG_FILE=/tmp/hc.%h.%p the destination (stderr by
// default). Every line says host, pid, thread and the rank the thread is working for:
//   host:1234:1236 [rank 3] HETCOMM INFO NET tcp: 2 sockets to rank 5 via 127.0.0.1
// The level check is one relaxed load; TRACE is compiled out below HETCOMM_MAX_LOG_LEVEL 3.
#pragma once

#include <atomic>
#include <cstdint>

#ifndef HETCOMM_MAX_LOG_LEVEL
#define HETCOMM_MAX_LOG_LEVEL 3
#endif

namespace hetcomm::log {

enum Level : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum Subsys : uint32_t {
  kInit = 1u << 0,
  kBoot = 1u << 1,
  kNet = 1u << 2,
  kShm = 1u << 3,
  kUcx = 1u << 4,
  kIb = 1u << 5,
  kTopo = 1u << 6,
  kColl = 1u << 7,
  kAlloc = 1u << 8,
  kEnv = 1u << 9,
  kCall = 1u << 10,
  kAll = ~0u,
};

extern std::atomic<int> gLevel;        // effective level after reading the environment
extern std::atomic<uint32_t> gSubsys;  // enabled subsystems

// Reads HETCOMM_DEBUG* once; every macro calls it through enabled().
void init();
inline bool enabled(Level level, uint32_t subsys) {
  if (level > HETCOMM_MAX_LOG_LEVEL) return false;
  int l = gLevel.load(std::memory_order_relaxed);
  if (l < 0) {
    init();
    l = gLevel.load(std::memory_order_relaxed);
  }
  return level <= l && (subsys & gSubsys.load(std::memory_order_relaxed));
}

void write(Level level, uint32_t subsys, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// The rank (and optional communicator name) printed on this thread's lines; -1 prints no rank.
struct RankContext {
  int rank = -1;
  const char* commName = nullptr;
};
RankContext& threadRank();
class ScopedRank {
 public:
  ScopedRank(int rank, const char* commName = nullptr) : saved_(threadRank()) {
    threadRank() = RankContext{rank, commName};
  }
  ~ScopedRank() { threadRank() = saved_; }
  ScopedRank(const ScopedRank&) = delete;
  ScopedRank& operator=(const ScopedRank&) = delete;

 private:
  RankContext saved_;
};

const char* subsysName(uint32_t subsys);
// For tests: re-read the environment.
void reinitForTest();

}  // namespace hetcomm::log

#define HC_LOG_AT(level, subsys, ...)                                                              \
  do {                                                                                             \
    if (::hetcomm::log::enabled(level, subsys)) ::hetcomm::log::write(level, subsys, __VA_ARGS__); \
  } while (0)
#define HC_WARN(...) HC_LOG_AT(::hetcomm::log::kWarn, ::hetcomm::log::kAll, __VA_ARGS__)
#define HC_INFO(SUBSYS, ...) HC_LOG_AT(::hetcomm::log::kInfo, ::hetcomm::log::k##SUBSYS, __VA_ARGS__)
#define HC_TRACE(SUBSYS, ...) HC_LOG_AT(::hetcomm::log::kTrace, ::hetcomm::log::k##SUBSYS, __VA_ARGS__)

// Invariants (never user input): abort with file:line.
#define HC_CHECK(cond)                                        \
  do {                                                        \
    if (!(cond)) [[unlikely]]                                 \
      ::hetcomm::log::checkFailed(#cond, __FILE__, __LINE__); \
  } while (0)
#ifdef NDEBUG
#define HC_DCHECK(cond) \
  do {                  \
  } while (0)
#else
#define HC_DCHECK(cond) HC_CHECK(cond)
#endif
namespace hetcomm::log {
[[noreturn]] void checkFailed(const char* cond, const char* file, int line);
}
