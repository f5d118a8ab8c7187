#!/usr/bin/env bash
# link_fault_check.sh REPO BIN_DIR: link faults on an emulated cluster (a copy of clusters/dualrail-2x2.json under
# a name of its own: 2 hosts x 2 ranks, two InfiniBand-class rails and an Ethernet NIC each), in the middle of a
# run of 4 MiB all-reduces with checking on (all_reduce_perf -c 1):
#   - a NIC goes down (ip link set ib0 down in host h1's namespace): over tcp every rank fails with a clear error
#     within HETCOMM_TIMEOUT (5 s here) plus a margin; over UCX the run goes on over the other NICs (see below);
#     never a hang or a wrong result.
#   - a link's rate collapses to 1 % (tbf 8 Mbit/s on ib0): the run completes, every result right (#wrong 0).
# Skips (exit 77) where network namespaces cannot be made.
set -uo pipefail
repo=$1
bin=$2
source "$(dirname "$0")/emulated_lib.sh"
tmp=$(mktemp -d)
name="ci-lf-$$"
python3 - "$repo/clusters/dualrail-2x2.json" "$name" >"$tmp/cluster.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["name"] = sys.argv[2]
json.dump(c, sys.stdout, indent=1)
PY
emulate="$repo/scripts/emulate-cluster.sh"
trap '"$emulate" down "$tmp/cluster.json" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
"$emulate" up "$tmp/cluster.json" >"$tmp/up.log" 2>&1; check "emulate-cluster up" $?
ns=$(python3 -c 'import json,sys; print([h["netns"] for h in json.load(open(sys.argv[1]))["hosts"]][1])' \
  "/run/hetcomm-emulate/$name.json")

# Runs all_reduce_perf for `iters` calls of 4 MiB with HETCOMM_TIMEOUT=`timeout` seconds; half a second into the
# timed calls (once the table's header is out) applies the fault (the rest: a command in h1's namespace). Leaves the
# output in $tmp/out and the seconds from the fault to the launcher's exit in $elapsed.
run_with_fault() {
  local iters=$1 timeout_s=$2
  shift 2
  HETCOMM_TIMEOUT=$timeout_s timeout 180 "$bin/hetcomm-run" --cluster "$tmp/cluster.json" "$bin/all_reduce_perf" -b 4M -e 4M \
    -n "$iters" -w 1 -c 1 >"$tmp/out" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    grep -q "#wrong" "$tmp/out" && break
    sleep 0.1
  done
  sleep 0.5
  local t0
  t0=$(date +%s.%N)
  ip netns exec "$ns" "$@"
  wait $pid
  rc=$?
  elapsed=$(python3 -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 1))" "$t0")
}

# Succeeds when no row of the table counts a wrong element.
wrong() { awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ && NF >= 14 && ($10 != 0 || $14 != 0) {bad = 1} END {exit bad}' "$tmp/out"; }

# A NIC goes down for good. Over tcp every rank fails within HETCOMM_TIMEOUT (5 s here) plus a margin: a socket
# whose link is down stalls without an error, and the stall is what the timeout catches. UCX's TCP transport
# carries on over the host's other NICs (slower, right), and then the finalize fails at the timeout: its store
# connection ran over the NIC that went down. Either way: no hang, no wrong result, and the failing rank says why.
run_with_fault 40 5 ip link set ib0 down
echo "link down: exit $rc, $elapsed s after the fault"
[ $rc -ne 124 ]; check "a NIC that goes down never hangs the run (exit $rc; 124: hung)" $?
wrong
check "no wrong result before or after the fault" $?
if [ $rc -ne 0 ]; then
  # The first rank to fail says why; hetcomm-run then stops the others, which may not get to say anything.
  grep -qE '^\[[0-9]+\] .*(timed out|failed)' "$tmp/out"; check "the failing rank says why" $?
  grep -q "hetcomm-run: rank" "$tmp/out"; check "hetcomm-run names the ranks that exited" $?
fi
if [ -z "${HETCOMM_TRANSPORT:-}" ]; then
  [ $rc -ne 0 ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 5 + 15 else 1)" "$elapsed"
  check "over tcp every rank gives up within HETCOMM_TIMEOUT and a margin (exit $rc, $elapsed s)" $?
fi
ip netns exec "$ns" ip link set ib0 up

# A link's rate collapses to 1 %: slower, still right. A call then moves its ib0 share (about 2 MB) at 1 MB/s,
# and the packets queued beyond the new rate's 50 ms are dropped and wait out TCP's retransmission timers: with a
# 5 s HETCOMM_TIMEOUT, one call under the loaded CI run (-j 2) timed out after 5 s, as a timeout should for a call
# that slow. The timeout is not what this case checks, so it is well above such a call.
run_with_fault 5 30 tc qdisc change dev ib0 root tbf rate 8mbit burst 32kb latency 50ms
echo "rate collapse: exit $rc, $elapsed s after the fault"
[ $rc -eq 0 ]; check "a collapsed link slows the run, which completes (exit $rc)" $?
wrong
check "every result right (#wrong 0)" $?
[ $failed -eq 0 ] || cat "$tmp/out"
echo "link_fault_check: $passed passed, $failed failed"
[ $failed -eq 0 ]
