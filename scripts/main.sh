#!/usr/bin/env bash
# main.sh: the main job. Sets up (scripts/setup.sh), runs the all-reduce perf sweep on 4 local ranks, then a short
# 2-rank training run of configs/gpt-tiny.json under the plan the planner chooses (--plan auto), which it prints
# with its prediction and, at the end, against what was measured.
#   NP=8 scripts/main.sh        more ranks
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BIN=${BUILD_DIR:-build}/bin
NP=${NP:-4}
echo "== all_reduce_perf on $NP local ranks (hetcomm-run -np $NP)"
"$BIN/hetcomm-run" -np "$NP" "$BIN/all_reduce_perf" -b 8 -e 128M -f 4 -c 1
echo "== hetcomm-train: configs/gpt-tiny.json on 2 ranks, the planner's plan (--plan auto), 100 steps"
"$BIN/hetcomm-run" -np 2 "$BIN/hetcomm-train" --config configs/gpt-tiny.json --steps 100 --warmup 10 \
  --eval-every 50 --log-every 10 --no-progress --plan auto
