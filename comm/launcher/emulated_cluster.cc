#include "comm/launcher/emulated_cluster.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace hetcomm::comm {

namespace {

Result<nlohmann::json> readJson(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return invalidArgument("%s %s: cannot be read", what, path.c_str());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument("%s %s: %s", what, path.c_str(), e.what());
  }
}

}  // namespace

Result<EmulatedCluster> loadEmulatedCluster(const std::string& clusterFile, const std::string& stateDir) {
  HC_ASSIGN_OR_RETURN(nlohmann::json desc, readJson(clusterFile, "cluster file"));
  if (!desc.is_object() || !desc.contains("name") || !desc["name"].is_string())
    return invalidArgument("cluster file %s: $.name: a string is required", clusterFile.c_str());
  const std::string name = desc["name"];
  const std::string statePath = stateDir + "/" + name + ".json";
  auto state = readJson(statePath, "emulated cluster state");
  if (!state)
    return invalidUsage("emulated cluster %s is not up (no readable %s): run scripts/emulate-cluster.sh up %s",
                        name.c_str(), statePath.c_str(), clusterFile.c_str());
  EmulatedCluster c;
  c.name = name;
  try {
    const nlohmann::json& s = *state;
    c.ranksPerHost = s.at("ranksPerHost").get<int>();
    c.topoFile = s.at("topoFile").get<std::string>();
    for (const auto& h : s.at("hosts")) {
      EmulatedHost host;
      host.name = h.at("name").get<std::string>();
      host.netns = h.at("netns").get<std::string>();
      const auto& nics = h.at("nics");
      if (nics.empty()) return invalidArgument("%s: host %s has no NICs", statePath.c_str(), host.name.c_str());
      host.storeAddr = nics.at(0).at("storeAddr").get<std::string>();
      for (const auto& n : nics)
        host.nics.push_back({n.at("fabric").get<std::string>(), n.at("addr").get<std::string>()});
      host.ranks = h.value("ranks", c.ranksPerHost);
      if (host.ranks < 1)
        return invalidArgument("%s: host %s has %d ranks", statePath.c_str(), host.name.c_str(), host.ranks);
      c.hosts.push_back(std::move(host));
    }
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument("emulated cluster state %s: %s (rebuild it: scripts/emulate-cluster.sh down %s, then up)",
                           statePath.c_str(), e.what(), clusterFile.c_str());
  }
  if (c.hosts.empty() || c.ranksPerHost < 1)
    return invalidArgument("emulated cluster state %s: no hosts or no ranks per host", statePath.c_str());
  return c;
}

}  // namespace hetcomm::comm
