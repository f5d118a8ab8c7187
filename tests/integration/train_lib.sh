# train_lib.sh: what the hetcomm-train checks share. Source it with bin and src set and an array `small` of
# hetcomm-train arguments; it makes $work (removed on exit unless KEEP is set) and defines:
#   check DESCRIPTION STATUS     counts a check (STATUS: the exit status of the condition)
#   train NAME RANKS ARGS...     runs hetcomm-train, losses into $work/NAME.json, output into $work/NAME.log
#   compare A B TOL [FIRST]      the losses of the steps both runs logged agree within TOL (relative; 0 = exactly)
#   finish NAME                  prints the failed runs' log tails and the count; exits non-zero on a failure
work=$(mktemp -d /tmp/hetcomm-train-check.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
passed=0
failed=0
check() {  # description, condition (exit status of the previous command)
  if [ "$2" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
train() {  # name, ranks, extra args...: runs hetcomm-train, losses into $work/name.json, output into name.log
  local name=$1 np=$2
  shift 2
  "$bin/hetcomm-run" -np "$np" "$bin/hetcomm-train" "${small[@]}" --log-json "$work/$name.json" "$@" \
    >"$work/$name.log" 2>&1
}
# compare A B TOL [FIRST_STEP]: the losses of the steps both logs have agree within TOL (relative; 0 = exactly).
compare() {
  python3 - "$work/$1.json" "$work/$2.json" "$3" "${4:-1}" <<'PY'
import json, sys
def losses(path):
    return {j["step"]: j["loss"] for j in map(json.loads, open(path))}
a, b, tol, first = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
steps = [s for s in sorted(a) if s >= first]
bad = [s for s in steps if s not in b or abs(a[s] - b[s]) > tol * abs(a[s])]
if not steps or bad:
    for s in bad or steps: print("  step %d: %r vs %r" % (s, a.get(s), b.get(s)))
    sys.exit(1)
PY
}

finish() {
  if [ "$failed" != 0 ]; then
    for f in "$work"/*.log; do echo "== $f"; tail -5 "$f"; done
  fi
  echo "$1: $passed passed, $failed failed"
  [ "$failed" = 0 ]
}
