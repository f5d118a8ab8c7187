// synth_efficiency.cc: the learned efficiency of the synthesised schedules, its median and its cache file.
#include "comm/synth_efficiency.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <sstream>

#include <glob.h>
#include <sys/stat.h>

#include "comm/link_probe.h"
#include "common/param.h"
#include "common/strings.h"

namespace hetcomm::comm {

HC_PARAM_INT(synthLearn, "SYNTH_LEARN", 1)

namespace {
constexpr const char* kMagic = "hetcomm-synth-efficiency 1";
}  // namespace

bool synthLearning() { return synthLearn() != 0; }

void SynthEfficiency::add(coll::CollKind kind, double efficiency) {
  if (!std::isfinite(efficiency)) return;
  auto& list = recent_[static_cast<size_t>(kind)];
  list.push_back(std::clamp(efficiency, kLowest, kHighest));
  if (list.size() > kKeep) list.erase(list.begin());
}

double SynthEfficiency::learned(coll::CollKind kind) const {
  std::vector<double> v = recent_[static_cast<size_t>(kind)];
  if (v.size() < kLeast) return 0;
  std::sort(v.begin(), v.end());
  // The middle half: a call or two slowed by something else (a first call's page faults, another job) must not
  // make the rest disagree, but half of them scattered means there is no one figure to learn.
  const size_t n = v.size(), lo = n / 4, hi = n - 1 - n / 4;
  if (v[hi] > kSpread * v[lo]) return 0;
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::array<double, coll::kCollKinds> SynthEfficiency::learnedAll() const {
  std::array<double, coll::kCollKinds> out{};
  for (size_t k = 0; k < coll::kCollKinds; ++k) out[k] = learned(static_cast<coll::CollKind>(k));
  return out;
}

std::string SynthEfficiency::format() const {
  std::string text = std::string(kMagic) + "\n";
  for (size_t k = 0; k < coll::kCollKinds; ++k) {
    if (recent_[k].empty()) continue;
    text += coll::name(static_cast<coll::CollKind>(k));
    for (double v : recent_[k]) text += hetcomm::format(" %.6g", v);
    text += "\n";
  }
  return text;
}

Result<SynthEfficiency> SynthEfficiency::parse(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kMagic)
    return invalidArgument("synth efficiency: the first line is \"%s\", not \"%s\"", line.c_str(), kMagic);
  SynthEfficiency log;
  for (int number = 2; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::string kindName;
    if (!(fields >> kindName)) continue;  // a blank line
    size_t k = 0;
    while (k < coll::kCollKinds && kindName != coll::name(static_cast<coll::CollKind>(k))) ++k;
    if (k == coll::kCollKinds)
      return invalidArgument("synth efficiency: line %d: \"%s\" is not a collective", number, kindName.c_str());
    if (!log.recent_[k].empty())
      return invalidArgument("synth efficiency: line %d: %s is listed twice", number, kindName.c_str());
    std::string word;
    while (fields >> word) {
      char* end = nullptr;
      const double v = std::strtod(word.c_str(), &end);
      if (*end || !(v >= kLowest && v <= kHighest))
        return invalidArgument("synth efficiency: line %d: \"%s\" is not an efficiency in [%g, %g]", number,
                               word.c_str(), kLowest, kHighest);
      if (log.recent_[k].size() == kKeep)
        return invalidArgument("synth efficiency: line %d: more than %zu values", number, kKeep);
      log.recent_[k].push_back(v);
    }
    if (log.recent_[k].empty()) return invalidArgument("synth efficiency: line %d: %s has no values", number, kindName.c_str());
  }
  return log;
}

namespace {
std::string stemOf(const std::string& probeCacheFile) {
  const size_t dot = probeCacheFile.rfind(".txt");
  return dot != std::string::npos && dot == probeCacheFile.size() - 4 ? probeCacheFile.substr(0, dot) : probeCacheFile;
}
}  // namespace

std::string synthEfficiencyFile(const std::string& probeCacheFile, const topo::ClusterView& view) {
  if (probeCacheFile.empty()) return "";
  std::vector<std::string> hosts;  // in id order, as the probe's cache names its hosts
  for (const topo::Host& h : view.hosts()) {
    std::string line = hetcomm::format("%s %zu", h.id.c_str(), h.ranks.size());
    for (const topo::Nic& n : h.node.nics)
      if (!n.loopback) line += hetcomm::format(" %s/%s/%llu", n.name.c_str(), n.fabric.c_str(), (unsigned long long)n.rateMbps);
    hosts.push_back(line);
  }
  std::sort(hosts.begin(), hosts.end());
  return hetcomm::format("%s-synth-%016llx.txt", stemOf(probeCacheFile).c_str(),
                         (unsigned long long)fnv1a(hetcomm::join(hosts, "\n")));
}

std::vector<std::string> synthEfficiencyFiles(const std::string& probeCacheFile) {
  std::vector<std::string> out;
  glob_t g{};
  const std::string pattern = stemOf(probeCacheFile) + "-synth-*.txt";
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

Result<SynthEfficiency> readSynthEfficiency(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return SynthEfficiency{};
    return errnoStatus(errno, "synth efficiency: cannot read %s", path.c_str());
  }
  std::ifstream in(path);
  if (!in) return systemError("synth efficiency: cannot open %s", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  auto log = SynthEfficiency::parse(text.str());
  if (!log) return invalidArgument("%s (in %s)", std::string(log.error().message()).c_str(), path.c_str());
  return log;
}

Status writeSynthEfficiency(const std::string& path, const SynthEfficiency& log) {
  return writeCacheFile(path, log.format());
}

}  // namespace hetcomm::comm
