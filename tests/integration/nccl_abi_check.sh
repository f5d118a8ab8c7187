#!/usr/bin/env bash
# nccl_abi_check.sh RUN NP CHECK LIBDIR MODE: runs the NCCL program CHECK on NP ranks under hetcomm-run (RUN) with
# hetcomm's libnccl.so.2 (in LIBDIR) first on the library path, and checks that it was ours that ran.
set -euo pipefail
run=$1 np=$2 check=$3 libdir=$4 mode=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
resolved=$(ldd "$check" | awk '/libnccl.so.2/ {print $3}')
if [[ "$(readlink -f "$resolved")" != "$(readlink -f "$libdir/libnccl.so.2")" ]]; then
  echo "FAIL: $check resolves libnccl.so.2 to $resolved, not hetcomm's in $libdir" >&2
  exit 1
fi
"$run" -np "$np" "$check" "$dir" "$mode"
