#!/usr/bin/env bash
# Training benchmark: hetcomm-train vs the same GPT in PyTorch, single process, side by side in one run; then
# hetcomm-train's 2-rank data-parallel scaling.
#
# Model: configs/gpt-bench.json (n_layer 4, n_head 4, d_model 256, seq_len 256, vocab 256, 3.29M parameters),
# micro_batch 8, one optimizer step per micro-batch (global_batch 8). The PyTorch side is perf/compare/torch_gpt.py:
# the same model, AdamW, clipping and data, CPU fp32, Debian's python3-torch under /usr/bin/python3 (installed with
# apt-get when `import torch` fails). Both sides run with --threads K, OPENBLAS_NUM_THREADS=K and OMP_NUM_THREADS=K
# (Debian's torch does not limit OpenBLAS's pool with set_num_threads alone) and both use the same OpenBLAS
# (openblas-pthread); OPENBLAS_CORETYPE is left as the environment has it and printed. OMP_WAIT_POLICY is
# PASSIVE unless the environment sets it: Debian's torch runs its own ops on libgomp threads, which by default spin
# for a while after every parallel region and so take the second core away from OpenBLAS's pthreads; at 2 threads
# that made PyTorch slower than at 1 (about 2.4k vs 2.9k tok/s here; PASSIVE: 3.4k-4.0k). hetcomm-train does not
# use OpenMP, so the setting only helps the peer.
#
# Each round runs, in this order (A B A B ..., so drift hits both alike), every run a fresh process:
#   hetcomm  build/bin/hetcomm-train --config configs/gpt-bench.json --steps N --warmup 0 --global-batch 8
#            --micro-batch 8 --eval-every 0 --eval-batches 1 --no-progress --threads K --log-json FILE
#   torch    /usr/bin/python3 perf/compare/torch_gpt.py --steps N-S --warmup-steps S --threads K (4/4/256/256, B 8)
# and then, unless --no-dp, hetcomm-train's data-parallel scaling, always with 1 BLAS thread per rank:
#   dp1      1 rank,  --global-batch 8  --micro-batch 8                        (1 rank x 1 thread: one core)
#   dp2      build/bin/hetcomm-run -np 2 hetcomm-train ... --global-batch 16 --micro-batch 8   (2 ranks x 1 thread)
#   dp1acc   1 rank,  --global-batch 16 --micro-batch 8 (2 micro-batches accumulate: dp2's step on one core)
#   dp1t2    1 rank,  --global-batch 16 --micro-batch 8, --threads 2 (the other way to use both cores)
# This machine has 2 cores: 2 ranks x 1 thread use both of them, and are compared with 1 rank x 1 thread, which
# uses one (the other idles). So:
#   weak scaling    efficiency = tok/s(dp2) / (2 x tok/s(dp1))        (same work per rank: 8 sequences per step)
#   strong scaling  speedup = tok/s(dp2) / tok/s(dp1acc), efficiency = speedup / 2   (same 16-sequence step)
#   and tok/s(dp2) / tok/s(dp1t2): data parallelism vs BLAS threads for using the second core.
# The two cores share caches and memory bandwidth, so even a perfect allreduce gives somewhat less than 1.
#
# Figures: hetcomm-train's per-step JSON (--log-json: tokens_per_s, compute_ms, comm_ms, step_ms of rank 0; the
# end-of-run evaluation is not in any step); the first S steps are skipped and the median tokens_per_s of the rest
# is a run's figure (their mean, total tokens / total time, is recorded too). torch_gpt.py times the same steps
# (forward + backward + clip + AdamW + zero_grad; batches drawn before the clock) and reports the median the same
# way. The table shows each round, then median (min-max) over rounds and the median of the per-round ratios.
#
# Usage: perf/compare/run-train.sh [--rounds 3] [--steps 30] [--skip 3] [--threads 1] [--no-dp] [--no-torch]
#                                  [--build-dir DIR] [--json FILE] [--timeout 600] [--wait-quiet SEC]
#                                  [--rerun-noisy N]
#   --steps       optimizer steps per run (each side executes N steps); --skip S of them are not counted
#   --threads     BLAS/OpenMP threads of the hetcomm/torch comparison (one count per invocation; the DP runs use 1)
#   --no-dp       only the hetcomm-vs-torch comparison;  --no-torch: only hetcomm's runs (no PyTorch needed)
#   --wait-quiet  before each run, wait up to SEC seconds until the CPUs are <= 15% busy (default 0)
#   --rerun-noisy rerun a run (up to N times) when other processes (niced or not; all CPU time not spent by this
#                 script's children) took > 10% of the CPU time during it (default 0). Recorded either way.
#   Recommended on the shared machine: --wait-quiet 120 --rerun-noisy 2
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
ROUNDS=3
STEPS=30
SKIP=3
THREADS=1
RUN_DP=1
RUN_TORCH=1
BUILD=${BUILD_DIR:-$REPO_ROOT/build}
JSON_OUT=""
# shellcheck disable=SC2034 # TIMEOUT_S is read by lib.sh's run_logged
TIMEOUT_S=600
WAIT_QUIET_S=0
QUIET_PCT=15
RERUN_NOISY=0
NOISY_PCT=10
PYTHON=/usr/bin/python3
CONFIG=$REPO_ROOT/configs/gpt-bench.json
OMP_WAIT=${OMP_WAIT_POLICY:-PASSIVE}

# shellcheck disable=SC2034 # PROG is read by lib.sh
PROG=run-train
# The shared helpers: wait_quiet, run_logged.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --skip) SKIP=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --no-dp) RUN_DP=0; shift ;;
    --no-torch) RUN_TORCH=0; shift ;;
    --build-dir) BUILD=${2:?}; shift 2 ;;
    --json) JSON_OUT=${2:?}; shift 2 ;;
    --timeout) TIMEOUT_S=${2:?}; shift 2 ;;
    --wait-quiet) WAIT_QUIET_S=${2:?}; shift 2 ;;
    --rerun-noisy) RERUN_NOISY=${2:?}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run-train: unknown argument: $1" >&2; usage 2 ;;
  esac
done
for v in ROUNDS STEPS THREADS TIMEOUT_S; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v,,} must be a positive integer"; done
for v in SKIP WAIT_QUIET_S RERUN_NOISY; do [[ ${!v} =~ ^[0-9]+$ ]] || die "${v,,}: must be a non-negative integer"; done
[[ $SKIP -lt $STEPS ]] || die "--skip ($SKIP) must be less than --steps ($STEPS)"
TRAIN=$BUILD/bin/hetcomm-train
RUN=$BUILD/bin/hetcomm-run
for b in "$TRAIN" "$RUN"; do [[ -x $b ]] || die "missing $b (build first)"; done
[[ -f $CONFIG ]] || die "missing $CONFIG"

# PyTorch from Debian (the only download this script makes).
if [[ $RUN_TORCH -eq 1 ]] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "run-train: $PYTHON cannot import torch: installing Debian's python3-torch" >&2
  if ! apt-get install -y --no-install-recommends python3-torch >&2; then
    if ! { apt-get update >&2 && apt-get install -y --no-install-recommends python3-torch >&2; }; then
      die "apt-get install python3-torch failed (needs root and the Debian mirror)"
    fi
  fi
  "$PYTHON" -c 'import torch' || die "python3-torch installed but $PYTHON still cannot import torch"
fi

LOG_DIR=$BUILD/compare/logs/train-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOG_DIR"
SAMPLES=$LOG_DIR/samples.tsv  # config round tok/s(median) tok/s(mean) step_ms compute_ms comm_ms opt_ms busy others attempts
: >"$SAMPLES"

train_args() {  # GLOBAL_BATCH THREADS JSON: hetcomm-train's arguments, into TARGS
  TARGS=(--config "$CONFIG" --steps "$STEPS" --warmup 0 --global-batch "$1" --micro-batch 8 --eval-every 0
         --eval-batches 1 --no-progress --threads "$2" --log-json "$3")
}
# hetcomm-train's JSON lines -> "tok/s-median tok/s-mean step_ms compute_ms comm_ms opt_ms" over steps > SKIP
# (opt_ms = step - compute - comm: clip, AdamW and zeroing the gradients).
summarise_json() {
  "$PYTHON" - "$1" "$SKIP" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r["step"] > int(sys.argv[2])]
if not rows:
    sys.exit(f"run-train: no timed steps in {sys.argv[1]}")
tok = sum(r["tokens_per_s"] * r["step_ms"] / 1e3 for r in rows)
med = lambda k: st.median(r[k] for r in rows)
opt = st.median(r["step_ms"] - r["compute_ms"] - r["comm_ms"] for r in rows)
print(f"{med('tokens_per_s'):.1f}\t{tok / (sum(r['step_ms'] for r in rows) / 1e3):.1f}\t{med('step_ms'):.2f}\t"
      f"{med('compute_ms'):.2f}\t{med('comm_ms'):.2f}\t{opt:.2f}")
PY
}
summarise_torch() {  # torch_gpt.py's RESULT line -> the same fields (comm_ms 0)
  awk '/^RESULT torch / { for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
       printf "%s\t%s\t%s\t%s\t0\t%s\n", v["tokens_per_s"], v["tokens_per_s_mean"], v["step_ms"], v["compute_ms"],
              v["opt_ms"]; found = 1 } END { exit !found }' "$1" || die "no RESULT line in $1"
}

# Other tenants' share of the CPUs during a run: all non-idle time minus this script's children's (the run's
# processes, waited for, so in this shell's cutime + cstime), over all CPU time. Counts niced and un-niced
# tenants alike (lib.sh's niced_share sees only the niced ones). /proc/stat and /proc/PID/stat both count USER_HZ.
load_snap() {
  local busy_total own
  busy_total=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  own=$(sed 's/^.*) //' "/proc/$$/stat" | awk '{print $14 + $15}')  # fields 16, 17: cutime, cstime
  echo "$busy_total $own"
}
others_share() {  # SNAP0 SNAP1
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2];
    o = (y[1] - x[1]) - (y[3] - x[3]); if (o < 0) o = 0; printf "%.0f", (d > 0 ? 100 * o / d : 0) }'
}

run_config() {  # CONFIG ROUND
  local cfg=$1 r=$2 attempt=0 log json busy s0 others row nt=$THREADS
  local -a cmd
  while :; do
    attempt=$((attempt + 1))
    log=$LOG_DIR/$cfg.round$r.log
    [[ $attempt -gt 1 ]] && log=$LOG_DIR/$cfg.round$r.retry$((attempt - 1)).log
    json=${log%.log}.jsonl
    case $cfg in
      hetcomm) train_args 8 "$THREADS" "$json"; cmd=("$TRAIN" "${TARGS[@]}") ;;
      torch) cmd=("$PYTHON" "$SCRIPT_DIR/torch_gpt.py" --n-layer 4 --n-head 4 --d-model 256 --seq-len 256
                  --micro-batch 8 --steps $((STEPS - SKIP)) --warmup-steps "$SKIP" --threads "$THREADS") ;;
      dp1) nt=1; train_args 8 1 "$json"; cmd=("$TRAIN" "${TARGS[@]}") ;;
      dp2) nt=1; train_args 16 1 "$json"; cmd=("$RUN" -np 2 "$TRAIN" "${TARGS[@]}") ;;
      dp1acc) nt=1; train_args 16 1 "$json"; cmd=("$TRAIN" "${TARGS[@]}") ;;
      dp1t2) nt=2; train_args 16 2 "$json"; cmd=("$TRAIN" "${TARGS[@]}") ;;
    esac
    busy=$(wait_quiet "$WAIT_QUIET_S" "$QUIET_PCT")
    s0=$(load_snap)
    run_logged "$log" env OPENBLAS_NUM_THREADS="$nt" OMP_NUM_THREADS="$nt" OMP_WAIT_POLICY="$OMP_WAIT" "${cmd[@]}"
    others=$(others_share "$s0" "$(load_snap)")
    if [[ $cfg == torch ]]; then row=$(summarise_torch "$log"); else row=$(summarise_json "$json"); fi
    echo "run-train: round $r/$ROUNDS $cfg: $(cut -f1 <<<"$row") tok/s, step $(cut -f3 <<<"$row") ms" \
         "(CPU ${busy}% busy before, other tasks ${others}% during)" >&2
    if [[ $others -gt $NOISY_PCT && $attempt -le $RERUN_NOISY ]]; then
      echo "run-train: other tasks took ${others}% of the CPUs during the run: discarded, rerunning" >&2
      continue
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$r" "$row" "$busy" "$others" "$attempt" >>"$SAMPLES"
    break
  done
}

CONFIGS=(hetcomm)
[[ $RUN_TORCH -eq 1 ]] && CONFIGS+=(torch)
[[ $RUN_DP -eq 1 ]] && CONFIGS+=(dp1 dp2 dp1acc dp1t2)
TORCH_INFO="(not run)"
[[ $RUN_TORCH -eq 1 ]] && TORCH_INFO=$("$PYTHON" -c 'import torch, torch.nn.functional as F
print(torch.__version__, "sdpa" if hasattr(F, "scaled_dot_product_attention") else "explicit")')
echo "run-train: $ROUNDS rounds of ${CONFIGS[*]}; $STEPS steps per run, first $SKIP not counted; threads $THREADS;" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}; OMP_WAIT_POLICY=$OMP_WAIT; torch $TORCH_INFO; logs in $LOG_DIR" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for cfg in "${CONFIGS[@]}"; do run_config "$cfg" "$r"; done
done

"$PYTHON" - "$SAMPLES" "$JSON_OUT" "$ROUNDS" "$STEPS" "$SKIP" "$THREADS" "$LOG_DIR" "$TORCH_INFO" \
  "${OPENBLAS_CORETYPE-(unset)}" "$NOISY_PCT" "$OMP_WAIT" <<'PY'
import json, os, platform, statistics as st, sys, time
samples, json_out, rounds, steps, skip, threads, log_dir, torch_info, coretype, noisy_pct, omp_wait = sys.argv[1:12]
fields = ("tok_s", "tok_s_mean", "step_ms", "compute_ms", "comm_ms", "opt_ms", "busy_before", "others_during",
          "attempts")
runs = {}
for line in open(samples):
    f = line.rstrip("\n").split("\t")
    runs.setdefault(f[0], {})[int(f[1])] = dict(zip(fields, map(float, f[2:])))
rnds = sorted({r for c in runs.values() for r in c})
tok = lambda c: [runs[c][r]["tok_s"] for r in rnds if r in runs.get(c, {})]
def mmm(v):
    return {"median": st.median(v), "min": min(v), "max": max(v), "samples": v} if v else None
def fmt(m, p=0):
    return f"{m['median']:.{p}f} ({m['min']:.{p}f}-{m['max']:.{p}f})" if m else "-"
def per_round(fn, *cs):
    return [fn(*(runs[c][r]["tok_s"] for c in cs)) for r in rnds if all(r in runs.get(c, {}) for c in cs)]
out = {}

print(f"\nGPT 4 layers, 4 heads, d_model 256, seq_len 256, vocab 256; micro-batch 8, one step per micro-batch; "
      f"{os.cpu_count()} CPUs; OPENBLAS_CORETYPE={coretype}; OMP_WAIT_POLICY={omp_wait}; torch {torch_info}")
print(f"tokens/s: median over steps {int(skip) + 1}..{steps} of each run; {threads} thread(s) on both sides")
if "hetcomm" in runs and "torch" in runs:
    print(f"{'round':>6}{'hetcomm tok/s':>16}{'torch tok/s':>14}{'hetcomm/torch':>16}")
    for r in rnds:
        if r in runs["hetcomm"] and r in runs["torch"]:
            h, t = runs["hetcomm"][r]["tok_s"], runs["torch"][r]["tok_s"]
            print(f"{r:>6}{h:>16.1f}{t:>14.1f}{h / t:>16.3f}")
    ratio = mmm(per_round(lambda h, t: h / t, "hetcomm", "torch"))
    hm, tm = mmm(tok("hetcomm")), mmm(tok("torch"))
    print(f"{'median':>6}{hm['median']:>16.1f}{tm['median']:>14.1f}{ratio['median']:>16.3f}")
    print(f"{'min':>6}{hm['min']:>16.1f}{tm['min']:>14.1f}{ratio['min']:>16.3f}")
    print(f"{'max':>6}{hm['max']:>16.1f}{tm['max']:>14.1f}{ratio['max']:>16.3f}")
    print(f"median ratio hetcomm/torch: {ratio['median']:.3f}; ratio of the medians: "
          f"{hm['median'] / tm['median']:.3f}")
    out["single_process"] = {"hetcomm_tok_s": hm, "torch_tok_s": tm, "ratio_hetcomm_over_torch": ratio}
elif "hetcomm" in runs:
    print(f"hetcomm tok/s: {fmt(mmm(tok('hetcomm')), 1)}")
    out["single_process"] = {"hetcomm_tok_s": mmm(tok("hetcomm"))}
phase = {}
for c in ("hetcomm", "torch"):
    if c in runs:
        phase[c] = {k: st.median(runs[c][r][k] for r in runs[c]) for k in ("step_ms", "compute_ms", "comm_ms", "opt_ms")}
        print(f"  {c:<8} median step {phase[c]['step_ms']:.1f} ms = forward+backward {phase[c]['compute_ms']:.1f} + "
              f"comm {phase[c]['comm_ms']:.1f} + clip/AdamW/zero {phase[c]['opt_ms']:.1f} ms")
out["phases_ms"] = phase

if "dp2" in runs:
    print(f"\ndata-parallel scaling, 1 BLAS thread per rank unless noted; tok/s over all ranks")
    print(f"{'round':>6}{'dp1 gb8':>10}{'dp2 gb16':>10}{'weak eff':>10}{'dp1 gb16':>10}{'speedup':>9}"
          f"{'strong eff':>12}{'1r x 2thr gb16':>16}{'dp2/2thr':>10}")
    for r in rnds:
        g = lambda c: runs.get(c, {}).get(r, {}).get("tok_s")
        d1, d2, acc, t2 = g("dp1"), g("dp2"), g("dp1acc"), g("dp1t2")
        cell = lambda v, w, p=1: f"{v:>{w}.{p}f}" if v else f"{'-':>{w}}"
        print(f"{r:>6}{cell(d1, 10)}{cell(d2, 10)}{cell(d2 / (2 * d1) if d1 and d2 else None, 10, 3)}"
              f"{cell(acc, 10)}{cell(d2 / acc if acc and d2 else None, 9, 3)}"
              f"{cell(d2 / acc / 2 if acc and d2 else None, 12, 3)}{cell(t2, 16)}"
              f"{cell(d2 / t2 if t2 and d2 else None, 10, 3)}")
    weak = mmm(per_round(lambda a, b: b / (2 * a), "dp1", "dp2"))
    speed = mmm(per_round(lambda a, b: b / a, "dp1acc", "dp2"))
    strong = mmm(per_round(lambda a, b: b / a / 2, "dp1acc", "dp2"))
    vs_thr = mmm(per_round(lambda a, b: b / a, "dp1t2", "dp2"))
    comm = st.median(runs["dp2"][r]["comm_ms"] for r in runs["dp2"])
    step = st.median(runs["dp2"][r]["step_ms"] for r in runs["dp2"])
    print(f"medians (min-max): dp1 {fmt(mmm(tok('dp1')))} tok/s, dp2 {fmt(mmm(tok('dp2')))}, "
          f"dp1 gb16 {fmt(mmm(tok('dp1acc')))}, 1 rank x 2 threads gb16 {fmt(mmm(tok('dp1t2')))}")
    print(f"weak scaling efficiency tok/s(2 ranks) / (2 x tok/s(1 rank)): {fmt(weak, 3)}")
    print(f"strong scaling (global batch 16): speedup {fmt(speed, 3)}, efficiency {fmt(strong, 3)}")
    if vs_thr:
        print(f"2 ranks x 1 thread / 1 rank x 2 threads (global batch 16): {fmt(vs_thr, 3)}")
    print(f"dp2: median step {step:.1f} ms of which comm (allreduce wait + loss/norm sum) {comm:.1f} ms")
    out["dp"] = {"tok_s": {c: mmm(tok(c)) for c in ("dp1", "dp2", "dp1acc", "dp1t2")},
                 "weak_efficiency": weak, "strong_speedup": speed, "strong_efficiency": strong,
                 "dp2_over_1rank_2threads": vs_thr, "dp2_step_ms": step, "dp2_comm_ms": comm}

noisy = [f"{c} round {r} ({v['others_during']:.0f}%)" for c, d in runs.items() for r, v in d.items()
         if v["others_during"] > float(noisy_pct)]
if noisy:
    print(f"WARNING: other tasks took > {noisy_pct}% of the CPUs during: {', '.join(noisy)}; figures from a loaded "
          "machine are not comparable (use --wait-quiet/--rerun-noisy, or rerun when it is quiet)")
if json_out:
    doc = {"benchmark": "hetcomm-train vs PyTorch GPT training tokens/s (4/4/256/256, micro-batch 8); "
                        "hetcomm-train 2-rank DP scaling",
           "rounds": int(rounds), "steps": int(steps), "skip": int(skip), "threads": int(threads),
           "host": platform.node(), "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "openblas_coretype": coretype, "omp_wait_policy": omp_wait, "torch": torch_info, "logs": log_dir, "runs": runs, **out}
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"\nwrote {json_out}")
PY
