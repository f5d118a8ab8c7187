#include "comm/link_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/log.h"
#include "common/param.h"
#include "common/strings.h"

namespace hetcomm::comm {

HC_PARAM_INT(probeMode, "PROBE", 1)
HC_PARAM_STR(probeCacheDir, "PROBE_CACHE", "")

namespace {

// Tags of the probe's messages. Nothing else is in flight on the connections while init runs, and the
// collectives' tags carry an operation sequence number >= 1 in their upper half, so these never meet them.
constexpr uint64_t kPingTag = 0xfffffff0ull << 32, kPongTag = 0xfffffff1ull << 32;
constexpr uint64_t kStreamTag = 0xfffffff2ull << 32, kAckTag = 0xfffffff3ull << 32;  // | stream << 16 | message
constexpr int kWarmPings = 3, kPings = 20;
constexpr int kShortStream = 2, kLongStream = 10;  // messages per bandwidth stream (see bandwidth())
constexpr size_t kMinMsgBytes = 64 << 10, kMaxMsgBytes = 1 << 20;
constexpr const char* kCacheMagic = "hetcomm-probe 1";

// About a millisecond of the class's nominal bandwidth per message, so a stream takes ~10 ms whatever the link.
size_t streamMessageBytes(const topo::Link& nominal) {
  const double perMs = nominal.bwGBps * 1e6;
  return std::clamp(static_cast<size_t>(perMs), kMinMsgBytes, kMaxMsgBytes);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Drives the transports until done() holds: progress, then sleep on their fds when nothing moved.
Status drive(const ProbeContext& ctx, const std::function<bool()>& done, const char* what) {
  std::vector<pollfd> fds;
  for (auto* t : ctx.transports)
    if (t->waitFd() >= 0) fds.push_back(pollfd{t->waitFd(), POLLIN, 0});
  while (true) {
    for (auto* t : ctx.transports) HC_TRY(t->progress());
    if (done()) return okStatus();
    if (ctx.deadline.expired())
      return timeoutError("link probe: rank %d timed out waiting for %s (HETCOMM_TIMEOUT)", ctx.rank, what);
    bool sleep = true;
    for (auto* t : ctx.transports) sleep = t->armForSleep() && sleep;
    if (!sleep || fds.empty()) continue;
    const int ms = ctx.deadline.isNever() ? 50 : std::min(50, ctx.deadline.msLeft());
    ::poll(fds.data(), fds.size(), ms);
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

// Ping-pong of 8-byte messages; returns the median one-way time in microseconds.
Result<double> pingPong(const ProbeContext& ctx, transport::Connection* c, bool initiator) {
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
  if (!initiator) return 0.0;
  std::nth_element(rtts.begin(), rtts.begin() + rtts.size() / 2, rtts.end());
  return rtts[rtts.size() / 2] / 2 * 1e6;
}

// One stream: the initiator sends `count` messages and waits for the receiver's one-byte ack after the last;
// returns the initiator's elapsed seconds (0 on the receiver). tagBase keeps streams apart.
Result<double> stream(const ProbeContext& ctx, transport::Connection* c, bool initiator, std::vector<std::byte>& buf,
                      int count, uint64_t tagBase) {
  std::byte ack[1]{};
  std::vector<transport::Request> reqs(count);
  transport::Request ackReq;
  std::vector<transport::Request*> all{&ackReq};
  for (auto& r : reqs) all.push_back(&r);
  if (initiator) {
    const double t0 = nowSec();
    HC_TRY(c->irecv(ackReq, ack, kAckTag | tagBase));
    for (int k = 0; k < count; ++k) HC_TRY(c->isend(reqs[k], buf, kStreamTag | tagBase | k));
    HC_TRY(waitAll(ctx, all, "a probe stream to be received"));
    return nowSec() - t0;
  }
  // Every receive lands in the same buffer: the bytes are not looked at, only their arrival.
  for (int k = 0; k < count; ++k) HC_TRY(c->irecv(reqs[k], buf, kStreamTag | tagBase | k));
  all.erase(all.begin());
  HC_TRY(waitAll(ctx, all, "a probe stream"));
  HC_TRY(c->isend(ackReq, ack, kAckTag | tagBase));
  HC_TRY(waitAll(ctx, {&ackReq}, "a probe stream's ack to be sent"));
  return 0.0;
}

// Bandwidth from the difference of a short and a long stream, so latency, the ack and per-stream costs cancel.
// A first short stream fills the pipe and empties a shaper's burst bucket (an emulated NIC's tbf), which would
// otherwise flatter the link; both timed streams then start from the same state. GB/s on the initiator, 0 on
// the receiver and when the difference is too small to time.
Result<double> bandwidth(const ProbeContext& ctx, transport::Connection* c, bool initiator, size_t msgBytes) {
  std::vector<std::byte> buf(msgBytes);
  HC_ASSIGN_OR_RETURN(double warm, stream(ctx, c, initiator, buf, kShortStream, 0ull << 16));
  (void)warm;  // fills the pipe only
  HC_ASSIGN_OR_RETURN(double shortS, stream(ctx, c, initiator, buf, kShortStream, 1ull << 16));
  HC_ASSIGN_OR_RETURN(double longS, stream(ctx, c, initiator, buf, kLongStream, 2ull << 16));
  if (!initiator || longS - shortS < 20e-6) return 0.0;
  return static_cast<double>(kLongStream - kShortStream) * msgBytes / (longS - shortS) / 1e9;
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
  return {reinterpret_cast<const std::byte*>(text.data()), reinterpret_cast<const std::byte*>(text.data()) + text.size()};
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

}  // namespace

bool probeEnabled() { return probeMode() != 0; }

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

std::string probeCacheFile(const topo::ClusterView& view, const std::vector<LinkClassProbe>& classes) {
  std::string dir = probeCacheDir().empty() ? defaultCacheDir() : probeCacheDir();
  if (dir.empty() || dir == "off") return "";
  std::vector<std::string> hosts;
  for (const auto& h : view.hosts()) hosts.push_back(h.id);
  std::sort(hosts.begin(), hosts.end());
  std::string identity;
  for (const auto& h : hosts) identity += h + "\n";
  for (const auto& c : classes) identity += c.key + "\n";
  return format("%s/probe-%016llx.txt", dir.c_str(), static_cast<unsigned long long>(fnv1a(identity)));
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
  const std::string dir = path.substr(0, path.rfind('/'));
  // mkdir -p, one level at a time.
  for (size_t at = 1; at <= dir.size(); ++at)
    if (at == dir.size() || dir[at] == '/') {
      const std::string part = dir.substr(0, at);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
        return errnoStatus(errno, "link probe: cannot create the cache directory %s", part.c_str());
    }
  std::string text = std::string(kCacheMagic) + "\n";
  for (const auto& c : classes) text += format("%s\t%.17g\t%.17g\n", c.key.c_str(), c.alphaUs, c.bwGBps);
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

Status probeLinkClasses(const ProbeContext& ctx, const topo::ClusterView& view, std::vector<LinkClassProbe>& classes,
                        std::string* source) {
  const double start = nowSec();
  const std::string cache = probeMode() == 1 ? probeCacheFile(view, classes) : "";
  // Rank 0 decides hit or miss for everyone, so all ranks take the same path even if their files differ.
  std::vector<std::byte> verdict;
  if (ctx.rank == 0 && !cache.empty() && readProbeCache(cache, classes)) verdict = encodeValues(classes);
  HC_ASSIGN_OR_RETURN(auto all, ctx.store->allGather(ctx.keyPrefix + "/probe-cache", ctx.rank, ctx.nranks, verdict,
                                                     ctx.deadline));
  if (!all[0].empty()) {
    HC_TRY(decodeValues(all[0], classes));
    *source = "cache " + cache;
    return okStatus();
  }

  // One class at a time, everyone waiting at a barrier between them.
  std::vector<std::string> mine;  // "index alpha bw" from each class's initiator
  for (size_t i = 0; i < classes.size(); ++i) {
    LinkClassProbe& c = classes[i];
    HC_TRY(ctx.store->barrier(ctx.keyPrefix + format("/probe%zu", i), ctx.nranks, ctx.deadline));
    if (ctx.rank != c.a && ctx.rank != c.b) continue;
    const bool initiator = ctx.rank == c.a;
    transport::Connection* conn = ctx.conns[initiator ? c.b : c.a];
    if (!conn) return internalError("link probe: rank %d has no connection to rank %d", ctx.rank, initiator ? c.b : c.a);
    HC_ASSIGN_OR_RETURN(double alpha, pingPong(ctx, conn, initiator));
    HC_ASSIGN_OR_RETURN(double bw, bandwidth(ctx, conn, initiator, c.streamMsgBytes));
    if (initiator) mine.push_back(format("%zu %.17g %.17g", i, alpha, bw));
  }
  std::string text;
  for (const auto& m : mine) text += m + "\n";
  HC_ASSIGN_OR_RETURN(all, ctx.store->allGather(ctx.keyPrefix + "/probe-results", ctx.rank, ctx.nranks,
                                                std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                                                       reinterpret_cast<const std::byte*>(text.data()) +
                                                                           text.size()),
                                                ctx.deadline));
  for (auto& c : classes) c.alphaUs = c.bwGBps = 0;
  for (int r = 0; r < ctx.nranks; ++r) {
    std::istringstream in(std::string(reinterpret_cast<const char*>(all[r].data()), all[r].size()));
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
  if (ctx.rank == 0 && !cache.empty()) {
    Status st = writeProbeCache(cache, classes);
    if (!st.ok()) HC_INFO(Init, "%s: later inits will probe again", std::string(st.message()).c_str());
  }
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
      // A figure the probe could not take (0) keeps the nominal one.
      const double alpha = c.alphaUs > 0 ? c.alphaUs : l.alphaUs;
      const double bw = c.bwGBps > 0 ? c.bwGBps : l.bwGBps;
      HC_TRY(links.setMeasured(i, j, alpha, bw));
    }
  return okStatus();
}

}  // namespace hetcomm::comm
