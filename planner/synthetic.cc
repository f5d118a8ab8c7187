#include "planner/synthetic.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace hetcomm::planner {
namespace {

using nlohmann::json;
using trainer::Error;
using trainer::Result;

Error bad(const std::string& key, const std::string& detail) {
  return Error{.source = "--synthetic", .field = key, .detail = detail};
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

Result<long long> integer(const std::string& key, const std::string& text, long long lo, long long hi) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) return bad(key, "'" + text + "' is not an integer");
  if (v < lo || v > hi)
    return bad(key, std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

Result<double> number(const std::string& key, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(v > 0) || !std::isfinite(v))
    return bad(key, "'" + text + "' is not a positive number");
  return v;
}

// "80G" -> bytes (binary suffixes).
Result<double> bytes(const std::string& key, const std::string& text) {
  if (text.empty()) return bad(key, "an empty size");
  double scale = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K':
      scale = 1024.0;
      break;
    case 'M':
      scale = 1024.0 * 1024;
      break;
    case 'G':
      scale = 1024.0 * 1024 * 1024;
      break;
    case 'T':
      scale = 1024.0 * 1024 * 1024 * 1024;
      break;
    default:
      break;
  }
  if (scale > 1) digits.pop_back();
  auto v = number(key, digits);
  if (!v) return v.error();
  return *v * scale;
}

struct Fabric {
  std::string kind;
  long long rateMbps = 0;
};

Result<Fabric> fabric(const std::string& key, const std::string& text) {
  const auto parts = split(text, ':');
  if (parts.size() != 2) return bad(key, "'" + text + "' is not KIND:MBIT/S");
  if (parts[0] != "ib" && parts[0] != "roce" && parts[0] != "eth")
    return bad(key, "kind '" + parts[0] + "' is not ib, roce or eth");
  auto rate = integer(key, parts[1], 1, 400000);
  if (!rate) return rate.error();
  return Fabric{parts[0], *rate};
}

}  // namespace

Result<std::string> syntheticClusterJson(const std::string& spec) {
  std::map<std::string, std::string> kv;
  for (const std::string& pair : split(spec, ',')) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos) return bad(pair, "expected key=value");
    const std::string key = pair.substr(0, eq);
    if (key != "hosts" && key != "ranks" && key != "types" && key != "islands" && key != "fast" && key != "slow")
      return bad(key, "unknown key (known: hosts, ranks, types, islands, fast, slow)");
    if (!kv.emplace(key, pair.substr(eq + 1)).second) return bad(key, "given twice");
  }
  if (!kv.count("hosts")) return bad("hosts", "missing: how many hosts");
  auto hosts = integer("hosts", kv["hosts"], 1, 100000);
  if (!hosts) return hosts.error();
  auto ranks = integer("ranks", kv.count("ranks") ? kv["ranks"] : "8", 1, 1024);
  if (!ranks) return ranks.error();
  auto perIsland = integer("islands", kv.count("islands") ? kv["islands"] : std::to_string(*hosts), 1, *hosts);
  if (!perIsland) return perIsland.error();
  std::vector<Fabric> fast;
  for (const std::string& f : split(kv.count("fast") ? kv["fast"] : "ib:200000", '/')) {
    auto parsed = fabric("fast", f);
    if (!parsed) return parsed.error();
    fast.push_back(*parsed);
  }
  auto slow = fabric("slow", kv.count("slow") ? kv["slow"] : "eth:25000");
  if (!slow) return slow.error();
  struct Type {
    std::string name;
    double peak = 0, memory = 0;
  };
  std::vector<Type> types;
  const auto typeList = split(kv.count("types") ? kv["types"] : "gpu:100:80G", '/');
  for (size_t i = 0; i < typeList.size(); ++i) {
    const auto parts = split(typeList[i], ':');
    const std::string where = "types";
    if (parts.size() != 3 || parts[0].empty())
      return bad(where, "entry " + std::to_string(i) + " '" + typeList[i] + "' is not NAME:PEAK_TFLOPS:MEMORY");
    auto peak = number(where, parts[1]);
    if (!peak) return bad(where, "entry " + std::to_string(i) + " '" + typeList[i] + "': " + peak.error().detail);
    auto mem = bytes(where, parts[2]);
    if (!mem) return bad(where, "entry " + std::to_string(i) + " '" + typeList[i] + "': " + mem.error().detail);
    types.push_back({parts[0], *peak, *mem});
  }
  if (static_cast<long long>(types.size()) > *hosts)
    return bad("types", std::to_string(types.size()) + " types for " + std::to_string(*hosts) + " hosts");

  json hostList = json::array();
  for (long long h = 0; h < *hosts; ++h) {
    const long long island = h / *perIsland;
    const Fabric& f = fast[static_cast<size_t>(island) % fast.size()];
    const Type& type = types[static_cast<size_t>(h * static_cast<long long>(types.size()) / *hosts)];
    json nics = json::array();
    nics.push_back({{"name", "slow0"}, {"kind", slow->kind}, {"rateMbps", slow->rateMbps}, {"fabric", "slow"}});
    nics.push_back({{"name", "fast0"},
                    {"kind", f.kind},
                    {"rateMbps", f.rateMbps},
                    {"fabric", f.kind + "-island" + std::to_string(island)}});
    hostList.push_back({{"name", "h" + std::to_string(h)},
                        {"ranks", *ranks},
                        {"nics", nics},
                        {"gpus", json::array({{{"model", type.name},
                                               {"peakTflops", type.peak},
                                               {"memoryBytes", static_cast<unsigned long long>(type.memory)},
                                               {"count", *ranks}}})}});
  }
  json doc = {{"name", "synthetic"}, {"description", "hetcomm-plan --synthetic " + spec}, {"hosts", hostList}};
  return doc.dump(1) + "\n";
}

}  // namespace hetcomm::planner
