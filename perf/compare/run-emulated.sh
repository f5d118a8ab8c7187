#!/usr/bin/env bash
# Heterogeneity benchmark (issue 5): allreduce on an emulated mixed-NIC cluster (scripts/emulate-cluster.sh), hetcomm's
# automatic choice (hierarchical on mixed-4x2) against a flat ring in rank order (HETCOMM_ALGO=ring) and against
# Gloo's ring allreduce run inside the same network namespaces, measured alternately in one run. With --coll, the
# same for allgather, reducescatter (against the flat ring), broadcast or reduce (against the flat chain); Gloo
# only runs for allreduce.
#
# Each round runs, in this order:
#   auto   hetcomm-run --cluster CLUSTER all_reduce_perf -b SIZE -e SIZE -c 0 -n N -w WARMUP -z 1, once for 64 MiB
#          (N = ITERS) and then once for 1 MiB (N = SMALL_ITERS: a 30 ms call varies by 10 % from one to the next):
#          large first, as in a job, whose large calls teach the cost model what a synthesised schedule reaches on
#          the cluster (HETCOMM_SYNTH_LEARN, kept beside the probe's cache) before its small ones are priced
#   ring   the same with -x HETCOMM_ALGO=ring (chain for broadcast and reduce)
#   gloo   gloo_allreduce --algo ring, one process per rank inside its host's namespace (ip netns exec), bound to
#          the host's address on the one fabric every host shares (Gloo's TCP device uses one interface)
#   ALGO   with --algos ALGO,...: the same as auto with -x HETCOMM_ALGO=ALGO, for each one (e.g. --algos rd,hier:
#          every allreduce algorithm's predicted against measured time)
# busbw is recomputed from the time column (us), which has more digits than the GB/s ones at these rates.
# Prints median (min-max) busbw, the algorithm and predicted time per row, the ratios, and the collective's lower
# bound from the link rates (hetcomm-topo --bound on the cluster file: max-flow cut bounds and, for allreduce, the
# aggregate bound; perf/README.md explains them), with auto's busbw as a fraction of it. busbw follows nccl-tests:
# allreduce bytes/time * 2(n-1)/n, allgather and reducescatter (n-1)/n, broadcast and reduce 1 (sizes are the
# whole buffer, as in nccl-tests).
# --scale F runs a copy of the cluster with every NIC's rate times F (and its bound likewise): two cores push only
# so much through veths (perf/README.md measures it), and a cluster whose traffic stays under that ceiling measures
# the schedule, not the emulator. hetcomm runs blocking (-z 1): each
# call is timed on its own, which is what the cost model predicts and what Gloo's calls do; queued calls would
# overlap one call's last levels with the next one's first (at 1 MiB, 20 % faster than one call alone).
# Broadcast and reduce run with --barrier-each 1 -a 3: each call from a common start, the time of the slowest
# rank. Back to back, the ranks near the root finish a call early and start the next, so the average over ranks
# measures neither one call nor the rate of many; the cost model predicts when the last rank is done.
#
# Usage: perf/compare/run-emulated.sh [--cluster clusters/mixed-4x2.json] [--coll allreduce] [--rounds 3]
#                                     [--iters 3] [--small-iters 20] [--warmup 1] [--algos ALGO,...]
#                                     [--no-gloo] [--keep-up] [--scale F] [--json FILE] [--timeout 900]
# Needs root (network namespaces); brings the cluster up if it is not, and down again unless --keep-up or it was
# already up.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
CLUSTER=$REPO_ROOT/clusters/mixed-4x2.json
ROUNDS=3
ITERS=3
SMALL_ITERS=20
WARMUP=1
RUN_GLOO=1
EXTRA_ALGOS=()
KEEP_UP=0
JSON_OUT=""
TIMEOUT_S=900
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
SIZES="67108864,1048576"  # the bound's size first
COLL=allreduce
TIMING=()  # how perf times a call; rooted collectives override it (see the comment above)
SCALE=1

# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-emulated
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cluster) CLUSTER=${2:?}; shift 2 ;;
    --coll) COLL=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --small-iters) SMALL_ITERS=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --algos) IFS=, read -r -a EXTRA_ALGOS <<<"${2:?}"; shift 2 ;;
    --no-gloo) RUN_GLOO=0; shift ;;
    --keep-up) KEEP_UP=1; shift ;;
    --scale) SCALE=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-emulated: unknown argument: $1" >&2; usage 2 ;;
  esac
done
for v in ROUNDS ITERS SMALL_ITERS TIMEOUT_S; do
  flag=${v,,}
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${flag//_/-} must be a positive integer"
done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
case $COLL in
  allreduce) PERF=all_reduce_perf FLAT=ring ;;
  allgather) PERF=all_gather_perf FLAT=ring RUN_GLOO=0 ;;
  reducescatter) PERF=reduce_scatter_perf FLAT=ring RUN_GLOO=0 ;;
  broadcast) PERF=broadcast_perf FLAT=chain RUN_GLOO=0 TIMING=(--barrier-each 1 -a 3) ;;
  reduce) PERF=reduce_perf FLAT=chain RUN_GLOO=0 TIMING=(--barrier-each 1 -a 3) ;;
  *) die "--coll must be allreduce, allgather, reducescatter, broadcast or reduce (got '$COLL')" ;;
esac
for a in "${EXTRA_ALGOS[@]}"; do
  [[ $a =~ ^[a-z0-9_-]+$ && $a != auto && $a != gloo && $a != "$FLAT" ]] \
    || die "--algos: '$a' is not a hetcomm algorithm name other than auto and $FLAT (which always run)"
done
[[ $SCALE =~ ^[0-9]*\.?[0-9]+$ ]] && python3 -c "import sys; sys.exit(not 0 < float('$SCALE') <= 1)" \
  || die "--scale must be a number in (0, 1]"
RUN=$BUILD/bin/hetcomm-run
for b in "$RUN" "$BUILD/bin/$PERF" "$BUILD/bin/hetcomm-topo"; do [[ -x $b ]] || die "missing $b (build first)"; done
CMP_DIR=$BUILD/compare
mkdir -p "$CMP_DIR"
if [[ $SCALE != 1 ]]; then  # a copy with every rate scaled, under a name of its own
  scaled=$CMP_DIR/$(basename "$CLUSTER" .json)-x$SCALE.json
  python3 - "$CLUSTER" "$SCALE" >"$scaled" <<'PY' || die "cannot scale $CLUSTER"
import json, sys
c = json.load(open(sys.argv[1]))
f = float(sys.argv[2])
c["name"] = f"{c['name']}-x{sys.argv[2]}"
c["description"] = f"{c.get('description', '')} Rates scaled by {sys.argv[2]} (perf/compare/run-emulated.sh --scale)."
for h in c["hosts"]:
    for n in h["nics"]:
        n["rateMbps"] = max(1, round(n["rateMbps"] * f))
json.dump(c, sys.stdout, indent=1)
PY
  CLUSTER=$scaled
fi
cluster_up "$CLUSTER" "$KEEP_UP"
NAME=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$CLUSTER")
GLOO_BIN=$CMP_DIR/gloo_allreduce
if [[ $RUN_GLOO -eq 1 ]]; then
  ensure_packages libgloo-dev
  if [[ ! -x $GLOO_BIN || $SCRIPT_DIR/gloo_allreduce.cc -nt $GLOO_BIN ]]; then
    nice -n 10 g++ -std=c++17 -O2 -pthread "$SCRIPT_DIR/gloo_allreduce.cc" -o "$GLOO_BIN" -lgloo \
      || die "building gloo_allreduce failed"
  fi
fi
# Per rank: its namespace and its address on the fabric every host shares (for Gloo).
mapfile -t PLACES < <(python3 - "$STATE" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
shared = set.intersection(*[{n["fabric"] for n in h["nics"]} for h in s["hosts"]])
if not shared:
    sys.exit("run-emulated: no fabric reaches every host; Gloo needs one")
fab = sorted(shared)[0]
for h in s["hosts"]:
    addr = next(n["addr"] for n in h["nics"] if n["fabric"] == fab)
    for _ in range(h.get("ranks", s["ranksPerHost"])):
        print(h["netns"], addr)
PY
)
NRANKS=${#PLACES[@]}

LOG_DIR=$CMP_DIR/logs/emulated-$NAME-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOG_DIR"
BIG=${SIZES%%,*}
"$BUILD/bin/hetcomm-topo" --bound --cluster "$CLUSTER" --size "$BIG" --bound-json "$LOG_DIR/bound.json" \
  >"$LOG_DIR/bound.txt" || die "hetcomm-topo --bound failed (see $LOG_DIR/bound.txt)"
SAMPLES=$LOG_DIR/samples.tsv  # peer size round time_us algorithm predicted_us
: >"$SAMPLES"

rows() {  # PEER ROUND LOG SIZE: "peer size round time algo predicted" from an nccl-tests style table (rank 0)
  python3 - "$1" "$2" "$3" "$4" <<'PY' >>"$SAMPLES"
import re, sys
peer, rnd, log, sizes = sys.argv[1:5]
want = {int(s) for s in sizes.split(",")}
got = {}
for line in open(log, errors="replace"):
    m = re.match(r"\s*\[(\d+)\]\s?(.*)$", line)
    if m:
        if m.group(1) != "0":
            continue
        line = m.group(2)
    f = line.split()
    if len(f) < 9 or not f[0].isdigit() or not f[1].isdigit():
        continue
    # perf rounds an allgather's or reduce-scatter's size down to whole blocks (7 ranks: 1048576 runs as 1048544):
    # such a row stands for the size asked for.
    size = next((w for w in want if 0 <= w - int(f[0]) < 4096), None)
    if size is None:
        continue
    algo, pred = (f[13], f[14]) if len(f) >= 15 else ("-", "nan")
    got[size] = (float(f[5]), algo, pred)
missing = want - set(got)
if missing:
    sys.exit(f"run-emulated: {peer} round {rnd}: no row for {sorted(missing)} in {log}")
for s in sorted(got):
    t, a, p = got[s]
    print(f"{peer}\t{s}\t{rnd}\t{t}\t{a}\t{p}")
PY
}

run_gloo() {  # LOG SIZE ITERS
  local store pids=() r=0 rc=0
  store=$(mktemp -d)
  for place in "${PLACES[@]}"; do
    read -r ns addr <<<"$place"
    ip netns exec "$ns" timeout "$TIMEOUT_S" "$GLOO_BIN" --rank "$r" --size "$NRANKS" --store "$store" \
      --host "$addr" --algo ring --sizes "$2" --iters "$3" --warmup "$WARMUP" >"$1.rank$r" 2>&1 &
    pids+=($!)
    r=$((r + 1))
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  rm -rf "$store"
  [[ $rc -eq 0 ]] || { tail -n 20 "$1".rank*; die "gloo_allreduce failed"; }
  cp "$1.rank0" "$1"
}

echo "run-emulated: cluster $NAME ($NRANKS ranks), $ROUNDS rounds; logs in $LOG_DIR" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for peer in auto "$FLAT" gloo "${EXTRA_ALGOS[@]}"; do
    [[ $peer != gloo || $RUN_GLOO -eq 1 ]] || continue
    for size in ${SIZES//,/ }; do
      iters=$ITERS
      ((size >= 16 << 20)) || iters=$SMALL_ITERS
      log=$LOG_DIR/$peer.round$r.$size.log
      algo=()
      [[ $peer == auto ]] || algo=(-x HETCOMM_ALGO="$peer")
      if [[ $peer == gloo ]]; then
        run_gloo "$log" "$size" "$iters"
      else
        # The init's log says where the link figures came from and what was learned of the synthesised schedules.
        run_logged "$log" "$RUN" --cluster "$CLUSTER" "${algo[@]}" -x HETCOMM_DEBUG=INFO -x HETCOMM_DEBUG_SUBSYS=INIT \
          "$BUILD/bin/$PERF" -b "$size" -e "$size" -c 0 -n "$iters" -w "$WARMUP" -z 1 "${TIMING[@]}"
      fi
      rows "$peer" "$r" "$log" "$size"
    done
    echo "run-emulated: round $r $peer: $(awk -v p="$peer" -v r="$r" '$1 == p && $3 == r { printf "%s B %.0f us  ", $2, $4 }' "$SAMPLES")" >&2
  done
done

python3 - "$SAMPLES" "$STATE" "$JSON_OUT" "$ROUNDS" "$ITERS" "$WARMUP" "$LOG_DIR" "$COLL" "$FLAT" "$SMALL_ITERS" \
  "${TIMING[*]}" "${EXTRA_ALGOS[@]}" <<'PY'
import json, os, statistics, sys, time
samples, state, json_out, rounds, iters, warmup, log_dir, coll, flat, small_iters, timing = sys.argv[1:12]
extra = [a for a in sys.argv[12:] if a not in ("auto", flat, "gloo")]
# What the time column is: the average over ranks of back-to-back calls, or (rooted) the slowest rank's call.
timing_note = "the slowest rank, each call from a barrier" if "--barrier-each" in timing else "average over ranks"
s = json.load(open(state))
hosts = s["hosts"]
n = sum(h.get("ranks", s["ranksPerHost"]) for h in hosts)
bounds = json.load(open(os.path.join(log_dir, "bound.json")))

data = {}
for line in open(samples):
    peer, size, rnd, t, algo, pred = line.rstrip("\n").split("\t")
    d = data.setdefault(peer, {}).setdefault(int(size), {"t": [], "algo": set(), "pred": []})
    d["t"].append(float(t))
    d["algo"].add(algo)
    if pred != "nan":
        d["pred"].append(float(pred))
busf = {"allreduce": 2.0 * (n - 1) / n, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n}.get(coll, 1.0)
def busbw(size, t_us):
    return size / (t_us * 1e-6) / 1e9 * busf
print(f"\n{coll} float32 on emulated cluster {s['name']} ({n} ranks, {len(hosts)} hosts); busbw GB/s = bytes/time * {busf:.3f}, median (min-max) of {rounds} rounds of {iters} iterations "
      f"({small_iters} below 16 MiB); time: {timing_note}")
print(f"{'peer':<8}{'size':>10}{'busbw':>28}{'time (us)':>14}{'algorithm':>11}{'predicted (us)':>16}{'pred/meas':>11}")
summary = {}
for peer in ["auto", flat, "gloo"] + extra:
    for size, d in sorted(data.get(peer, {}).items()):
        bws = [busbw(size, t) for t in d["t"]]
        tm = statistics.median(d["t"])
        pred = statistics.median(d["pred"]) if d["pred"] else None
        summary.setdefault(peer, {})[size] = {
            "busbw_median": statistics.median(bws), "busbw_min": min(bws), "busbw_max": max(bws),
            "time_us_median": tm, "algorithm": ",".join(sorted(d["algo"])), "predicted_us": pred,
            "predicted_over_measured": pred / tm if pred else None}
        print(f"{peer:<8}{size:>10}{statistics.median(bws):>12.4f} ({min(bws):.4f}-{max(bws):.4f})"
              f"{tm:>14.0f}{','.join(sorted(d['algo'])):>11}{(f'{pred:.0f}' if pred else '-'):>16}"
              f"{(f'{pred / tm:.3f}' if pred else '-'):>11}")
big = max(data["auto"])
ratios = {}
a = summary["auto"][big]["busbw_median"]
ratios[f"auto/{flat}"] = a / summary[flat][big]["busbw_median"]
b = bounds[coll]
bound = {"binding": b["binding"], "time_s": b["time_us"] * 1e-6, "busbw": b["busbw"]}
print(f"\nbound at {big >> 20} MiB (hetcomm-topo --bound): time >= {bound['time_s']:.3f} s, busbw <= "
      f"{bound['busbw']:.4f} GB/s; binds: {b['binding']}")
ratios["auto/bound"] = a / bound["busbw"]
if "gloo" in summary:
    ratios["auto/gloo"] = a / summary["gloo"][big]["busbw_median"]
for k, v in ratios.items():
    print(f"ratio {k} at {big >> 20} MiB: {v:.3f}")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"cluster": s["name"], "collective": coll, "nranks": n, "rounds": int(rounds),
                   "iters": int(iters), "small_iters": int(small_iters), "warmup": int(warmup), "timing": timing_note, "logs": log_dir,
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "bound": bound,
                   "results": {p: {str(k): v for k, v in d.items()} for p, d in summary.items()},
                   "ratios": ratios}, f, indent=2)
        f.write("\n")
    print(f"\nwrote {json_out}")
PY
