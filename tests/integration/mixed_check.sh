#!/usr/bin/env bash
# mixed_check.sh BIN_DIR: one communicator that mixes transports. Four ranks on this machine pose as two hosts
# (HETCOMM_HOSTID h0 for ranks 0-1, h1 for ranks 2-3), so pairs within a "host" take shm and pairs across take
# what HETCOMM_TRANSPORT lists next (ucx, then tcp); every collective must be correct over the mix.
set -uo pipefail
bin=$1
passed=0
failed=0
check() {  # description, condition (exit status of the previous command)
  if [ "$2" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
# Each rank's host id from its rank, set before the program starts.
as_two_hosts='export HETCOMM_HOSTID=h$((HETCOMM_RANK / 2)); exec "$@"'

for across in ucx tcp; do
  out=$("$bin/hetcomm-run" -np 4 -x HETCOMM_TRANSPORT=shm,$across bash -c "$as_two_hosts" _ "$bin/hetcomm-topo" 2>&1)
  grep -qE "^\[0\] r0 +X +shm +$across +$across" <<<"$out"; check "shm,$across: rank 0 uses shm to 1, $across to 2-3" $?
  grep -qE "^\[0\] r2 +$across +$across +X +shm" <<<"$out"; check "shm,$across: rank 2 uses $across to 0-1, shm to 3" $?
  out=$("$bin/hetcomm-run" -np 4 -x HETCOMM_TRANSPORT=shm,$across bash -c "$as_two_hosts" _ "$bin/coll_check" 2>&1)
  rc=$?
  [ $rc -eq 0 ] && grep -qE "coll_check on 4 ranks: [0-9]+ passed, 0 failed" <<<"$out"
  check "shm,$across: every collective correct over the mix" $?
  [ $rc -eq 0 ] || tail -20 <<<"$out"
done

# Automatic choice across the two "hosts" (no RDMA here): shm within, tcp across.
out=$(env -u HETCOMM_TRANSPORT "$bin/hetcomm-run" -np 4 bash -c "$as_two_hosts" _ "$bin/hetcomm-topo" 2>&1)
grep -qE "^\[0\] r1 +shm +X +tcp +tcp" <<<"$out"; check "automatic: shm within a host, tcp across" $?

echo "mixed_check: $passed passed, $failed failed"
[ $failed -eq 0 ]
