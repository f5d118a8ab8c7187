#include "common/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/status.h"
#include "common/strings.h"

namespace hetcomm::log {

std::atomic<int> gLevel{-1};
std::atomic<uint32_t> gSubsys{kAll};

namespace {

struct SubsysName {
  const char* name;
  uint32_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit}, {"BOOT", kBoot}, {"NET", kNet},     {"SHM", kShm}, {"UCX", kUcx},   {"IB", kIb},
    {"TOPO", kTopo}, {"COLL", kColl}, {"ALLOC", kAlloc}, {"ENV", kEnv}, {"CALL", kCall}, {"ALL", kAll},
};

std::mutex gMutex;  // serialises init and line output
FILE* gOut = nullptr;
char gHost[64] = "?";

int parseLevel(const char* s) {
  if (!s || !*s) return kWarn;  // errors are always worth a line
  std::string v(s);
  for (auto& c : v) c = static_cast<char>(toupper(c));
  if (v == "NONE" || v == "0") return kNone;
  if (v == "WARN" || v == "VERSION") return kWarn;
  if (v == "INFO") return kInfo;
  if (v == "TRACE") return kTrace;
  std::fprintf(stderr, "hetcomm: HETCOMM_DEBUG=%s is not one of NONE, WARN, INFO, TRACE; using WARN\n", s);
  return kWarn;
}

uint32_t parseSubsys(const char* s) {
  if (!s || !*s) return kAll;
  bool invert = s[0] == '^';
  uint32_t mask = 0;
  for (const auto& tok : split(invert ? s + 1 : s, ',')) {
    bool found = false;
    for (const auto& n : kSubsysNames) {
      if (strcasecmp(tok.c_str(), n.name) == 0) {
        mask |= n.bit;
        found = true;
      }
    }
    if (!found && !tok.empty())
      std::fprintf(stderr, "hetcomm: HETCOMM_DEBUG_SUBSYS: unknown subsystem '%s'\n", tok.c_str());
  }
  return invert ? ~mask : mask;
}

// HETCOMM_DEBUG_FILE: %h -> host, %p -> pid.
FILE* openOutput(const char* pattern) {
  if (!pattern || !*pattern) return stderr;
  std::string path;
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'h') {
      path += gHost;
      ++p;
    } else if (p[0] == '%' && p[1] == 'p') {
      path += std::to_string(getpid());
      ++p;
    } else {
      path += *p;
    }
  }
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) {
    std::fprintf(stderr, "hetcomm: cannot open HETCOMM_DEBUG_FILE %s: %s; logging to stderr\n", path.c_str(),
                 std::strerror(errno));
    return stderr;
  }
  setvbuf(f, nullptr, _IOLBF, 0);
  return f;
}

void initLocked() {
  gethostname(gHost, sizeof(gHost) - 1);
  if (char* dot = std::strchr(gHost, '.')) *dot = '\0';
  gOut = openOutput(std::getenv("HETCOMM_DEBUG_FILE"));
  gSubsys.store(parseSubsys(std::getenv("HETCOMM_DEBUG_SUBSYS")), std::memory_order_relaxed);
  gLevel.store(parseLevel(std::getenv("HETCOMM_DEBUG")), std::memory_order_release);
}

const char* levelName(Level l) {
  switch (l) {
    case kWarn:
      return "WARN";
    case kInfo:
      return "INFO";
    case kTrace:
      return "TRACE";
    default:
      return "";
  }
}

}  // namespace

void init() {
  std::lock_guard<std::mutex> lock(gMutex);
  if (gLevel.load(std::memory_order_acquire) < 0) initLocked();
}

void reinitForTest() {
  std::lock_guard<std::mutex> lock(gMutex);
  if (gOut && gOut != stderr) std::fclose(gOut);
  initLocked();
}

RankContext& threadRank() {
  thread_local RankContext ctx;
  return ctx;
}

const char* subsysName(uint32_t subsys) {
  for (const auto& n : kSubsysNames)
    if (n.bit == subsys) return n.name;
  return "ALL";
}

void write(Level level, uint32_t subsys, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  const RankContext& rc = threadRank();
  std::string who;
  if (rc.rank >= 0) who = rc.commName ? format(" [rank %d %s]", rc.rank, rc.commName) : format(" [rank %d]", rc.rank);
  std::string sub = level == kWarn ? "" : std::string(" ") + subsysName(subsys);
  std::lock_guard<std::mutex> lock(gMutex);
  std::fprintf(gOut ? gOut : stderr, "%s:%d:%ld%s HETCOMM %s%s %s\n", gHost, getpid(), (long)syscall(SYS_gettid),
               who.c_str(), levelName(level), sub.c_str(), msg.c_str());
}

void breadcrumb(const Status& st, const char* file, int line) {
  if (enabled(kTrace, kAll)) write(kTrace, kAll, "-> %s at %s:%d", codeName(st.code()), file, line);
}

void checkFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "hetcomm: internal check failed: %s at %s:%d\n", cond, file, line);
  std::abort();
}

}  // namespace hetcomm::log
