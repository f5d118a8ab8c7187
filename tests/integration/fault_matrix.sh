#!/usr/bin/env bash
# fault_matrix.sh BIN_DIR: kill -9 and SIGSTOP against every collective on the transport HETCOMM_TRANSPORT names
# (tcp and shm by default; the suite's UCX reruns set ucx), 4 ranks, through fault_check. Every survivor must fail
# within its bound (kill: at once, as a remote error; stop: at HETCOMM_TIMEOUT, 5 s here), and name the rank that
# died (the cause innermost in "rank X aborted: ..."). Prints a table: trials, survivors' slowest error, blame.
#
# Blame over tcp and UCX is reported, not required (fixing it is open work): a rank that aborts while its peer is
# still sending closes a socket with unread data, the kernel answers with a reset, and the reset discards the abort
# reason it had sent (measured: 1 miss in 102 tcp alltoall and sendrecv trials: the aborting rank named, not the dead one);
# UCX reports the aborting peer's endpoint as an I/O error without its reason (1 in 3 alltoall trials over sm).
set -uo pipefail
BIN=${1:?usage: fault_matrix.sh BIN_DIR}
transports=${HETCOMM_TRANSPORT:-"tcp shm"}
colls="allreduce allgather reducescatter broadcast reduce alltoall sendrecv"
failed=0
printf "%-6s %-14s %-5s %7s %12s %s\n" transport collective fault trials "slowest (s)" blame
for t in $transports; do
  blame=require
  [ "$t" = tcp ] || [ "$t" = ucx ] && blame=report
  for c in $colls; do
    for fault in kill stall; do
      [ "$fault" = stall ] && [ "$c" != allreduce ] && [ "$c" != sendrecv ] && continue  # stalls: timeouts alike
      victim=$(( (RANDOM % 3) + 1 ))
      out=$(HETCOMM_TRANSPORT=$t FAULT_BLAME=$blame timeout 120 "$BIN/fault_check" 4 "$victim" "$fault" "$c" 2>&1)
      rc=$?
      lines=$(grep -E "^fault " <<<"$out")
      n=$(grep -c . <<<"$lines")
      slowest=$(awk '{print $(NF-3)}' <<<"$lines" | sort -n | tail -1)
      right=$(grep -c "blame right" <<<"$lines")
      printf "%-6s %-14s %-5s %7s %12s %s/%s right\n" "$t" "$c" "$fault" "$n" "${slowest:--}" "$right" "$n"
      if [ $rc -ne 0 ] || [ "$n" -ne 3 ]; then
        echo "FAILED: $t $c $fault (victim $victim, exit $rc)"
        tail -n 8 <<<"$out" | sed 's/^/    /'
        failed=$((failed + 1))
      fi
    done
  done
done
echo "fault_matrix: $failed failed"
[ $failed -eq 0 ]
