#!/usr/bin/env bash
# The planner's benchmarks (issue 17): how well its predictions match hetcomm-train's measured steps, and how its
# automatic plan compares with hand plans, on emulated clusters (scripts/emulate-cluster.sh) with emulated
# compute (--emulate-compute: each layer waits its FLOPs at the device's speed x --reference-gflops; messages
# keep their real sizes), so 8 ranks on this machine's 2 cores measure what a plan's communication, bubbles and
# overlap cost.
#
#   fidelity  on each --clusters cluster, with mixed device speeds: --plans random plans (seeded; random degrees,
#             per-stage TP, uneven layers and micro-batches, micro-batch size, ZeRO-1, pipeline depth 1 or 2, and
#             ranks placed along the hosts or at random) and the --plan auto plan, each run with --predict. Predicted against measured
#             step (median of the steps after --skip): the median absolute error, Kendall's tau of the two
#             orders, and the auto plan against the best measured. Then --real plans with real compute on 2 local
#             ranks (the profile measured on this host).
#   quality   on mixed-4x2 (hosts 0-1 speed 1, 2-3 speed 0.5), measured tokens/s of the auto plan, the README's
#             best hand plan (DP8, micro-batches by speed), a Megatron-style plan (TP2 x PP2 x DP2, even layers
#             and micro-batches, TP in a host), the same with --assignment naive, and one speed-1 device alone:
#             the HetHub bound is (sum of the speeds = 6) x that. Twice: without memory limits, and with limits
#             on the slow hosts (--slow-memory) that leave them no room for a whole replica (--limits: only
#             one of the two).
#
# Usage: perf/compare/run-planner.sh [--clusters "mixed-4x2 eth-4x2"] [--plans 12] [--real 3] [--seed 1]
#                                    [--steps 5] [--skip 1] [--reference-gflops 50] [--n-layer 12]
#                                    [--global-batch 48] [--slow-memory 80M] [--rounds 2] [--only fidelity|quality]
#                                    [--limits both|none|slow]
#                                    [--json FILE] [--timeout 600]
# Needs root (network namespaces); brings each cluster up and down again.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-planner
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
CLUSTERS="mixed-4x2 eth-4x2"
PLANS=12 REAL=3 SEED=1 STEPS=5 SKIP=1 GFLOPS=50 NLAYER=12 GLOBAL=48 SLOWMEM=80M ROUNDS=2 ONLY="" LIMITS=both JSON_OUT="" TIMEOUT_S=600
while [[ $# -gt 0 ]]; do
  case "$1" in
    --clusters) CLUSTERS=${2:?}; shift 2 ;;
    --plans) PLANS=${2:?}; shift 2 ;;
    --real) REAL=${2:?}; shift 2 ;;
    --seed) SEED=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --skip) SKIP=${2:?}; shift 2 ;;
    --reference-gflops) GFLOPS=${2:?}; shift 2 ;;
    --n-layer) NLAYER=${2:?}; shift 2 ;;
    --global-batch) GLOBAL=${2:?}; shift 2 ;;
    --slow-memory) SLOWMEM=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --only) ONLY=${2:?}; shift 2 ;;
    --limits) LIMITS=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-planner: unknown argument: $1" >&2; usage 2 ;;
  esac
done
for v in PLANS REAL SEED STEPS ROUNDS TIMEOUT_S NLAYER GLOBAL; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "${v,,}: must be a non-negative integer"
done
[[ $SKIP =~ ^[0-9]+$ && $SKIP -lt $STEPS ]] || die "--skip must be a non-negative integer below --steps ($STEPS)"
[[ -z $ONLY || $ONLY == fidelity || $ONLY == quality ]] || die "--only takes fidelity or quality"
[[ $LIMITS == both || $LIMITS == none || $LIMITS == slow ]] || die "--limits takes both, none or slow"
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
for b in hetcomm-run hetcomm-train; do [[ -x $BUILD/bin/$b ]] || die "missing $BUILD/bin/$b (build first)"; done
LOG_DIR=$BUILD/compare/logs/planner-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOG_DIR"
echo "run-planner: logs in $LOG_DIR" >&2

exec python3 - "$REPO_ROOT" "$BUILD" "$LOG_DIR" "$CLUSTERS" "$PLANS" "$REAL" "$SEED" "$STEPS" "$SKIP" "$GFLOPS" \
  "$NLAYER" "$GLOBAL" "$SLOWMEM" "$ROUNDS" "$ONLY" "$JSON_OUT" "$TIMEOUT_S" "$LIMITS" <<'PY'
import itertools, json, os, random, statistics as st, subprocess, sys

(repo, build, logs, clusters, n_plans, n_real, seed, steps, skip, gflops, n_layer, global_batch, slow_memory,
 rounds, only, json_out, timeout, limits_mode) = sys.argv[1:19]
n_plans, n_real, seed, steps, skip = int(n_plans), int(n_real), int(seed), int(steps), int(skip)
n_layer, global_batch, rounds, timeout = int(n_layer), int(global_batch), int(rounds), int(timeout)
RUN, TRAIN = f"{build}/bin/hetcomm-run", f"{build}/bin/hetcomm-train"
EMULATE = f"{repo}/scripts/emulate-cluster.sh"
CONFIG = f"{repo}/configs/gpt-bench.json"
# Device speeds per cluster: two islands of unlike devices, or unlike devices inside each island.
SPEEDS = {"mixed-4x2": [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5], "eth-4x2": [1, 1, 0.5, 0.5, 1, 1, 0.5, 0.5]}
COMMON = ["--config", CONFIG, "--n-layer", str(n_layer), "--global-batch", str(global_batch), "--steps", str(steps),
          "--warmup", "1", "--eval-every", "0", "--threads", "1", "--no-progress"]
EMULATED = ["--emulate-compute", "--reference-gflops", gflops]


def log(msg):
    print(f"run-planner: {msg}", file=sys.stderr, flush=True)


def run(name, cmd):
    """Runs cmd with --log-json and --summary-json; returns (median measured step ms, predicted step ms or None)."""
    out, js, summ = f"{logs}/{name}.log", f"{logs}/{name}.jsonl", f"{logs}/{name}.summary.json"
    with open(out, "w") as f:
        r = subprocess.run(cmd + ["--log-json", js, "--summary-json", summ], stdout=f, stderr=subprocess.STDOUT,
                           timeout=timeout)
    if r.returncode != 0:
        tail = open(out).read().splitlines()[-15:]
        sys.exit(f"run-planner: {name} failed ({r.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))
    rows = [json.loads(l) for l in open(js) if l.strip()]
    timed = [r["step_ms"] for r in rows if r["step"] > skip]
    s = json.load(open(summ))
    return st.median(timed), (s.get("predicted") or {}).get("step_ms"), s


def cluster_cmd(cluster):
    return [RUN, "--cluster", f"{repo}/clusters/{cluster}.json", "--ranks-per-host", "2", TRAIN]


def compositions(total, parts, rng, lo=1):
    """A random split of total into parts integers >= lo."""
    cuts = sorted(rng.sample(range(1, total - parts * (lo - 1)), parts - 1))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [total - parts * (lo - 1)])]
    return [s + lo - 1 for s in sizes]


def random_plan(rng, depth_rng, world=8, rph=2):
    """A valid random plan for 8 ranks on 4 hosts of 2 (its pipeline depth, 1 or 2, from depth_rng: the rest is the
    plan the seed gave before plans had a depth)."""
    while True:
        per_replica = rng.choice([1, 2, 4, 8])
        dp = world // per_replica
        tps, left = [], per_replica
        while left:
            t = rng.choice([1, 2]) if left >= 2 else 1
            tps.append(t)
            left -= t
        if len(tps) > n_layer:
            continue
        mb = rng.choice([m for m in (1, 2, 4) if global_batch % m == 0])
        total = global_batch // mb
        if total < dp:
            continue
        plan = {"data_parallel": dp, "micro_batch": mb,
                "stages": [{"layers": l, "tensor_parallel": t} for l, t in zip(compositions(n_layer, len(tps), rng), tps)],
                "micro_batches": compositions(total, dp, rng), "zero": rng.choice([0, 1]) if dp > 1 else 0}
        # Ranks: along the hosts (a TP group of 2 on one host where it can) or at random.
        ranks = list(range(world))
        if rng.random() < 0.5:
            rng.shuffle(ranks)
        else:
            hosts = list(range(world // rph))
            rng.shuffle(hosts)
            ranks = [h * rph + k for h in hosts for k in range(rph)]
        it = iter(ranks)
        plan["ranks"] = [[[next(it) for _ in range(t)] for t in tps] for _ in range(dp)]
        if len(tps) > 1:
            plan["pipeline_depth"] = depth_rng.choice([1, 2])
        return plan


def kendall(xs, ys):
    pairs = list(itertools.combinations(range(len(xs)), 2))
    s = sum((1 if (xs[i] - xs[j]) * (ys[i] - ys[j]) > 0 else -1 if (xs[i] - xs[j]) * (ys[i] - ys[j]) < 0 else 0)
            for i, j in pairs)
    return s / len(pairs) if pairs else float("nan")


def up(cluster):
    subprocess.run([EMULATE, "up", f"{repo}/clusters/{cluster}.json"], check=True, stdout=sys.stderr)


def down(cluster):
    subprocess.run([EMULATE, "down", f"{repo}/clusters/{cluster}.json"], check=False, stdout=sys.stderr)


result = {"reference_gflops": float(gflops), "n_layer": n_layer, "global_batch": global_batch, "logs": logs}

# ---- fidelity ----
if only in ("", "fidelity"):
    rng, depth_rng = random.Random(seed), random.Random(seed + 1000003)
    fidelity = {}
    for cluster in clusters.split():
        speeds = ",".join(f"{v:g}" for v in SPEEDS[cluster])
        up(cluster)
        try:
            rows = []
            for i in range(n_plans):
                plan = random_plan(rng, depth_rng)
                path = f"{logs}/{cluster}.plan{i}.json"
                json.dump(plan, open(path, "w"))
                meas, pred, _ = run(f"{cluster}.plan{i}", cluster_cmd(cluster) + COMMON + EMULATED +
                                    ["--device-speeds", speeds, "--plan", path, "--predict"])
                rows.append({"plan": plan, "measured_ms": meas, "predicted_ms": pred})
                log(f"{cluster} plan {i}: predicted {pred:.0f} ms, measured {meas:.0f} ms ({pred / meas:.2f}x)")
            meas, pred, _ = run(f"{cluster}.auto", cluster_cmd(cluster) + COMMON + EMULATED +
                                ["--device-speeds", speeds, "--plan", "auto"])
            log(f"{cluster} auto: predicted {pred:.0f} ms, measured {meas:.0f} ms")
        finally:
            down(cluster)
        errs = [abs(r["predicted_ms"] - r["measured_ms"]) / r["measured_ms"] for r in rows]
        tau = kendall([r["predicted_ms"] for r in rows], [r["measured_ms"] for r in rows])
        best = min([r["measured_ms"] for r in rows] + [meas])
        fidelity[cluster] = {"speeds": speeds, "plans": rows, "auto": {"measured_ms": meas, "predicted_ms": pred},
                             "median_abs_error": st.median(errs), "max_abs_error": max(errs), "kendall_tau": tau,
                             "auto_over_best": meas / best}
    # Real compute: 2 local ranks, the profile measured on this host.
    real = []
    tiny = ["--config", f"{repo}/configs/gpt-tiny.json", "--steps", str(steps), "--warmup", "1", "--eval-every", "0",
            "--threads", "1", "--no-progress"]
    for i, extra in enumerate([["--tp", "1"], ["--pp", "2"], ["--tp", "2"]][:n_real]):
        meas, pred, _ = run(f"real{i}", [RUN, "-np", "2", TRAIN] + tiny + extra + ["--predict"])
        real.append({"args": " ".join(extra) if extra != ["--tp", "1"] else "DP2", "measured_ms": meas,
                     "predicted_ms": pred})
        log(f"real compute {real[-1]['args']}: predicted {pred:.0f} ms, measured {meas:.0f} ms")
    result["fidelity"] = fidelity
    result["real"] = real
    all_rows = [r for c in fidelity.values() for r in c["plans"]]
    print(f"\nplanner fidelity: {len(all_rows)} random plans on {len(fidelity)} emulated clusters "
          f"(emulated compute, {gflops} GFLOP/s per speed-1 device, {n_layer} layers, global batch {global_batch})")
    for cluster, c in fidelity.items():
        print(f"  {cluster:10s} speeds {c['speeds']}: median |error| {c['median_abs_error'] * 100:.1f}% "
              f"(max {c['max_abs_error'] * 100:.0f}%), Kendall tau {c['kendall_tau']:.2f}, auto plan "
              f"{c['auto']['measured_ms']:.0f} ms measured = {c['auto_over_best']:.3f} x the best measured")
    if all_rows:
        errs = [abs(r["predicted_ms"] - r["measured_ms"]) / r["measured_ms"] for r in all_rows]
        result["median_abs_error"] = st.median(errs)
        print(f"  all: median |error| {st.median(errs) * 100:.1f}%")
    for r in real:
        print(f"  real compute, 2 ranks, {r['args']}: predicted {r['predicted_ms']:.1f} ms, measured "
              f"{r['measured_ms']:.1f} ms ({(r['predicted_ms'] - r['measured_ms']) / r['measured_ms'] * 100:+.0f}%)")

# ---- quality ----
if only in ("", "quality"):
    cluster = "mixed-4x2"
    speeds = ",".join(f"{v:g}" for v in SPEEDS[cluster])
    # The README's best hand plan, perf/compare/plans/dp8-by-speed.json, for this model: DP8 with micro-batches of 2
    # in proportion to the speeds (4 on each fast rank, 2 on each slow one, for a global batch of 48).
    hand = f"{logs}/dp8-by-speed.json"
    per = [round(v * (global_batch // 2) / sum(SPEEDS[cluster])) for v in SPEEDS[cluster]]
    json.dump({"data_parallel": 8, "micro_batches": per, "stages": [{"layers": n_layer}]}, open(hand, "w"))
    limits = ",".join(["1G"] * 4 + [slow_memory] * 4)
    configs = {
        "auto": ["--plan", "auto", "--micro-batch", "2"],  # the sizes it tries: 1, 2 and 4, as the others run 2
        "hand": ["--plan", hand, "--micro-batch", "2"],
        "megatron": ["--tp", "2", "--pp", "2", "--micro-batch", "2"],
        "naive": ["--tp", "2", "--pp", "2", "--micro-batch", "2", "--assignment", "naive"],
    }
    quality = {}
    up(cluster)
    try:
        scenarios = {"none": [("no limits", [])], "slow": [(f"slow hosts {slow_memory}", ["--memory-limits", limits])]}
        for scenario, mem in scenarios["none"] * (limits_mode != "slow") + scenarios["slow"] * (limits_mode != "none"):
            runs = {k: [] for k in list(configs) + ["one"]}
            refused = {}
            for r in range(rounds):
                for name, extra in configs.items():
                    if name in refused:
                        continue
                    cmd = cluster_cmd(cluster) + COMMON + EMULATED + ["--device-speeds", speeds] + extra + mem
                    tag = f"quality.{scenario.split()[0]}.{name}.r{r}"
                    try:
                        meas, pred, s = run(tag, cmd)
                    except SystemExit as e:
                        if mem and "does not fit --memory-limits" in open(f"{logs}/{tag}.log").read():
                            refused[name] = "does not fit the memory limits"
                            log(f"quality ({scenario}) {name}: refused, does not fit")
                            continue
                        raise
                    runs[name].append(s["tokens_per_s"])
                    log(f"quality ({scenario}) round {r} {name}: {s['tokens_per_s']:.0f} tok/s")
                one = [TRAIN] + COMMON[:2] + ["--n-layer", str(n_layer), "--global-batch", str(global_batch // 8),
                                             "--micro-batch", "2",
                                             "--steps", str(steps), "--warmup", "1", "--eval-every", "0", "--threads",
                                             "1", "--no-progress"] + EMULATED
                _, _, s = run(f"quality.{scenario.split()[0]}.one.r{r}", one)
                runs["one"].append(s["tokens_per_s"])
            bound = sum(SPEEDS[cluster]) * st.median(runs["one"])
            quality[scenario] = {"tokens_per_s": {k: st.median(v) for k, v in runs.items() if v},
                                 "refused": refused, "bound": bound,
                                 "of_bound": {k: st.median(v) / bound for k, v in runs.items() if v and k != "one"}}
    finally:
        down(cluster)
    result["quality"] = quality
    print(f"\nplanner quality on {cluster}, speeds {speeds}, tokens/s (median of {rounds} rounds), emulated compute")
    for scenario, q in quality.items():
        print(f"  {scenario}: HetHub bound {q['bound']:.0f} tok/s (6 x one speed-1 device alone)")
        for name in configs:
            if name in q["refused"]:
                print(f"    {name:9s} {q['refused'][name]}")
            else:
                print(f"    {name:9s} {q['tokens_per_s'][name]:8.0f} tok/s  {q['of_bound'][name]:.3f} of the bound")

if json_out:
    json.dump(result, open(json_out, "w"), indent=1)
PY
