#!/usr/bin/env bash
# plot_check.sh BUILD_DIR SOURCE_DIR: a perf tool's -J file and a hetcomm-train --log-json file become PNGs through
# perf/plot.py, and plot.py refuses files it cannot use with exit status 2 and a message.
set -uo pipefail
BUILD=$(cd "${1:?build dir}" && pwd)
SRC=$(cd "${2:?source dir}" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "plot_check: FAIL: $*"; exit 1; }
PLOT=("/usr/bin/python3" "$SRC/perf/plot.py")

"$BUILD/bin/hetcomm-run" -np 2 "$BUILD/bin/all_reduce_perf" -b 1K -e 256K -f 4 -n 2 -J "$TMP/ar.json" >"$TMP/ar.log" 2>&1 \
  || fail "all_reduce_perf -J"
/usr/bin/python3 - "$TMP/ar.json" <<'PY' || fail "the -J file does not hold the table"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["tool"] == "all_reduce_perf" and d["ranks"] == 2, d
sizes = [r["size"] for r in d["rows"]]
assert sizes == [1024, 4096, 16384, 65536, 262144], sizes
assert all(r["out_of_place"]["busbw_gbs"] > 0 and r["out_of_place"]["wrong"] == 0 for r in d["rows"])
assert all("algorithm" in r and r["predicted_us"] > 0 for r in d["rows"])
PY
"${PLOT[@]}" "$TMP/ar.json" "$TMP/ar.json" --labels a,b --bound-gbs 1.5 -o "$TMP/ar.png" >/dev/null || fail "busbw plot"
[ "$(head -c 8 "$TMP/ar.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] || fail "busbw plot is not a PNG"

"$BUILD/bin/hetcomm-run" -np 2 "$BUILD/bin/hetcomm-train" --config "$SRC/configs/gpt-tiny.json" --steps 3 --warmup 1 \
  --eval-every 0 --log-json "$TMP/train.jsonl" >"$TMP/train.log" 2>&1 || fail "hetcomm-train --log-json"
"${PLOT[@]}" --train "$TMP/train.jsonl" -o "$TMP/train.png" >/dev/null || fail "training plot"
[ -s "$TMP/train.png" ] || fail "no training plot"

# Refusals: exit 2 and a message naming the problem.
"${PLOT[@]}" "$TMP/train.jsonl" -o "$TMP/x.png" 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "--train" "$TMP/err" || fail "a training log without --train: $(cat "$TMP/err")"
"${PLOT[@]}" "$TMP/missing.json" -o "$TMP/x.png" 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "missing.json" "$TMP/err" || fail "a missing file: $(cat "$TMP/err")"
"${PLOT[@]}" "$TMP/ar.json" --labels a,b -o "$TMP/x.png" 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "2 labels for 1 files" "$TMP/err" || fail "wrong label count: $(cat "$TMP/err")"
echo "plot_check: ok"
