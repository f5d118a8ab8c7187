#!/usr/bin/env bash
# Foundation benchmark: hetcomm vs Gloo vs Open MPI (TCP BTL), allreduce, 2 ranks on loopback, 1 MiB and 64 MiB.
#
# Builds the two peer benchmarks (gloo_allreduce.cc, mpi_allreduce.c) into $BUILD_DIR/compare with g++/mpicc, then
# runs, alternating A B1 B2 C, A B1 B2 C, ... for --rounds rounds so that machine drift hits every peer alike:
#   A  hetcomm       $BUILD_DIR/bin/hetcomm-run -np 2 -x HETCOMM_TRANSPORT=tcp $BUILD_DIR/bin/all_reduce_perf -b 1M -e 64M
#                    -f 64 -c 0 -n N -w W   (TCP like the peers; HETCOMM_TRANSPORT in the environment overrides)
#   B1 gloo_ring     gloo_allreduce --algo ring: gloo::allreduce(AllreduceOptions), RING (PyTorch's path), 2 processes
#   B2 gloo_chunked  gloo_allreduce --algo chunked: gloo::AllreduceRingChunked, 2 processes
#   C  mpi           mpirun ... --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo mpi_allreduce
# Every run is a fresh set of processes. Gloo's legacy AllreduceRing is deliberately not used (it forwards whole
# buffers and shrinks socket send buffers; see /work/shared/reference/measuring-here.md).
# The out-of-place busbw (8th field of an nccl-tests row) is collected per size per round; the script prints the
# median (min-max) per peer and size, and the ratios hetcomm/gloo (gloo = the better Gloo variant by median),
# hetcomm/gloo_ring, hetcomm/gloo_chunked and hetcomm/mpi at 64 MiB and 1 MiB, and writes them to --json.
#
# Usage: perf/compare/run-foundation.sh [--rounds 5] [--iters 20] [--warmup 5] [--build-dir DIR] [--json FILE]
#                                       [--gloo-algos ring,chunked] [--no-hetcomm] [--require] [--timeout 600]
#                                       [--wait-quiet SEC] [--rerun-noisy N]
#   --build-dir  hetcomm's build dir (default $BUILD_DIR, else <repo>/build); peers go to <build-dir>/compare
#   --no-hetcomm run only the peers (Gloo, MPI), e.g. before hetcomm's binaries exist; no ratios
#   --require    exit 3 unless hetcomm's 64 MiB median busbw >= both Gloo's and MPI's
#   --wait-quiet before each run, wait up to SEC seconds until the CPUs are <= 15% busy (shared machine: another
#                tenant's compile on one of the 2 cores ruins the figures, Open MPI's most of all); default 0.
#   --rerun-noisy rerun a run (up to N times) when niced tasks (the other builders compile under nice; these
#                benchmarks run un-niced) took > 10% of the CPU time during it; default 0. The load before and
#                during each run is printed and recorded in the JSON either way.
#   Recommended on the shared machine: --wait-quiet 300 --rerun-noisy 3
#   HETCOMM_EXTRA_ARGS (env) is appended to all_reduce_perf's arguments.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)

ROUNDS=5
ITERS=20
WARMUP=5
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
JSON_OUT=""
GLOO_ALGOS="ring,chunked"
RUN_HETCOMM=1
REQUIRE=0
WAIT_QUIET_S=0
QUIET_PCT=15
RERUN_NOISY=0
NOISY_PCT=10
TIMEOUT_S=600
NP=2
SIZES_BYTES=(1048576 67108864)

# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-foundation
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
    --gloo-algos) GLOO_ALGOS=${2:?}; shift 2 ;;
    --no-hetcomm) RUN_HETCOMM=0; shift ;;
    --require) REQUIRE=1; shift ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    --wait-quiet) WAIT_QUIET_S=${2:?}; shift 2 ;;
    --rerun-noisy) RERUN_NOISY=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-foundation: unknown argument: $1" >&2; usage 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "--iters must be a positive integer"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
[[ $TIMEOUT_S =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer"
[[ $WAIT_QUIET_S =~ ^[0-9]+$ ]] || die "--wait-quiet must be a non-negative integer"
[[ $RERUN_NOISY =~ ^[0-9]+$ ]] || die "--rerun-noisy must be a non-negative integer"
BUILD=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)
CMP_DIR=$BUILD/compare
IFS=',' read -r -a GLOO_ALGO_LIST <<<"$GLOO_ALGOS"
for a in "${GLOO_ALGO_LIST[@]}"; do
  [[ $a == ring || $a == chunked ]] || die "--gloo-algos: unknown Gloo variant '$a' (ring, chunked)"
done

# ---------------------------------------------------------------- dependencies (idempotent)
ensure_packages g++ python3 libgloo-dev openmpi-bin libopenmpi-dev
for t in g++ mpicc mpirun python3 timeout; do
  command -v "$t" >/dev/null 2>&1 || die "'$t' not found in PATH"
done

# ---------------------------------------------------------------- build the peers
mkdir -p "$CMP_DIR"
GLOO_BIN=$CMP_DIR/gloo_allreduce
MPI_BIN=$CMP_DIR/mpi_allreduce
if [[ ! -x $GLOO_BIN || $SCRIPT_DIR/gloo_allreduce.cc -nt $GLOO_BIN ]]; then
  echo "run-foundation: building $GLOO_BIN" >&2
  # Debian's gloo/config.h fixes the GLOO_USE_* switches; libgloo.so (in /usr/lib) links hiredis/ibverbs itself.
  nice -n 10 g++ -std=c++17 -O2 -pthread "$SCRIPT_DIR/gloo_allreduce.cc" -o "$GLOO_BIN" -lgloo \
    || die "building gloo_allreduce failed"
fi
if [[ ! -x $MPI_BIN || $SCRIPT_DIR/mpi_allreduce.c -nt $MPI_BIN ]]; then
  echo "run-foundation: building $MPI_BIN" >&2
  nice -n 10 mpicc -O2 "$SCRIPT_DIR/mpi_allreduce.c" -o "$MPI_BIN" || die "building mpi_allreduce failed"
fi

HETCOMM_RUN=$BUILD/bin/hetcomm-run
HETCOMM_PERF=$BUILD/bin/all_reduce_perf
if [[ $RUN_HETCOMM -eq 1 ]]; then
  [[ -x $HETCOMM_RUN ]] || die "hetcomm launcher missing: $HETCOMM_RUN (build hetcomm first, or pass --no-hetcomm)"
  [[ -x $HETCOMM_PERF ]] || die "hetcomm benchmark missing: $HETCOMM_PERF (build hetcomm first, or pass --no-hetcomm)"
fi
[[ -x $GLOO_BIN ]] || die "missing $GLOO_BIN"
[[ -x $MPI_BIN ]] || die "missing $MPI_BIN"

# ---------------------------------------------------------------- runs
STAMP=$(date +%Y%m%d-%H%M%S)
LOG_DIR=$CMP_DIR/logs/foundation-$STAMP-$$
mkdir -p "$LOG_DIR"
TMP_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/hetcomm-foundation.XXXXXX")
cleanup() { rm -rf "$TMP_ROOT"; }
trap cleanup EXIT
SAMPLES=$LOG_DIR/samples.tsv   # peer  size  round  busbw
BUSY=$LOG_DIR/load.tsv         # peer  round  busy% before  niced% during  attempts
: >"$SAMPLES"
: >"$BUSY"


sizes_csv=$(IFS=,; echo "${SIZES_BYTES[*]}")
# The peers run over TCP, so hetcomm does too: between ranks of one host it would otherwise pick shared memory
# (HETCOMM_TRANSPORT=shm there is issue 3's comparison, against Open MPI's vader BTL).
HETCOMM_TRANSPORT_USED=${HETCOMM_TRANSPORT:-tcp}
HETCOMM_CMD=("$HETCOMM_RUN" -np "$NP" -x "HETCOMM_TRANSPORT=$HETCOMM_TRANSPORT_USED" "$HETCOMM_PERF" -b 1M -e 64M -f 64
  -c 0 -n "$ITERS" -w "$WARMUP")
# shellcheck disable=SC2206
[[ -n ${HETCOMM_EXTRA_ARGS:-} ]] && HETCOMM_CMD+=(${HETCOMM_EXTRA_ARGS})
MPI_CMD=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" --mca pml ob1 --mca btl "tcp,self"
         --mca btl_tcp_if_include lo "$MPI_BIN" --sizes "$sizes_csv" --iters "$ITERS" --warmup "$WARMUP")
GLOO_ARGS=(--size "$NP" --host 127.0.0.1 --sizes "$sizes_csv" --iters "$ITERS" --warmup "$WARMUP")



run_gloo() {  # ALGO LOG
  local algo=$1 log=$2 store pid1 rc1=0
  store=$(mktemp -d "$TMP_ROOT/gloo-store.XXXXXX")
  timeout "$TIMEOUT_S" "$GLOO_BIN" --rank 1 --store "$store" --algo "$algo" "${GLOO_ARGS[@]}" \
    >"$log.rank1" 2>"$log.rank1.err" &
  pid1=$!
  if ! timeout "$TIMEOUT_S" "$GLOO_BIN" --rank 0 --store "$store" --algo "$algo" "${GLOO_ARGS[@]}" \
    >"$log" 2>"$log.err"; then
    wait "$pid1" || true
    echo "run-foundation: gloo_allreduce --algo $algo failed (rank 0)" >&2
    tail -n 30 "$log" "$log.err" "$log.rank1.err" >&2 || true
    exit 1
  fi
  wait "$pid1" || rc1=$?
  if [[ $rc1 -ne 0 ]]; then
    echo "run-foundation: gloo_allreduce --algo $algo failed (rank 1, rc $rc1)" >&2
    tail -n 30 "$log.rank1" "$log.rank1.err" >&2 || true
    exit 1
  fi
  rm -rf "$store"
}

PEERS=()
[[ $RUN_HETCOMM -eq 1 ]] && PEERS+=(hetcomm)
for a in "${GLOO_ALGO_LIST[@]}"; do PEERS+=("gloo_$a"); done
PEERS+=(mpi)

echo "run-foundation: $NP ranks on loopback, sizes ${SIZES_BYTES[*]} B, $ROUNDS rounds of ${PEERS[*]}," \
     "warmup $WARMUP, iters $ITERS; logs in $LOG_DIR" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for peer in "${PEERS[@]}"; do
    attempt=0
    while :; do
      attempt=$((attempt + 1))
      log=$LOG_DIR/$peer.round$r.log
      [[ $attempt -gt 1 ]] && log=$LOG_DIR/$peer.round$r.retry$((attempt - 1)).log
      busy=$(wait_quiet "$WAIT_QUIET_S" "$QUIET_PCT")
      s0=$(cpu_snap)
      case $peer in
        hetcomm) run_logged "$log" "${HETCOMM_CMD[@]}" ;;
        gloo_*) run_gloo "${peer#gloo_}" "$log" ;;
        mpi) run_logged "$log" "${MPI_CMD[@]}" ;;
      esac
      others=$(niced_share "$s0" "$(cpu_snap)")
      extract "$peer" "$r" "$log" "$sizes_csv" >"$TMP_ROOT/rows"
      echo "run-foundation: round $r/$ROUNDS $peer: $(awk '{ printf "%s B %s GB/s  ", $2, $4 }' "$TMP_ROOT/rows")" \
           "(CPU ${busy}% busy before, niced tasks ${others}% during)" >&2
      if [[ $others -gt $NOISY_PCT && $attempt -le $RERUN_NOISY ]]; then
        echo "run-foundation: other (niced) tasks took ${others}% of the CPUs during the run: discarded, rerunning" >&2
        continue
      fi
      cat "$TMP_ROOT/rows" >>"$SAMPLES"
      printf '%s\t%s\t%s\t%s\t%s\n' "$peer" "$r" "$busy" "$others" "$attempt" >>"$BUSY"
      break
    done
  done
done

# ---------------------------------------------------------------- statistics
python3 - "$SAMPLES" "$BUSY" "$JSON_OUT" "$REQUIRE" "$ROUNDS" "$ITERS" "$WARMUP" "$NP" "$LOG_DIR" \
  "${HETCOMM_CMD[*]}" "$GLOO_BIN --rank R --store DIR --algo ALGO ${GLOO_ARGS[*]}" "${MPI_CMD[*]}" "$NOISY_PCT" <<'PY'
import json, os, platform, statistics, sys, time
samples, busy_file, json_out, require, rounds, iters, warmup, np_, log_dir = sys.argv[1:10]
cmd_hetcomm, cmd_gloo, cmd_mpi = sys.argv[10:13]
noisy_pct = float(sys.argv[13])
load = [(p, int(r), float(b), float(o), int(a))
        for p, r, b, o, a in (l.split("\t") for l in open(busy_file) if l.strip())]
others_max = max((o for *_, o, _ in load), default=0.0)
data = {}
order = []
for line in open(samples):
    peer, size, rnd, bw = line.split("\t")
    if peer not in order:
        order.append(peer)
    data.setdefault(peer, {}).setdefault(int(size), []).append(float(bw))
sizes = sorted({s for p in data.values() for s in p})

def label(s):
    return f"{s >> 20} MiB" if s % (1 << 20) == 0 else f"{s} B"

stats = {p: {s: {"median": statistics.median(v), "min": min(v), "max": max(v), "samples": v}
             for s, v in d.items()} for p, d in data.items()}
print()
print(f"allreduce float32 sum, {np_} ranks, loopback TCP; busbw GB/s (1e9), median (min-max) of {rounds} rounds, "
      f"warmup {warmup}, iters {iters}")
print(f"{'peer':<14}" + "".join(f"{label(s):>24}" for s in sizes))
for p in order:
    cells = []
    for s in sizes:
        st = stats[p].get(s)
        cells.append(f"{st['median']:.3f} ({st['min']:.3f}-{st['max']:.3f})" if st else "-")
    print(f"{p:<14}" + "".join(f"{c:>24}" for c in cells))

gloo_peers = [p for p in order if p.startswith("gloo_")]
ratios, verdict = {}, None
if "hetcomm" in stats:
    print()
    for s in sorted(sizes, reverse=True):
        h = stats["hetcomm"][s]["median"]
        r = {}
        if gloo_peers:
            best = max(gloo_peers, key=lambda p: stats[p][s]["median"])
            r["hetcomm/gloo"] = h / stats[best][s]["median"]
            r["gloo_variant"] = best
            for p in gloo_peers:
                r[f"hetcomm/{p}"] = h / stats[p][s]["median"]
        if "mpi" in stats:
            r["hetcomm/mpi"] = h / stats["mpi"][s]["median"]
        ratios[str(s)] = r
        parts = [f"{k} {v:.3f}" for k, v in r.items() if k != "gloo_variant"]
        print(f"ratios at {label(s):>7}: " + ", ".join(parts)
              + (f"  (gloo = {r['gloo_variant']}, the better Gloo variant)" if "gloo_variant" in r else ""))
    big = str(max(sizes))
    checks = [v for k, v in ratios[big].items() if k in ("hetcomm/gloo", "hetcomm/mpi")]
    verdict = bool(checks) and all(v >= 1.0 for v in checks)
    print(f"criterion (hetcomm busbw >= Gloo and MPI at {label(max(sizes))}): {'PASS' if verdict else 'FAIL'}")

noisy = [f"{p} round {r} ({o:.0f}%)" for p, r, b, o, a in load if o > noisy_pct]
if noisy:
    print(f"WARNING: other (niced) tasks took > {noisy_pct:.0f}% of the CPUs during: {', '.join(noisy)}; figures "
          "from a loaded machine are not comparable (use --wait-quiet/--rerun-noisy, or rerun when it is quiet)")

if json_out:
    doc = {
        "benchmark": "allreduce float32 sum, out-of-place busbw, loopback TCP",
        "nranks": int(np_), "rounds": int(rounds), "iters": int(iters), "warmup": int(warmup),
        "busbw_unit": "GB/s (1e9 B/s), busbw = algbw * 2(n-1)/n",
        "host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE",) if k in os.environ},
        "commands": {"hetcomm": cmd_hetcomm if "hetcomm" in stats else None, "gloo": cmd_gloo, "mpi": cmd_mpi},
        "logs": log_dir,
        "load": {"note": "busy_before: % of CPU time not idle in the 0.5 s before the run; niced_during: % of CPU "
                         "time in niced tasks (the other builders) during the run; attempts: runs made (noisy ones "
                         "discarded)",
                 "niced_during_max": others_max,
                 "runs": [{"peer": p, "round": r, "busy_before": b, "niced_during": o, "attempts": a}
                          for p, r, b, o, a in load]},
        "busbw": {p: {str(s): st for s, st in stats[p].items()} for p in order},
        "ratios": ratios,
        "pass": verdict,
    }
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"\nwrote {json_out}")
if require == "1" and verdict is not True:
    sys.exit(3)
PY
