#!/usr/bin/env bash
# Shared-memory benchmark (issue 3): hetcomm's shm transport vs Open MPI's vader BTL, and vs the host's memcpy.
#
# Builds mpi_allreduce.c (with mpicc) and memcpy_bw.c (with cc) into $BUILD_DIR/compare, then runs, alternating
# A2 B2 A4 B4 C P D, A2 B2 A4 B4 C P D, ... for --rounds rounds so that machine drift hits every peer alike:
#   A<N> hetcomm_npN   $BUILD_DIR/bin/hetcomm-run -np N -x HETCOMM_TRANSPORT=shm $BUILD_DIR/bin/all_reduce_perf
#                      -b 1M -e 64M -f 64 -c 0 -n ITERS -w WARMUP   (HETCOMM_TRANSPORT in the environment overrides)
#   B<N> vader_npN     mpirun --allow-run-as-root --oversubscribe --bind-to none -np N --mca pml ob1
#                      --mca btl vader,self mpi_allreduce --sizes 1M,64M --iters ITERS --warmup WARMUP
#   C    sendrecv      $BUILD_DIR/bin/hetcomm-run -np 2 -x HETCOMM_TRANSPORT=shm $BUILD_DIR/bin/sendrecv_perf
#                      -b 64M -e 64M -c 0 -n ITERS -w WARMUP   (both directions at once; busbw = algbw =
#                      bytes/time of each direction; information only, not a criterion)
#   P    p2p_bw        $BUILD_DIR/bin/hetcomm-run -np 2 -x HETCOMM_TRANSPORT=shm $BUILD_DIR/bin/p2p_bw
#                      -b 64M -e 64M -n ITERS -w WARMUP   (one-way, osu_bw style: rank 0 streams a window of 4
#                      messages to rank 1, rank 1 acks each window; GB/s = bytes / time, 3rd field of its row)
#   D    memcpy        memcpy_bw --bytes 64M --passes P   (single-thread glibc memcpy, best of P passes)
# for N in --nranks (default 2,4). Every run is a fresh set of processes. With 4 ranks the 2 cores of this machine
# are oversubscribed; Open MPI's vader busy-polls, and is measured as it is (no yield/blocking knobs are set).
# The out-of-place busbw (8th field of an nccl-tests row; p2p_bw's GB/s; memcpy_bw's best-pass GB/s for memcpy) is
# collected per size per round; the script prints the median (min-max) per peer and size, the ratios hetcomm/vader
# per N at 64 MiB and 1 MiB, p2p_bw/memcpy and (information) sendrecv/memcpy at 64 MiB, and writes them to --json.
# Criteria (issue 3): hetcomm/vader >= 1.5 at 64 MiB for every N, and the shm transport's one-way point-to-point
# bandwidth at 64 MiB (p2p_bw GB/s) >= 0.5 x the single-thread memcpy GB/s.
#
# Usage: perf/compare/run-shm.sh [--rounds 5] [--iters 20] [--warmup 5] [--build-dir DIR] [--json FILE]
#                                [--nranks 2,4] [--no-p2p] [--no-allreduce] [--memcpy-passes 10] [--require]
#                                [--timeout 600] [--wait-quiet SEC] [--rerun-noisy N]
#   --build-dir  hetcomm's build dir (default $BUILD_DIR, else <repo>/build); helpers go to <build-dir>/compare
#   --nranks     rank counts for the allreduce comparison (comma-separated)
#   --no-p2p / --no-allreduce   skip the point-to-point part (sendrecv, p2p_bw, memcpy) / the allreduce-vs-vader part
#   --require    exit 3 unless every criterion that was measured passes
#   --wait-quiet before each run, wait up to SEC seconds until the CPUs are <= 15% busy (shared machine: another
#                tenant's compile on one of the 2 cores ruins the figures, Open MPI's most of all); default 0.
#   --rerun-noisy rerun a run (up to N times) when niced tasks (the other builders compile under nice; these
#                benchmarks run un-niced) took > 10% of the CPU time during it; default 0. The load before and
#                during each run is printed and recorded in the JSON either way.
#   Recommended on the shared machine: --wait-quiet 300 --rerun-noisy 3
#   HETCOMM_EXTRA_ARGS (env) is appended to all_reduce_perf's and sendrecv_perf's arguments (not p2p_bw's, which
#                takes none of the nccl-tests options such as -c).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)

ROUNDS=5
ITERS=20
WARMUP=5
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
JSON_OUT=""
NRANKS="2,4"
RUN_P2P=1
RUN_ALLREDUCE=1
MEMCPY_PASSES=10
REQUIRE=0
WAIT_QUIET_S=0
QUIET_PCT=15
RERUN_NOISY=0
NOISY_PCT=10
TIMEOUT_S=600
SIZES_BYTES=(1048576 67108864)
P2P_BYTES=67108864

# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-shm
# The shared helpers: cpu_busy, cpu_snap, niced_share, extract, run_logged.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --build-dir) BUILD=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --nranks) NRANKS=${2:?}; shift 2 ;;
    --no-p2p) RUN_P2P=0; shift ;;
    --no-allreduce) RUN_ALLREDUCE=0; shift ;;
    --memcpy-passes) MEMCPY_PASSES=${2:?}; shift 2 ;;
    --require) REQUIRE=1; shift ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    --wait-quiet) WAIT_QUIET_S=${2:?}; shift 2 ;;
    --rerun-noisy) RERUN_NOISY=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-shm: unknown argument: $1" >&2; usage 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "--iters must be a positive integer"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
[[ $MEMCPY_PASSES =~ ^[1-9][0-9]*$ ]] || die "--memcpy-passes must be a positive integer"
[[ $TIMEOUT_S =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer"
[[ $WAIT_QUIET_S =~ ^[0-9]+$ ]] || die "--wait-quiet must be a non-negative integer"
[[ $RERUN_NOISY =~ ^[0-9]+$ ]] || die "--rerun-noisy must be a non-negative integer"
IFS=',' read -r -a NRANKS_LIST <<<"$NRANKS"
[[ ${#NRANKS_LIST[@]} -gt 0 ]] || die "--nranks is empty"
for n in "${NRANKS_LIST[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ && $n -ge 2 ]] || die "--nranks: '$n' is not a rank count >= 2"
done
[[ $RUN_P2P -eq 1 || $RUN_ALLREDUCE -eq 1 ]] || die "--no-p2p and --no-allreduce leave nothing to run"
BUILD=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)
CMP_DIR=$BUILD/compare

# ---------------------------------------------------------------- dependencies (idempotent)
ensure_packages gcc python3 openmpi-bin libopenmpi-dev
for t in cc mpicc mpirun python3 timeout; do
  command -v "$t" >/dev/null 2>&1 || die "'$t' not found in PATH"
done

# ---------------------------------------------------------------- build the helpers
mkdir -p "$CMP_DIR"
MPI_BIN=$CMP_DIR/mpi_allreduce
MEMCPY_BIN=$CMP_DIR/memcpy_bw
if [[ $RUN_ALLREDUCE -eq 1 ]] && [[ ! -x $MPI_BIN || $SCRIPT_DIR/mpi_allreduce.c -nt $MPI_BIN ]]; then
  echo "run-shm: building $MPI_BIN" >&2
  nice -n 10 mpicc -O2 "$SCRIPT_DIR/mpi_allreduce.c" -o "$MPI_BIN" || die "building mpi_allreduce failed"
fi
if [[ $RUN_P2P -eq 1 ]] && [[ ! -x $MEMCPY_BIN || $SCRIPT_DIR/memcpy_bw.c -nt $MEMCPY_BIN ]]; then
  echo "run-shm: building $MEMCPY_BIN" >&2
  nice -n 10 cc -O2 -std=c11 "$SCRIPT_DIR/memcpy_bw.c" -o "$MEMCPY_BIN" || die "building memcpy_bw failed"
fi

HETCOMM_RUN=$BUILD/bin/hetcomm-run
HETCOMM_PERF=$BUILD/bin/all_reduce_perf
HETCOMM_SR=$BUILD/bin/sendrecv_perf
HETCOMM_P2P=$BUILD/bin/p2p_bw
[[ -x $HETCOMM_RUN ]] || die "hetcomm launcher missing: $HETCOMM_RUN (build hetcomm first)"
[[ $RUN_ALLREDUCE -eq 0 || -x $HETCOMM_PERF ]] || die "hetcomm benchmark missing: $HETCOMM_PERF (build hetcomm first)"
[[ $RUN_P2P -eq 0 || -x $HETCOMM_SR ]] || die "hetcomm benchmark missing: $HETCOMM_SR (build hetcomm first)"
[[ $RUN_P2P -eq 0 || -x $HETCOMM_P2P ]] || die "hetcomm benchmark missing: $HETCOMM_P2P (build hetcomm first)"
[[ $RUN_ALLREDUCE -eq 0 || -x $MPI_BIN ]] || die "missing $MPI_BIN"
[[ $RUN_P2P -eq 0 || -x $MEMCPY_BIN ]] || die "missing $MEMCPY_BIN"

# ---------------------------------------------------------------- runs
STAMP=$(date +%Y%m%d-%H%M%S)
LOG_DIR=$CMP_DIR/logs/shm-$STAMP-$$
mkdir -p "$LOG_DIR"
TMP_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/hetcomm-shm.XXXXXX")
cleanup() { rm -rf "$TMP_ROOT"; }
trap cleanup EXIT
SAMPLES=$LOG_DIR/samples.tsv   # peer  size  round  busbw (GB/s)
BUSY=$LOG_DIR/load.tsv         # peer  round  busy% before  niced% during  attempts
: >"$SAMPLES"
: >"$BUSY"


sizes_csv=$(IFS=,; echo "${SIZES_BYTES[*]}")
# hetcomm would pick shared memory between ranks of one host anyway; force it so a fallback can't go unnoticed.
HETCOMM_TRANSPORT_USED=${HETCOMM_TRANSPORT:-shm}
EXTRA=()
# shellcheck disable=SC2206
[[ -n ${HETCOMM_EXTRA_ARGS:-} ]] && EXTRA=(${HETCOMM_EXTRA_ARGS})
hetcomm_cmd() {  # NP: the allreduce command line, into CMD
  CMD=("$HETCOMM_RUN" -np "$1" -x "HETCOMM_TRANSPORT=$HETCOMM_TRANSPORT_USED" "$HETCOMM_PERF" -b 1M -e 64M -f 64
       -c 0 -n "$ITERS" -w "$WARMUP" ${EXTRA[@]+"${EXTRA[@]}"})
}
vader_cmd() {  # NP
  CMD=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$1" --mca pml ob1 --mca btl "vader,self"
       "$MPI_BIN" --sizes "$sizes_csv" --iters "$ITERS" --warmup "$WARMUP")
}
SR_CMD=("$HETCOMM_RUN" -np 2 -x "HETCOMM_TRANSPORT=$HETCOMM_TRANSPORT_USED" "$HETCOMM_SR" -b 64M -e 64M -c 0
        -n "$ITERS" -w "$WARMUP" ${EXTRA[@]+"${EXTRA[@]}"})
P2P_CMD=("$HETCOMM_RUN" -np 2 -x "HETCOMM_TRANSPORT=$HETCOMM_TRANSPORT_USED" "$HETCOMM_P2P" -b 64M -e 64M
         -n "$ITERS" -w "$WARMUP")
MEMCPY_CMD=("$MEMCPY_BIN" --bytes "$P2P_BYTES" --passes "$MEMCPY_PASSES")



PEERS=()
if [[ $RUN_ALLREDUCE -eq 1 ]]; then
  for n in "${NRANKS_LIST[@]}"; do PEERS+=("hetcomm_np$n" "vader_np$n"); done
fi
[[ $RUN_P2P -eq 1 ]] && PEERS+=(sendrecv p2p_bw memcpy)

echo "run-shm: this host ($(nproc) CPUs), HETCOMM_TRANSPORT=$HETCOMM_TRANSPORT_USED, $ROUNDS rounds of ${PEERS[*]}," \
     "warmup $WARMUP, iters $ITERS, memcpy passes $MEMCPY_PASSES; logs in $LOG_DIR" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for peer in "${PEERS[@]}"; do
    case $peer in
      hetcomm_np*) hetcomm_cmd "${peer#hetcomm_np}"; want=$sizes_csv ;;
      vader_np*) vader_cmd "${peer#vader_np}"; want=$sizes_csv ;;
      sendrecv) CMD=("${SR_CMD[@]}"); want=$P2P_BYTES ;;
      p2p_bw) CMD=("${P2P_CMD[@]}"); want=$P2P_BYTES ;;
      memcpy) CMD=("${MEMCPY_CMD[@]}"); want=$P2P_BYTES ;;
    esac
    attempt=0
    while :; do
      attempt=$((attempt + 1))
      log=$LOG_DIR/$peer.round$r.log
      [[ $attempt -gt 1 ]] && log=$LOG_DIR/$peer.round$r.retry$((attempt - 1)).log
      busy=$(wait_quiet "$WAIT_QUIET_S" "$QUIET_PCT")
      s0=$(cpu_snap)
      run_logged "$log" "${CMD[@]}"
      others=$(niced_share "$s0" "$(cpu_snap)")
      extract "$peer" "$r" "$log" "$want" >"$TMP_ROOT/rows"
      echo "run-shm: round $r/$ROUNDS $peer: $(awk '{ printf "%s B %s GB/s  ", $2, $4 }' "$TMP_ROOT/rows")" \
           "(CPU ${busy}% busy before, niced tasks ${others}% during)" >&2
      if [[ $others -gt $NOISY_PCT && $attempt -le $RERUN_NOISY ]]; then
        echo "run-shm: other (niced) tasks took ${others}% of the CPUs during the run: discarded, rerunning" >&2
        continue
      fi
      cat "$TMP_ROOT/rows" >>"$SAMPLES"
      printf '%s\t%s\t%s\t%s\t%s\n' "$peer" "$r" "$busy" "$others" "$attempt" >>"$BUSY"
      break
    done
  done
done

# ---------------------------------------------------------------- statistics
hetcomm_cmd N; HC_CMD_STR=${CMD[*]}
vader_cmd N; VADER_CMD_STR=${CMD[*]}
python3 - "$SAMPLES" "$BUSY" "$JSON_OUT" "$REQUIRE" "$ROUNDS" "$ITERS" "$WARMUP" "$LOG_DIR" "$NOISY_PCT" \
  "$MEMCPY_PASSES" "$HETCOMM_TRANSPORT_USED" "$HC_CMD_STR" "$VADER_CMD_STR" "${SR_CMD[*]}" "${P2P_CMD[*]}" \
  "${MEMCPY_CMD[*]}" <<'PY'
import json, os, platform, statistics, sys, time
samples, busy_file, json_out, require, rounds, iters, warmup, log_dir, noisy_pct, passes, transport = sys.argv[1:12]
cmd_hetcomm, cmd_vader, cmd_sendrecv, cmd_p2p, cmd_memcpy = sys.argv[12:17]
noisy_pct = float(noisy_pct)
AR_MIN, P2P_MIN = 1.5, 0.5
load = [(p, int(r), float(b), float(o), int(a))
        for p, r, b, o, a in (l.split("\t") for l in open(busy_file) if l.strip())]
others_max = max((o for *_, o, _ in load), default=0.0)
data, per_round, order = {}, {}, []
for line in open(samples):
    peer, size, rnd, bw = line.split("\t")
    if peer not in order:
        order.append(peer)
    data.setdefault(peer, {}).setdefault(int(size), []).append(float(bw))
    per_round.setdefault(peer, {}).setdefault(int(size), {})[int(rnd)] = float(bw)
sizes = sorted({s for p in data.values() for s in p})
nranks = sorted({int(p[len("hetcomm_np"):]) for p in data if p.startswith("hetcomm_np")})

def label(s):
    return f"{s >> 20} MiB" if s % (1 << 20) == 0 else f"{s} B"

def summary(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "samples": v}

stats = {p: {s: summary(v) for s, v in d.items()} for p, d in data.items()}

def paired(a, b, s):  # per-round ratios a/b (the two ran back to back in every round)
    ra, rb = per_round[a][s], per_round[b][s]
    v = [ra[r] / rb[r] for r in sorted(ra) if r in rb and rb[r] > 0]
    return summary(v) if v else None

def cell(st):
    return f"{st['median']:.3f} ({st['min']:.3f}-{st['max']:.3f})" if st else "-"

print()
print(f"hetcomm shm transport (HETCOMM_TRANSPORT={transport}) vs Open MPI vader BTL and memcpy, this host "
      f"({os.cpu_count()} CPUs); GB/s (1e9), median (min-max) of {rounds} rounds, warmup {warmup}, iters {iters}")
print("allreduce float32 sum: out-of-place busbw; sendrecv (both directions at once, information only): "
      "busbw = algbw per direction (2 ranks);")
print("p2p_bw: one-way rank 0 -> rank 1, window of 4 messages + ack (osu_bw style); "
      f"memcpy: single-thread glibc memcpy, best of {passes} passes")
PEER_LABEL = {"sendrecv": "sendrecv (both directions at once)", "p2p_bw": "p2p_bw (one-way)"}
w = max([14] + [len(PEER_LABEL.get(p, p)) + 2 for p in order])
print(f"{'peer':<{w}}" + "".join(f"{label(s):>26}" for s in sizes))
for p in order:
    print(f"{PEER_LABEL.get(p, p):<{w}}" + "".join(f"{cell(stats[p].get(s)):>26}" for s in sizes))

ratios, criteria, info = {}, [], []
if nranks:
    print()
    for n in nranks:
        h, v = f"hetcomm_np{n}", f"vader_np{n}"
        if h not in stats or v not in stats:
            continue
        for s in sorted(sizes, reverse=True):
            if s not in stats[h] or s not in stats[v]:
                continue
            rat = stats[h][s]["median"] / stats[v][s]["median"]
            pr = paired(h, v, s)
            ratios.setdefault(f"np{n}", {})[str(s)] = {"hetcomm/vader": rat, "paired_per_round": pr}
            print(f"ratio hetcomm/vader, {n} ranks, {label(s):>7}: {rat:.3f}"
                  + (f"   (per-round pairs: median {pr['median']:.3f}, {pr['min']:.3f}-{pr['max']:.3f})" if pr else ""))
        big = max(sizes)
        if str(big) in ratios.get(f"np{n}", {}):
            rat = ratios[f"np{n}"][str(big)]["hetcomm/vader"]
            criteria.append({"name": f"allreduce busbw hetcomm/vader at {label(big)}, {n} ranks",
                             "value": rat, "threshold": AR_MIN, "pass": rat >= AR_MIN})
if "memcpy" in stats and ("p2p_bw" in stats or "sendrecv" in stats):
    print()
for peer, what in (("p2p_bw", "p2p_bw one-way GB/s"), ("sendrecv", "sendrecv busbw (both directions at once, info)")):
    if peer not in stats or "memcpy" not in stats:
        continue
    s = max(set(stats[peer]) & set(stats["memcpy"]))
    rat = stats[peer][s]["median"] / stats["memcpy"][s]["median"]
    pr = paired(peer, "memcpy", s)
    ratios.setdefault("p2p", {}).setdefault(str(s), {}).update(
        {f"{peer}/memcpy": rat, f"{peer}/memcpy_paired_per_round": pr})
    print(f"ratio {what} / memcpy GB/s, {label(s):>7}: {rat:.3f}"
          + (f"   (per-round pairs: median {pr['median']:.3f}, {pr['min']:.3f}-{pr['max']:.3f})" if pr else ""))
    if peer == "sendrecv":
        info.append({"name": f"sendrecv (both directions at once) busbw / single-thread memcpy GB/s at {label(s)}",
                     "value": rat, "note": "information only, not a criterion"})
    if peer == "p2p_bw":
        criteria.append({"name": f"shm one-way point-to-point GB/s (p2p_bw) / single-thread memcpy GB/s at {label(s)}",
                         "value": rat, "threshold": P2P_MIN, "pass": rat >= P2P_MIN})
print()
for c in criteria:
    print(f"criterion {c['name']} >= {c['threshold']}: {c['value']:.3f} {'PASS' if c['pass'] else 'FAIL'}")
verdict = bool(criteria) and all(c["pass"] for c in criteria)
print(f"overall: {'PASS' if verdict else 'FAIL'}")

noisy = [f"{p} round {r} ({o:.0f}%)" for p, r, b, o, a in load if o > noisy_pct]
if noisy:
    print(f"WARNING: other (niced) tasks took > {noisy_pct:.0f}% of the CPUs during: {', '.join(noisy)}; figures "
          "from a loaded machine are not comparable (use --wait-quiet/--rerun-noisy, or rerun when it is quiet)")

if json_out:
    doc = {
        "benchmark": "hetcomm shm transport: allreduce float32 sum out-of-place busbw vs Open MPI vader BTL; "
                     "one-way point-to-point GB/s (p2p_bw) vs single-thread memcpy; sendrecv busbw (both "
                     "directions at once) for information",
        "nranks": nranks, "rounds": int(rounds), "iters": int(iters), "warmup": int(warmup),
        "memcpy_passes": int(passes), "hetcomm_transport": transport,
        "busbw_unit": "GB/s (1e9 B/s); allreduce busbw = algbw * 2(n-1)/n; sendrecv busbw = algbw (per direction, "
                      "both directions at once); p2p_bw = one-way bytes / 1e9 / s (rank 0 -> rank 1, window of 4 "
                      "messages, 1-byte ack per window); memcpy = bytes copied / 1e9 / s of the best pass",
        "host": platform.node(), "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "HETCOMM_EXTRA_ARGS") if k in os.environ},
        "commands": {"hetcomm": cmd_hetcomm, "vader": cmd_vader, "sendrecv": cmd_sendrecv, "p2p_bw": cmd_p2p,
                     "memcpy": cmd_memcpy},
        "logs": log_dir,
        "load": {"note": "busy_before: % of CPU time not idle in the 0.5 s before the run; niced_during: % of CPU "
                         "time in niced tasks (the other builders) during the run; attempts: runs made (noisy ones "
                         "discarded)",
                 "niced_during_max": others_max,
                 "runs": [{"peer": p, "round": r, "busy_before": b, "niced_during": o, "attempts": a}
                          for p, r, b, o, a in load]},
        "busbw": {p: {str(s): st for s, st in stats[p].items()} for p in order},
        "ratios": ratios,
        "criteria": criteria,
        "info": info,
        "pass": verdict,
    }
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"\nwrote {json_out}")
if require == "1" and verdict is not True:
    sys.exit(3)
PY
