#!/usr/bin/env bash
# Every collective on many clusters (issue 16): for each cluster file and each collective, run-emulated.sh (the
# automatic choice, the flat ring or chain, Gloo's ring for allreduce, alternating in one run; the bound from
# hetcomm-topo --bound), then one table: the automatic choice's busbw as a fraction of the bound, against the flat
# algorithm and Gloo, and predicted over measured at 1 MiB and 64 MiB. Where a cell stays below 0.90 of the bound,
# it says which is at fault (hetcomm-packing, on the cluster's links): the bound (no tree packing reaches it), the
# synthesised packing (above the best), or the schedule as it ran (the bound is reachable).
#
# Clusters: the shipped ones (clusters/*.json) and --random N random ones (hetcomm-topo --random-cluster SEED with
# at most 4 hosts of 2 ranks, seeds 1..N or --seeds LIST). Each runs at a scale that keeps its traffic under the
# veth ceiling of this machine (--ceiling, MB/s of payload through every emulated NIC together; perf/README.md
# measures it): an allreduce at its bound moves 2(H-1) times the buffer across H hosts' NICs, so the scale is
# ceiling / (that rate at full speed), at most 1. --scale F forces one scale for all.
#
# Usage: perf/compare/run-clusters.sh [--clusters FILE,...] [--random 5] [--seeds 1,2,...] [--colls allreduce,...]
#                                     [--rounds 2] [--iters 3] [--small-iters 10] [--ceiling 150] [--scale F]
#                                     [--json FILE]
#        perf/compare/run-clusters.sh --summary DIR [--json FILE]   the table again from an earlier run's directory
# Needs root (network namespaces). Each cluster comes up and goes down again.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
CLUSTERS=""
RANDOM_N=5
SEEDS=""
COLLS=allreduce,allgather,reducescatter,broadcast
ROUNDS=2
ITERS=3
SMALL_ITERS=10
CEILING=150
SCALE=""
JSON_OUT=""
SUMMARY_OF=""
# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-clusters
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --clusters) CLUSTERS=${2:?}; shift 2 ;;
    --random) RANDOM_N=${2:?}; shift 2 ;;
    --seeds) SEEDS=${2:?}; shift 2 ;;
    --colls) COLLS=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --small-iters) SMALL_ITERS=${2:?}; shift 2 ;;
    --ceiling) CEILING=${2:?}; shift 2 ;;
    --scale) SCALE=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --summary) SUMMARY_OF=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-clusters: unknown argument: $1" >&2; usage 2 ;;
  esac
done
[[ $RANDOM_N =~ ^[0-9]+$ && $CEILING =~ ^[0-9]+$ ]] || die "--random and --ceiling take non-negative integers"
TOPO=$BUILD/bin/hetcomm-topo
PACKING=$BUILD/bin/hetcomm-packing
[[ -x $TOPO && -x $PACKING ]] || die "missing $TOPO or $PACKING (build first: scripts/setup.sh)"
# Runs every cluster and collective into $WORK, a line each in $WORK/summary.tsv.
run_clusters() {
  files=()
  if [[ -n $CLUSTERS ]]; then
    IFS=, read -r -a files <<<"$CLUSTERS"
  else
    files=("$REPO_ROOT"/clusters/*.json)
  fi
  if [[ -z $SEEDS && $RANDOM_N -gt 0 ]]; then SEEDS=$(seq -s, 1 "$RANDOM_N"); fi
  IFS=, read -r -a seeds <<<"$SEEDS"
  for seed in "${seeds[@]}"; do
    [[ -n $seed ]] || continue
    "$TOPO" --random-cluster "$seed" --max-hosts 4 --max-ranks 2 >"$WORK/random-$seed.json"
    files+=("$WORK/random-$seed.json")
  done

  SUMMARY=$WORK/summary.tsv  # cluster scale coll json
  : >"$SUMMARY"
  IFS=, read -r -a colls <<<"$COLLS"
  for f in "${files[@]}"; do
    [[ -f $f ]] || die "no cluster file $f"
    scale=$SCALE
    if [[ -z $scale ]]; then
      "$TOPO" --bound --cluster "$f" --size 1 --bound-json "$WORK/b.json" >/dev/null
      scale=$(python3 - "$WORK/b.json" "$CEILING" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
h = b["nhosts"]
rate = 2 * (h - 1) / (b["allreduce"]["time_us"] * 1e-6) / 1e6  # MB/s of payload at the bound (size 1 byte)
print(f"{min(1.0, float(sys.argv[2]) / rate):.2f}" if rate > 0 else "1")
PY
  )
    fi
    for coll in "${colls[@]}"; do
      out=$WORK/$(basename "$f" .json).$coll.json
      echo "run-clusters: $(basename "$f") at scale $scale: $coll" >&2
      "$SCRIPT_DIR/run-emulated.sh" --cluster "$f" --coll "$coll" --scale "$scale" --rounds "$ROUNDS" --iters "$ITERS" \
        --small-iters "$SMALL_ITERS" --warmup 1 --json "$out" >"$out.log" 2>&1 || { tail -30 "$out.log"; die "run-emulated failed"; }
      printf '%s\t%s\t%s\t%s\n' "$(basename "$f" .json)" "$scale" "$coll" "$out" >>"$SUMMARY"
    done
    # A copy of each cluster file beside its results (the random ones are there already): --summary reads them.
    [[ $(dirname "$f") -ef $WORK ]] || cp "$f" "$WORK/"
  done
}

if [[ -n $SUMMARY_OF ]]; then
  [[ -f $SUMMARY_OF/summary.tsv ]] || die "--summary $SUMMARY_OF: no summary.tsv there (not a run-clusters.sh directory)"
  WORK=$SUMMARY_OF
else
  WORK=$BUILD/compare/clusters-$(date +%Y%m%d-%H%M%S)-$$
  mkdir -p "$WORK"
  run_clusters
fi

python3 - "$WORK/summary.tsv" "$JSON_OUT" "$PACKING" "$WORK" <<'PY'
import json, os, subprocess, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
packing_tool, work = sys.argv[3], sys.argv[4]
packings = {}
def packing(cluster):
    # The packings against the bound on the cluster's links (its rates scaled alike: the ratios do not change).
    if cluster not in packings:
        out = os.path.join(work, cluster + ".packing.json")
        subprocess.run([packing_tool, "--cluster", os.path.join(work, cluster + ".json"), "--json", out],
                       check=True, stdout=subprocess.DEVNULL)
        packings[cluster] = json.load(open(out))
    return packings[cluster]
SLACK = 1.0105  # hetcomm-packing's: the column generation's gap and the library's 1 % rule
out = []
print(f"\n{'cluster':<16}{'scale':>6} {'collective':<14}{'auto':>7}{'busbw':>9}{'bound':>9}{'/bound':>8}{'flat':>9}"
      f"{'/flat':>7}{'gloo':>9}{'/gloo':>7}{'pred/meas 1M':>14}{'64M':>6}{'trees':>7}  below 0.90, at fault; binds")
for cluster, scale, coll, path in rows:
    r = json.load(open(path))
    res = r["results"]
    big = max(int(s) for s in res["auto"])
    small = min(int(s) for s in res["auto"])
    flat = "ring" if coll in ("allreduce", "allgather", "reducescatter") else "chain"
    a = res["auto"][str(big)]
    f = res.get(flat, {}).get(str(big))
    g = res.get("gloo", {}).get(str(big))
    b = r["bound"]
    pm = lambda s: res["auto"][str(s)]["predicted_over_measured"]
    fmt = lambda x, p=".4f": format(x, p) if x is not None else "-"
    row = {"cluster": cluster, "scale": float(scale), "collective": coll, "algorithm": a["algorithm"],
           "busbw": a["busbw_median"], "bound_busbw": b["busbw"], "over_bound": a["busbw_median"] / b["busbw"],
           "flat_busbw": f["busbw_median"] if f else None,
           "over_flat": a["busbw_median"] / f["busbw_median"] if f else None,
           "gloo_busbw": g["busbw_median"] if g else None,
           "over_gloo": a["busbw_median"] / g["busbw_median"] if g else None,
           "pred_over_meas_small": pm(small), "pred_over_meas_big": pm(big), "binding": b["binding"]}
    # Below 0.90, which is at fault: trees take at best best_over_bound times the bound's time; the synthesised
    # schedule's packing packing_over_bound times.
    pk = packing(cluster)[coll]
    row["trees_best_over_bound"], row["packing_over_bound"] = pk["best_over_bound"], pk["packing_over_bound"]
    fault = ""
    if row["over_bound"] < 0.90:
        if pk["best_over_bound"] is None:
            fault = "not known (over 32 hosts, or the simplex failed)"
        elif pk["best_over_bound"] > SLACK:
            fault = f"bound (trees reach {1 / pk['best_over_bound']:.2f} of it)"
        elif row["algorithm"] == "synth" and pk["packing_over_bound"] > SLACK:
            fault = f"packing ({pk['packing_over_bound']:.2f}x the bound)"
        else:
            fault = "schedule (the bound is reachable)"
    row["at_fault"] = fault or None
    out.append(row)
    print(f"{cluster:<16}{scale:>6} {coll:<14}{row['algorithm']:>7}{row['busbw']:>9.4f}{row['bound_busbw']:>9.4f}"
          f"{row['over_bound']:>8.2f}{fmt(row['flat_busbw']):>9}{fmt(row['over_flat'], '.2f'):>7}{fmt(row['gloo_busbw']):>9}"
          f"{fmt(row['over_gloo'], '.2f'):>7}{fmt(row['pred_over_meas_small'], '.2f'):>14}{fmt(row['pred_over_meas_big'], '.2f'):>6}"
          f"{fmt(row['trees_best_over_bound'] and 1 / row['trees_best_over_bound'], '.2f'):>7}"
          f"  {fault + '; ' if fault else ''}{row['binding']}")
if sys.argv[2]:
    json.dump(out, open(sys.argv[2], "w"), indent=2)
    print(f"\nwrote {sys.argv[2]}")
PY
