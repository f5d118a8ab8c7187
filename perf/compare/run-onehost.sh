#!/usr/bin/env bash
# One-host benchmark (issue 16): is the automatic choice the fastest algorithm? Allreduce (float32 sum) on 2 and 4
# ranks of this host, over shm and over tcp, from 8 B to 256 MiB: hetcomm's automatic choice against every
# algorithm forced (HETCOMM_ALGO), alternating in one run; and, for 2 ranks at 64 MiB, the default path against
# Open MPI (vader over shared memory, the tcp BTL over loopback) and Gloo's ring over loopback.
#
# Each round runs, for every N in --nranks, T in --transports and band of sizes (8 B-1 KiB, 2-64 KiB, 128 KiB-1 MiB,
# 2-16 MiB, 32 MiB and up, cut to --min/--max), back to back in an order shuffled per round (a fixed order lets the
# machine's drift favour whoever runs first):
#   auto    hetcomm-run -np N -x HETCOMM_TRANSPORT=T all_reduce_perf -b LO -e HI -f STEP -c 0 -n I -w W, I being
#           SMALL_ITERS up to 1 MiB and ITERS above (a call of a few microseconds varies by 2x from one run to the
#           next on this machine: many iterations; a large one is long enough in itself)
#   ALGO    the same with -x HETCOMM_ALGO=ALGO, for each ALGO in --algos (default: ring,rd,slots, every allreduce
#           algorithm that serves one host: hier and synth need two hosts). An algorithm forced where it does not
#           serve the call (slots above its size, or over tcp) runs the automatic choice instead; its table rows
#           name the algorithm that ran, and only rows of the forced one count as that algorithm's.
# The band keeps the runs compared with each other seconds apart: this VM switches between a fast and a slow mode
# for minutes at a time (2-3x apart on small calls), and a whole sweep per algorithm put them minutes apart.
# and (--peers, the default) for 2 ranks, in the shuffled order of the band that holds 64 MiB (so that they run
# beside hetcomm's runs of that size), at 64 MiB with PEER_ITERS iterations after 5 warm-up calls:
#   hetcomm hetcomm-run -np 2 all_reduce_perf, the automatic choice, over shm and over tcp: what the peers are
#           compared with (the same size and iterations as theirs; a sweep's 5 calls of 64 MiB are 50 ms)
#   vader   mpirun -np 2 --mca btl vader,self mpi_allreduce       (with hetcomm over shm)
#   mpitcp  mpirun -np 2 --mca btl tcp,self (loopback) mpi_allreduce (with hetcomm over tcp)
#   gloo    gloo_allreduce --algo ring, 2 processes on loopback   (with hetcomm over tcp)
# The time per call is nccl-tests' out-of-place time column (us, the average over iterations and ranks). Per size
# the script prints the median over rounds for auto and every forced algorithm, which algorithm auto chose, and
# chosen/best: per round, the time of the algorithm auto chose in that round (its forced run, so that both sides
# of the ratio are the same kind of run; auto's own run where it chose one that --algos does not force) over the
# fastest forced algorithm's in that round, the median over rounds; criterion: <= 1.05. Then the peers' busbw at
# 64 MiB and the ratios against them, each the median of the rounds' own ratios (criteria: >= 2.5 against vader,
# >= 1.2 against the better of Gloo and Open MPI's tcp).
#
# Usage: perf/compare/run-onehost.sh [--rounds 3] [--nranks 2,4] [--transports shm,tcp] [--algos ring,rd,slots]
#                                    [--min 8] [--max 256M] [--step 2] [--iters 5] [--small-iters 200]
#                                    [--warmup 3] [--no-peers]
#                                    [--peer-iters 20] [--json FILE] [--timeout 900] [--wait-quiet SEC]
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
ROUNDS=3
NRANKS=2,4
TRANSPORTS=shm,tcp
ALGOS=ring,rd,slots
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
[[ $STEP =~ ^[0-9]+$ && $STEP -ge 2 ]] || die "--step must be an integer of at least 2 (sizes grow by that factor)"
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

# The sizes run (as all_reduce_perf steps them), and their bands, "LO HI ITERS" in bytes: the sizes that fall in
# each (a band starts at the first size at or above its edge), many iterations up to 1 MiB.
SIZES=()
for ((size = MIN_B; size <= MAX_B; size *= STEP)); do SIZES+=("$size"); done
BANDS=()
band_edges=(1 2048 131072 2097152 33554432)
for ((i = 0; i < ${#band_edges[@]}; i++)); do
  edge=${band_edges[i]} next=${band_edges[i + 1]:-0}
  lo='' hi=''
  for size in "${SIZES[@]}"; do
    ((size >= edge && (next == 0 || size < next))) || continue
    [[ -n $lo ]] || lo=$size
    hi=$size
  done
  [[ -n $lo ]] && BANDS+=("$lo $hi $((hi <= 1 << 20 ? SMALL_ITERS : ITERS))")
done

# run_peer NAME ROUND TRANSPORT: one of the peers at PEER_SIZE, 2 ranks, into the samples; "hetcomm" is the
# automatic choice over TRANSPORT run as the peers are (that one size, their iterations), for the ratios.
run_peer() {
  local peer=$1 r=$2 t=$3 log=$LOG_DIR/$1.$3.round$2.log store k pids=()
  local mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca pml ob1)
  case $peer in
    hetcomm)
      run_logged "$log" "$RUN" -np 2 -x HETCOMM_TRANSPORT="$t" "$BUILD/bin/all_reduce_perf" -b "$PEER_SIZE" \
        -e "$PEER_SIZE" -n "$PEER_ITERS" -c 0 -w 5
      rows 2 "$t" hetcomm "$r" "$log" ;;
    vader)
      run_logged "$log" "${mpi[@]}" --mca btl vader,self "$MPI_BIN" --sizes "$PEER_SIZE" --iters "$PEER_ITERS" --warmup 5
      rows 2 shm vader "$r" "$log" ;;
    mpitcp)
      run_logged "$log" "${mpi[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo "$MPI_BIN" --sizes "$PEER_SIZE" \
        --iters "$PEER_ITERS" --warmup 5
      rows 2 tcp mpitcp "$r" "$log" ;;
    gloo)
      store=$(mktemp -d)
      for k in 0 1; do
        timeout "$TIMEOUT_S" "$GLOO_BIN" --rank $k --size 2 --store "$store" --host 127.0.0.1 --algo ring \
          --sizes "$PEER_SIZE" --iters "$PEER_ITERS" --warmup 5 >"$log.rank$k" 2>&1 &
        pids+=($!)
      done
      for k in "${pids[@]}"; do wait "$k" || die "gloo_allreduce failed (see $log.rank*)"; done
      rm -rf "$store"
      cp "$log.rank0" "$log"
      rows 2 tcp gloo "$r" "$log" ;;
  esac
}
PEER_SIZE=67108864
# The peers need 64 MiB among the sizes run.
if [[ $PEERS -eq 1 && " ${SIZES[*]} " != *" $PEER_SIZE "* ]]; then
  die "the peers run at 64 MiB: --min, --max and --step must include it (or --no-peers)"
fi

IFS=, read -r -a NLIST <<<"$NRANKS"
IFS=, read -r -a TLIST <<<"$TRANSPORTS"
IFS=, read -r -a ALIST <<<"$ALGOS"
for ((r = 1; r <= ROUNDS; r++)); do
  for n in "${NLIST[@]}"; do
    for t in "${TLIST[@]}"; do
      for ((band = 0; band < ${#BANDS[@]}; band++)); do
        read -r lo hi iters <<<"${BANDS[band]}"
        others=()
        if [[ $PEERS -eq 1 && $n -eq 2 && $lo -le $PEER_SIZE && $hi -ge $PEER_SIZE ]]; then
          case $t in shm) others=(hetcomm vader) ;; tcp) others=(hetcomm mpitcp gloo) ;; esac
        fi
        mapfile -t order < <(printf '%s\n' auto "${ALIST[@]}" "${others[@]}" | shuf --random-source=<(yes "$r$n$t$band"))
        for peer in "${order[@]}"; do
          if [[ $peer == hetcomm || $peer == vader || $peer == mpitcp || $peer == gloo ]]; then
            run_peer "$peer" "$r" "$t"
            continue
          fi
          algo=()
          [[ $peer == auto ]] || algo=(-x HETCOMM_ALGO="$peer")
          log=$LOG_DIR/np$n.$t.$peer.band$band.round$r.log
          [[ $WAIT_QUIET_S -eq 0 ]] || wait_quiet "$WAIT_QUIET_S" 15 >/dev/null
          run_logged "$log" "$RUN" -np "$n" -x HETCOMM_TRANSPORT="$t" "${algo[@]}" "$BUILD/bin/all_reduce_perf" \
            -b "$lo" -e "$hi" -n "$iters" -f "$STEP" -c 0 -w "$WARMUP"
          rows "$n" "$t" "$peer" "$r" "$log"
        done
      done
      echo "run-onehost: round $r np $n $t done (${#BANDS[@]} bands of sizes, each in its own shuffled order)" >&2
    done
  done
done

python3 - "$SAMPLES" "$JSON_OUT" "$ALGOS" "$ROUNDS" "$ITERS" "$LOG_DIR" <<'PY'
import json, statistics, sys, time
samples, json_out, algos, rounds, iters, log_dir = sys.argv[1:7]
algos = algos.split(",")
data = {}  # (n, transport) -> peer -> size -> {"t": [...], "algo": set, "pred": [...], "by_round": {round: (us, algo)}}
for line in open(samples):
    n, t, peer, size, rnd, us, algo, pred = line.rstrip("\n").split("\t")
    if peer in algos and algo != peer:
        continue  # forced where it does not serve: the automatic choice ran
    d = data.setdefault((int(n), t), {}).setdefault(peer, {}).setdefault(
        int(size), {"t": [], "algo": set(), "pred": [], "by_round": {}})
    d["t"].append(float(us))
    d["algo"].add(algo)
    d["by_round"][rnd] = (float(us), algo)
    if pred != "nan":
        d["pred"].append(float(pred))
med = lambda d: statistics.median(d["t"])
def round_ratio(peers, size):
    # Per round: the time of what auto chose (its forced run; auto's own where --algos does not force it) over the
    # fastest forced run of that round; the median over the rounds. None where nothing was forced.
    ratios = []
    for rnd, (auto_us, chose) in peers["auto"][size]["by_round"].items():
        forced = {a: peers[a][size]["by_round"][rnd][0] for a in algos
                  if size in peers.get(a, {}) and rnd in peers[a][size]["by_round"]}
        if forced:
            ratios.append(forced.get(chose, auto_us) / min(forced.values()))
    return statistics.median(ratios) if ratios else None
out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rounds": int(rounds), "iters": int(iters), "logs": log_dir,
       "configs": {}, "worst_chosen_over_best": None, "peers": {}}
worst, within, counted = 1.0, 0, 0
for (n, t), peers in sorted(data.items()):
    if "auto" not in peers:
        continue
    print(f"\nallreduce float32, {n} ranks over {t}: median time per call (us) of {rounds} rounds; chosen/best: the "
          "median of the rounds' own ratios")
    head = f"{'size':>10}{'auto':>12}{'chose':>8}" + "".join(f"{a:>12}" for a in algos) + f"{'best':>8}{'chosen/best':>13}"
    print(head)
    cfg = {}
    for size in sorted(peers["auto"]):
        auto = peers["auto"][size]
        chose = ",".join(sorted(auto["algo"]))
        forced = {a: med(peers[a][size]) for a in algos if a in peers and size in peers[a]}
        best = min(forced, key=forced.get) if forced else None
        ratio = round_ratio(peers, size)
        if ratio is not None:
            worst = max(worst, ratio)
            counted += 1
            within += ratio <= 1.05
        mark = "" if ratio is None or ratio <= 1.05 else "  <-- more than 5% off"
        print(f"{size:>10}{med(auto):>12.1f}{chose:>8}" + "".join(f"{forced.get(a, float('nan')):>12.1f}" for a in algos)
              + f"{best or '-':>8}{(f'{ratio:.3f}' if ratio else '-'):>13}{mark}")
        cfg[str(size)] = {"auto_us": med(auto), "auto_algorithm": chose, "forced_us": forced, "best": best,
                          "chosen_over_best": ratio,
                          "auto_predicted_us": statistics.median(auto["pred"]) if auto["pred"] else None}
    out["configs"][f"np{n}-{t}"] = cfg
out["worst_chosen_over_best"] = worst
out["within_5_percent"] = {"sizes": within, "of": counted}
print(f"\nchosen/best within 5 %: {within} of {counted} sizes; worst over every size, rank count and transport: "
      f"{worst:.3f} (criterion <= 1.05)")
big = 67108864
def busbw(n, us):  # nccl-tests' allreduce bus bandwidth, GB/s
    return big / (us * 1e-6) / 1e9 * 2 * (n - 1) / n
def peer_bw(t, peer):
    d = data.get((2, t), {}).get(peer, {}).get(big)
    return busbw(2, med(d)) if d else None
shm, tcp = peer_bw("shm", "hetcomm"), peer_bw("tcp", "hetcomm")
vader, mpitcp, gloo = peer_bw("shm", "vader"), peer_bw("tcp", "mpitcp"), peer_bw("tcp", "gloo")
if vader or mpitcp or gloo:
    print(f"\n2 ranks, 64 MiB, busbw GB/s (median of {rounds} rounds; the ratios: the median of the rounds' own)")
    for name, v in (("hetcomm auto, shm", shm), ("Open MPI vader", vader), ("hetcomm auto, tcp", tcp),
                    ("Open MPI tcp", mpitcp), ("Gloo ring (tcp)", gloo)):
        if v:
            print(f"  {name:<20}{v:.3f}")
    def paired(t, peer_names):
        # Per round, hetcomm's busbw over the best of the peers' in that round (they ran beside it); the median.
        auto = data.get((2, t), {}).get("hetcomm", {}).get(big)
        ratios = []
        for rnd, (us, _) in (auto["by_round"].items() if auto else []):
            theirs = [data[(2, t)][p][big]["by_round"][rnd][0] for p in peer_names
                      if big in data[(2, t)].get(p, {}) and rnd in data[(2, t)][p][big]["by_round"]]
            if theirs:
                ratios.append(min(theirs) / us)
        return (statistics.median(ratios), min(ratios), max(ratios)) if ratios else None
    shm_ratio, tcp_ratio = paired("shm", ["vader"]), paired("tcp", ["mpitcp", "gloo"])
    if shm_ratio:
        print(f"  hetcomm shm / vader: {shm_ratio[0]:.2f} (rounds {shm_ratio[1]:.2f}-{shm_ratio[2]:.2f}; "
              "criterion >= 2.5)")
    if tcp_ratio:
        print(f"  hetcomm tcp / best of Gloo and Open MPI tcp: {tcp_ratio[0]:.2f} (rounds {tcp_ratio[1]:.2f}-"
              f"{tcp_ratio[2]:.2f}; criterion >= 1.2)")
    out["peers"] = {"hetcomm_shm": shm, "vader": vader, "hetcomm_tcp": tcp, "mpi_tcp": mpitcp, "gloo_ring": gloo,
                    "shm_over_vader": shm_ratio[0] if shm_ratio else None,
                    "tcp_over_best_peer": tcp_ratio[0] if tcp_ratio else None,
                    "ratios_are": "the median over rounds of each round's ratio"}
if json_out:
    with open(json_out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"\nwrote {json_out}")
PY
