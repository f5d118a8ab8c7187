#!/usr/bin/env bash
# check_layers.sh: the layer rules of DESIGN.md, checked on #include lines. A layer includes only the layers
# below it; clients (perf/, trainer/, planner/) include only the public headers in include/hetcomm/ (the planner
# also the trainer's plan and model types; the trainer will link it for --plan auto, never include it below).
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
check() {  # folder, then forbidden include prefixes
  local dir=$1; shift
  [ -d "$dir" ] || return 0
  for bad in "$@"; do
    hits=$(grep -rnE "#include[[:space:]]*[\"<]($bad)/" "$dir" --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' 2>/dev/null)
    if [ -n "$hits" ]; then
      echo "layer rule broken: $dir/ must not include $bad/:"; echo "$hits"; status=1
    fi
  done
}
check common kernels transports topology collectives comm trainer perf planner
check kernels transports topology collectives comm trainer perf planner
check transports topology collectives comm trainer perf planner
check topology transports collectives comm trainer perf planner
check collectives comm trainer perf planner
check comm trainer perf planner
check trainer common transports topology collectives comm perf
# The trainer's tensor math is kernels/nn (DESIGN.md); nothing else of kernels/.
hits=$(grep -rnE '#include[[:space:]]*["<]kernels/' trainer --include='*.h' --include='*.cc' 2>/dev/null | grep -v 'kernels/nn/nn.h')
if [ -n "$hits" ]; then echo "layer rule broken: trainer/ may include only kernels/nn/nn.h of kernels/:"; echo "$hits"; status=1; fi
check perf common kernels transports topology collectives comm trainer planner
check planner common kernels transports topology collectives comm perf
# tools/ read the topology layer's files and models, and use the public API for the rest.
check tools kernels transports collectives comm trainer perf planner python
# The PyTorch backend is a client too: only the public headers (and its own).
check python common kernels transports topology collectives comm trainer perf planner
[ $status = 0 ] && echo "layers: ok"
exit $status
