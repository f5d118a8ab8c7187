// synth_efficiency.h: what the synthesised schedules reach of their tree packing's rate on this cluster, learned
// from the communicator's own calls.
//
// The cost model prices a synthesised schedule at its packing's rate times an efficiency (coll::synth::
// treeEfficiency): several trees' segments share each NIC, each a stream of its own, and a host forwards a segment
// only once it has all of it. What that costs depends on the machines: on the emulated clusters the schedules ran
// at 0.84-1.01 of their packing on one machine (0.92 in the mean: the default) and at 1.0-1.04 on another. So
// rank 0 times its large synthesised collectives, and the efficiency each one showed is kept beside the probe's
// cache file, per collective kind; the next communicator of the cluster prices with the median of the last few
// once they agree. Rank 0 reads the file and every rank takes its values, so all choose alike.
//
// The file belongs to the cached link figures the efficiencies were measured against: it goes when they are
// measured again or dropped (link_probe.h). HETCOMM_SYNTH_LEARN=0 neither reads nor writes it.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "collectives/args.h"
#include "common/status.h"
#include "topology/cluster.h"

namespace hetcomm::comm {

class SynthEfficiency {
 public:
  static constexpr size_t kKeep = 8;       // the most recent observations kept per kind
  static constexpr size_t kLeast = 3;      // observations a kind needs before they count
  static constexpr double kSpread = 1.25;  // the middle half of them agrees within this factor
  // What an observation may be: far outside, the call measured something else (a stall, a clock jump).
  static constexpr double kLowest = 0.3, kHighest = 1.5;

  // One call's efficiency: the efficiency it was priced with, times predicted over measured time.
  void add(coll::CollKind kind, double efficiency);
  // The median of kind's observations; 0 when there are fewer than kLeast or they disagree (the default prices).
  double learned(coll::CollKind kind) const;
  std::array<double, coll::kCollKinds> learnedAll() const;
  size_t observations(coll::CollKind kind) const { return recent_[static_cast<size_t>(kind)].size(); }

  // The cache file's text, and back: a header line, then "kind value value ..." per kind observed. Anything else
  // (another header, an unknown kind, a value outside [kLowest, kHighest]) is refused with what and where.
  std::string format() const;
  static Result<SynthEfficiency> parse(const std::string& text);

 private:
  std::array<std::vector<double>, coll::kCollKinds> recent_;
};

// The file beside a probe cache file (link_probe.h's probeCacheFile) that keeps the efficiencies of one shape of
// its cluster: the probe's cache is per set of hosts and link classes, and the same hosts with other rank counts
// or NICs (or, in emulation, other clusters whose hosts have the same names) pack other trees.
std::string synthEfficiencyFile(const std::string& probeCacheFile, const topo::ClusterView& view);
// Every such file of a probe cache file (dropProbeCache removes them with it).
std::vector<std::string> synthEfficiencyFiles(const std::string& probeCacheFile);
// Reads it: an empty log when there is none; an error when it exists but does not parse.
Result<SynthEfficiency> readSynthEfficiency(const std::string& path);
Status writeSynthEfficiency(const std::string& path, const SynthEfficiency& log);

// Whether communicators learn the efficiency and price with it (HETCOMM_SYNTH_LEARN, default 1).
bool synthLearning();

}  // namespace hetcomm::comm
