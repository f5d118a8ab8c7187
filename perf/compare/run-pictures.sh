#!/usr/bin/env bash
# The README's pictures, made by the shipped tools (issue 19): perf tools write JSON with -J, perf/plot.py draws it.
#
#   busbw    allreduce busbw against size on the emulated clusters/mixed-4x2.json: hetcomm's automatic choice and
#            a flat ring (HETCOMM_ALGO=ring), with the link bound at the largest size (hetcomm-topo --bound)
#   train    hetcomm-train on 2 local ranks (configs/gpt-tiny.json, 100 steps): loss, validation loss, tokens/s
#
# Usage: perf/compare/run-pictures.sh [--out docs/images] [--keep-up]      (root: the cluster's namespaces)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-pictures
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
OUT=$REPO_ROOT/docs/images KEEP_UP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=${2:?}; shift 2 ;;
    --keep-up) KEEP_UP=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run-pictures: unknown argument: $1" >&2; usage 2 ;;
  esac
done
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || die "matplotlib missing (scripts/setup.sh installs python3-matplotlib)"
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CLUSTER=$REPO_ROOT/clusters/mixed-4x2.json

cluster_up "$CLUSTER" "$KEEP_UP"
"$BUILD/bin/hetcomm-topo" --bound --cluster "$CLUSTER" --size 64M --bound-json "$WORK/bound.json" >/dev/null
for algo in auto ring; do
  "$BUILD/bin/hetcomm-run" --cluster "$CLUSTER" -x HETCOMM_ALGO=$algo "$BUILD/bin/all_reduce_perf" \
    -b 64K -e 64M -f 4 -n 5 -w 1 -c 0 -z 1 -J "$WORK/$algo.json" >"$WORK/$algo.log" 2>&1 \
    || { tail "$WORK/$algo.log"; die "all_reduce_perf ($algo) failed"; }
done
/usr/bin/python3 "$REPO_ROOT/perf/plot.py" "$WORK/auto.json" "$WORK/ring.json" --labels "hetcomm auto,flat ring" \
  --bound "$WORK/bound.json" -o "$OUT/mixed-4x2-allreduce.png"

"$BUILD/bin/hetcomm-run" -np 2 "$BUILD/bin/hetcomm-train" --config "$REPO_ROOT/configs/gpt-tiny.json" --steps 100 \
  --warmup 10 --eval-every 20 --log-json "$WORK/train.jsonl" >"$WORK/train.log" 2>&1 \
  || { tail "$WORK/train.log"; die "hetcomm-train failed"; }
/usr/bin/python3 "$REPO_ROOT/perf/plot.py" --train "$WORK/train.jsonl" --labels "gpt-tiny on 2 ranks" \
  -o "$OUT/gpt-tiny-train.png"
