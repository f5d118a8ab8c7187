#!/usr/bin/env bash
# PyTorch backends compared (issue 19): hetcomm's torch.distributed backend against gloo, allreduce busbw and DDP
# step time, on 2 local ranks and on an emulated cluster (default clusters/mixed-4x2.json: two islands of two hosts,
# ib and roce inside, a slow eth fabric across), through perf/compare/torch_bench.py: both backends in one job,
# alternating by round, the median over rounds of the slowest rank.
#
#   local    hetcomm-run -np 2 python3 torch_bench.py --sizes 1M,16M,64M
#   cluster  scripts/emulate-cluster.sh up CLUSTER, then hetcomm-run --cluster CLUSTER python3 torch_bench.py with
#            smaller sizes and model (the eth fabric runs at 200 Mbit/s); gloo binds to the one fabric every host
#            shares (GLOO_SOCKET_IFNAME: its TCP device uses one interface), hetcomm uses every NIC.
#
# Usage: perf/compare/run-torch.sh [--rounds 3] [--cluster clusters/mixed-4x2.json] [--no-cluster] [--keep-up]
#                                  [--json-dir DIR]
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-torch
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
ROUNDS=3 CLUSTER=$REPO_ROOT/clusters/mixed-4x2.json RUN_CLUSTER=1 KEEP_UP=0 JSON_DIR=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --cluster) CLUSTER=${2:?}; shift 2 ;;
    --no-cluster) RUN_CLUSTER=0; shift ;;
    --keep-up) KEEP_UP=1; shift ;;
    --json-dir) JSON_DIR=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-torch: unknown argument: $1" >&2; usage 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive integer"
PY=$(grep -E '^HETCOMM_PYTHON:' "$BUILD/CMakeCache.txt" 2>/dev/null | cut -d= -f2)
PY=${PY:-/usr/bin/python3}
[[ -x $BUILD/bin/hetcomm-run ]] || die "missing $BUILD/bin/hetcomm-run (build first)"
ls "$BUILD"/python/hetcomm/_torch_backend*.so >/dev/null 2>&1 \
  || die "the PyTorch backend is not built (scripts/setup.sh installs python3-torch, libtorch-dev, pybind11-dev)"
export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
json() { [[ -n $JSON_DIR ]] && { mkdir -p "$JSON_DIR"; echo "--json $JSON_DIR/$1.json"; } || true; }

echo "== 2 local ranks"
# shellcheck disable=SC2046 # json prints nothing or two words
"$BUILD/bin/hetcomm-run" -np 2 "$PY" "$SCRIPT_DIR/torch_bench.py" --rounds "$ROUNDS" --sizes 1M,16M,64M \
  $(json local) | sed -n 's/^\[0\] //p'

if [[ $RUN_CLUSTER -eq 1 ]]; then
  cluster_up "$CLUSTER" "$KEEP_UP"
  # The NIC every host has on a fabric they all share: gloo's interface.
  IFNAME=$(python3 - "$STATE" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
shared = set.intersection(*[{n["fabric"] for n in h["nics"]} for h in s["hosts"]])
if not shared:
    sys.exit("run-torch: no fabric reaches every host; gloo needs one")
fab = sorted(shared)[0]
names = {n["name"] for h in s["hosts"] for n in h["nics"] if n["fabric"] == fab}
if len(names) != 1:
    sys.exit(f"run-torch: the hosts name their {fab} NIC differently ({sorted(names)}); GLOO_SOCKET_IFNAME takes one")
print(names.pop())
PY
) || die "cannot pick gloo's interface"
  echo "== $(basename "$CLUSTER" .json) (emulated; gloo on $IFNAME)"
  # shellcheck disable=SC2046
  "$BUILD/bin/hetcomm-run" --cluster "$CLUSTER" -x GLOO_SOCKET_IFNAME="$IFNAME" "$PY" "$SCRIPT_DIR/torch_bench.py" \
    --rounds "$ROUNDS" --sizes 1M,4M,16M --iters 3 --ddp-steps 3 --width 512 --layers 2 $(json cluster) \
    | sed -n 's/^\[0\] //p'
fi
