# lib.sh: what the comparison scripts (run-*.sh) share: errors and usage, the machine's load around a run, running a
# command with a time limit into a log, installing the peers' packages, pulling result rows out of a log, and bringing an emulated cluster up
# (cluster_up). Sourced; the caller sets PROG (its name, for messages) and TIMEOUT_S.
# shellcheck shell=bash

# die MESSAGE: says "PROG: error: MESSAGE" and exits 1.
die() { echo "$PROG: error: $*" >&2; exit 1; }
# usage [STATUS]: prints the script's header comment (line 2 up to `set -euo`) and exits with STATUS (0).
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

# ensure_packages PKG...: installs the Debian packages among PKG that are missing (the peers' libraries and tools:
# Open MPI's headers, Gloo, PyTorch), with apt-get, the only download these scripts make; sudo when not root.
ensure_packages() {
  local need=() p sudo=""
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
  ((${#need[@]})) || return 0
  echo "$PROG: installing ${need[*]}" >&2
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 \
    || { $sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2; } \
    || die "could not install ${need[*]} (needs root and the Debian mirror)"
}

# cpu_busy: percent of all CPUs' time that was not idle over 0.5 s (from /proc/stat). These benchmarks need the
# machine quiet: Open MPI busy-polls and collapses when another process takes a core.
cpu_busy() {
  local a b
  a=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
  sleep 0.5
  b=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); d = (y[1] - x[1]) + (y[2] - x[2]);
    printf "%.0f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }'
}
# wait_quiet SEC PCT: waits up to SEC seconds until the CPUs are at most PCT% busy (saying so on stderr when it
# has to wait), then prints the last busy percentage measured.
wait_quiet() {
  local limit=$1 pct=$2 busy waited=0
  busy=$(cpu_busy)
  while [[ $busy -gt $pct && $waited -lt $limit ]]; do
    [[ $waited -eq 0 ]] && echo "$PROG: CPUs ${busy}% busy, waiting up to ${limit}s" >&2
    sleep 2
    waited=$((waited + 3))
    busy=$(cpu_busy)
  done
  echo "$busy"
}
# cpu_snap / niced_share A B: share of all CPU time spent in niced tasks between two snapshots. The other builders
# on this machine compile under `nice`, and the benchmarks run un-niced, so this is the other tenants' load.
cpu_snap() { awk '/^cpu /{print $3, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
niced_share() {
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2];
    printf "%.0f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }'
}

# extract PEER ROUND LOGFILE SIZES: print "peer size round busbw" lines for the wanted sizes from an nccl-tests style
# table (busbw = 8th field), from p2p_bw's rows ("size time_us GB/s": GB/s = 3rd field, peer "p2p_bw") or from
# memcpy_bw's row (best GB/s = 3rd field, peer "memcpy"). A leading "[N]" (hetcomm-run's rank prefix) is stripped;
# prefixed lines from ranks other than 0 are ignored; lines starting with "#" are comments.
extract() {
  local peer=$1 round=$2 log=$3 sizes=$4
  python3 - "$peer" "$round" "$log" "$sizes" "$PROG" <<'PY'
import re, sys
peer, rnd, log, sizes, prog = sys.argv[1:6]
want = [int(s) for s in sizes.split(",")]
field = 2 if peer in ("memcpy", "p2p_bw") else 7
got = {}
for line in open(log, errors="replace"):
    m = re.match(r"\s*\[([^\]]*)\]\s?(.*)$", line)
    if m:
        nums = re.findall(r"\d+", m.group(1))
        if nums and int(nums[0]) != 0:
            continue
        line = m.group(2)
    f = line.split()
    if len(f) <= field or f[0].startswith("#") or not f[0].isdigit():
        continue
    if peer != "p2p_bw" and not f[1].isdigit():  # nccl-tests: count; memcpy_bw: passes (p2p_bw: time, a float)
        continue
    try:
        size, bw = int(f[0]), float(f[field])
    except ValueError:
        continue
    if size in want and size not in got:
        got[size] = bw
missing = [s for s in want if s not in got]
if missing:
    sys.exit(f"{prog}: {peer} round {rnd}: no result row for size(s) {missing} in {log}")
for s in want:
    print(f"{peer}\t{s}\t{rnd}\t{got[s]}")
PY
}
# run_logged LOG CMD...: run with a time limit, stdout to LOG, stderr to LOG.err; fail loudly.
run_logged() {
  local log=$1; shift
  if ! timeout "$TIMEOUT_S" "$@" >"$log" 2>"$log.err"; then
    echo "$PROG: command failed: $*" >&2
    tail -n 30 "$log" "$log.err" >&2 || true
    exit 1
  fi
}

# cluster_up CLUSTER KEEP_UP: brings the emulated cluster up (scripts/emulate-cluster.sh) and, unless KEEP_UP is 1
# or it was already up, down again when the script exits. Sets STATE to its state file (hosts, namespaces,
# addresses). Needs root.
cluster_up() {
  local cluster=$1 keep=$2 name
  [[ $(id -u) -eq 0 ]] || { echo "$PROG: error: needs root (network namespaces)" >&2; exit 1; }
  [[ -r $cluster ]] || { echo "$PROG: error: no cluster file $cluster" >&2; exit 1; }
  EMULATE=$REPO_ROOT/scripts/emulate-cluster.sh
  name=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$cluster")
  STATE=/run/hetcomm-emulate/$name.json
  local was_up=0
  [[ -r $STATE ]] && was_up=1
  "$EMULATE" up "$cluster" >&2
  local down
  printf -v down '%q down %q >&2' "$EMULATE" "$cluster"
  # shellcheck disable=SC2064 # the command is fixed now
  if [[ $keep -eq 0 && $was_up -eq 0 ]]; then trap "$down" EXIT; fi
}
