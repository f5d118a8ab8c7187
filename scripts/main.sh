#!/usr/bin/env bash
# main.sh: the main job. Sets up (scripts/setup.sh), then runs the all-reduce perf sweep on 4 local ranks.
#   NP=8 scripts/main.sh        more ranks
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BIN=${BUILD_DIR:-build}/bin
NP=${NP:-4}
echo "== all_reduce_perf on $NP local ranks (hetcomm-run -np $NP)"
"$BIN/hetcomm-run" -np "$NP" "$BIN/all_reduce_perf" -b 8 -e 128M -f 4 -c 1
