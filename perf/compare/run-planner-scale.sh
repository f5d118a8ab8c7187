#!/usr/bin/env bash
# How long hetcomm-plan takes, and how much memory, on one core (issue 17's scale targets): an 80-layer,
# 8192-wide model (configs/llm-80l.json: about 65 billion parameters) on
#   1024 devices: 128 hosts of 8, four device types (H100, A100 40G, L40S, V100) in runs of 32 hosts, InfiniBand
#                 and RoCE islands of 16 hosts each, and a 100 Gbit/s Ethernet joining every host;
#   16 devices:   2 hosts of 8 (H100, A100 80G) on one InfiniBand fabric and an Ethernet (global batch 64).
# Each run: hetcomm-plan --synthetic under `taskset -c 0` and /usr/bin/time; it prints the wall time of the search
# (the planner's own figure, and the whole process's), the largest resident set, how many structures were
# estimated and plans simulated, and the best plan.
#
# Usage: perf/compare/run-planner-scale.sh [--rounds 3] [--json FILE]
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-planner-scale
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
ROUNDS=3 JSON_OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-planner-scale: unknown argument: $1" >&2; usage 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
PLAN=$BUILD/bin/hetcomm-plan
[[ -x $PLAN ]] || die "missing $PLAN (build first)"
command -v taskset >/dev/null || die "taskset not found (util-linux)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (the time package)"
LOG_DIR=$BUILD/compare/logs/planner-scale-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOG_DIR"

# 16 devices hold the model only with a smaller global batch (the trainer keeps every micro-batch's boundary
# activations): 64 sequences.
declare -A BATCH=([1024]=1024 [16]=64)
declare -A SPEC=(
  [1024]="hosts=128,ranks=8,islands=16,types=H100:989:80G/A100:312:40G/L40S:362:48G/V100:125:32G,fast=ib:400000/roce:200000,slow=eth:100000"
  [16]="hosts=2,ranks=8,islands=1,types=H100:989:80G/A100:312:80G,fast=ib:400000,slow=eth:100000"
)
: >"$LOG_DIR/samples.tsv"
for devices in 16 1024; do
  for ((r = 1; r <= ROUNDS; r++)); do
    log=$LOG_DIR/plan-$devices.r$r.log
    taskset -c 0 /usr/bin/time -v "$PLAN" --config "$REPO_ROOT/configs/llm-80l.json" --synthetic "${SPEC[$devices]}" \
      --global-batch "${BATCH[$devices]}" --top 1 >"$log" 2>&1 || { tail -20 "$log" >&2; die "hetcomm-plan failed ($devices devices)"; }
    python3 - "$log" "$devices" "$r" >>"$LOG_DIR/samples.tsv" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
search = float(re.search(r"searched in ([0-9.]+) s", text).group(1))
m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([0-9.]+)", text)
wall = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
est, sim = re.search(r"planner: (\d+) structures estimated, (\d+) plans simulated", text).groups()
best = re.search(r"#1 (.*?): step", text).group(1)
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{search}\t{wall}\t{rss:.0f}\t{est}\t{sim}\t{best}")
PY
    echo "run-planner-scale: $devices devices, round $r: $(cut -f3- "$LOG_DIR/samples.tsv" | tail -1)" >&2
  done
done
python3 - "$LOG_DIR/samples.tsv" "$JSON_OUT" "$LOG_DIR" <<'PY'
import json, statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
out = {}
print("\nhetcomm-plan on one core (taskset -c 0), configs/llm-80l.json (80 layers, d_model 8192), median (max) of"
      f" {len({r[1] for r in rows})} rounds")
for devices in ("16", "1024"):
    rs = [r for r in rows if r[0] == devices]
    search, wall, rss = ([float(r[i]) for r in rs] for i in (2, 3, 4))
    out[devices] = {"search_s": st.median(search), "search_s_max": max(search), "wall_s": st.median(wall),
                    "max_rss_mib": max(rss), "structures": int(rs[0][5]), "simulated": int(rs[0][6]), "best": rs[0][7]}
    print(f"  {devices:>4s} devices: search {st.median(search):.2f} s (max {max(search):.2f}), process {st.median(wall):.2f} s,"
          f" max RSS {max(rss):.0f} MiB; {rs[0][5]} structures estimated, {rs[0][6]} plans simulated; best: {rs[0][7]}")
if sys.argv[2]:
    out["logs"] = sys.argv[3]
    json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
