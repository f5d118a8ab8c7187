#!/usr/bin/env bash
# test.sh: sets up (scripts/setup.sh), checks the layer rules, and runs the whole test suite with ctest:
# unit tests per layer and multi-process integration tests through hetcomm-run. The integration suite then runs
# twice more with every pair forced onto UCX: over its TCP transport and over its shared memory, less the tests
# labelled "once", whose subject is not the transport: the trainer's numerics checks (train_check, hybrid_check;
# their collectives are the ones the coll, perf and fault checks already run over UCX, and they took 160 s of
# each rerun) and the 3-rank perf check (perf_check_np3; 75 s). Last come the
# bounded passes in clang trees of their own: the sanitizer subsets (scripts/sanitize.sh address, then thread)
# and a short run of every fuzz target (scripts/fuzz.sh --seconds 5).
#   LABEL=unit scripts/test.sh          only one label (unit | integration) of the main build, nothing else
#   SKIP_SANITIZE=1 scripts/test.sh     the main build's suite only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check_layers.sh
root=$PWD
cd "${BUILD_DIR:-build}"
args=(--output-on-failure --timeout 600 -j 2)
[ -n "${LABEL:-}" ] && args+=(-L "$LABEL")
ctest "${args[@]}"
ucx_built=$(grep -E '^HETCOMM_UCX_BUILT:INTERNAL=' CMakeCache.txt | cut -d= -f2)
if [ "${ucx_built:-OFF}" != ON ]; then
  echo "== integration suite over UCX: skipped, the UCX transport is not built (HETCOMM_UCX, libucx-dev)"
elif [ "${LABEL:-integration}" = integration ]; then
  for tls in tcp sm; do
    echo "== integration suite with HETCOMM_TRANSPORT=ucx UCX_TLS=$tls"
    HETCOMM_TRANSPORT=ucx UCX_TLS=$tls ctest --output-on-failure --timeout 600 -j 2 -L integration -LE once
  done
fi
cd "$root"
if [ -z "${LABEL:-}" ] && [ "${SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/sanitize.sh address
  echo "== fuzz: every target for 5 s"
  scripts/fuzz.sh --seconds 5
  scripts/sanitize.sh thread
fi
leftover=$(ls /dev/shm 2>/dev/null | grep -i hetcomm || true)
if [ -n "$leftover" ]; then
  echo "test: shared-memory segments left behind in /dev/shm: $leftover" >&2
  exit 1
fi
