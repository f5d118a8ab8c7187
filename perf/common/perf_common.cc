// perf_common.cc: flags, communicator setup, timing, validation and the nccl-tests table for every perf tool.
//
// The run follows nccl-tests' structure so that numbers compare: per (datatype, op, root) a barrier and warmup
// calls at the largest and smallest size; per size, out-of-place then in-place, each with one untimed call, a
// barrier, `iters` timed calls, the time combined across ranks (-a), then `check` verified calls on fresh data.
#include "perf/common/perf_common.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hetcomm::perf {

[[noreturn]] void throwCallError(const char* call, hetcommResult_t result, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  const char* last = hetcommGetLastError(nullptr);  // read first: thread-local, later calls may replace it
  std::string msg = std::string(call) + " failed: " + hetcommGetErrorString(result);
  if (last != nullptr && *last != '\0') msg += std::string(": ") + last;
  msg += " (" + std::string(base ? base + 1 : file) + ":" + std::to_string(line) + ")";
  throw CallError(msg);
}

size_t perRankCount(size_t count, size_t eltSize, int nranks) {
  const size_t eltsPer16B = std::max<size_t>(16 / eltSize, 1);
  return count / static_cast<size_t>(nranks) / eltsPer16B * eltsPer16B;
}

CollCounts sameCounts(size_t count) { return {count, count, count, 0, 0}; }

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kContinue = -1;  // parseOptions: go on and run

// ---- flags ----

struct Options {
  size_t minBytes = 32 * kMiB;
  size_t maxBytes = 32 * kMiB;
  size_t stepBytes = 1 * kMiB;
  int stepFactor = 1;  // > 1: multiply the size; 1: add stepBytes
  int iters = 20;
  int warmupIters = 1;
  int check = 1;
  int blocking = 0;
  int average = 1;
  int barrierEach = 0;
  int root = 0;          // -1: every root
  std::string jsonPath;  // -J: every row as JSON (rank 0 writes it)
  std::vector<hetcommRedOp_t> ops;
  std::vector<hetcommDataType_t> types;
};

// nccl-tests' order for -o all / -d all.
constexpr hetcommRedOp_t kAllOps[] = {hetcommSum, hetcommProd, hetcommMax, hetcommMin, hetcommAvg};
constexpr hetcommDataType_t kAllTypes[] = {hetcommInt8,    hetcommUint8,   hetcommInt32,   hetcommUint32,
                                           hetcommInt64,   hetcommUint64,  hetcommFloat16, hetcommFloat32,
                                           hetcommFloat64, hetcommBfloat16};

// A size in bytes: a number (fractions allowed) with an optional binary K, M or G suffix, as nccl-tests.
bool parseSize(const std::string& text, size_t* bytes) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(begin, &end);
  if (end == begin || errno != 0 || !(value >= 0) || !std::isfinite(value)) return false;
  double unit = 1;
  if (*end != '\0') {
    switch (*end) {
      case 'k':
      case 'K':
        unit = 1024.0;
        break;
      case 'm':
      case 'M':
        unit = 1024.0 * 1024;
        break;
      case 'g':
      case 'G':
        unit = 1024.0 * 1024 * 1024;
        break;
      default:
        return false;
    }
    ++end;
  }
  if (*end != '\0' || value * unit >= 0x1p63) return false;
  *bytes = static_cast<size_t>(value * unit);
  return true;
}

int parseOptions(const CollTest& test, int argc, char** argv, Options* o) {
  CLI::App app{std::string(test.name) +
               ": hetcomm collective benchmark with nccl-tests' flags and table. Launch one process per rank "
               "(hetcomm-run -np N, mpirun, srun or torchrun)."};
  int nthreads = 1, ngpus = 1;
  std::string minBytes = "32M", maxBytes = "32M", stepBytes = "1M", op = "sum", type = "float", root = "0";
  app.add_option("-t,--nthreads", nthreads, "threads per process: only 1 (one rank per process)")
      ->capture_default_str();
  app.add_option("-g,--ngpus", ngpus, "devices per thread: only 1")->capture_default_str();
  app.add_option("-b,--minbytes", minBytes, "smallest size in bytes; K, M, G suffixes")->capture_default_str();
  app.add_option("-e,--maxbytes", maxBytes, "largest size in bytes; K, M, G suffixes")->capture_default_str();
  app.add_option("-i,--stepbytes", stepBytes, "size increment when -f is 1; K, M, G suffixes")->capture_default_str();
  app.add_option("-f,--stepfactor", o->stepFactor, "size multiplier (1: add -i instead)")->capture_default_str();
  app.add_option("-n,--iters", o->iters, "timed calls per size")->capture_default_str();
  app.add_option("-w,--warmup_iters", o->warmupIters, "untimed calls at the largest and smallest size")
      ->capture_default_str();
  app.add_option("-c,--check", o->check, "verified calls per size (0: no check, #wrong shows N/A)")
      ->capture_default_str();
  app.add_option("-o,--op", op, "sum, prod, min, max, avg or all (reductions only)")->capture_default_str();
  app.add_option("-d,--datatype", type,
                 "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16 or all")
      ->capture_default_str();
  app.add_option("-r,--root", root, "root rank, or all (rooted collectives only)")->capture_default_str();
  app.add_option("-z,--blocking", o->blocking,
                 "0: calls queued on a stream, synchronised after the timed loop; 1: NULL stream, each call blocks")
      ->capture_default_str();
  app.add_option("-a,--average", o->average, "time across ranks: 0 rank 0, 1 average, 2 minimum, 3 maximum")
      ->capture_default_str();
  app.add_option("--barrier-each", o->barrierEach,
                 "1: a barrier before each timed call, each call timed from it to its completion (OSU's latency "
                 "tests: one call from a common start); 0: back to back, as nccl-tests")
      ->capture_default_str();
  app.add_option("-J,--json", o->jsonPath,
                 "also write the table as JSON to this file (rank 0): the run's settings and one object per row, "
                 "for perf/plot.py");

  try {
    app.parse(argc, argv);
    using CLI::ValidationError;
    if (nthreads != 1) {
      throw ValidationError("-t,--nthreads", std::to_string(nthreads) +
                                                 " is not supported: hetcomm runs one rank per process; launch N "
                                                 "ranks with hetcomm-run -np N (or mpirun / srun) and -t 1");
    }
    if (ngpus != 1) {
      throw ValidationError("-g,--ngpus", std::to_string(ngpus) +
                                              " is not supported: one rank per process drives one device; launch "
                                              "more ranks instead");
    }
    const auto size = [](const char* name, const std::string& text, size_t* out) {
      if (!parseSize(text, out)) {
        throw ValidationError(
            name, "invalid size '" + text + "': expected a non-negative number with an optional K, M or G suffix");
      }
    };
    size("-b,--minbytes", minBytes, &o->minBytes);
    size("-e,--maxbytes", maxBytes, &o->maxBytes);
    size("-i,--stepbytes", stepBytes, &o->stepBytes);
    if (o->minBytes > o->maxBytes) {
      throw ValidationError("-b,--minbytes", "minbytes (" + std::to_string(o->minBytes) + ") exceeds maxbytes (" +
                                                 std::to_string(o->maxBytes) + ")");
    }
    if (o->stepFactor < 1) throw ValidationError("-f,--stepfactor", "must be >= 1");
    if (o->stepFactor > 1 && o->minBytes == 0 && o->maxBytes > 0) {
      throw ValidationError("-b,--minbytes", "0 never grows with -f; start at -b 1 or more, or use -i");
    }
    if (o->stepFactor == 1 && o->stepBytes == 0 && o->maxBytes > o->minBytes) {
      throw ValidationError("-i,--stepbytes", "must be > 0 when -f is 1 and maxbytes > minbytes");
    }
    if (o->iters < 1) throw ValidationError("-n,--iters", "must be >= 1");
    if (o->warmupIters < 0) throw ValidationError("-w,--warmup_iters", "must be >= 0");
    if (o->check < 0) throw ValidationError("-c,--check", "must be >= 0");
    if (o->blocking != 0 && o->blocking != 1) throw ValidationError("-z,--blocking", "must be 0 or 1");
    if (o->average < 0 || o->average > 3) throw ValidationError("-a,--average", "must be 0, 1, 2 or 3");
    if (o->barrierEach != 0 && o->barrierEach != 1) throw ValidationError("--barrier-each", "must be 0 or 1");

    if (op == "all") {
      o->ops.assign(std::begin(kAllOps), std::end(kAllOps));
    } else {
      for (hetcommRedOp_t candidate : kAllOps) {
        if (op == opName(candidate)) o->ops = {candidate};
      }
      if (o->ops.empty()) throw ValidationError("-o,--op", "unknown op '" + op + "': sum, prod, min, max, avg, all");
    }
    if (type == "all") {
      o->types.assign(std::begin(kAllTypes), std::end(kAllTypes));
    } else {
      for (hetcommDataType_t candidate : kAllTypes) {
        if (type == typeName(candidate)) o->types = {candidate};
      }
      if (o->types.empty()) {
        throw ValidationError("-d,--datatype", "unknown datatype '" + type +
                                                   "': int8, uint8, int32, uint32, int64, uint64, half, float, "
                                                   "double, bfloat16, all");
      }
    }
    if (root == "all") {
      o->root = -1;
    } else {
      size_t used = 0;
      int value = -2;
      try {
        value = std::stoi(root, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != root.size() || value < -1) {
        throw ValidationError("-r,--root", "invalid root '" + root + "': a rank number, or all");
      }
      o->root = value;
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return kContinue;
}

// ---- this process ----

std::string shortHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  if (char* dot = std::strchr(name, '.')) *dot = '\0';  // as nccl-tests
  return name;
}

// Buffers are host memory, so the "device" is the CPU; name it honestly with its model.
std::string cpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return "CPU " + line.substr(colon + 2);
    }
  }
  return "CPU";
}

// What rank 0 prints in "# Using devices"; gathered as bytes with hetcommAllGather.
struct RankInfo {
  int32_t rank;
  int32_t pid;
  char host[64];
  char device[160];
};

template <size_t N>
void copyString(char (&dst)[N], const std::string& src) {
  std::snprintf(dst, N, "%s", src.c_str());
}

// Page-aligned host memory; every byte written once so that page faults stay out of the timings.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

Buffer allocate(size_t bytes, const char* what) {
  constexpr size_t kAlign = 4096;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) {
    throw std::runtime_error("cannot allocate " + std::to_string(rounded) + " bytes for the " + what +
                             " buffer (see -e)");
  }
  std::memset(p, 0, rounded);
  return Buffer(static_cast<std::byte*>(p));
}

// nccl-tests' number format: as many decimals as fit the column (%.2f, %.1f, %.0f), then an exponent.
std::string formatValue(double v, int width) {
  char out[64];
  if (!std::isfinite(v)) {
    std::snprintf(out, sizeof(out), "%*s", width, std::isnan(v) ? "nan" : "inf");
    return out;
  }
  int digits = 0;  // digits before the decimal point
  for (double p = 1; std::fabs(v) >= p && digits < 400; p *= 10) ++digits;
  if (digits < width - 2) {
    std::snprintf(out, sizeof(out), "%*.2f", width, v);
  } else if (digits < width - 1) {
    std::snprintf(out, sizeof(out), "%*.1f", width, v);
  } else if (digits < width + 1) {
    std::snprintf(out, sizeof(out), "%*.0f", width, v);
  } else if (width >= 7) {
    std::snprintf(out, sizeof(out), "%*.1e", width, v);
  } else {
    std::snprintf(out, sizeof(out), "%*.0e", width, v);
  }
  return out;
}

// ---- the run ----

class Runner {
 public:
  Runner(const CollTest& test, const Options& opt, hetcommComm_t comm, int rank, int nranks)
      : test_(test), opt_(opt), comm_(comm), rank_(rank), nranks_(nranks) {}

  // Prints the header, runs every row, prints the footer. Returns the exit code.
  int run() {
    printHeader();
    send_ = allocate(opt_.maxBytes, "send");
    recv_ = allocate(opt_.maxBytes, "receive");
    if (opt_.blocking == 0) HC_PERF_CHECK(hetcommStreamCreate(&stream_));

    const std::vector<hetcommRedOp_t> ops = test_.reduces ? opt_.ops : std::vector<hetcommRedOp_t>{hetcommSum};
    std::vector<int> roots = {-1};
    if (test_.rooted && opt_.root >= 0) roots = {opt_.root};
    if (test_.rooted && opt_.root < 0) {
      roots.clear();
      for (int r = 0; r < nranks_; ++r) roots.push_back(r);
    }
    for (hetcommDataType_t type : opt_.types) {
      for (hetcommRedOp_t op : ops) {
        for (int root : roots) timeTest(type, op, root);
      }
    }

    // nccl-tests counts, over all ranks, the checks that found a wrong element.
    const int64_t failed = sumAcrossRanks(failedChecks_);
    print("# %-20s : %lld %s\n", "Out of bounds values", static_cast<long long>(failed), failed ? "FAILED" : "OK");
    print("# %-20s : %g\n", "Avg bus bandwidth", bwCount_ ? bwSum_ / bwCount_ : 0.0);
    print("#\n");
    print("# Collective test concluded: %s\n", test_.name);
    if (!opt_.jsonPath.empty() && rank_ == 0) writeJson(failed, bwCount_ ? bwSum_ / bwCount_ : 0.0);

    if (stream_ != nullptr) {
      hetcommStream_t s = stream_;
      stream_ = nullptr;
      HC_PERF_CHECK(hetcommStreamDestroy(s));
    }
    return failed ? 1 : 0;
  }

 private:
  void print(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    if (rank_ != 0) return;
    va_list ap;
    va_start(ap, fmt);
    std::vprintf(fmt, ap);
    va_end(ap);
  }

  void printHeader() {
    int library = 0;
    HC_PERF_CHECK(hetcommGetVersion(&library));
    print("# hetcomm-tests version %d.%d.%d hetcomm-headers=%d hetcomm-library=%d\n", HETCOMM_MAJOR, HETCOMM_MINOR,
          HETCOMM_PATCH, HETCOMM_VERSION_CODE, library);
    print("# Collective test starting: %s\n", test_.name);
    const bool factor = opt_.stepFactor > 1;
    print(
        "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
        "validation: %d graph: %d unalign: %d\n",
        1, 1, opt_.minBytes, opt_.maxBytes, factor ? static_cast<size_t>(opt_.stepFactor) : opt_.stepBytes,
        factor ? "factor" : "bytes", opt_.warmupIters, opt_.iters, 1, opt_.check, 0, 0);
    if (opt_.barrierEach) {
      print("# Barrier Each: a barrier before each timed call, which is timed from it to its completion\n");
    } else if (opt_.blocking) {
      print("# Blocking Enabled: wait for completion after each collective (no barrier)\n");
    }
    print("#\n");

    RankInfo mine{};
    mine.rank = rank_;
    mine.pid = static_cast<int32_t>(getpid());
    copyString(mine.host, shortHostName());
    copyString(mine.device, cpuName());
    std::vector<RankInfo> all(static_cast<size_t>(nranks_));
    HC_PERF_CHECK(hetcommAllGather(&mine, all.data(), sizeof(RankInfo), hetcommUint8, comm_, nullptr));
    print("# Using devices\n");
    for (int r = 0; r < nranks_; ++r) {
      const RankInfo& info = all[static_cast<size_t>(r)];
      int local = 0;  // nccl-tests' device number is the rank's index on its host
      for (int q = 0; q < r; ++q) local += std::strcmp(all[static_cast<size_t>(q)].host, info.host) == 0;
      print("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n", info.rank, 0, info.pid, info.host,
            local, 0, 0, 0, info.device);
    }

    print("#\n");
    print("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
          "", "");
    print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s%s\n", "size", "count", "type", "redop",
          "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
          test_.algo >= 0 ? "  algorithm  predicted" : "");
    print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s%s\n", "(B)", "(elements)", "", "", "",
          "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", test_.algo >= 0 ? "             (us)" : "");
  }

  // One (datatype, op, root): warmup at the largest and smallest size, then one row per size.
  void timeTest(hetcommDataType_t type, hetcommRedOp_t op, int root) {
    type_ = type;
    op_ = op;
    root_ = root;
    elt_ = typeSize(type);
    barrier();
    for (size_t bytes : {opt_.maxBytes, opt_.minBytes}) {
      setSize(bytes);
      for (int i = 0; i < opt_.warmupIters; ++i) startColl(false);
      completeColl();
    }
    for (size_t bytes = opt_.minBytes; bytes <= opt_.maxBytes;) {
      setSize(bytes);
      const size_t rowBytes = std::max(counts_.sendCount, counts_.recvCount) * elt_;
      print("%12zu  %12zu  %8s  %6s  %6d", rowBytes, counts_.paramCount, typeName(type),
            test_.reduces ? opName(op) : "none", root);
      nlohmann::json row = {{"size", rowBytes},
                            {"count", counts_.paramCount},
                            {"type", typeName(type)},
                            {"redop", test_.reduces ? opName(op) : "none"},
                            {"root", root}};
      row["out_of_place"] = benchTime(false);
      row["in_place"] = benchTime(true);
      if (test_.algo >= 0) {
        // What hetcomm chose for this row and what its cost model predicted, next to what was measured.
        char algo[32];
        double predictedUs = 0;
        HC_PERF_CHECK(hetcommCommGetAlgorithm(comm_, static_cast<hetcommCollective_t>(test_.algo), counts_.paramCount,
                                              type_, algo, sizeof(algo), &predictedUs));
        print("  %9s  %9s", algo, formatValue(predictedUs, 9).c_str());
        row["algorithm"] = algo;
        row["predicted_us"] = predictedUs;
      }
      print("\n");
      rows_.push_back(std::move(row));
      if (opt_.stepFactor > 1) {
        if (bytes > opt_.maxBytes / static_cast<size_t>(opt_.stepFactor)) break;  // the next size overflows max
        bytes *= static_cast<size_t>(opt_.stepFactor);
      } else {
        if (opt_.stepBytes == 0 || bytes > opt_.maxBytes - opt_.stepBytes) break;
        bytes += opt_.stepBytes;
      }
    }
  }

  void setSize(size_t bytes) { counts_ = test_.counts(bytes / elt_, elt_, nranks_); }

  std::byte* sendPtr(bool inPlace) const {
    return inPlace ? recv_.get() + counts_.sendInplaceOffset * static_cast<size_t>(rank_) * elt_ : send_.get();
  }
  std::byte* recvPtr(bool inPlace) const {
    return recv_.get() + (inPlace ? counts_.recvInplaceOffset * static_cast<size_t>(rank_) * elt_ : 0);
  }
  Layout layout() const { return {rank_, nranks_, root_, counts_.paramCount}; }
  DataSpec spec(uint64_t seed) const { return {type_, op_, test_.reduces, nranks_, seed}; }

  void startColl(bool inPlace) {
    test_.run({sendPtr(inPlace), recvPtr(inPlace), counts_.paramCount, type_, op_, root_, rank_, nranks_, comm_,
               opt_.blocking ? nullptr : stream_});
  }
  void completeColl() {
    if (stream_ != nullptr) HC_PERF_CHECK(hetcommStreamSynchronize(stream_));
  }

  // Garbage in the receive buffer first, then the inputs: in place, the send buffer lies inside the receive one.
  void initData(bool inPlace, uint64_t seed) {
    fillGarbage(type_, recvPtr(inPlace), counts_.recvCount);
    fillInput(spec(seed), rank_, sendPtr(inPlace), counts_.sendCount);
  }

  int64_t checkData(bool inPlace, uint64_t seed) const {
    if (test_.checksRank != nullptr && !test_.checksRank(layout())) return 0;
    return countWrong(spec(seed), recvPtr(inPlace), counts_.recvCount, test_.source, layout());
  }

  // Times one placement and prints its columns; returns them for the JSON row.
  nlohmann::json benchTime(bool inPlace) {
    if (opt_.check > 0) initData(inPlace, 0);  // time on the kind of data that is checked, as nccl-tests
    startColl(inPlace);                        // one untimed call
    completeColl();
    barrier();

    const double sec = combineTime(timedCalls(inPlace) / opt_.iters);

    const double bytes = static_cast<double>(counts_.paramCount * elt_) * (test_.bytesScaleWithRanks ? nranks_ : 1);
    const double algBw = bytes / 1.0e9 / sec;
    const double busBw = algBw * test_.busBwFactor(nranks_);

    const bool report = opt_.check > 0 && (!inPlace || test_.checkInPlace);
    int64_t wrong = 0;
    for (int c = 0; report && c < opt_.check; ++c) {
      const uint64_t seed = ++checkRep_;  // the same sequence on every rank
      initData(inPlace, seed);
      startColl(inPlace);
      completeColl();
      const int64_t local = checkData(inPlace, seed);
      if (local != 0) ++failedChecks_;
      wrong = sumAcrossRanks(local);
      if (wrong != 0) break;
    }

    const std::string time = formatValue(sec * 1.0e6, 7);
    const std::string alg = formatValue(algBw, 6);
    const std::string bus = formatValue(busBw, 6);
    if (report) {
      print("  %7s  %6s  %6s  %6g", time.c_str(), alg.c_str(), bus.c_str(), static_cast<double>(wrong));
    } else {
      print("  %7s  %6s  %6s    N/A", time.c_str(), alg.c_str(), bus.c_str());
    }
    bwSum_ += busBw;
    ++bwCount_;
    return {{"time_us", sec * 1.0e6},
            {"algbw_gbs", algBw},
            {"busbw_gbs", busBw},
            {"wrong", report ? nlohmann::json(wrong) : nlohmann::json(nullptr)}};
  }

  // -J: the settings, the ranks' hosts, and every row, with full-precision figures (the table rounds them).
  void writeJson(int64_t failed, double avgBusBw) const {
    nlohmann::json doc = {{"tool", test_.name},
                          {"ranks", nranks_},
                          {"host", shortHostName()},
                          {"cpu", cpuName()},
                          {"blocking", opt_.blocking == 1},
                          {"barrier_each", opt_.barrierEach == 1},
                          {"iters", opt_.iters},
                          {"transport", std::getenv("HETCOMM_TRANSPORT") ? std::getenv("HETCOMM_TRANSPORT") : "auto"},
                          {"algo", std::getenv("HETCOMM_ALGO") ? std::getenv("HETCOMM_ALGO") : "auto"},
                          {"rows", rows_},
                          {"wrong_checks", failed},
                          {"avg_busbw_gbs", avgBusBw}};
    std::ofstream out(opt_.jsonPath);
    out << doc.dump(1) << "\n";
    if (!out) std::fprintf(stderr, "%s: -J %s: cannot write the file\n", test_.name, opt_.jsonPath.c_str());
  }

  // Seconds this rank spent in the timed calls. Back to back, a rank that finishes a call early starts the next:
  // for a rooted collective the ranks near the root run ahead of the slowest one, and the average over ranks
  // falls below what one call takes. --barrier-each times each call alone from a common start instead.
  double timedCalls(bool inPlace) {
    using Clock = std::chrono::steady_clock;
    if (!opt_.barrierEach) {
      const auto start = Clock::now();
      for (int i = 0; i < opt_.iters; ++i) startColl(inPlace);
      completeColl();
      return std::chrono::duration<double>(Clock::now() - start).count();
    }
    double total = 0;
    for (int i = 0; i < opt_.iters; ++i) {
      barrier();
      const auto start = Clock::now();
      startColl(inPlace);
      completeColl();
      total += std::chrono::duration<double>(Clock::now() - start).count();
    }
    return total;
  }

  // An allreduce of one element on the NULL stream: returns once every rank has reached it.
  void barrier() {
    const int32_t one = 1;
    int32_t sum = 0;
    HC_PERF_CHECK(hetcommAllReduce(&one, &sum, 1, hetcommInt32, hetcommSum, comm_, nullptr));
  }

  // -a: 0 rank 0's time, 1 the average, 2 the minimum, 3 the maximum over ranks.
  double combineTime(double sec) {
    const double mine = (opt_.average == 0 && rank_ != 0) ? 0.0 : sec;
    const hetcommRedOp_t op = opt_.average == 2 ? hetcommMin : opt_.average == 3 ? hetcommMax : hetcommSum;
    double combined = 0;
    HC_PERF_CHECK(hetcommAllReduce(&mine, &combined, 1, hetcommFloat64, op, comm_, nullptr));
    return opt_.average == 1 ? combined / nranks_ : combined;
  }

  int64_t sumAcrossRanks(int64_t value) {
    int64_t sum = 0;
    HC_PERF_CHECK(hetcommAllReduce(&value, &sum, 1, hetcommInt64, hetcommSum, comm_, nullptr));
    return sum;
  }

  const CollTest& test_;
  const Options& opt_;
  hetcommComm_t comm_;
  const int rank_;
  const int nranks_;
  hetcommStream_t stream_ = nullptr;  // -z 0 only
  Buffer send_, recv_;                // maxBytes each

  // The current row.
  hetcommDataType_t type_ = hetcommFloat32;
  hetcommRedOp_t op_ = hetcommSum;
  int root_ = -1;
  size_t elt_ = 4;
  CollCounts counts_{};

  uint64_t checkRep_ = 0;             // seed of the next checked call
  int64_t failedChecks_ = 0;          // checks on this rank that found a wrong element
  double bwSum_ = 0;                  // busbw summed over every row and placement, for the footer
  std::vector<nlohmann::json> rows_;  // -J: every row so far
  int bwCount_ = 0;
};

}  // namespace

int runPerfTest(const CollTest& test, int argc, char** argv) {
  setlinebuf(stdout);  // rows appear as they finish
  Options opt;
  if (const int rc = parseOptions(test, argc, argv, &opt); rc != kContinue) return rc;

  hetcommComm_t comm = nullptr;
  int rank = -1;
  // Declared outside the try block so that, on failure, its buffers outlive hetcommCommAbort: operations still
  // queued on its stream may write into them until the abort stops them. (Its stream is then left to exit.)
  std::unique_ptr<Runner> runner;
  try {
    HC_PERF_CHECK(hetcommCommInitFromEnv(&comm));
    int nranks = 0;
    HC_PERF_CHECK(hetcommCommUserRank(comm, &rank));
    HC_PERF_CHECK(hetcommCommCount(comm, &nranks));

    int rc = 2;
    if (test.rooted && opt.root >= nranks) {  // every rank sees the same flags and size: all stop here
      if (rank == 0) {
        std::fprintf(stderr, "%s: -r,--root: root %d out of range for %d ranks (0..%d, or all)\n", test.name, opt.root,
                     nranks, nranks - 1);
      }
    } else {
      runner = std::make_unique<Runner>(test, opt, comm, rank, nranks);
      rc = runner->run();
    }
    hetcommComm_t done = comm;
    comm = nullptr;  // from here a failure must not abort it again
    HC_PERF_CHECK(hetcommCommFinalize(done));
    HC_PERF_CHECK(hetcommCommDestroy(done));
    return rc;
  } catch (const std::exception& e) {
    const std::string who = rank >= 0 ? "rank " + std::to_string(rank) : std::string("rank ?");
    std::fprintf(stderr, "%s: %s on %s pid %d: %s\n", test.name, who.c_str(), shortHostName().c_str(),
                 static_cast<int>(getpid()), e.what());
    if (comm != nullptr) hetcommCommAbort(comm);  // peers fail fast instead of waiting for their timeout
    return 1;
  }
}

}  // namespace hetcomm::perf
