#!/usr/bin/env bash
# test.sh: sets up (scripts/setup.sh), checks the layer rules, and runs the whole test suite with ctest:
# unit tests per layer and multi-process integration tests through hetcomm-run. The integration suite then runs
# twice more with every pair forced onto UCX: over its TCP transport and over its shared memory.
#   LABEL=unit scripts/test.sh          only one label (unit | integration)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check_layers.sh
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
    HETCOMM_TRANSPORT=ucx UCX_TLS=$tls ctest --output-on-failure --timeout 600 -j 2 -L integration
  done
fi
leftover=$(ls /dev/shm 2>/dev/null | grep -i hetcomm || true)
if [ -n "$leftover" ]; then
  echo "test: shared-memory segments left behind in /dev/shm: $leftover" >&2
  exit 1
fi
