#!/usr/bin/env bash
# Transport benchmark (issue 4): hetcomm's allreduce over each transport it has on one host, and the gap between
# hetcomm-over-UCX and raw UCX (ucx_perftest), measured in one run.
#
# Each round runs, in this order (so drift hits every configuration alike):
#   allreduce  for N in --nranks, for T in tcp shm ucx(tcp) ucx(sm):
#              $BUILD_DIR/bin/hetcomm-run -np N -x HETCOMM_TRANSPORT=... [-x UCX_TLS=...]
#              $BUILD_DIR/bin/all_reduce_perf -b 1M -e 64M -f 64 -c 0 -n ITERS -w WARMUP      (busbw, 8th field)
#   p2p_bw     for T in the same transports: hetcomm-run -np 2 ... p2p_bw -b 1M -e 64M -f 64 -n ITERS -w WARMUP
#              (one-way, window of 4 messages + ack; GB/s, 3rd field)
#   ucx_perftest for TLS in tcp sm: a server and a client on 127.0.0.1, `ucx_perftest -t ucp_am_bw -s SIZE
#              -n ITERS*4 -w WARMUP` (UCP active messages, the API hetcomm's ucx transport uses; its MB/s are
#              2^20 B/s, converted to GB/s = 1e9 B/s)
# Prints the median (min-max) per configuration and size, and the ratios hetcomm p2p_bw over ucx / ucx_perftest
# for the same UCX_TLS; --json writes everything.
#
# Usage: perf/compare/run-ucx.sh [--rounds 3] [--iters 20] [--warmup 5] [--nranks 2,4] [--build-dir DIR]
#                                [--json FILE] [--timeout 600] [--wait-quiet SEC]
#   --wait-quiet  before each run, wait up to SEC seconds until the CPUs are <= 15% busy (default 0)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
ROUNDS=3
ITERS=20
WARMUP=5
NRANKS="2,4"
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
JSON_OUT=""
TIMEOUT_S=600
WAIT_QUIET_S=0
QUIET_PCT=15
SIZES="1048576,67108864"

# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-ucx
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --nranks) NRANKS=${2:?}; shift 2 ;;
    --build-dir) BUILD=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    --wait-quiet) WAIT_QUIET_S=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-ucx: unknown argument: $1" >&2; usage 2 ;;
  esac
done
for v in ROUNDS ITERS TIMEOUT_S; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v,,} must be a positive integer"; done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
[[ $WAIT_QUIET_S =~ ^[0-9]+$ ]] || die "--wait-quiet must be a non-negative integer"
IFS=',' read -r -a NRANKS_LIST <<<"$NRANKS"
for n in "${NRANKS_LIST[@]}"; do [[ $n =~ ^[0-9]+$ && $n -ge 2 ]] || die "--nranks: '$n' is not a rank count >= 2"; done
command -v ucx_perftest >/dev/null || die "ucx_perftest not found (Debian package ucx-utils; scripts/setup.sh installs it)"
RUN=$BUILD/bin/hetcomm-run
for b in "$RUN" "$BUILD/bin/all_reduce_perf" "$BUILD/bin/p2p_bw"; do [[ -x $b ]] || die "missing $b (build first)"; done

LOG_DIR=$BUILD/compare/logs/ucx-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOG_DIR"
SAMPLES=$LOG_DIR/samples.tsv  # config  size  round  GB/s
: >"$SAMPLES"
TRANSPORTS=(tcp shm "ucx(tcp)" "ucx(sm)")
transport_env() {  # T: the hetcomm-run -x options that select it, into ENVX
  case $1 in
    "ucx("*) ENVX=(-x HETCOMM_TRANSPORT=ucx -x "UCX_TLS=${1:4:-1}") ;;
    *) ENVX=(-x "HETCOMM_TRANSPORT=$1") ;;
  esac
}
record() {  # CONFIG ROUND LOG PEER-KIND: rows for the sizes, into SAMPLES
  extract "$4" "$2" "$3" "$SIZES" | awk -v c="$1" -F'\t' '{ print c "\t" $2 "\t" $3 "\t" $4 }' >>"$SAMPLES"
}
# ucx_perftest's final line: "Final: iters p50 avg overall bw_avg(MB/s) bw_overall msgrate..."; MB = 2^20 B.
perftest() {  # TLS SIZE ROUND
  local port=$((20000 + RANDOM % 20000)) log=$LOG_DIR/perftest-$1-$2.round$3.log srv
  UCX_TLS=$1 timeout "$TIMEOUT_S" ucx_perftest -p "$port" >"$log.server" 2>&1 &
  srv=$!
  sleep 0.5
  if ! UCX_TLS=$1 timeout "$TIMEOUT_S" ucx_perftest 127.0.0.1 -p "$port" -t ucp_am_bw -s "$2" -n $((ITERS * 4)) \
      -w "$WARMUP" -f >"$log" 2>&1; then
    kill "$srv" 2>/dev/null || true
    tail -n 20 "$log" "$log.server" >&2
    die "ucx_perftest (UCX_TLS=$1, $2 B) failed"
  fi
  wait "$srv" || true
  awk -v c="ucx_perftest($1)" -v s="$2" -v r="$3" \
    '/^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/ { v = $6 } END {
       if (v == "") exit 1; printf "%s\t%s\t%s\t%.4f\n", c, s, r, v * 1048576 / 1e9 }' "$log" >>"$SAMPLES" \
    || die "no result line in $log"
}

echo "run-ucx: $ROUNDS rounds; logs in $LOG_DIR" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for n in "${NRANKS_LIST[@]}"; do
    for t in "${TRANSPORTS[@]}"; do
      transport_env "$t"
      wait_quiet "$WAIT_QUIET_S" "$QUIET_PCT" >/dev/null
      log=$LOG_DIR/allreduce-np$n-$t.round$r.log
      run_logged "$log" "$RUN" -np "$n" "${ENVX[@]}" "$BUILD/bin/all_reduce_perf" -b 1M -e 64M -f 64 -c 0 \
        -n "$ITERS" -w "$WARMUP"
      record "allreduce np$n $t" "$r" "$log" allreduce
    done
  done
  for t in "${TRANSPORTS[@]}"; do
    transport_env "$t"
    wait_quiet "$WAIT_QUIET_S" "$QUIET_PCT" >/dev/null
    log=$LOG_DIR/p2p-$t.round$r.log
    run_logged "$log" "$RUN" -np 2 "${ENVX[@]}" "$BUILD/bin/p2p_bw" -b 1M -e 64M -f 64 -n "$ITERS" -w "$WARMUP"
    record "p2p_bw $t" "$r" "$log" p2p_bw
  done
  for tls in tcp sm; do
    for s in ${SIZES//,/ }; do
      wait_quiet "$WAIT_QUIET_S" "$QUIET_PCT" >/dev/null
      perftest "$tls" "$s" "$r"
    done
  done
  echo "run-ucx: round $r/$ROUNDS done" >&2
done

python3 - "$SAMPLES" "$JSON_OUT" "$ROUNDS" "$ITERS" "$WARMUP" "$LOG_DIR" <<'PY'
import json, os, statistics, sys, time
samples, json_out, rounds, iters, warmup, log_dir = sys.argv[1:7]
data, order = {}, []
for line in open(samples):
    c, s, r, v = line.rstrip("\n").split("\t")
    if c not in order:
        order.append(c)
    data.setdefault(c, {}).setdefault(int(s), []).append(float(v))
stats = {c: {s: {"median": statistics.median(v), "min": min(v), "max": max(v), "samples": v}
             for s, v in d.items()} for c, d in data.items()}
sizes = sorted({s for d in data.values() for s in d})
label = lambda s: f"{s >> 20} MiB"
print(f"\nhetcomm transports on this host ({os.cpu_count()} CPUs), GB/s (1e9), median (min-max) of {rounds} rounds; "
      "allreduce: float32 sum out-of-place busbw; p2p_bw and ucx_perftest ucp_am_bw: one-way bandwidth")
w = max(len(c) for c in order) + 2
print(f"{'configuration':<{w}}" + "".join(f"{label(s):>24}" for s in sizes))
for c in order:
    print(f"{c:<{w}}" + "".join(
        f"{'%.3f (%.3f-%.3f)' % (st['median'], st['min'], st['max']) if (st := stats[c].get(s)) else '-':>24}"
        for s in sizes))
ratios = {}
print()
for tls in ("tcp", "sm"):
    h, u = f"p2p_bw ucx({tls})", f"ucx_perftest({tls})"
    if h in stats and u in stats:
        for s in sizes:
            rat = stats[h][s]["median"] / stats[u][s]["median"]
            ratios[f"{h} / {u} {label(s)}"] = rat
            print(f"ratio hetcomm p2p_bw over ucx / raw ucx_perftest, UCX_TLS={tls}, {label(s)}: {rat:.3f}")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"benchmark": "hetcomm allreduce busbw per transport; hetcomm p2p_bw vs ucx_perftest ucp_am_bw",
                   "rounds": int(rounds), "iters": int(iters), "warmup": int(warmup), "logs": log_dir,
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(),
                   "gbps": {c: {str(s): st for s, st in d.items()} for c, d in stats.items()},
                   "ratios": ratios}, f, indent=2)
        f.write("\n")
    print(f"\nwrote {json_out}")
PY
