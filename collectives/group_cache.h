// group_cache.h: what is derived from a group once and kept while it lives: its hierarchy, the synthesised tree
// packings, and the algorithm chosen per (collective, size class). Shared by the copies of a prepared GroupView
// (GroupView::prepare); guarded by one mutex, since the engine thread plans while API calls may query.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "collectives/algorithm.h"
#include "collectives/hierarchy.h"
#include "collectives/synth/trees.h"

namespace hetcomm::coll {

struct GroupCache {
  std::mutex mu;
  bool hierarchyDone = false;
  std::shared_ptr<const Hierarchy> hierarchy;
  // (use, root host or -1 for every host's ranks as demand)
  std::map<std::pair<int, int>, std::shared_ptr<const synth::Packing>> packings;
  // (kind, root, dtype, op, in place, size class) -> the automatic choice
  using SelectionKey = std::tuple<int, int, int, int, bool, int>;
  std::map<SelectionKey, const Algorithm*> selections;
};

}  // namespace hetcomm::coll
