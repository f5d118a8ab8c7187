// transport_select.h: which transport each pair of ranks uses, and why.
//
// Every rank publishes an Offer at init (what it can run: shm and tcp always, UCX and verbs where they started,
// with the RDMA ports verbs can use), and every rank then calls choose() for its own pairs. choose() is a pure
// function of both ends' offers and the cluster view, symmetric in the two ranks, so both ends of a pair pick
// the same transport without another round of messages; a host with InfiniBand talking to one without it falls
// back to what both have (NCCL's issue #234) instead of waiting for a connection that never comes.
//
// Automatic choice: shm within a host; verbs over the fastest RDMA fabric (ib, then roce) the two hosts share
// when both ends have verbs on a port of it, else UCX when both ends run it on such a port; TCP otherwise.
// HETCOMM_TRANSPORT=a[,b...] forces: each pair takes the first listed transport that can serve it, and pairs
// none can serve keep the automatic choice (the reason says so).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "topology/cluster.h"
#include "transports/transport.h"

namespace hetcomm::comm {

inline constexpr int kKinds = 4;  // transport::Kind values, for arrays indexed by kind

struct Offer {
  std::string hostId;
  bool ucx = false;                     // UCX started on this rank
  std::string ucxWhy;                   // why not, when it did not
  std::vector<std::string> verbsPorts;  // "mlx5_0:1": RDMA ports the verbs transport can use; empty: none
  std::string verbsWhy;                 // why none, when verbsPorts is empty
};

struct PairChoice {
  transport::Kind kind = transport::Kind::kTcp;
  std::string why;  // "same host", "fabric ib0 (ib, 100 Gb/s): verbs at both ends", ...
  int fabric = -1;  // the ClusterView fabric the pair's traffic should take; -1: same host, or none known
};

// HETCOMM_TRANSPORT's value: empty, or a comma list of shm, tcp, ucx, verbs. An unknown name is an error that
// lists the valid ones.
Result<std::vector<transport::Kind>> parseTransportList(const std::string& spec);

// The transport ranks a and b use. offers[r] is rank r's offer; view is the same on every rank.
PairChoice choose(const topo::ClusterView& view, const std::vector<Offer>& offers,
                  const std::vector<transport::Kind>& forced, int a, int b);

// True when the kind may be wanted on this rank and must therefore listen: automatic needs shm and tcp always,
// verbs and UCX only on a host with an RDMA NIC; a forced kind is always wanted.
bool mayNeed(transport::Kind kind, const std::vector<transport::Kind>& forced, const topo::NodeDescription& local);

}  // namespace hetcomm::comm
