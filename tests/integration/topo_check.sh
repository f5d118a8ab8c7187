#!/usr/bin/env bash
# topo_check.sh BIN_DIR: hetcomm-topo alone and under hetcomm-run, and the transport ranks of one host pick.
set -uo pipefail
bin=$1
passed=0
failed=0
check() {  # description, condition (exit status of the previous command)
  if [ "$2" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$bin/hetcomm-topo" 2>&1)
grep -q "^host .*cores" <<<"$out"; check "hetcomm-topo alone prints this host" $?
grep -q "package 0" <<<"$out"; check "hetcomm-topo alone lists packages" $?

out=$("$bin/hetcomm-run" -np 3 "$bin/hetcomm-topo" --probe --json "$tmp/cluster.json" 2>&1)
grep -q "cluster: 3 ranks on 1 host" <<<"$out"; check "cluster summary" $?
grep -qE "^\[0\] r1 +SHM +X +SHM" <<<"$out"; check "link-class matrix" $?
grep -qE "^\[0\] r0 +X +shm +shm" <<<"$out"; check "transport matrix: shm on one host" $?
grep -q "measured through the transports" <<<"$out"; check "probe prints the alpha/beta matrix" $?
[ -s "$tmp/cluster.json" ] && grep -q '"hosts"' "$tmp/cluster.json"; check "--json writes the cluster" $?

out=$(HETCOMM_TRANSPORT=tcp "$bin/hetcomm-run" -np 2 -x HETCOMM_TRANSPORT=tcp "$bin/hetcomm-topo" 2>&1)
grep -qE "^\[0\] r0 +X +tcp" <<<"$out"; check "HETCOMM_TRANSPORT=tcp shows in the transport matrix" $?

# 4 ranks of one host: init says shm to every peer, and every collective is correct over it.
out=$("$bin/hetcomm-run" -np 4 -x HETCOMM_DEBUG=INFO -x HETCOMM_DEBUG_SUBSYS=INIT "$bin/all_reduce_perf" -b 8 -e 1M -f 32 -c 1 2>&1)
grep -q "same host: shm to 3 peers; other hosts: tcp to 0 peers" <<<"$out"; check "4 local ranks pick shm" $?
grep -q "Out of bounds values : 0 OK" <<<"$out"; check "allreduce over shm is correct" $?

# A broken topology file is refused with its name in the message.
echo '{"hosts": [ {"match": 3} ]}' >"$tmp/bad.json"
out=$(HETCOMM_TOPO_FILE="$tmp/bad.json" "$bin/hetcomm-topo" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "bad.json" <<<"$out"; check "a bad HETCOMM_TOPO_FILE is refused, naming the file" $?

echo "topo_check: $passed passed, $failed failed"
[ $failed -eq 0 ]
