#!/usr/bin/env bash
# elastic_check.sh BIN_DIR SOURCE_DIR: hetcomm-train --elastic under hetcomm-run --elastic -np 4, rank 2 killed
# (SIGKILL) mid-run. Checks:
#   - the launcher reports the lost rank and lets the others go on, and exits 0;
#   - the survivors shrink to 3 ranks, say which checkpoint they go on from, and finish the run;
#   - their losses after the recovery equal, bit for bit, a fresh 3-rank run resumed from that checkpoint.
# Prints the time from the kill to the survivors being set up again (polled every 20 ms).
set -uo pipefail
bin=$1
src=$2
small=(--config "$src/configs/gpt-tiny.json" --n-layer 2 --n-head 2 --d-model 64 --seq-len 64 --micro-batch 1
       --global-batch 12 --steps 300 --warmup 2 --eval-every 1000 --eval-batches 2 --threads 1 --no-progress)
# shellcheck source=train_lib.sh
source "$src/tests/integration/train_lib.sh"
export HETCOMM_PROBE=0

"$bin/hetcomm-run" --elastic -np 4 "$bin/hetcomm-train" "${small[@]}" --elastic --checkpoint-dir "$work/ckpt" \
  --checkpoint-every 5 --log-json "$work/elastic.json" >"$work/elastic.log" 2>&1 &
launcher=$!
# Kill rank 2 once 20 steps are logged.
until [ "$({ wc -l <"$work/elastic.json"; } 2>/dev/null || echo 0)" -ge 20 ] || ! kill -0 $launcher 2>/dev/null; do
  sleep 0.02
done
victim=""
for p in $(pgrep -f "$bin/hetcomm-train"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "HETCOMM_RANK=2" && victim=$p
done
[ -n "$victim" ]; check "rank 2 found running after 20 steps" $?
killed=$(date +%s.%N)
kill -9 "$victim"
until grep -q "elastic: set up again" "$work/elastic.log" || ! kill -0 $launcher 2>/dev/null; do sleep 0.02; done
ready=$(date +%s.%N)
wait $launcher
check "the launcher exits 0 (a lost rank under --elastic)" $?
grep -q "rank 2 was killed by signal SIGKILL; --elastic: the other 3 ranks go on" "$work/elastic.log"
check "the launcher names the killed rank and lets the others go on" $?
from=$(sed -n 's/.*elastic: lost rank 2 of 4; going on with 3 ranks from \(.*safetensors\)$/\1/p' "$work/elastic.log")
[ -n "$from" ]; check "the survivors shrink to 3 ranks and name the checkpoint they go on from" $?
grep -q '"step":300,' "$work/elastic.json"; check "the survivors finish the run" $?
step=$(sed -n 's/.*step\([0-9]*\)\.safetensors$/\1/p' <<<"$from")
train fresh 3 --resume "$from"; check "a fresh 3-rank run resumes from $from" $?
compare fresh elastic 0 "$((step + 1))"; check "losses after the recovery equal the fresh resumed run's, bit for bit" $?
echo "elastic: kill to set up again on 3 ranks: $(python3 -c "print('%.2f s' % ($ready - $killed))"); resumed at step $step"
finish elastic_check
