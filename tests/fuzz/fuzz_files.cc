// fuzz_files: the parsers of the files users and tools hand hetcomm: topology files, cluster dumps, cluster
// descriptions (hetcomm-run --cluster), plan files, model configs and safetensors checkpoints. One binary per
// parser (HETCOMM_FUZZ_PARSER picks it at compile time): each input is one file's bytes, which must give a value
// or an error naming what was wrong, never a crash, a read past the input or an allocation a count only claims.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "topology/cluster_spec.h"
#include "topology/topo_file.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/plan.h"

using namespace hetcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
#if HETCOMM_FUZZ_PARSER == 1
  (void)topo::TopoFile::parse(text, "fuzz");
  (void)topo::parseClusterDump(text, "fuzz");
#elif HETCOMM_FUZZ_PARSER == 2
  (void)topo::parseClusterSpec(text, "fuzz");
#elif HETCOMM_FUZZ_PARSER == 3
  if (auto plan = trainer::parsePlan(std::string(text), "fuzz")) (void)trainer::validatePlanShape(*plan, "fuzz");
#elif HETCOMM_FUZZ_PARSER == 4
  (void)trainer::parseCheckpoint(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz");
#elif HETCOMM_FUZZ_PARSER == 5
  (void)trainer::parseConfig(std::string(text), "fuzz");
#else
#error "HETCOMM_FUZZ_PARSER: 1 topology, 2 cluster, 3 plan, 4 safetensors, 5 model config"
#endif
  return 0;
}
