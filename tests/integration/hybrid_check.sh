#!/usr/bin/env bash
# hybrid_check.sh BIN_DIR SOURCE_DIR: hetcomm-train's tensor, pipeline and hybrid plans give the single-process
# run's losses (same seed, same global batch) after each of 10 steps, within 1e-4 relative:
#   DP2, TP2, PP2, TP2xPP2, DP2xPP2 with uneven stages (1 + 3 blocks), DP2 with uneven micro-batches (3 + 1),
#   a pipeline whose stages have TP degrees 2 and 1, DP2xPP2 with ZeRO-1, the naive assignment, emulated device
#   speeds (timing only: the same losses);
# and that the role table is printed, and that bad plans and options are refused with a message that says why.
# Also: checkpoints of any plan resume exactly, and under another plan; --emulate-compute runs a plan with no math and says so; --memory-limits accepts a plan that fits and
# refuses one that does not, naming the rank and its numbers; a topology file's GPU peaks give device speeds;
# --plan auto (2 and 4 ranks, real and emulated compute) and --predict; 16 micro-batches through 4 stages.
set -uo pipefail
bin=$1
src=$2
plans=$src/tests/integration/plans
small=(--config "$src/configs/gpt-tiny.json" --n-layer 4 --n-head 2 --d-model 64 --seq-len 32 --micro-batch 2
       --global-batch 8 --steps 10 --warmup 2 --eval-every 5 --eval-batches 2 --threads 1 --no-progress)
# shellcheck source=train_lib.sh
source "$src/tests/integration/train_lib.sh"

train one 1; check "1 rank runs" $?
matches() {  # name ranks description args...
  local name=$1 np=$2 what=$3
  shift 3
  train "$name" "$np" "$@"; check "$what runs" $?
  compare one "$name" 1e-4; check "$what: the single process's losses (1e-4)" $?
}
matches dp2 2 "DP2"
matches tp2 2 "TP2" --tp 2
matches pp2 2 "PP2" --pp 2
matches tp2pp2 4 "TP2xPP2" --tp 2 --pp 2
matches dp2pp2 4 "DP2xPP2, stages of 1 and 3 blocks" --plan "$plans/dp2pp2-uneven-layers.json"
matches micro31 2 "DP2, 3 and 1 micro-batches" --plan "$plans/dp2-uneven-micro.json"
matches tp21 3 "PP2 with TP degrees 2 and 1" --plan "$plans/pp-tp2-tp1.json"
matches zero 4 "DP2xPP2 with ZeRO-1" --plan "$plans/dp2pp2-uneven-layers.json" --zero 1
matches naive 4 "TP2xPP2, naive assignment" --tp 2 --pp 2 --assignment naive
matches zshares 4 "DP2xPP2 with ZeRO-1 shares 3:1 (by memory)" --plan "$plans/dp2pp2-zero-shares.json"
matches speeds 2 "PP2 with device speeds 1, 0.5" --pp 2 --device-speeds 1,0.5
# Warm-ups capped by the 4 micro-batches: stage 0 runs all its forwards first.
matches deepcap 4 "PP4 at pipeline depth 2, warm-ups capped" --pp 4 --pipeline-depth 2

# Many micro-batches (16 of 1): the stages reuse their boundary buffers round-robin (one more than in flight), under
# uneven speeds that reorder who waits for whom; the losses stay the single process's.
saved=("${small[@]}")
small=("${small[@]:0:10}" --micro-batch 1 --global-batch 16 "${small[@]:14}")
train one16 1; check "1 rank, 16 micro-batches runs" $?
train pp4many 4 --pp 4 --device-speeds 0.4,1,0.6,1; check "PP4, 16 micro-batches runs" $?
compare one16 pp4many 1e-4; check "PP4 with 16 micro-batches and reused boundary buffers: the single process's losses" $?
# Deeper pipelines (each stage runs 2 or 3 forwards ahead of the next; warm-ups 6,4,2,0 and 9,6,3,0 of 16).
train pp4deep 4 --pp 4 --pipeline-depth 2 --device-speeds 0.4,1,0.6,1; check "PP4 at depth 2 runs" $?
compare one16 pp4deep 1e-4; check "PP4 at pipeline depth 2: the single process's losses" $?
train pp4deeper 4 --pp 4 --pipeline-depth 3 --device-speeds 1,0.4,1,0.6; check "PP4 at depth 3 runs" $?
compare one16 pp4deeper 1e-4; check "PP4 at pipeline depth 3: the single process's losses" $?
small=("${saved[@]}")
grep -q "rank  host  island  replica  stage  tp_rank" "$work/tp2pp2.log"; check "the role table is printed" $?
grep -q "pipeline bubble" "$work/tp2pp2.log"; check "the bubble fraction is reported" $?
grep -q "emulated" "$work/speeds.log"; check "emulated speeds are marked" $?

# Checkpoints hold the whole model whatever the plan: a hybrid run resumed from its own step-5 checkpoint gives
# its uninterrupted losses exactly (TP2xPP2; DP2xPP2 with ZeRO-1), and a run resumes under another plan (the
# single process's checkpoint under TP2xPP2, TP2xPP2's on one process) with the single process's losses.
train ckone 1 --checkpoint-dir "$work/ckone" --checkpoint-every 5; check "1 rank with checkpoints runs" $?
train cktp 4 --tp 2 --pp 2 --checkpoint-dir "$work/cktp" --checkpoint-every 5; check "TP2xPP2 checkpoints" $?
train cktp-res 4 --tp 2 --pp 2 --resume "$work/cktp/step5.safetensors"; check "TP2xPP2 resumes" $?
compare tp2pp2 cktp-res 0 6; check "TP2xPP2 resumed: its uninterrupted losses, exactly" $?
train ckzero 4 --plan "$plans/dp2pp2-uneven-layers.json" --zero 1 --checkpoint-dir "$work/ckzero" --checkpoint-every 5
check "DP2xPP2 ZeRO-1 checkpoints" $?
train ckzero-res 4 --plan "$plans/dp2pp2-uneven-layers.json" --zero 1 --resume "$work/ckzero/step5.safetensors"
check "DP2xPP2 ZeRO-1 resumes" $?
compare zero ckzero-res 0 6; check "DP2xPP2 ZeRO-1 resumed: its uninterrupted losses, exactly" $?
train ckshares 4 --plan "$plans/dp2pp2-zero-shares.json" --checkpoint-dir "$work/ckshares" --checkpoint-every 5
train ckshares-res 4 --plan "$plans/dp2pp2-zero-shares.json" --resume "$work/ckshares/step5.safetensors"
compare zshares ckshares-res 0 6; check "ZeRO-1 with uneven shares resumed: its uninterrupted losses, exactly" $?
train cross 4 --tp 2 --pp 2 --resume "$work/ckone/step5.safetensors"
compare one cross 1e-4 6; check "the single process's checkpoint resumed under TP2xPP2 (1e-4)" $?
train crossback 1 --resume "$work/cktp/step5.safetensors"
compare one crossback 1e-4 6; check "TP2xPP2's checkpoint resumed on one process (1e-4)" $?

# --emulate-compute: no losses (null in the log), every figure marked emulated, the bubble still measured.
train emu 4 --tp 2 --pp 2 --emulate-compute --reference-gflops 20 --device-speeds 1,1,0.5,0.5; check "--emulate-compute runs" $?
grep -q "emulated compute: no math" "$work/emu.log" && grep -q "loss - " "$work/emu.log" &&
  grep -q "summary: losses not computed" "$work/emu.log" && grep -q "pipeline bubble .*\[emulated\]" "$work/emu.log"
check "--emulate-compute says what it did" $?
python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(not (len(rows) == 10 and all(r["loss"] is None and r["emulated"] and r["tokens_per_s"] > 0 for r in rows)))
' "$work/emu.json"
check "--emulate-compute logs 10 steps, no loss, emulated" $?

train memok 4 --tp 2 --pp 2 --memory-limits 1G; check "a plan within --memory-limits runs" $?
grep -q "memory: every rank fits its limit" "$work/memok.log"; check "the memory headroom is reported" $?

# Device speeds from HETCOMM_TOPO_FILE: this host's two GPUs at 100 and 50 TFLOP/s (rank r drives GPU r).
cat >"$work/gpus.json" <<'JSON'
{"hosts": [{"hostName": "*", "gpus": [{"model": "big", "peakTflops": 100}, {"model": "small", "peakTflops": 50}]}]}
JSON
HETCOMM_TOPO_FILE=$work/gpus.json train topospeeds 2 --pp 2 --device-speeds topo; check "device speeds from the topology file run" $?
grep -q "emulated device speeds (from the topology file's GPU peaks; compute stretched, figures marked emulated): 1 0.5" \
  "$work/topospeeds.log"
check "the topology file's GPU peaks give speeds 1, 0.5" $?
compare one topospeeds 1e-4; check "speeds from the topology file: the single process's losses (1e-4)" $?

# --plan auto: the planner chooses on rank 0, every rank runs its plan, and the losses are the single process's;
# the chosen plan's prediction is printed against the measured step. --predict does the same for a given plan.
matches auto2 2 "--plan auto on 2 ranks" --plan auto --summary-json "$work/auto2-summary.json"
matches auto4 4 "--plan auto on 4 ranks with device speeds 1, 1, 0.5, 0.5" --plan auto --device-speeds 1,1,0.5,0.5
grep -q "plan auto: searched in" "$work/auto4.log" && grep -q "planner: HetHub bound" "$work/auto4.log" &&
  grep -q "plan (--plan auto, nic assignment)" "$work/auto4.log" &&
  grep -q "summary: predicted vs measured: step" "$work/auto4.log"
check "--plan auto prints its search, its plan and predicted vs measured" $?
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
p, m = j["predicted"], j["measured"]
sys.exit(not (p["step_ms"] > 0 and m["step_ms"] > 0 and m["tokens_per_s"] > 0 and 0 <= m["bubble"] <= 1))
' "$work/auto2-summary.json"
check "--summary-json holds the predicted and the measured step" $?
train autoemu 4 --plan auto --emulate-compute --reference-gflops 20 --device-speeds 1,1,0.5,0.5 --pipeline-depth 5
check "--plan auto with --emulate-compute runs" $?
grep -q "compute: FLOPs at 20.0 GFLOP/s" "$work/autoemu.log"; check "--plan auto plans the emulated devices' FLOPs" $?
# The planner tries depths up to 4: the forced 5 is predicted again, and that is what the run is compared with.
grep -q "^\[0\] --pipeline-depth 5 replaces the planner's [1-4], predicted: step" "$work/autoemu.log"
check "--pipeline-depth with --plan auto: the run's depth is predicted again" $?
train predicted 4 --tp 2 --pp 2 --predict; check "--predict runs" $?
grep -q "^\[0\] predicted: step" "$work/predicted.log" && grep -q "summary: predicted vs measured" "$work/predicted.log"
check "--predict prints the plan's prediction and compares it" $?

# Cephalo: data parallelism only (--plan-max-tp 1 --plan-max-pp 1), rank 0 with room for less than an even ZeRO-1
# half of the optimizer state (at the smallest micro-batch size searched, 1) and rank 1 with plenty: the planner
# says even shares do not fit, shards by memory,
# and the run gives the single process's losses.
echo '{"data_parallel": 2, "stages": [{"layers": 4}], "zero": 0, "micro_batch": 1}' >"$work/dp2.json"
"$bin/hetcomm-plan" "${small[@]:0:12}" --global-batch 8 --synthetic hosts=1,ranks=2 --reference-gflops 10 \
  --evaluate "$work/dp2.json" --json "$work/dp2-memory.json" >"$work/dp2-memory.log" 2>&1
limits=$(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["plans"][0]["memory"][0]
rest, state = m["total"] - m["optimizer"], m["optimizer"]
print("%d,%d" % (rest + 0.3 * state, rest + 0.9 * state))' "$work/dp2-memory.json")
check "hetcomm-plan --evaluate gives each rank's memory" $?
matches cephalo 2 "--plan auto sharding the optimizer state by memory" --plan auto --plan-max-tp 1 --plan-max-pp 1 \
  --memory-limits "$limits"
grep -q "even ZeRO-1 shards would need .* on rank 0" "$work/cephalo.log" && grep -q "ZeRO-1 by memory" "$work/cephalo.log" &&
  grep -q '"zero_shares"' "$work/cephalo.log" && grep -q "memory: every rank fits its limit" "$work/cephalo.log"
check "the planner says even shares do not fit and shards by memory" $?

refused() {  # name ranks pattern description args...
  local name=$1 np=$2 pattern=$3 what=$4
  shift 4
  train "$name" "$np" "$@"
  [ $? != 0 ] && grep -q -- "$pattern" "$work/$name.log"
  check "refused: $what" $?
}
echo '{"stages": [{"layers": 1}, {"layers": 2}]}' >"$work/short.json"
refused short 2 "n_layer" "stages whose layers do not sum to n_layer" --plan "$work/short.json"
refused tp3 2 "does not divide the 2 ranks" "--tp 3 on 2 ranks" --tp 3
echo '{"stages": [{"layers": 2}, {"layers": 2}], "pipeline_depth": 0}' >"$work/depth0.json"
refused depth0 2 "'pipeline_depth': must be in \[1, 64\], got 0" "a plan's pipeline_depth of 0" --plan "$work/depth0.json"
refused speedcount 2 "device-speeds" "--device-speeds with a wrong count" --pp 2 --device-speeds 1
refused world 3 "ranks" "a plan for 2 ranks run on 3" --plan "$plans/dp2-uneven-micro.json"
refused memory 2 "rank 0 (replica 0, stage 0, tp rank 0) needs .* > its limit 1.0 MiB: parameters" \
  "a plan over --memory-limits, with the numbers" --pp 2 --memory-limits 1M
refused memcount 2 "--memory-limits has 3 entries for 2 ranks" "--memory-limits with a wrong count" \
  --memory-limits 1G,1G,1G
refused topo 2 "gives rank 0 no GPU peak" "--device-speeds topo without GPU peaks" --device-speeds topo
refused speedtext 2 "entry 1 'fast' is not a number" "--device-speeds with a word" --device-speeds 1,fast
refused autotp 2 "--plan auto and --tp/--pp both given" "--plan auto with --tp" --plan auto --tp 2
refused automem 2 "no plan fits" "--plan auto when no plan fits --memory-limits" --plan auto --memory-limits 64K
refused emuckpt 2 "computes no parameters" "--emulate-compute with checkpoints" --emulate-compute \
  --checkpoint-dir "$work/ckpt2"

finish hybrid_check
