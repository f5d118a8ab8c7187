#!/usr/bin/env bash
# sanitize.sh: tests under a sanitizer, in a clang tree of their own (scripts/lib/sanitized_build.sh).
#   scripts/sanitize.sh address          ASan + UBSan: the subset CI runs (ctest -L sanitize): the unit tests of
#                                        common, kernels, transports and comm, and coll_check (3 ranks, shm and
#                                        tcp), cpp_api_check, fault_check (kill, shm and tcp) and shrink_check
#                                        (kill -9 and shrink, shm and tcp)
#   scripts/sanitize.sh thread           TSan: the subset CI runs (ctest -L tsan): the public API's unit tests
#                                        (ranks as threads of one process), coll_check and fault_check as above
#   SANITIZE_ALL=1 scripts/sanitize.sh address|thread    every unit and integration test instead (not torch)
# Any report (a leak, an overflow, undefined behaviour, a data race) fails the test that made it.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
[ "$kind" = address ] || [ "$kind" = thread ] || { sed -n '2,10p' "$0"; exit 2; }
source scripts/lib/sanitized_build.sh
if [ "${SANITIZE_ALL:-0}" = 1 ]; then
  targets=(all) labels='unit|integration'
elif [ "$kind" = address ]; then
  targets=(unit_common unit_kernels unit_transports unit_comm_internal unit_comm_api hetcomm-run coll_check
           cpp_api_check fault_check shrink_check)
  labels='sanitize'
else
  targets=(unit_comm_api hetcomm-run coll_check fault_check) labels='tsan'
fi
sanitized_build "$kind" "${targets[@]}"
dir=$(sanitized_dir "$kind")
echo "== sanitize $kind: ctest -L '$labels' in $dir"
cd "$dir"
ctest --output-on-failure --timeout 900 -j 2 -L "$labels" -LE torch
