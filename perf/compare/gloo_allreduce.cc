// Gloo allreduce benchmark: the Gloo peer of hetcomm's foundation comparison (see run-foundation.sh).
//
// One process per rank. Rendezvous through gloo::rendezvous::FileStore in a directory that every rank can see and
// that must be empty (fresh) for each run; TCP transport on a given address (default 127.0.0.1). float32, sum.
// For each size: one verified call, `warmup` untimed calls, a barrier, `iters` timed calls; the per-call time is
// averaged over ranks and rank 0 prints one row in nccl-tests' column layout:
//     size(B)  count  type  redop  root  time(us)  algbw(GB/s)  busbw(GB/s)  #wrong
// with GB = 1e9 bytes and busbw = algbw * 2(n-1)/n, so the busbw is the 8th field as in nccl-tests' out-of-place
// columns.
//
// Algorithms (--algo), each to be run in a fresh process:
//   ring     gloo::allreduce(gloo::AllreduceOptions) with the RING algorithm: Gloo's "new" API, what PyTorch's
//            ProcessGroupGloo uses (options rebuilt per call, a fresh tag per call, gloo::sum<float>). Out-of-place.
//   chunked  the legacy gloo::AllreduceRingChunked<float> (reduce-scatter + allgather in 2n chunks), in-place.
// Do NOT use the legacy gloo::AllreduceRing: it forwards whole buffers (about half the link rate) and its Pair
// buffers shrink every socket's send buffer, which makes later calls in the same process crawl.
//
// Build (Debian libgloo-dev; config.h already fixes GLOO_USE_* so no -D is needed; libgloo.so lives in /usr/lib
// and pulls in libhiredis and libibverbs itself):
//     g++ -std=c++17 -O2 -pthread gloo_allreduce.cc -o gloo_allreduce -lgloo
// Run (2 ranks):
//     d=$(mktemp -d); ./gloo_allreduce --rank 0 --size 2 --store $d & ./gloo_allreduce --rank 1 --size 2 --store $d
// Rank and size may also come from RANK/WORLD_SIZE (or OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE).

#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Args {
  int rank = -1;
  int size = -1;
  std::string store;
  std::string host = "127.0.0.1";
  std::string algo = "ring";
  std::vector<size_t> sizes = {size_t(1) << 20, size_t(64) << 20};
  int iters = 20;
  int warmup = 5;
  int timeoutSec = 300;
};

[[noreturn]] void usage(const char* prog, const char* why) {
  std::fprintf(stderr,
               "%s: %s\n"
               "usage: %s --store DIR [--rank R --size N] [--host 127.0.0.1] [--algo ring|chunked]\n"
               "          [--sizes 1M,64M] [--iters 20] [--warmup 5] [--timeout 300]\n"
               "  sizes are bytes, with optional K/M/G (binary) suffix; rank/size default to RANK/WORLD_SIZE\n",
               prog, why, prog);
  std::exit(2);
}

size_t parseBytes(const std::string& s) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) throw std::runtime_error("bad size '" + s + "'");
  switch (*end) {
    case 'K':
    case 'k':
      v <<= 10;
      ++end;
      break;
    case 'M':
    case 'm':
      v <<= 20;
      ++end;
      break;
    case 'G':
    case 'g':
      v <<= 30;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') throw std::runtime_error("bad size '" + s + "'");
  return v;
}

int envInt(const char* a, const char* b) {
  const char* v = std::getenv(a);
  if (!v) v = std::getenv(b);
  return v ? std::atoi(v) : -1;
}

Args parse(int argc, char** argv) {
  Args a;
  a.rank = envInt("RANK", "OMPI_COMM_WORLD_RANK");
  a.size = envInt("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0], ("missing value for " + k).c_str());
      return argv[++i];
    };
    if (k == "--rank")
      a.rank = std::stoi(val());
    else if (k == "--size")
      a.size = std::stoi(val());
    else if (k == "--store")
      a.store = val();
    else if (k == "--host")
      a.host = val();
    else if (k == "--algo")
      a.algo = val();
    else if (k == "--iters" || k == "-n")
      a.iters = std::stoi(val());
    else if (k == "--warmup" || k == "-w")
      a.warmup = std::stoi(val());
    else if (k == "--timeout")
      a.timeoutSec = std::stoi(val());
    else if (k == "--sizes") {
      a.sizes.clear();
      std::string s = val();
      size_t p = 0;
      while (p <= s.size()) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        if (q > p) a.sizes.push_back(parseBytes(s.substr(p, q - p)));
        p = q + 1;
      }
    } else if (k == "-h" || k == "--help")
      usage(argv[0], "help");
    else
      usage(argv[0], ("unknown argument " + k).c_str());
  }
  if (a.store.empty()) usage(argv[0], "--store DIR is required");
  if (a.size < 1 || a.rank < 0 || a.rank >= a.size) usage(argv[0], "need 0 <= rank < size");
  if (a.algo != "ring" && a.algo != "chunked") usage(argv[0], "--algo must be ring or chunked");
  if (a.iters < 1 || a.warmup < 0 || a.sizes.empty()) usage(argv[0], "bad iters/warmup/sizes");
  return a;
}

// Input of rank r at index i: a small integer, so float sums are exact.
inline float inputValue(int r, size_t i) { return float((r + 1) * int(1 + i % 7)); }

class Runner {
 public:
  Runner(std::shared_ptr<gloo::Context> ctx, const std::string& algo) : ctx_(std::move(ctx)), algo_(algo) {}

  // Prepares for `count` floats; the chunked algorithm binds its buffers at construction.
  void prepare(float* in, float* out, size_t count) {
    in_ = in;
    out_ = out;
    count_ = count;
    chunked_.reset();
    if (algo_ == "chunked") {
      std::vector<float*> ptrs{out_};
      chunked_ = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx_, ptrs, int(count_));
    }
  }

  // One allreduce. ring: out = sum(in). chunked: out = sum(out) in place.
  void run() {
    if (chunked_) {
      chunked_->run();
      return;
    }
    gloo::AllreduceOptions opts(ctx_);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setInput(in_, count_);
    opts.setOutput(out_, count_);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(nextTag_++);
    gloo::allreduce(opts);
  }

  // Fills the buffers so that the next run() produces the verifiable result.
  void fillInputs(int rank) {
    float* dst = chunked_ ? out_ : in_;
    for (size_t i = 0; i < count_; ++i) dst[i] = inputValue(rank, i);
    if (!chunked_) std::memset(out_, 0, count_ * sizeof(float));
  }

  const float* result() const { return out_; }

  void barrier() {
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(nextTag_++);
    gloo::barrier(opts);
  }

  double sumOverRanks(double v) {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(&v, 1);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
    opts.setTag(nextTag_++);
    gloo::allreduce(opts);
    return v;
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  std::string algo_;
  std::unique_ptr<gloo::AllreduceRingChunked<float>> chunked_;
  float* in_ = nullptr;
  float* out_ = nullptr;
  size_t count_ = 0;
  uint32_t nextTag_ = 1;
};

std::string fmtNum(double v, int width) {
  // nccl-tests' fallback: %.2f, then %.1f, then %.0f, then %.1e, whatever fits the width.
  char buf[64];
  const char* fmts[] = {"%.2f", "%.1f", "%.0f"};
  for (const char* f : fmts) {
    std::snprintf(buf, sizeof buf, f, v);
    if (int(std::strlen(buf)) <= width) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = a.host;
    auto dev = gloo::transport::tcp::CreateDevice(attr);

    gloo::rendezvous::FileStore fileStore(a.store);
    gloo::rendezvous::PrefixStore store("gloo_allreduce", fileStore);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(a.rank, a.size);
    ctx->setTimeout(std::chrono::seconds(a.timeoutSec));
    ctx->connectFullMesh(store, dev);

    Runner runner(ctx, a.algo);
    const int n = a.size;
    const double busFactor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    int failures = 0;

    if (a.rank == 0) {
      std::printf(
          "# gloo_allreduce: gloo %d.%d.%d, algo %s (%s), nranks %d, transport tcp %s, "
          "warmup %d, iters %d\n",
          GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, a.algo.c_str(),
          a.algo == "ring" ? "gloo::allreduce RING, out-of-place" : "AllreduceRingChunked, in-place", n, a.host.c_str(),
          a.warmup, a.iters);
      std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root", "time",
                  "algbw", "busbw", "#wrong");
      std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
                  "(GB/s)", "(GB/s)", "");
      std::fflush(stdout);
    }

    for (size_t bytes : a.sizes) {
      const size_t count = bytes / sizeof(float);
      if (count == 0) continue;
      const size_t realBytes = count * sizeof(float);
      std::vector<float> in(count), out(count);
      runner.prepare(in.data(), out.data(), count);

      // Verified call.
      runner.fillInputs(a.rank);
      runner.run();
      long wrong = 0;
      const float* res = runner.result();
      for (size_t i = 0; i < count; ++i) {
        float expect = 0;
        for (int r = 0; r < n; ++r) expect += inputValue(r, i);
        if (res[i] != expect) ++wrong;
      }
      long wrongAll = long(runner.sumOverRanks(double(wrong)));
      if (wrongAll) ++failures;

      for (int i = 0; i < a.warmup; ++i) runner.run();
      runner.barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < a.iters; ++i) runner.run();
      auto t1 = std::chrono::steady_clock::now();
      double sec = std::chrono::duration<double>(t1 - t0).count() / a.iters;
      sec = runner.sumOverRanks(sec) / n;

      const double algbw = double(realBytes) / 1e9 / sec;
      const double busbw = algbw * busFactor;
      if (a.rank == 0) {
        std::printf("%12zu  %12zu  %8s  %6s  %6s  %7s  %6s  %6s  %6ld\n", realBytes, count, "float", "sum", "-1",
                    fmtNum(sec * 1e6, 7).c_str(), fmtNum(algbw, 6).c_str(), fmtNum(busbw, 6).c_str(), wrongAll);
        std::fflush(stdout);
      }
    }

    runner.barrier();
    if (a.rank == 0) {
      std::printf("# Out of bounds values : %d %s\n", failures, failures ? "FAILED" : "OK");
      std::fflush(stdout);
    }
    if (failures) {
      std::fprintf(stderr, "gloo_allreduce rank %d: wrong allreduce result\n", a.rank);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce rank %d: %s\n", a.rank, e.what());
    return 1;
  }
  return 0;
}
