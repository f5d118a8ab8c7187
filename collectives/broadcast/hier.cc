// Hierarchical broadcast: scatter, then all-gather (van de Geijn), along the hierarchy. The root cuts the buffer
// into one share per host of its island and hands share h to host h's lead (the rank with the root's place on
// that host); each of those hosts sends its share across the slow fabric to the host at the same place in the
// next island (a chain through the islands), every rank of the host a part of it, so every host of an island
// carries 1/m of the buffer over the slow fabric at once instead of one host carrying all of it. The leads of
// each island then all-gather the shares over their fast fabric, and each lead passes the whole buffer down a
// chain through its host.
//
// Every share is cut into chunks that flow through the stages on their own.
#include <algorithm>

#include "collectives/algorithm_list.h"
#include "collectives/hierarchy.h"
#include "collectives/ring_phases.h"

namespace hetcomm::coll {
namespace {

class HierBroadcast final : public HierAlgorithm {
 public:
  CollKind kind() const override { return CollKind::kBroadcast; }

  double estimate(const Args& a, const GroupView& g, const Hierarchy* h) const override {
    const double bytes = static_cast<double>(a.count * kernels::sizeOf(a.dtype));
    return rootedHierUs(a, g, *h, false) + memoryUs(g, a.root, a.inPlace ? 0 : bytes, 0, bytes);
  }

  Result<Schedule> planOn(const Args& a, const GroupView& g, const Hierarchy* h, Schedule s) const override {
    const size_t esz = kernels::sizeOf(a.dtype);
    const RootedPaths paths = rootedPaths(*h, a.root);
    const int m = h->size[1];
    const Shares shares(a.count, m, esz, g.chunkBytes);
    const size_t P = shares.ch.nchunks;
    const bool isRoot = g.rank == a.root;
    if (isRoot) copyUnlessSame(s, {Buf::kRecv, 0, a.count * esz}, {Buf::kSend, 0, a.count * esz}, a.inPlace);
    // The root sends from its send buffer; everyone else forwards what it received.
    auto src = [&](int sh, size_t p) { return shares.at(isRoot ? Buf::kSend : Buf::kRecv, sh, p); };
    // have[sh][p]: the step after which this rank holds chunk p of share sh.
    std::vector<std::vector<uint32_t>> have(m, std::vector<uint32_t>(P, 0));
    if (isRoot) {
      const uint32_t start = joinSteps(s, {});
      for (auto& v : have) std::fill(v.begin(), v.end(), start);
    }
    auto tagOf = [&](uint32_t base, int sh, size_t p) { return base + static_cast<uint32_t>(sh * P + p); };
    uint32_t tag = 0;

    // 1. The root hands each host of its island its share. Its own share waits, chunk by chunk, for the others'
    //    to be sent: it goes to the same hosts in step 3, and ahead of their shares it held back their slow-fabric
    //    crossings (step 2) by as long as it took (mixed-4x2: 0.3 s of a 3 s call with one host's Ethernet idle).
    std::vector<std::vector<uint32_t>> handed(P);
    for (size_t p = 0; m > 1 && p < P; ++p)
      for (int sh = 0; sh < m; ++sh) {
        if (paths.scatter[sh] == a.root) continue;
        if (isRoot) handed[p].push_back(s.send(paths.scatter[sh], tagOf(tag, sh, p), src(sh, p)));
        if (g.rank == paths.scatter[sh]) have[sh][p] = s.recv(a.root, tagOf(tag, sh, p), shares.at(Buf::kRecv, sh, p));
      }
    if (const auto own = std::find(paths.scatter.begin(), paths.scatter.end(), a.root);
        isRoot && m > 1 && own != paths.scatter.end())
      for (size_t p = 0; p < P; ++p) have[own - paths.scatter.begin()][p] = joinSteps(s, handed[p]);
    tag += static_cast<uint32_t>(m * P);

    // 2. Host place hp carries share hp (all of it when there is one host per island) from island to island,
    //    every rank of the host a part of it: the lead hands part j of each chunk to the rank at place j of its
    //    host over shared memory, that rank carries it along its chain through the islands, and there hands it
    //    to its own lead. A host's NIC then carries one stream per rank: one stream alone leaves a shaped link
    //    short of its rate, and one process's progress thread busy with the island's traffic as well.
    const int k = h->size[0];
    const auto [carrySh, part, crossPos] = carriedPartOf(paths, g.rank);
    if (carrySh >= 0 && h->size[2] > 1) {
      const int sh = carrySh;
      const std::vector<std::vector<int>>& parts = paths.partChains[sh];
      const std::vector<int>& chain = parts[part];
      const int myLead = parts[0][crossPos];
      const bool forward = crossPos + 1 < static_cast<int>(chain.size());
      const uint32_t crossTag = tag, outTag = tag + static_cast<uint32_t>(m * P), backTag = outTag + m * P;
      // A lead's part lands where the share goes; another rank's in scratch, so that the host chain's receive of
      // the whole buffer (step 4) need not wait for the sends that read it.
      if (part > 0) s.scratchBytes = shares.shareBytes();
      for (size_t p = 0; p < P; ++p) {
        const Slice whole = shares.at(Buf::kRecv, sh, p);
        const Slice mine = partOf(part == 0 ? whole : shares.inShare(Buf::kScratch, 0, sh, p), esz, part, k);
        uint32_t got = 0;
        if (crossPos > 0) {
          got = s.recv(chain[crossPos - 1], tagOf(crossTag, sh, p), mine);
        } else if (part == 0) {
          got = have[sh][p];
          for (int j = 1; j < k; ++j)
            s.steps[s.send(parts[j][0], tagOf(outTag, sh, p), partOf(src(sh, p), esz, j, k))].dependOn(got);
        } else {
          got = s.recv(myLead, tagOf(outTag, sh, p), mine);
        }
        if (forward) {
          const Slice from = crossPos == 0 && part == 0 ? partOf(src(sh, p), esz, 0, k) : mine;
          s.steps[s.send(chain[crossPos + 1], tagOf(crossTag, sh, p), from)].dependOn(got);
        }
        if (crossPos > 0 && part > 0) s.steps[s.send(myLead, tagOf(backTag, sh, p), mine)].dependOn(got);
        if (crossPos > 0 && part == 0) {
          std::vector<uint32_t> all{got};
          for (int j = 1; j < k; ++j)
            all.push_back(s.recv(parts[j][crossPos], tagOf(backTag, sh, p), partOf(whole, esz, j, k)));
          have[sh][p] = joinSteps(s, all);
        }
      }
    }
    tag += static_cast<uint32_t>(3 * m * P);

    // 3. The leads of each island all-gather the shares.
    const auto [island, ringPos] = findIn(paths.islandRings, g.rank);
    if (m > 1 && island >= 0) {
      Ring ring(g, paths.islandRings[island], ringPos, P, shares.ch.per, a.dtype);
      auto at = [&](int b, size_t p) { return shares.at(Buf::kRecv, b, p); };
      auto own = [&](int b, size_t p) { return src(b, p); };
      const std::vector<uint32_t> done = emitRingAllGather(s, ring, at, own, have[ringPos], {}, tag);
      for (auto& v : have) v = done;
    }
    tag += static_cast<uint32_t>((m - 1) * P);

    // 4. Each lead passes the whole buffer down its host.
    const auto [host, hostPos] = findIn(paths.hostChains, g.rank);
    const std::vector<int>& chain = paths.hostChains[host];
    for (size_t p = 0; chain.size() > 1 && p < P; ++p)
      for (int b = 0; b < m; ++b) {
        if (hostPos > 0) have[b][p] = s.recv(chain[hostPos - 1], tagOf(tag, b, p), shares.at(Buf::kRecv, b, p));
        if (hostPos + 1 < static_cast<int>(chain.size()))
          s.steps[s.send(chain[hostPos + 1], tagOf(tag, b, p), src(b, p))].dependOn(have[b][p]);
      }
    return s;
  }
};

}  // namespace

const Algorithm& hierBroadcast() {
  static const HierBroadcast algo;
  return algo;
}

}  // namespace hetcomm::coll
