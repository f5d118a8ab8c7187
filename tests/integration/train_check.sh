#!/usr/bin/env bash
# train_check.sh BIN_DIR SOURCE_DIR: hetcomm-train end to end on a small model (2 layers, d_model 64, 10 steps).
#   - one rank, twice: the same losses bit for bit (fixed seed);
#   - 2 data-parallel ranks vs 1 rank with the same global batch: the same loss after each step (1e-5 relative);
#   - ZeRO-1 vs plain data parallelism: the same losses (1e-5 relative);
#   - a run resumed from its step-5 checkpoint: steps 6-10 give exactly the uninterrupted run's losses (plain and
#     ZeRO-1);
#   - a truncated checkpoint and one with a flipped data byte are refused, naming the file and the fault;
#   - a global batch the ranks cannot share is refused with the numbers.
set -uo pipefail
bin=$1
src=$2
small=(--config "$src/configs/gpt-tiny.json" --n-layer 2 --n-head 2 --d-model 64 --seq-len 64 --micro-batch 4 --global-batch 8 --steps 10 --warmup 2
       --eval-every 5 --eval-batches 2 --threads 1 --no-progress)
# shellcheck source=train_lib.sh
source "$src/tests/integration/train_lib.sh"

train one 1; check "1 rank runs" $?
train one_again 1; check "1 rank runs again" $?
compare one one_again 0; check "1 rank: the same losses bit for bit" $?
train dp2 2; check "2 ranks run" $?
compare one dp2 1e-5; check "2 data-parallel ranks: 1 rank's losses (1e-5)" $?
train zero2 2 --zero 1; check "2 ranks with ZeRO-1 run" $?
compare dp2 zero2 1e-5; check "ZeRO-1: plain data parallelism's losses (1e-5)" $?

for mode in dp zero; do
  extra=()
  [ $mode = zero ] && extra=(--zero 1)
  train ${mode}_full 2 "${extra[@]}" --checkpoint-dir "$work/ckpt_$mode" --checkpoint-every 5
  check "$mode: run with checkpoints" $?
  [ -s "$work/ckpt_$mode/step5.safetensors" ]; check "$mode: step 5 checkpoint written" $?
  train ${mode}_resumed 2 "${extra[@]}" --resume "$work/ckpt_$mode/step5.safetensors"
  check "$mode: resume runs" $?
  grep -q "resumed from .*step5.safetensors at step 5" "$work/${mode}_resumed.log"; check "$mode: resume says so" $?
  [ "$(wc -l <"$work/${mode}_resumed.json")" = 5 ]; check "$mode: resume runs steps 6-10 only" $?
  compare ${mode}_full ${mode}_resumed 0 6; check "$mode: resumed losses equal the uninterrupted run's" $?
done

ckpt=$work/ckpt_dp/step5.safetensors
size=$(stat -c %s "$ckpt")
head -c $((size / 2)) "$ckpt" >"$work/truncated.safetensors"
train truncated 1 --resume "$work/truncated.safetensors"
[ $? != 0 ] && grep -q "truncated.safetensors" "$work/truncated.log"
check "a truncated checkpoint is refused, naming the file" $?
cp "$ckpt" "$work/flipped.safetensors"
printf '\x55' | dd of="$work/flipped.safetensors" bs=1 seek=$((size - 100)) conv=notrunc status=none
train flipped 1 --resume "$work/flipped.safetensors"
[ $? != 0 ] && grep -qi "checksum" "$work/flipped.log"
check "a checkpoint with a flipped byte is refused (checksum)" $?
"$bin/hetcomm-run" -np 3 "$bin/hetcomm-train" "${small[@]}" >"$work/uneven.log" 2>&1
[ $? != 0 ] && grep -q "global_batch" "$work/uneven.log"
check "a global batch 3 ranks cannot share is refused" $?

finish train_check
