// synthetic.h: a cluster described in one line, for planning at scales nobody writes out by hand
// (hetcomm-plan --synthetic). Comma-separated key=value pairs:
//
//   hosts=128                       hosts (required)
//   ranks=8                         ranks per host, one device each (default 8)
//   types=H100:989:80G/A100:312:40G device types NAME:PEAK_TFLOPS:MEMORY (binary suffixes K M G T), the hosts split
//                                   among them in equal runs in this order (default one type, gpu:100:80G)
//   islands=16                      hosts per island: each island has a fast fabric of its own (default all hosts)
//   fast=ib:400000/roce:200000      the islands' fabric KIND:MBIT/S, taken in turn island by island (default
//                                   ib:200000); kind ib, roce or eth
//   slow=eth:100000                 the fabric that joins every host (default eth:25000)
//
// The result is a cluster file's JSON (topology/cluster_spec.h), for hetcommCommInitModel or
// scripts/emulate-cluster.sh.
#pragma once

#include <string>

#include "trainer/error.h"

namespace hetcomm::planner {

// Errors name the key and what was wrong ("types: entry 2 'A100:fast:40G': peak 'fast' is not a number").
trainer::Result<std::string> syntheticClusterJson(const std::string& spec);

}  // namespace hetcomm::planner
