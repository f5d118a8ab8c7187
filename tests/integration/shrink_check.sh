#!/usr/bin/env bash
# shrink_check.sh BIN_DIR [TRANSPORTS]: under `hetcomm-run --elastic -np 4`, rank 2 and then rank 0 (the lowest,
# which leads the agreement) are killed mid-all-reduce, over each transport (default: HETCOMM_TRANSPORT, as the
# suite's UCX reruns set it, else "shm tcp"); every survivor must shrink and go on (shrink_check.cc), and the
# launcher must report the lost rank and exit 0. Then a rank dies instead of calling finalize: the others' finalize
# must fail at once, naming it.
set -uo pipefail
bin=$1
transports=${2:-${HETCOMM_TRANSPORT:-"shm tcp"}}
fail=0
for t in $transports; do
  for victim in 2 0; do
    out=$(HETCOMM_TIMEOUT=30 HETCOMM_PROBE=0 HETCOMM_TRANSPORT=$t timeout 120 \
      "$bin/hetcomm-run" --elastic -np 4 "$bin/shrink_check" "$victim" 2>&1)
    rc=$?
    ok=$(grep -c "shrink ok" <<<"$out")
    reported=$(grep -c "rank $victim was killed by signal SIGKILL; --elastic" <<<"$out")
    if [ "$rc" != 0 ] || [ "$ok" != 3 ] || [ "$reported" != 1 ]; then
      echo "FAIL: $t, victim $victim: exit $rc, $ok of 3 survivors went on, launcher report $reported"
      echo "$out"
      fail=1
    else
      echo "ok: $t, victim $victim: $(grep -o '[0-9.]* s from the error to the new communicator' <<<"$out" | sort -n | tail -1) (slowest survivor)"
    fi
  done
done
# A rank that dies instead of calling finalize: the others' finalize fails at once, naming it (HETCOMM_TIMEOUT is
# 30 s here; the bound below is far under it).
out=$(HETCOMM_TIMEOUT=30 HETCOMM_PROBE=0 timeout 60 "$bin/hetcomm-run" --elastic -np 3 "$bin/shrink_check" 1 finalize 2>&1)
ok=$(grep -c "finalize ok" <<<"$out")
slowest=$(grep -o 'failed after [0-9.]*' <<<"$out" | awk '{print $3}' | sort -n | tail -1)
if [ "$ok" != 2 ] || ! awk -v s="${slowest:-99}" 'BEGIN { exit !(s < 5) }'; then
  echo "FAIL: finalize with a dead rank: $ok of 2 survivors failed in time (slowest ${slowest:-none} s)"
  echo "$out"
  fail=1
else
  echo "ok: finalize with a dead rank fails on both survivors, naming it, within $slowest s"
fi
exit $fail
