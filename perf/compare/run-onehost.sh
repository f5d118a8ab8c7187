#!/usr/bin/env bash
# One-host benchmark (issue 16): is the automatic choice the fastest algorithm? Allreduce (float32 sum) on 2 and 4
# ranks of this host, over shm and over tcp, from 8 B to 256 MiB: hetcomm's automatic choice against every
# algorithm forced (HETCOMM_ALGO), alternating in one run; and, for 2 ranks at 64 MiB, the default path against
# Open MPI (vader over shared memory, the tcp BTL over loopback) and Gloo's ring over loopback.
#
# Each round runs, for every N in --nranks and T in --transports, in an order shuffled per round (a fixed order lets
# the machine's drift favour whoever runs first):
#   auto    hetcomm-run -np N -x HETCOMM_TRANSPORT=T all_reduce_perf -b MIN -e 1M -f STEP -c 0 -n SMALL_ITERS -w W,
#           then the same from 2 MiB to MAX with -n ITERS (a call of a few microseconds varies by 2x from one run to
#           the next on this machine: many iterations; a large one is long enough in itself)
#   ALGO    the same with -x HETCOMM_ALGO=ALGO, for each ALGO in --algos (default: ring,rd, every allreduce algorithm
#           that serves one host: hier and synth need two hosts)
# then (--peers, the default) for 2 ranks at 64 MiB:
#   vader   mpirun -np 2 --mca btl vader,self mpi_allreduce       (against hetcomm over shm)
#   mpitcp  mpirun -np 2 --mca btl tcp,self (loopback) mpi_allreduce (against hetcomm over tcp)
#   gloo    gloo_allreduce --algo ring, 2 processes on loopback   (against hetcomm over tcp)
# The time per call is nccl-tests' out-of-place time column (us, the average over iterations and ranks). Per size
# the script prints the median over rounds for auto and every forced algorithm, which algorithm auto chose, and
# chosen/best: the median time of the chosen algorithm (its forced runs, so that both sides of the ratio are the
# same kind of run) over the fastest forced algorithm's; criterion: <= 1.05. Then the peers' busbw at 64 MiB and
# the ratios against them (criteria: >= 2.5 against vader, >= 1.2 against the better of Gloo and Open MPI's tcp).
#
# Usage: perf/compare/run-onehost.sh [--rounds 3] [--nranks 2,4] [--transports shm,tcp] [--algos ring,rd]
#                                    [--min 8] [--max 256M] [--step 2] [--iters 5] [--small-iters 200]
#                                    [--warmup 3] [--no-peers]
#                                    [--peer-iters 20] [--json FILE] [--timeout 900] [--wait-quiet SEC]
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
ROUNDS=3
NRANKS=2,4
TRANSPORTS=shm,tcp
ALGOS=ring,rd
MIN=8
MAX=256M
STEP=2
ITERS=5
SMALL_ITERS=200
WARMUP=3
PEERS=1
PEER_ITERS=20
JSON_OUT=""
TIMEOUT_S=900
WAIT_QUIET_S=0
BUILD=${BUILD_DIR:-$REPO_ROOT/build}

# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-onehost
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --nranks) NRANKS=${2:?}; shift 2 ;;
    --transports) TRANSPORTS=${2:?}; shift 2 ;;
    --algos) ALGOS=${2:?}; shift 2 ;;
    --min) MIN=${2:?}; shift 2 ;;
    --max) MAX=${2:?}; shift 2 ;;
    --step) STEP=${2:?}; shift 2 ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --small-iters) SMALL_ITERS=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --no-peers) PEERS=0; shift ;;
    --peer-iters) PEER_ITERS=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    --wait-quiet) WAIT_QUIET_S=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-onehost: unknown argument: $1" >&2; usage 2 ;;
  esac
done
for v in ROUNDS ITERS SMALL_ITERS PEER_ITERS TIMEOUT_S; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v,,} must be a positive integer"
done
[[ $WARMUP =~ ^[0-9]+$ && $WAIT_QUIET_S =~ ^[0-9]+$ ]] || die "--warmup and --wait-quiet take non-negative integers"
[[ $NRANKS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--nranks takes a comma list of rank counts"
[[ $TRANSPORTS =~ ^(shm|tcp|ucx)(,(shm|tcp|ucx))*$ ]] || die "--transports takes a comma list of shm, tcp, ucx"
[[ $ALGOS =~ ^[a-z0-9_-]+(,[a-z0-9_-]+)*$ ]] || die "--algos takes a comma list of algorithm names"
RUN=$BUILD/bin/hetcomm-run
for b in "$RUN" "$BUILD/bin/all_reduce_perf"; do [[ -x $b ]] || die "missing $b (build first: scripts/setup.sh)"; done

CMP_DIR=$BUILD/compare
mkdir -p "$CMP_DIR"
if [[ $PEERS -eq 1 ]]; then
  ensure_packages openmpi-bin libopenmpi-dev libgloo-dev
  MPI_BIN=$CMP_DIR/mpi_allreduce
  GLOO_BIN=$CMP_DIR/gloo_allreduce
  [[ -x $MPI_BIN && ! $SCRIPT_DIR/mpi_allreduce.c -nt $MPI_BIN ]] \
    || nice -n 10 mpicc -O2 "$SCRIPT_DIR/mpi_allreduce.c" -o "$MPI_BIN" || die "building mpi_allreduce failed"
  [[ -x $GLOO_BIN && ! $SCRIPT_DIR/gloo_allreduce.cc -nt $GLOO_BIN ]] \
    || nice -n 10 g++ -std=c++17 -O2 -pthread "$SCRIPT_DIR/gloo_allreduce.cc" -o "$GLOO_BIN" -lgloo \
    || die "building gloo_allreduce failed"
fi

# Sizes in bytes (K, M and G as the perf tools take them): which of the two parts of a run the range covers.
bytes_of() {
  local v=${1%[KkMmGg]} unit=${1: -1}
  [[ $v =~ ^[0-9]+$ ]] || die "not a size: $1 (a number with an optional K, M or G)"
  case $unit in K | k) echo $((v << 10)) ;; M | m) echo $((v << 20)) ;; G | g) echo $((v << 30)) ;; *) echo "$v" ;; esac
}
MIN_B=$(bytes_of "$MIN") MAX_B=$(bytes_of "$MAX")
((MIN_B >= 1 && MIN_B <= MAX_B)) || die "--min ($MIN) must be at least 1 byte and no more than --max ($MAX)"

LOG_DIR=$CMP_DIR/logs/onehost-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOG_DIR"
SAMPLES=$LOG_DIR/samples.tsv  # nranks transport peer size round time_us algorithm predicted_us
: >"$SAMPLES"
echo "run-onehost: $ROUNDS rounds; logs in $LOG_DIR" >&2

rows() {  # NRANKS TRANSPORT PEER ROUND LOG: every row of an nccl-tests table (rank 0) into the samples
  python3 - "$@" >>"$SAMPLES" <<'PY'
import re, sys
n, transport, peer, rnd, log = sys.argv[1:6]
found = False
for line in open(log, errors="replace"):
    m = re.match(r"\s*\[(\d+)\]\s?(.*)$", line)
    if m:
        if m.group(1) != "0":
            continue
        line = m.group(2)
    f = line.split()
    if len(f) < 9 or not f[0].isdigit() or not f[1].isdigit():
        continue
    algo, pred = (f[13], f[14]) if len(f) >= 15 else ("-", "nan")
    print(f"{n}\t{transport}\t{peer}\t{f[0]}\t{rnd}\t{f[5]}\t{algo}\t{pred}")
    found = True
if not found:
    sys.exit(f"run-onehost: {peer} (np {n}, {transport}) round {rnd}: no result rows in {log}")
PY
}

IFS=, read -r -a NLIST <<<"$NRANKS"
IFS=, read -r -a TLIST <<<"$TRANSPORTS"
IFS=, read -r -a ALIST <<<"$ALGOS"
for ((r = 1; r <= ROUNDS; r++)); do
  for n in "${NLIST[@]}"; do
    for t in "${TLIST[@]}"; do
      mapfile -t order < <(printf '%s\n' auto "${ALIST[@]}" | shuf --random-source=<(yes "$r$n$t"))
      for peer in "${order[@]}"; do
        algo=()
        [[ $peer == auto ]] || algo=(-x HETCOMM_ALGO="$peer")
        for part in small large; do
          log=$LOG_DIR/np$n.$t.$peer.$part.round$r.log
          if [[ $part == small ]]; then  # up to 1 MiB, many iterations; none where --min is above it
            ((MIN_B <= 1 << 20)) || continue
            range=(-b "$MIN" -e "$((MAX_B < 1 << 20 ? MAX_B : 1 << 20))" -n "$SMALL_ITERS")
          else
            ((MAX_B >= 2 << 20)) || continue
            range=(-b "$((MIN_B > 2 << 20 ? MIN_B : 2 << 20))" -e "$MAX" -n "$ITERS")
          fi
          [[ $WAIT_QUIET_S -eq 0 ]] || wait_quiet "$WAIT_QUIET_S" 15 >/dev/null
          run_logged "$log" "$RUN" -np "$n" -x HETCOMM_TRANSPORT="$t" "${algo[@]}" "$BUILD/bin/all_reduce_perf" \
            "${range[@]}" -f "$STEP" -c 0 -w "$WARMUP"
          rows "$n" "$t" "$peer" "$r" "$log"
        done
      done
      echo "run-onehost: round $r np $n $t done (order ${order[*]})" >&2
    done
  done
  if [[ $PEERS -eq 1 ]]; then
    mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca pml ob1)
    log=$LOG_DIR/vader.round$r.log
    run_logged "$log" "${mpi[@]}" --mca btl vader,self "$MPI_BIN" --sizes 67108864 --iters "$PEER_ITERS" --warmup 5
    rows 2 shm vader "$r" "$log"
    log=$LOG_DIR/mpitcp.round$r.log
    run_logged "$log" "${mpi[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo "$MPI_BIN" --sizes 67108864 \
      --iters "$PEER_ITERS" --warmup 5
    rows 2 tcp mpitcp "$r" "$log"
    log=$LOG_DIR/gloo.round$r.log
    store=$(mktemp -d)
    pids=()
    for k in 0 1; do
      timeout "$TIMEOUT_S" "$GLOO_BIN" --rank $k --size 2 --store "$store" --host 127.0.0.1 --algo ring \
        --sizes 67108864 --iters "$PEER_ITERS" --warmup 5 >"$log.rank$k" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || die "gloo_allreduce failed (see $log.rank*)"; done
    rm -rf "$store"
    cp "$log.rank0" "$log"
    rows 2 tcp gloo "$r" "$log"
    echo "run-onehost: round $r peers done" >&2
  fi
done

python3 - "$SAMPLES" "$JSON_OUT" "$ALGOS" "$ROUNDS" "$ITERS" "$LOG_DIR" <<'PY'
import json, statistics, sys, time
samples, json_out, algos, rounds, iters, log_dir = sys.argv[1:7]
algos = algos.split(",")
data = {}  # (n, transport) -> peer -> size -> {"t": [...], "algo": set, "pred": [...]}
for line in open(samples):
    n, t, peer, size, rnd, us, algo, pred = line.rstrip("\n").split("\t")
    d = data.setdefault((int(n), t), {}).setdefault(peer, {}).setdefault(int(size), {"t": [], "algo": set(), "pred": []})
    d["t"].append(float(us))
    d["algo"].add(algo)
    if pred != "nan":
        d["pred"].append(float(pred))
med = lambda d: statistics.median(d["t"])
out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rounds": int(rounds), "iters": int(iters), "logs": log_dir,
       "configs": {}, "worst_chosen_over_best": None, "peers": {}}
worst = 1.0
for (n, t), peers in sorted(data.items()):
    if "auto" not in peers:
        continue
    print(f"\nallreduce float32, {n} ranks over {t}: median time per call (us) of {rounds} rounds")
    head = f"{'size':>10}{'auto':>12}{'chose':>8}" + "".join(f"{a:>12}" for a in algos) + f"{'best':>8}{'chosen/best':>13}"
    print(head)
    cfg = {}
    for size in sorted(peers["auto"]):
        auto = peers["auto"][size]
        chose = ",".join(sorted(auto["algo"]))
        forced = {a: med(peers[a][size]) for a in algos if a in peers and size in peers[a]}
        best = min(forced, key=forced.get) if forced else None
        ratio = forced[chose] / forced[best] if best and chose in forced else None
        if ratio is not None:
            worst = max(worst, ratio)
        mark = "" if ratio is None or ratio <= 1.05 else "  <-- more than 5% off"
        print(f"{size:>10}{med(auto):>12.1f}{chose:>8}" + "".join(f"{forced.get(a, float('nan')):>12.1f}" for a in algos)
              + f"{best or '-':>8}{(f'{ratio:.3f}' if ratio else '-'):>13}{mark}")
        cfg[str(size)] = {"auto_us": med(auto), "auto_algorithm": chose, "forced_us": forced, "best": best,
                          "chosen_over_best": ratio,
                          "auto_predicted_us": statistics.median(auto["pred"]) if auto["pred"] else None}
    out["configs"][f"np{n}-{t}"] = cfg
out["worst_chosen_over_best"] = worst
print(f"\nworst chosen/best over every size, rank count and transport: {worst:.3f} (criterion <= 1.05)")
big = 67108864
def busbw(n, us):  # nccl-tests' allreduce bus bandwidth, GB/s
    return big / (us * 1e-6) / 1e9 * 2 * (n - 1) / n
def peer_bw(t, peer):
    d = data.get((2, t), {}).get(peer, {}).get(big)
    return busbw(2, med(d)) if d else None
shm, tcp = peer_bw("shm", "auto"), peer_bw("tcp", "auto")
vader, mpitcp, gloo = peer_bw("shm", "vader"), peer_bw("tcp", "mpitcp"), peer_bw("tcp", "gloo")
if vader or mpitcp or gloo:
    print(f"\n2 ranks, 64 MiB, busbw GB/s (median of {rounds} rounds):")
    for name, v in (("hetcomm auto, shm", shm), ("Open MPI vader", vader), ("hetcomm auto, tcp", tcp),
                    ("Open MPI tcp", mpitcp), ("Gloo ring (tcp)", gloo)):
        if v:
            print(f"  {name:<20}{v:.3f}")
    if shm and vader:
        print(f"  hetcomm shm / vader: {shm / vader:.2f} (criterion >= 2.5)")
    best_tcp = max(v for v in (mpitcp, gloo) if v) if (mpitcp or gloo) else None
    if tcp and best_tcp:
        print(f"  hetcomm tcp / best of Gloo and Open MPI tcp: {tcp / best_tcp:.2f} (criterion >= 1.2)")
    out["peers"] = {"hetcomm_shm": shm, "vader": vader, "hetcomm_tcp": tcp, "mpi_tcp": mpitcp, "gloo_ring": gloo,
                    "shm_over_vader": shm / vader if shm and vader else None,
                    "tcp_over_best_peer": tcp / best_tcp if tcp and best_tcp else None}
if json_out:
    with open(json_out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"\nwrote {json_out}")
PY
