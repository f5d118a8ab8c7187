#!/usr/bin/env bash
# perf_check.sh BIN_DIR NP: every perf tool under hetcomm-run with checking on (-c 1) must exit 0 and report
# "Out of bounds values : 0 OK" with #wrong 0 in every checked column. all_reduce_perf also sweeps every
# datatype and op at small sizes, and broadcast/reduce every root; broadcast/reduce also time each call alone
# (--barrier-each).
set -uo pipefail
bin=$1
np=$2
passed=0
failed=0
run() {  # name, args...
  local name=$1; shift
  local out
  out=$("$bin/hetcomm-run" -np "$np" "$bin/$name" "$@" -c 1 2>&1)
  local rc=$?
  # Column 10 and 14 of a data row (after the [rank] prefix) are #wrong out of place and in place.
  local wrong
  wrong=$(awk '$1=="[0]" && $2 ~ /^[0-9]+$/ && (($10 != "0" && $10 != "N/A") || ($14 != "0" && $14 != "N/A"))' <<<"$out")
  if [ $rc -eq 0 ] && grep -q "Out of bounds values : 0 OK" <<<"$out" && [ -z "$wrong" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $name $* (exit $rc)"
    echo "$out" | tail -20
  fi
}
for tool in all_reduce_perf all_gather_perf broadcast_perf reduce_perf reduce_scatter_perf alltoall_perf sendrecv_perf; do
  run "$tool" -b 8 -e 8M -f 8
done
run all_reduce_perf -b 8 -e 64K -f 32 -d all -o all
run reduce_scatter_perf -b 64 -e 64K -f 32 -d all -o all
run broadcast_perf -b 8 -e 1M -f 64 -r all -d all
run reduce_perf -b 8 -e 1M -f 64 -r all -o all
run all_reduce_perf -b 1M -e 1M -z 1
run broadcast_perf -b 1M -e 1M -z 1 --barrier-each 1 -a 3
run reduce_perf -b 64K -e 1M -f 16 --barrier-each 1
echo "perf_check on $np ranks: $passed passed, $failed failed"
[ $failed -eq 0 ]
