#!/usr/bin/env bash
# Hybrid-parallel training benchmark (issue 7): hetcomm-train on an emulated mixed-NIC cluster
# (scripts/emulate-cluster.sh, default clusters/mixed-4x2.json: 4 hosts x 2 ranks, two RDMA islands joined by
# 200 Mbit/s Ethernet), 8 ranks, with --emulate-compute: each layer waits its FLOPs at the emulated device's rate
# (--reference-gflops for a speed-1 device) instead of computing, while every message has its real size. So 8
# ranks on this machine's 2 cores measure what the plan's communication, bubbles and overlap cost.
#
# Two comparisons, every run a fresh hetcomm-run, alternated within each round (A B A B ...):
#   1. Group assignment, the same TP2 x PP2 x DP2 plan (--tp 2 --pp 2, micro-batch 2, global batch 32: 8
#      micro-batches per replica):
#        nic      --assignment nic    (Holmes: TP in a host, DP in an RDMA island, pipeline boundaries across)
#        naive    --assignment naive  (rank order: both DP groups cross the Ethernet)
#   2. Uneven devices, --device-speeds 1,1,1,1,0.5,0.5,0.5,0.5 (hosts 0-1 fast, hosts 2-3 half as fast), DP8,
#      global batch 48 (24 micro-batches of 2):
#        uniform  perf/compare/plans/dp8-uniform.json   3 micro-batches per replica
#        uneven   perf/compare/plans/dp8-by-speed.json  4 on each fast replica, 2 on each slow one (in
#                 proportion to speed; the gradients are weighted so the update equals the uniform plan's)
#        one      one speed-1 device alone, 1 rank, 3 micro-batches per step (no communication): the ideal
#                 throughput of the 8 devices is (sum of device speeds = 6) x one's tokens/s
#      and, for reference, allfast: the uniform plan with every speed 1.
# A run's figure is the median tokens/s of rank 0's per-step JSON (--log-json) over the steps after --skip; the
# table gives median (min-max) over rounds, the ratios nic/naive and uneven/uniform, and uneven and uniform as
# fractions of the ideal. The runs' summaries (bubble, communication per kind of group) are in the logs.
#
# Usage: perf/compare/run-hybrid.sh [--cluster clusters/mixed-4x2.json] [--rounds 3] [--steps 10] [--skip 3]
#                                   [--reference-gflops 50] [--config configs/gpt-bench.json] [--keep-up]
#                                   [--json FILE] [--timeout 600]
# Needs root (network namespaces); brings the cluster up if it is not, and down again unless --keep-up or it
# was already up.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
CLUSTER=$REPO_ROOT/clusters/mixed-4x2.json
CONFIG=$REPO_ROOT/configs/gpt-bench.json
ROUNDS=3
STEPS=10
SKIP=3
GFLOPS=50
KEEP_UP=0
JSON_OUT=""
# shellcheck disable=SC2034 # TIMEOUT_S is read by lib.sh's run_logged
TIMEOUT_S=600
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
SPEEDS=1,1,1,1,0.5,0.5,0.5,0.5

# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-hybrid
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cluster) CLUSTER=${2:?}; shift 2 ;;
    --config) CONFIG=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --skip) SKIP=${2:?}; shift 2 ;;
    --reference-gflops) GFLOPS=${2:?}; shift 2 ;;
    --keep-up) KEEP_UP=1; shift ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-hybrid: unknown argument: $1" >&2; usage 2 ;;
  esac
done
for v in ROUNDS STEPS TIMEOUT_S; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "${v,,}: must be a positive integer"; done
[[ $SKIP =~ ^[0-9]+$ && $SKIP -lt $STEPS ]] || die "--skip must be a non-negative integer below --steps ($STEPS)"
[[ $GFLOPS =~ ^[0-9]+(\.[0-9]+)?$ ]] && python3 -c "import sys; sys.exit(not float(sys.argv[1]) > 0)" "$GFLOPS" ||
  die "--reference-gflops must be a positive number (got '$GFLOPS')"
[[ -r $CONFIG ]] || die "no config $CONFIG"
RUN=$BUILD/bin/hetcomm-run
TRAIN=$BUILD/bin/hetcomm-train
for b in "$RUN" "$TRAIN"; do [[ -x $b ]] || die "missing $b (build first)"; done
cluster_up "$CLUSTER" "$KEEP_UP"
NRANKS=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(len(s["hosts"]) * s["ranksPerHost"])' \
  "$STATE")
[[ $NRANKS -eq 8 ]] || die "the cluster has $NRANKS ranks; these plans are for 8"
RPH=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ranksPerHost"])' "$STATE")

LOG_DIR=$BUILD/compare/logs/hybrid-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOG_DIR"
SAMPLES=$LOG_DIR/samples.tsv  # config round tok/s
: >"$SAMPLES"

COMMON=(--config "$CONFIG" --emulate-compute --reference-gflops "$GFLOPS" --micro-batch 2 --steps "$STEPS"
        --warmup 1 --eval-every 0 --threads 1 --no-progress)
run_config() {  # CONFIG ROUND
  local cfg=$1 r=$2 log=$LOG_DIR/$1.round$2.log json=$LOG_DIR/$1.round$2.jsonl
  local -a cmd=("$RUN" --cluster "$CLUSTER" --ranks-per-host "$RPH" "$TRAIN" "${COMMON[@]}")
  case $cfg in
    nic) cmd+=(--global-batch 32 --tp 2 --pp 2 --assignment nic) ;;
    naive) cmd+=(--global-batch 32 --tp 2 --pp 2 --assignment naive) ;;
    uniform) cmd+=(--global-batch 48 --plan "$SCRIPT_DIR/plans/dp8-uniform.json" --device-speeds "$SPEEDS") ;;
    uneven) cmd+=(--global-batch 48 --plan "$SCRIPT_DIR/plans/dp8-by-speed.json" --device-speeds "$SPEEDS") ;;
    allfast) cmd+=(--global-batch 48 --plan "$SCRIPT_DIR/plans/dp8-uniform.json") ;;
    one) cmd=("$TRAIN" "${COMMON[@]}" --global-batch 6) ;;
  esac
  run_logged "$log" "${cmd[@]}" --log-json "$json"
  local tps
  tps=$(python3 - "$json" "$SKIP" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r["step"] > int(sys.argv[2])]
if not rows or not all(r.get("emulated") for r in rows):
    sys.exit(f"run-hybrid: no timed emulated steps in {sys.argv[1]}")
print(f"{statistics.median(r['tokens_per_s'] for r in rows):.1f}")
PY
  ) || die "no figure from $json"
  printf '%s\t%s\t%s\n' "$cfg" "$r" "$tps" >>"$SAMPLES"
  echo "run-hybrid: round $r/$ROUNDS $cfg: $tps tok/s" >&2
}

CONFIGS=(nic naive uniform uneven one allfast)
echo "run-hybrid: $(basename "$CLUSTER"), 8 ranks, $ROUNDS rounds of ${CONFIGS[*]}; $STEPS steps per run, first" \
     "$SKIP not counted; emulated compute at $GFLOPS GFLOP/s per speed-1 device; logs in $LOG_DIR" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${CONFIGS[@]}"; do run_config "$c" "$r"; done
done

python3 - "$SAMPLES" "$SPEEDS" "$JSON_OUT" "$LOG_DIR" "$GFLOPS" "$(basename "$CONFIG")" <<'PY'
import json, statistics as st, sys
samples, speeds, json_out, log_dir, gflops, config = sys.argv[1:7]
runs = {}
for line in open(samples):
    cfg, rnd, tps = line.split("\t")
    runs.setdefault(cfg, {})[int(rnd)] = float(tps)
rounds = sorted(runs["nic"])
ideal_factor = sum(float(v) for v in speeds.split(","))
def stat(values):
    return st.median(values), min(values), max(values)
def fmt(values, unit=""):
    m, lo, hi = stat(values)
    return f"{m:.1f}{unit} ({lo:.1f}-{hi:.1f})" if unit != "x" else f"{m:.3f} ({lo:.3f}-{hi:.3f})"
print(f"\nhybrid training, emulated compute ({gflops} GFLOP/s per speed-1 device), {config}, tokens/s of rank 0,"
      f" median (min-max) over {len(rounds)} rounds")
for cfg, what in [("nic", "TP2xPP2xDP2, NIC-aware assignment"), ("naive", "TP2xPP2xDP2, naive assignment"),
                  ("uniform", "DP8, 3 micro-batches each, speeds " + speeds),
                  ("uneven", "DP8, 4 fast / 2 slow micro-batches, same speeds"),
                  ("allfast", "DP8, 3 micro-batches each, every speed 1"),
                  ("one", "one speed-1 device alone (no communication)")]:
    print(f"  {cfg:8s} {fmt([runs[cfg][r] for r in rounds]):>26s}   {what}")
ratio = lambda a, b: [runs[a][r] / runs[b][r] for r in rounds]
ideal = [ideal_factor * runs["one"][r] for r in rounds]
frac = lambda a: [runs[a][r] / i for r, i in zip(rounds, ideal)]
print(f"  nic / naive:          {fmt(ratio('nic', 'naive'), 'x')}")
print(f"  uneven / uniform:     {fmt(ratio('uneven', 'uniform'), 'x')}")
print(f"  ideal = {ideal_factor:g} x one = {st.median(ideal):.1f} tok/s; uneven {fmt(frac('uneven'), 'x')}, "
      f"uniform {fmt(frac('uniform'), 'x')} of it (per-round ratios)")
if json_out:
    json.dump({"runs": runs, "speeds": speeds, "reference_gflops": float(gflops), "config": config,
               "nic_over_naive": stat(ratio("nic", "naive")), "uneven_over_uniform": stat(ratio("uneven", "uniform")),
               "uneven_of_ideal": stat(frac("uneven")), "uniform_of_ideal": stat(frac("uniform")),
               "logs": log_dir}, open(json_out, "w"), indent=1)
PY
