#!/usr/bin/env bash
# hybrid_check.sh BIN_DIR SOURCE_DIR: hetcomm-train's tensor, pipeline and hybrid plans give the single-process
# run's losses (same seed, same global batch) after each of 10 steps, within 1e-4 relative:
#   DP2, TP2, PP2, TP2xPP2, DP2xPP2 with uneven stages (1 + 3 blocks), DP2 with uneven micro-batches (3 + 1),
#   a pipeline whose stages have TP degrees 2 and 1, DP2xPP2 with ZeRO-1, the naive assignment, emulated device
#   speeds (timing only: the same losses);
# and that the role table is printed, and that bad plans and options are refused with a message that says why.
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
matches speeds 2 "PP2 with device speeds 1, 0.5" --pp 2 --device-speeds 1,0.5

grep -q "rank  host  island  replica  stage  tp_rank" "$work/tp2pp2.log"; check "the role table is printed" $?
grep -q "pipeline bubble" "$work/tp2pp2.log"; check "the bubble fraction is reported" $?
grep -q "emulated" "$work/speeds.log"; check "emulated speeds are marked" $?

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
refused ckpt 2 "not supported yet" "checkpoints of a pipeline" --pp 2 --checkpoint-dir "$work/ckpt"
refused speedcount 2 "device-speeds" "--device-speeds with a wrong count" --pp 2 --device-speeds 1
refused world 3 "ranks" "a plan for 2 ranks run on 3" --plan "$plans/dp2-uneven-micro.json"

finish hybrid_check
