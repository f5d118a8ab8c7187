// node_json.h: NodeDescription to JSON and bytes, and back. The bytes are what each rank publishes through the
// bootstrap at communicator init; the JSON is also the "ranks" entries of a cluster dump (topo_file.h).
//
// One node, as written by nodeToJson (every field; on reading only hostId, hostName and each NIC's name and kind
// are required, the rest default as in node.h):
//   {"hostId": "vm:1a2b3c4d", "hostName": "vm", "pid": 4242, "localRank": 0, "topoFile": "",
//    "cores": 2, "pus": 2,
//    "packages": [{"index": 0, "cores": 2, "pus": 2}],
//    "numaNodes": [{"index": 0, "memoryBytes": 8147644416, "cores": 2}],
//    "pciDevices": [{"busId": "0000:00:03.0", "vendorId": 6900, "deviceId": 4161, "classId": 512, "name": "",
//                    "numaNode": -1, "osDevices": ["eth0"]}],
//    "nics": [{"name": "eth0", "kind": "eth", "rateMbps": 0, "state": "up", "fabric": "",
//              "addresses": ["10.0.0.2/24"], "numaNode": -1, "pciBusId": "0000:00:03.0", "rdmaDevice": "",
//              "rdmaPort": 0, "virtual": false, "loopback": false, "fromTopoFile": false}],
//    "gpus": [{"model": "NVIDIA H100 80GB HBM3", "memoryBytes": 85520809984, "peakTflops": 989,
//              "pciBusId": "0000:1b:00.0", "numaNode": 0, "fromTopoFile": true}]}
// Bytes on the wire: {"version": 1, "node": <the above>} as UTF-8 text.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/node.h"

namespace hetcomm::topo {

constexpr int kNodeFormatVersion = 1;

nlohmann::json nodeToJson(const NodeDescription& node);
// Validates every field; errors name the JSON path below `path` ("$.ranks[3].nics[0].kind: ..."). NICs come
// back sorted by name; two NICs with one name are an error.
Result<NodeDescription> nodeFromJson(const nlohmann::json& value, const std::string& path);

std::vector<std::byte> serializeNode(const NodeDescription& node);
// Errors start with "node description: " and name the path; a version other than kNodeFormatVersion is an error
// (ranks running different hetcomm builds).
Result<NodeDescription> deserializeNode(std::span<const std::byte> bytes);

}  // namespace hetcomm::topo
