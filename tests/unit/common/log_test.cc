// Logging: HETCOMM_DEBUG / HETCOMM_DEBUG_SUBSYS parsing, HETCOMM_DEBUG_FILE with %h / %p, and the line format
// (host, pid, rank). Every test restores the environment and re-reads it, so the order of tests does not matter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "common/log.h"
#include "common/status.h"

namespace hetcomm::log {
namespace {

namespace fs = std::filesystem;

// Sets (or unsets) the logging variables for one test and puts the old values back afterwards.
class LogEnv : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"HETCOMM_DEBUG", "HETCOMM_DEBUG_SUBSYS", "HETCOMM_DEBUG_FILE"};

  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.push_back(old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(v);
    }
    char tmpl[] = "/tmp/hc_log_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i]) ::setenv(kVars[i], saved_[i]->c_str(), 1);
      else ::unsetenv(kVars[i]);
    }
    reinitForTest();  // closes a log file this test opened; back to the process's own settings
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

  static std::string readAll(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static std::string shortHost() {
    char host[64] = {};
    gethostname(host, sizeof(host) - 1);
    std::string h = host;
    return h.substr(0, h.find('.'));
  }

  fs::path dir_;
  std::vector<std::optional<std::string>> saved_;
};

TEST_F(LogEnv, DefaultLevelIsWarnForAllSubsystems) {
  reinitForTest();
  EXPECT_EQ(gLevel.load(), kWarn);
  EXPECT_EQ(gSubsys.load(), static_cast<uint32_t>(kAll));
  EXPECT_TRUE(enabled(kWarn, kAll));
  EXPECT_FALSE(enabled(kInfo, kNet));
}

TEST_F(LogEnv, LevelNamesParseCaseInsensitively) {
  struct Case {
    const char* value;
    int level;
  };
  for (const Case& c : {Case{"NONE", kNone}, Case{"0", kNone}, Case{"warn", kWarn}, Case{"VERSION", kWarn},
                        Case{"Info", kInfo}, Case{"INFO", kInfo}, Case{"trace", kTrace},
                        Case{"loud", kWarn} /* unknown: a notice on stderr, then WARN */}) {
    SCOPED_TRACE(c.value);
    set("HETCOMM_DEBUG", c.value);
    reinitForTest();
    EXPECT_EQ(gLevel.load(), c.level);
  }
}

TEST_F(LogEnv, LevelGatesMacros) {
  set("HETCOMM_DEBUG", "INFO");
  reinitForTest();
  EXPECT_TRUE(enabled(kWarn, kAll));
  EXPECT_TRUE(enabled(kInfo, kNet));
  EXPECT_FALSE(enabled(kTrace, kNet));
  set("HETCOMM_DEBUG", "NONE");
  reinitForTest();
  EXPECT_FALSE(enabled(kWarn, kAll));
  set("HETCOMM_DEBUG", "TRACE");
  reinitForTest();
  EXPECT_TRUE(enabled(kTrace, kColl));
}

TEST_F(LogEnv, SubsystemListAndInversion) {
  set("HETCOMM_DEBUG", "INFO");
  set("HETCOMM_DEBUG_SUBSYS", "NET,coll");
  reinitForTest();
  EXPECT_EQ(gSubsys.load(), static_cast<uint32_t>(kNet | kColl));
  EXPECT_TRUE(enabled(kInfo, kNet));
  EXPECT_TRUE(enabled(kInfo, kColl));
  EXPECT_FALSE(enabled(kInfo, kInit));
  EXPECT_TRUE(enabled(kWarn, kAll));  // warnings are never filtered away by subsystem

  set("HETCOMM_DEBUG_SUBSYS", "^NET,ENV");
  reinitForTest();
  EXPECT_FALSE(enabled(kInfo, kNet));
  EXPECT_FALSE(enabled(kInfo, kEnv));
  EXPECT_TRUE(enabled(kInfo, kInit));
  EXPECT_TRUE(enabled(kInfo, kBoot));

  set("HETCOMM_DEBUG_SUBSYS", "BOGUS,TOPO");  // unknown names are reported and skipped
  reinitForTest();
  EXPECT_EQ(gSubsys.load(), static_cast<uint32_t>(kTopo));
}

TEST_F(LogEnv, SubsysNames) {
  EXPECT_STREQ(subsysName(kNet), "NET");
  EXPECT_STREQ(subsysName(kColl), "COLL");
  EXPECT_STREQ(subsysName(kAll), "ALL");
}

TEST_F(LogEnv, WarnLineGoesToTheFileWithHostPidAndRank) {
  set("HETCOMM_DEBUG", "WARN");
  set("HETCOMM_DEBUG_FILE", (dir_ / "hc.%h.%p.log").string());
  reinitForTest();
  {
    ScopedRank rank(3);
    HC_WARN("unit test marker %d", 4242);
  }
  HC_WARN("after the scope");
  // Both substitutions made: the exact path exists.
  const std::string host = shortHost();
  const fs::path expected = dir_ / ("hc." + host + "." + std::to_string(getpid()) + ".log");
  ASSERT_TRUE(fs::exists(expected)) << expected;
  std::string text = readAll(expected);
  std::istringstream lines(text);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  // host:pid:tid [rank 3] HETCOMM WARN unit test marker 4242
  EXPECT_EQ(first.rfind(host + ":" + std::to_string(getpid()) + ":", 0), 0u) << first;
  EXPECT_NE(first.find(" [rank 3] HETCOMM WARN unit test marker 4242"), std::string::npos) << first;
  // The scope ended: no rank on the next line.
  EXPECT_EQ(second.find("[rank"), std::string::npos) << second;
  EXPECT_NE(second.find("HETCOMM WARN after the scope"), std::string::npos) << second;
}

TEST_F(LogEnv, ScopedRankNestsAndShowsTheCommName) {
  set("HETCOMM_DEBUG", "INFO");
  set("HETCOMM_DEBUG_FILE", (dir_ / "nest.log").string());
  reinitForTest();
  {
    ScopedRank outer(1, "dp");
    {
      ScopedRank inner(5);
      HC_INFO(Net, "inner line");
    }
    HC_INFO(Coll, "outer line");
  }
  std::string text = readAll(dir_ / "nest.log");
  EXPECT_NE(text.find("[rank 5] HETCOMM INFO NET inner line"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1 dp] HETCOMM INFO COLL outer line"), std::string::npos) << text;
  EXPECT_EQ(threadRank().rank, -1);
}

TEST_F(LogEnv, FilteredLinesAreNotWritten) {
  set("HETCOMM_DEBUG", "INFO");
  set("HETCOMM_DEBUG_SUBSYS", "COLL");
  set("HETCOMM_DEBUG_FILE", (dir_ / "filtered.log").string());
  reinitForTest();
  HC_INFO(Net, "net line must not appear");
  HC_TRACE(Coll, "trace line must not appear");
  HC_INFO(Coll, "coll line appears");
  std::string text = readAll(dir_ / "filtered.log");
  EXPECT_EQ(text.find("must not appear"), std::string::npos) << text;
  EXPECT_NE(text.find("coll line appears"), std::string::npos) << text;
}

TEST_F(LogEnv, UnwritableFileFallsBackToStderr) {
  set("HETCOMM_DEBUG_FILE", (dir_ / "no" / "such" / "dir" / "x.log").string());
  testing::internal::CaptureStderr();
  reinitForTest();
  HC_WARN("still logged");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot open HETCOMM_DEBUG_FILE"), std::string::npos) << err;
  EXPECT_NE(err.find("still logged"), std::string::npos) << err;
}

TEST_F(LogEnv, HcTryLeavesABreadcrumbAtTrace) {
  set("HETCOMM_DEBUG", "TRACE");
  set("HETCOMM_DEBUG_FILE", (dir_ / "trace.log").string());
  reinitForTest();
  auto inner = [] { return timeoutError("slow"); };
  auto outer = [&]() -> Status {
    HC_TRY(inner());
    return okStatus();
  };
  EXPECT_EQ(outer().code(), Code::kTimeout);
  std::string text = readAll(dir_ / "trace.log");
  EXPECT_NE(text.find("-> timeout at "), std::string::npos) << text;
  EXPECT_NE(text.find("log_test.cc:"), std::string::npos) << text;
}

}  // namespace
}  // namespace hetcomm::log
