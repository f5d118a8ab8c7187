#include "comm/link_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "comm/engine.h"
#include "comm/synth_efficiency.h"
#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"
#include "kernels/reduce.h"

namespace hetcomm::comm {

HC_PARAM_INT(probeMode, "PROBE", 1)
HC_PARAM_STR(probeCacheDir, "PROBE_CACHE", "")

namespace {

// Tags of the probe's messages. Nothing else is in flight on the connections while init runs, and the
// collectives' tags carry an operation sequence number >= 1 in their upper half, so these never meet them.
constexpr uint64_t kPingTag = 0xfffffff0ull << 32, kPongTag = 0xfffffff1ull << 32;
constexpr uint64_t kStreamTag = 0xfffffff2ull << 32, kAckTag = 0xfffffff3ull << 32;  // | stream << 16 | message
constexpr int kWarmPings = 3, kPings = 20;
// Messages per bandwidth stream (see bandwidth()). The long stream runs about 40 ms: with 10 messages (10 ms) an
// emulated 480 Mbit/s link measured 0.052 GB/s, 0.87 of its rate, while a collective's long streams on it carry
// 0.057; with 20, 0.055; with 40, 0.056 (three probes each, mixed-2x2 at 0.3 of its rates, on the Xeon).
constexpr int kShortStream = 2, kLongStream = 40;
constexpr int kExchangeWindow = 1;  // messages in flight each way in a two-way stream
constexpr size_t kMinMsgBytes = 64 << 10, kMaxMsgBytes = 1 << 20;
// 2: same-host streams out of cache; 3: both ways; 4: long streams of 40 messages; 5: loopback tcp without the
// system's pacing (reno: tcp_transport.h), faster and steadier than what version 4 measured under BBR
constexpr const char* kCacheMagic = "hetcomm-probe 5";
constexpr const char* kMemCacheMagic = "hetcomm-memory 2";  // 2: rates by buffer size
// Payload per byte on the wire over TCP with a 1500-byte MTU: 1448 of 1538 (TCP/IP and Ethernet headers,
// preamble and gap).
constexpr double kTcpPayloadShare = 0.94;
// A repeat that differs by more than this is not trusted enough to cache.
constexpr double kBwRepeatTolerance = 0.25, kAlphaRepeatRatio = 2.0, kMemRepeatTolerance = 0.2;

// About a millisecond of the class's nominal bandwidth per message, so a long stream takes ~40 ms whatever the link.
size_t streamMessageBytes(const topo::Link& nominal) {
  const double perMs = nominal.bwGBps * 1e6;
  return std::clamp(static_cast<size_t>(perMs), kMinMsgBytes, kMaxMsgBytes);
}

// Drives the transports until done() holds: progress, polling for HETCOMM_SPIN_US as a waiting collective does
// (Engine::waitUntil), then sleeping on their fds when nothing moved. Where cores are shared (ProbeContext), it
// sleeps at once, as a collective's rank there must let its peer run. Sleeping where each rank has a core of its
// own added a wake-up to every message of the ping-pong: 2 ranks on one host measured shared memory's latency at
// 5.4 us where an 8-byte allreduce takes 0.8, and the model chose recursive doubling over the ring up to 512 KiB,
// where the ring was 1.2-1.4x faster (2026-11-29, AMD EPYC VM).
Status drive(const ProbeContext& ctx, const std::function<bool()>& done, const char* what) {
  std::vector<pollfd> fds;
  for (auto* t : ctx.transports)
    if (t->waitFd() >= 0) fds.push_back(pollfd{t->waitFd(), POLLIN, 0});
  const double spinSec = ctx.coresShared ? 0 : static_cast<double>(std::max<int64_t>(0, spinUsParam())) * 1e-6;
  double idleSince = nowSec();
  for (unsigned idle = 0;; ++idle) {
    for (auto* t : ctx.transports) HC_TRY(t->progress());
    if (done()) return okStatus();
    if (ctx.deadline.expired())
      return timeoutError("link probe: rank %d timed out waiting for %s (HETCOMM_TIMEOUT)", ctx.rank, what);
    if (nowSec() - idleSince < spinSec) {
      // Yield now and then: the peer may share this core.
      if (idle % 64 == 63) sched_yield();
      continue;
    }
    bool sleep = true;
    for (auto* t : ctx.transports) sleep = t->armForSleep() && sleep;
    if (!sleep || fds.empty()) continue;
    const int ms = ctx.deadline.isNever() ? 50 : std::min(50, ctx.deadline.msLeft());
    ::poll(fds.data(), fds.size(), ms);
    idleSince = nowSec();
  }
}

// Waits for requests; the first failure is the result.
Status waitAll(const ProbeContext& ctx, std::vector<transport::Request*> reqs, const char* what) {
  HC_TRY(drive(
      ctx,
      [&] {
        for (auto* r : reqs)
          if (!r->finished()) return false;
        return true;
      },
      what));
  for (auto* r : reqs)
    if (r->failed()) return r->error;
  return okStatus();
}

// A measurement and whether it agreed with its own repeat.
struct Figure {
  double value = 0;
  bool agreed = true;
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Ping-pong of 8-byte messages; the median one-way time in microseconds, agreed when the medians of the two halves
// are within kAlphaRepeatRatio of each other.
Result<Figure> pingPong(const ProbeContext& ctx, transport::Connection* c, bool initiator) {
  std::byte out[8]{}, in[8]{};
  std::vector<double> rtts;
  for (int k = 0; k < kWarmPings + kPings; ++k) {
    transport::Request s, r;
    if (initiator) {
      const double t0 = nowSec();
      HC_TRY(c->irecv(r, in, kPongTag | k));
      HC_TRY(c->isend(s, out, kPingTag | k));
      HC_TRY(waitAll(ctx, {&s, &r}, "a ping's answer"));
      if (k >= kWarmPings) rtts.push_back(nowSec() - t0);
    } else {
      HC_TRY(c->irecv(r, in, kPingTag | k));
      HC_TRY(waitAll(ctx, {&r}, "a ping"));
      HC_TRY(c->isend(s, out, kPongTag | k));
      HC_TRY(waitAll(ctx, {&s}, "a pong to be sent"));
    }
  }
  if (!initiator) return Figure{};
  const size_t half = rtts.size() / 2;
  const double a = median({rtts.begin(), rtts.begin() + half}), b = median({rtts.begin() + half, rtts.end()});
  return Figure{median(rtts) / 2 * 1e6, std::max(a, b) <= kAlphaRepeatRatio * std::min(a, b)};
}

// Where a stream's messages come from and land. Between ranks of one host the link is memory itself: messages
// then walk through a region larger than the caches, as a large collective's do, instead of reusing one buffer that
// stays in cache and flatters the link several times over.
struct StreamBuffer {
  StreamBuffer(size_t msgBytes, bool outOfCache)
      : region(outOfCache ? std::max(kOutOfCacheBytes, msgBytes) : msgBytes), msg(msgBytes) {}
  std::span<std::byte> take() {
    if (next + msg > region.size()) next = 0;
    std::span<std::byte> out(region.data() + next, msg);
    next += msg;
    return out;
  }
  static constexpr size_t kOutOfCacheBytes = 16 << 20;
  // Messages to send before timing: enough to walk the whole region once (memory touched for the first time by a
  // peer's copy is several times slower than memory in use, as a collective's buffers are when it repeats).
  int warmMessages(int atLeast) const { return std::max<int>(atLeast, static_cast<int>(region.size() / msg)); }
  std::vector<std::byte> region;
  size_t msg, next = 0;
};

// One stream: the initiator sends `count` messages and waits for the receiver's one-byte ack after the last;
// returns the initiator's elapsed seconds (0 on the receiver). Both ways (bothWays): the two exchange `count`
// messages kExchangeWindow at a time each way, and the receiver acks after the last. One at a time: with two or more
// in flight each way, loopback TCP stalls for tens of milliseconds now and then (0.3 instead of 2 GB/s here; see
// perf/README.md). tagBase keeps streams apart.
Result<double> stream(const ProbeContext& ctx, transport::Connection* c, bool initiator, StreamBuffer& buf,
                      int count, uint64_t tagBase, bool bothWays) {
  std::byte ack[1]{};
  std::vector<transport::Request> in(count), out(count);
  transport::Request ackReq;
  std::vector<transport::Request*> mine;  // the requests this rank waits for before the ack
  // One way: every message posted at once. The bytes are not looked at, only their arrival.
  auto oneWay = [&](bool sending) {
    std::vector<transport::Request>& reqs = sending ? out : in;
    for (int k = 0; k < count; ++k) {
      const uint64_t tag = kStreamTag | tagBase | k;
      HC_TRY(sending ? c->isend(reqs[k], buf.take(), tag) : c->irecv(reqs[k], buf.take(), tag));
      mine.push_back(&reqs[k]);
    }
    return okStatus();
  };
  auto exchange = [&] {
    for (int k = 0; k < count; k += kExchangeWindow) {
      std::vector<transport::Request*> step;
      for (int j = k; j < std::min(count, k + kExchangeWindow); ++j) {
        HC_TRY(c->irecv(in[j], buf.take(), kStreamTag | tagBase | j));
        HC_TRY(c->isend(out[j], buf.take(), kStreamTag | tagBase | j));
        step.insert(step.end(), {&in[j], &out[j]});
      }
      HC_TRY(waitAll(ctx, step, "a probe exchange"));
    }
    return okStatus();
  };
  if (initiator) {
    const double t0 = nowSec();
    HC_TRY(c->irecv(ackReq, ack, kAckTag | tagBase));
    mine.push_back(&ackReq);
    HC_TRY(bothWays ? exchange() : oneWay(true));
    HC_TRY(waitAll(ctx, mine, "a probe stream to be received"));
    return nowSec() - t0;
  }
  HC_TRY(bothWays ? exchange() : oneWay(false));
  HC_TRY(waitAll(ctx, mine, "a probe stream"));
  HC_TRY(c->isend(ackReq, ack, kAckTag | tagBase));
  HC_TRY(waitAll(ctx, {&ackReq}, "a probe stream's ack to be sent"));
  return 0.0;
}

// Bandwidth from the difference of a short and a long stream, so latency, the ack and per-stream costs cancel.
// Between ranks of one host the messages walk through memory out of cache (StreamBuffer).
// A first stream fills the pipe and empties a shaper's burst bucket (an emulated NIC's tbf), which would otherwise
// flatter the link, and walks the region once (StreamBuffer); the timed streams then start from the same state.
// Short and long streams run twice each, alternating; the quicker of each pair counts, and the figure is agreed
// when the two long ones are within kBwRepeatTolerance. GB/s on the initiator, 0 on the receiver and when the
// difference is too small to time.
Result<Figure> bandwidth(const ProbeContext& ctx, transport::Connection* c, bool initiator, size_t msgBytes,
                         bool sameHost) {
  StreamBuffer buf(msgBytes, sameHost);
  // Between ranks of one host both directions share the host's cores (a transport's copies run on them), and a
  // collective's ranks send and receive at once: the streams go both ways, and the figure is per direction.
  const bool both = sameHost;
  HC_ASSIGN_OR_RETURN(double warm, stream(ctx, c, initiator, buf, buf.warmMessages(kShortStream), 0ull << 16, both));
  (void)warm;  // fills the pipe only
  HC_ASSIGN_OR_RETURN(double shortA, stream(ctx, c, initiator, buf, kShortStream, 1ull << 16, both));
  HC_ASSIGN_OR_RETURN(double longA, stream(ctx, c, initiator, buf, kLongStream, 2ull << 16, both));
  HC_ASSIGN_OR_RETURN(double shortB, stream(ctx, c, initiator, buf, kShortStream, 3ull << 16, both));
  HC_ASSIGN_OR_RETURN(double longB, stream(ctx, c, initiator, buf, kLongStream, 4ull << 16, both));
  // The quicker of each pair: a hiccup only ever adds time.
  const double shortS = std::min(shortA, shortB), longS = std::min(longA, longB);
  if (!initiator) return Figure{};
  if (longS - shortS < 20e-6) return Figure{0, false};
  const double bytes = static_cast<double>(kLongStream - kShortStream) * static_cast<double>(msgBytes);
  // (A figure that could not be timed, above, is 0 and not agreed: it never reaches the cache.)
  return Figure{bytes / (longS - shortS) / 1e9, std::max(longA, longB) <= std::min(longA, longB) / (1 - kBwRepeatTolerance)};
}

std::string defaultCacheDir() {
  if (auto xdg = param::env("XDG_CACHE_HOME")) return *xdg + "/hetcomm";
  if (auto home = param::env("HOME")) return *home + "/.cache/hetcomm";
  return "";
}

// rank 0's cache verdict, as every rank learns it: "" (miss) or the cached values, one "alpha bw" line per class.
std::vector<std::byte> encodeValues(const std::vector<LinkClassProbe>& classes) {
  std::string text;
  for (const auto& c : classes) text += format("%.17g %.17g\n", c.alphaUs, c.bwGBps);
  return textBytes(text);
}

Status decodeValues(const std::vector<std::byte>& raw, std::vector<LinkClassProbe>& classes) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(raw.data()), raw.size()));
  for (auto& c : classes)
    if (!(in >> c.alphaUs >> c.bwGBps)) return remoteError("link probe: rank 0 sent malformed cached values");
  return okStatus();
}

// Pair (i, j)'s class, without its representative pair: the same rule in linkClasses and applyProbe.
LinkClassProbe classOf(const topo::ClusterView& view, const topo::LinkMatrix& links,
                       const std::function<transport::Kind(int, int)>& kindOf, int i, int j) {
  const topo::Link& l = links.at(i, j);
  LinkClassProbe c;
  c.cls = l.cls;
  c.fabric = l.fabric;
  c.kind = kindOf(i, j);
  c.rateMbps = l.fabric >= 0 ? view.pairRateMbps(l.fabric, view.hostOf(i), view.hostOf(j)) : 0;
  c.key = format("%s|%s|%lluMb|%s", topo::linkClassLabel(c.cls),
                 l.fabric >= 0 ? view.fabrics()[l.fabric].name.c_str() : "-",
                 static_cast<unsigned long long>(c.rateMbps), transport::kindName(c.kind));
  return c;
}

// Seconds of CPU this thread has had.
double threadCpuSec() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

bool ensureDir(const std::string& dir, Status* st) {
  for (size_t at = 1; at <= dir.size(); ++at)
    if (at == dir.size() || dir[at] == '/') {
      const std::string part = dir.substr(0, at);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
        *st = errnoStatus(errno, "link probe: cannot create the cache directory %s", part.c_str());
        return false;
      }
    }
  return true;
}

// Writes text to path atomically (a temporary file, then rename).
Status writeAtomically(const std::string& path, const std::string& text) {
  Status st;
  if (!ensureDir(path.substr(0, path.rfind('/')), &st)) return st;
  const std::string tmp = format("%s.tmp.%d", path.c_str(), static_cast<int>(getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errnoStatus(errno, "link probe: cannot write the cache file %s", tmp.c_str());
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return errnoStatus(ok ? errno : err, "link probe: cannot write the cache file %s", path.c_str());
  }
  return okStatus();
}

std::string cacheDir() {
  std::string dir = probeCacheDir().empty() ? defaultCacheDir() : probeCacheDir();
  return dir == "off" ? "" : dir;
}

}  // namespace

bool probeEnabled() { return probeMode() != 0; }

ForeignLoad::ForeignLoad(std::vector<int> ourPids) : pids_(std::move(ourPids)), start_(sample()) {}

ForeignLoad::Sample ForeignLoad::sample() const {
  static const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  Sample s;
  s.wall = nowSec();
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu")
    s.busy = (user + nice + system + irq + softirq + steal) / tick;
  for (int pid : pids_) {
    std::ifstream ps(format("/proc/%d/stat", pid));
    std::string line;
    if (!std::getline(ps, line)) continue;
    // Fields after the command (in parentheses, which may hold spaces): state is field 3, utime 14, stime 15.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int f = 3; f <= 15 && rest >> field; ++f) {
      if (f == 14) utime = std::strtod(field.c_str(), nullptr);
      if (f == 15) stime = std::strtod(field.c_str(), nullptr);
    }
    s.ours += (utime + stime) / tick;
  }
  return s;
}

double ForeignLoad::cpus() const {
  const Sample now = sample();
  const double wall = now.wall - start_.wall;
  if (wall <= 0) return 0;
  return std::max(0.0, (now.busy - start_.busy) - (now.ours - start_.ours)) / wall;
}

bool ForeignLoad::busy(std::string* why) const {
  const double c = cpus();
  if (c < 0.5) return false;
  if (why) *why = format("other processes used %.1f CPUs meanwhile", c);
  return true;
}

Status dropProbeCache(const std::string& path) {
  std::vector<std::string> files = synthEfficiencyFiles(path);
  files.push_back(path);
  for (const std::string& file : files)
    if (::unlink(file.c_str()) != 0 && errno != ENOENT)
      return errnoStatus(errno, "link probe: cannot remove the cache file %s", file.c_str());
  return okStatus();
}

Status writeCacheFile(const std::string& path, const std::string& text) { return writeAtomically(path, text); }

namespace {

// The smallest buffers the memory probe times (three of them fit a core's L2 on any current x86 or Arm server),
// the factor between sizes, and the bytes each timed repeat moves at least (many calls on small buffers, so that
// the clock's resolution and the call overhead do not count).
constexpr size_t kMemSmallestBytes = 64 << 10, kMemSizeStep = 8, kMemRepeatBytes = 8 << 20;

}  // namespace

MemoryRates measureMemoryRates(const std::vector<int>& ourPids, size_t largestBytes) {
  MemoryRates out;
  const ForeignLoad load(ourPids);
  largestBytes = std::max(largestBytes, kMemSmallestBytes);
  const size_t count = largestBytes / 4;
  auto a = std::make_unique<float[]>(count), b = std::make_unique<float[]>(count), c = std::make_unique<float[]>(count);
  for (size_t i = 0; i < count; ++i) a[i] = b[i] = c[i] = 1.0f;  // touch every page before timing
  constexpr int kReps = 3;
  const double wall0 = nowSec(), cpu0 = threadCpuSec();
  bool agreed = true;
  for (size_t bytes = kMemSmallestBytes;; bytes = std::min(bytes * kMemSizeStep, largestBytes)) {
    const size_t calls = std::max<size_t>(1, kMemRepeatBytes / bytes), n = bytes / 4;
    // One untimed call first: small buffers are then in cache, as in a call that reuses its buffers.
    std::memcpy(a.get(), b.get(), bytes);
    kernels::reduce(a.get(), b.get(), c.get(), n, kernels::DataType::kFloat32, kernels::RedOp::kSum);
    std::vector<double> copyS, reduceS;
    for (int r = 0; r < kReps; ++r) {
      double t0 = nowSec();
      for (size_t k = 0; k < calls; ++k) std::memcpy(a.get(), b.get(), bytes);
      copyS.push_back((nowSec() - t0) / static_cast<double>(calls));
      t0 = nowSec();
      for (size_t k = 0; k < calls; ++k)
        kernels::reduce(a.get(), b.get(), c.get(), n, kernels::DataType::kFloat32, kernels::RedOp::kSum);
      reduceS.push_back((nowSec() - t0) / static_cast<double>(calls));
    }
    std::sort(copyS.begin(), copyS.end());
    std::sort(reduceS.begin(), reduceS.end());
    const double size = static_cast<double>(bytes);
    out.bySize.push_back({size, size / copyS[0] / 1e9, size / reduceS[0] / 1e9});
    agreed = agreed && copyS[1] <= copyS[0] / (1 - kMemRepeatTolerance) &&
             reduceS[1] <= reduceS[0] / (1 - kMemRepeatTolerance);
    if (bytes == largestBytes) break;
  }
  const double wall = nowSec() - wall0, cpu = threadCpuSec() - cpu0;
  out.trusted = true;
  if (cpu < 0.9 * wall) {
    out.trusted = false;
    out.why = format("the thread ran %.0f %% of the time", 100 * cpu / wall);
  } else if (!agreed) {
    out.trusted = false;
    out.why = "repeats disagreed";
  } else if (std::string busy; load.busy(&busy)) {
    out.trusted = false;
    out.why = busy;
  }
  return out;
}

std::string formatMemoryRates(const std::vector<topo::MemoryRate>& bySize) {
  std::string text;
  for (const topo::MemoryRate& m : bySize)
    text += format("%s%.17g %.17g %.17g", text.empty() ? "" : " ", m.bytes, m.copyGBps, m.reduceGBps);
  return text;
}

bool parseMemoryRates(const std::string& text, std::vector<topo::MemoryRate>* bySize) {
  std::istringstream in(text);
  std::vector<topo::MemoryRate> out;
  topo::MemoryRate m;
  while (in >> m.bytes >> m.copyGBps >> m.reduceGBps) {
    const bool ok = std::isfinite(m.bytes) && std::isfinite(m.copyGBps) && std::isfinite(m.reduceGBps) &&
                    m.copyGBps > 0 && m.reduceGBps > 0 && (out.empty() ? m.bytes > 0 : m.bytes > out.back().bytes);
    if (!ok) return false;
    out.push_back(m);
  }
  if (out.empty() || !(in >> std::ws).eof()) return false;
  *bySize = std::move(out);
  return true;
}

Result<std::vector<MemoryRates>> probeMemoryRates(const ProbeContext& ctx, const topo::ClusterView& view) {
  const int host = view.hostOf(ctx.rank);
  std::string mine;
  if (view.localRank(ctx.rank) == 0) {
    const std::string path = probeMode() == 1 || probeMode() == 2 ? memoryCacheFile(view.hosts()[host].id) : "";
    MemoryRates r;
    std::ifstream in(path);
    std::string magic, line;
    if (probeMode() == 1 && !path.empty() && std::getline(in, magic) && magic == kMemCacheMagic &&
        std::getline(in, line) && parseMemoryRates(line, &r.bySize)) {
      HC_TRACE(Init, "memory rates of %s from cache %s", view.hosts()[host].name.c_str(), path.c_str());
    } else {
      r = measureMemoryRates(ctx.localPids);
      HC_INFO(Init, "memory rates of host %s: memcpy %.2f GB/s, reduce %.2f GB/s out of cache, %.2f and %.2f in it%s",
              view.hosts()[host].name.c_str(), r.bySize.back().copyGBps, r.bySize.back().reduceGBps,
              r.bySize.front().copyGBps, r.bySize.front().reduceGBps,
              r.trusted ? "" : (" (not cached: " + r.why + ")").c_str());
      if (r.trusted && !path.empty()) {
        Status st = writeAtomically(path, format("%s\n%s\n", kMemCacheMagic, formatMemoryRates(r.bySize).c_str()));
        if (!st.ok()) HC_INFO(Init, "%s", std::string(st.message()).c_str());
      }
    }
    mine = formatMemoryRates(r.bySize);
  }
  HC_ASSIGN_OR_RETURN(auto all, ctx.store->allGather(ctx.keyPrefix + "/memory-rates", ctx.rank, ctx.nranks,
                                                     textBytes(mine),
                                                     ctx.deadline));
  std::vector<MemoryRates> rates(view.nhosts());
  for (int h = 0; h < view.nhosts(); ++h) {
    const int first = view.hosts()[h].ranks.front();
    MemoryRates& r = rates[h];
    if (!parseMemoryRates(bytesText(all[first]), &r.bySize))
      return remoteError("memory probe: rank %d sent malformed rates for host %s", first, view.hosts()[h].name.c_str());
    r.trusted = true;
  }
  return rates;
}

std::vector<LinkClassProbe> linkClasses(const topo::ClusterView& view, const topo::LinkMatrix& links,
                                        const std::function<transport::Kind(int, int)>& kindOf) {
  std::vector<LinkClassProbe> out;
  std::map<std::string, size_t> seen;
  const int n = links.size();
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      LinkClassProbe c = classOf(view, links, kindOf, i, j);
      if (seen.count(c.key)) continue;
      c.a = i;
      c.b = j;
      c.streamMsgBytes = streamMessageBytes(links.at(i, j));
      seen[c.key] = out.size();
      out.push_back(std::move(c));
    }
  return out;
}

// g++ 12 knows the sanitizers by __SANITIZE_*__ alone; clang by __has_feature.
#if defined(__has_feature)
#define HC_HAS_FEATURE(x) __has_feature(x)
#else
#define HC_HAS_FEATURE(x) 0
#endif

std::string buildFlavour() {
  std::vector<std::string> parts;
#if defined(__SANITIZE_ADDRESS__) || HC_HAS_FEATURE(address_sanitizer)
  parts.push_back("address sanitizer");
#endif
#if defined(__SANITIZE_THREAD__) || HC_HAS_FEATURE(thread_sanitizer)
  parts.push_back("thread sanitizer");
#endif
#if HC_HAS_FEATURE(memory_sanitizer)
  parts.push_back("memory sanitizer");
#endif
#if !defined(__OPTIMIZE__)
  parts.push_back("unoptimised");
#endif
  return join(parts, ", ");
}

namespace {
// DIR/KIND-HASH.txt, the hash of what the file describes and of the build's flavour. An optimised, uninstrumented
// build's names are those of the caches written before the flavour counted.
std::string cacheFileOf(const std::string& dir, const char* kind, std::string identity, const std::string& flavour) {
  if (!flavour.empty()) identity += "\nbuild: " + flavour;
  return format("%s/%s-%016llx.txt", dir.c_str(), kind, static_cast<unsigned long long>(fnv1a(identity)));
}
}  // namespace

std::string probeCacheFile(const topo::ClusterView& view, const std::vector<LinkClassProbe>& classes,
                           bool coresShared, const std::string& flavour) {
  const std::string dir = cacheDir();
  if (dir.empty()) return "";
  std::vector<std::string> hosts;
  for (const auto& h : view.hosts()) hosts.push_back(h.id);
  std::sort(hosts.begin(), hosts.end());
  std::string identity;
  for (const auto& h : hosts) identity += h + "\n";
  for (const auto& c : classes) identity += c.key + "\n";
  if (coresShared) identity += "cores shared\n";
  return cacheFileOf(dir, "probe", identity, flavour);
}

std::string memoryCacheFile(const std::string& hostId, const std::string& flavour) {
  const std::string dir = cacheDir();
  return dir.empty() ? "" : cacheFileOf(dir, "memory", hostId, flavour);
}

bool readProbeCache(const std::string& path, std::vector<LinkClassProbe>& classes) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line != kCacheMagic) return false;
  std::map<std::string, std::pair<double, double>> values;
  while (std::getline(in, line)) {
    auto tab = split(line, '\t');
    if (tab.size() != 3) return false;
    char* end = nullptr;
    const double alpha = std::strtod(tab[1].c_str(), &end);
    if (*end) return false;
    const double bw = std::strtod(tab[2].c_str(), &end);
    if (*end || !std::isfinite(alpha) || !std::isfinite(bw) || alpha < 0 || bw < 0) return false;
    values[tab[0]] = {alpha, bw};
  }
  if (values.size() != classes.size()) return false;
  for (const auto& c : classes)
    if (!values.count(c.key)) return false;
  for (auto& c : classes) std::tie(c.alphaUs, c.bwGBps) = values[c.key];
  return true;
}

Status writeProbeCache(const std::string& path, const std::vector<LinkClassProbe>& classes) {
  std::string text = std::string(kCacheMagic) + "\n";
  for (const auto& c : classes) text += format("%s\t%.17g\t%.17g\n", c.key.c_str(), c.alphaUs, c.bwGBps);
  return writeAtomically(path, text);
}

Status probeLinkClasses(const ProbeContext& ctx, const topo::ClusterView& view, std::vector<LinkClassProbe>& classes,
                        std::string* source, std::string* cacheFile) {
  if (cacheFile) cacheFile->clear();
  const double start = nowSec();
  // HETCOMM_PROBE=1 reads the cache and writes it on a miss; 2 measures again and rewrites it.
  const std::string cache = probeMode() == 1 || probeMode() == 2 ? probeCacheFile(view, classes, ctx.coresShared) : "";
  // Rank 0 decides hit or miss for everyone, so all ranks take the same path even if their files differ.
  std::vector<std::byte> verdict;
  if (ctx.rank == 0 && probeMode() == 1 && !cache.empty() && readProbeCache(cache, classes))
    verdict = encodeValues(classes);
  HC_ASSIGN_OR_RETURN(auto all, ctx.store->allGather(ctx.keyPrefix + "/probe-cache", ctx.rank, ctx.nranks, verdict,
                                                     ctx.deadline));
  if (!all[0].empty()) {
    HC_TRY(decodeValues(all[0], classes));
    *source = "cache " + cache;
    if (cacheFile) *cacheFile = cache;
    return okStatus();
  }

  // One class at a time, everyone waiting at a barrier between them.
  std::vector<std::string> mine;  // "index alpha bw trusted" from each class's initiator
  std::string distrust;           // why some figure of this rank's must not be cached
  const ForeignLoad load(ctx.localPids);
  for (size_t i = 0; i < classes.size(); ++i) {
    LinkClassProbe& c = classes[i];
    HC_TRY(ctx.store->barrier(ctx.keyPrefix + format("/probe%zu", i), ctx.nranks, ctx.deadline));
    if (ctx.rank != c.a && ctx.rank != c.b) continue;
    const bool initiator = ctx.rank == c.a;
    transport::Connection* conn = ctx.conns[initiator ? c.b : c.a];
    if (!conn) return internalError("link probe: rank %d has no connection to rank %d", ctx.rank, initiator ? c.b : c.a);
    HC_ASSIGN_OR_RETURN(Figure alpha, pingPong(ctx, conn, initiator));
    HC_ASSIGN_OR_RETURN(Figure bw,
                        bandwidth(ctx, conn, initiator, c.streamMsgBytes, c.cls == topo::LinkClass::kSameHost));
    if (!initiator) continue;
    if ((!alpha.agreed || !bw.agreed) && distrust.empty())
      distrust = format("%s: the %s disagreed with its repeat", c.key.c_str(), bw.agreed ? "latency" : "bandwidth");
    mine.push_back(format("%zu %.17g %.17g", i, alpha.value, bw.value));
  }
  if (std::string busy; distrust.empty() && load.busy(&busy)) distrust = "while rank " + std::to_string(ctx.rank) + " measured, " + busy;
  std::string text = distrust.empty() ? "-\n" : distrust + "\n";
  for (const auto& m : mine) text += m + "\n";
  HC_ASSIGN_OR_RETURN(all, ctx.store->allGather(ctx.keyPrefix + "/probe-results", ctx.rank, ctx.nranks,
                                                textBytes(text),
                                                ctx.deadline));
  for (auto& c : classes) c.alphaUs = c.bwGBps = 0;
  std::string notCached;
  for (int r = 0; r < ctx.nranks; ++r) {
    std::istringstream in(bytesText(all[r]));
    std::string why;
    std::getline(in, why);
    if (why != "-" && notCached.empty()) notCached = why;
    size_t idx;
    double alpha, bw;
    while (in >> idx >> alpha >> bw) {
      if (idx >= classes.size() || !std::isfinite(alpha) || !std::isfinite(bw) || alpha < 0 || bw < 0)
        return remoteError("link probe: rank %d sent a malformed result", r);
      classes[idx].alphaUs = alpha;
      classes[idx].bwGBps = bw;
    }
  }
  *source = format("measured in %.0f ms", (nowSec() - start) * 1e3);
  if (!notCached.empty()) {
    *source += ", not cached: " + notCached;
    return okStatus();
  }
  if (cache.empty()) return okStatus();
  // Every rank learns whether rank 0 could write the cache, so that all name it (or none).
  std::vector<std::byte> wrote;
  if (ctx.rank == 0) {
    Status st = dropProbeCache(cache);  // with what was learned against the figures it held
    if (st.ok()) st = writeProbeCache(cache, classes);
    if (st.ok())
      wrote.push_back(std::byte{1});
    else
      HC_INFO(Init, "%s: later inits will probe again", std::string(st.message()).c_str());
  }
  HC_ASSIGN_OR_RETURN(all, ctx.store->allGather(ctx.keyPrefix + "/probe-written", ctx.rank, ctx.nranks, wrote,
                                                ctx.deadline));
  if (!all[0].empty() && cacheFile) *cacheFile = cache;
  return okStatus();
}

Status applyProbe(const std::vector<LinkClassProbe>& classes, const topo::ClusterView& view,
                  const std::function<transport::Kind(int, int)>& kindOf, topo::LinkMatrix& links) {
  std::map<std::string, const LinkClassProbe*> byKey;
  for (const auto& c : classes) byKey[c.key] = &c;
  const int n = links.size();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const topo::Link& l = links.at(i, j);
      auto it = byKey.find(classOf(view, links, kindOf, i, j).key);
      if (it == byKey.end()) continue;
      const LinkClassProbe& c = *it->second;
      // A figure the probe could not take (0) keeps the nominal one. Across hosts a known line rate caps the
      // bandwidth, less TCP/IP's headers over TCP: no NIC carries payload faster, and a figure above it is
      // buffers answering early (on tc tbf links the probe read 1.06x the rate where a 64 MiB stream ran at
      // 0.94x), which would predict a collective faster than its bound.
      const double alpha = c.alphaUs > 0 ? c.alphaUs : l.alphaUs;
      double bw = c.bwGBps > 0 ? c.bwGBps : l.bwGBps;
      if (l.fabric >= 0 && !l.rateAssumed && l.bwGBps > 0)
        bw = std::min(bw, l.bwGBps * (kindOf(i, j) == transport::Kind::kTcp ? kTcpPayloadShare : 1.0));
      HC_TRY(links.setMeasured(i, j, alpha, bw));
    }
  return okStatus();
}

}  // namespace hetcomm::comm
