#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer and UndefinedBehaviorSanitizer
# on, in the tree scripts/sanitize.sh address uses: build-sanitize-address/) and runs each on a copy of its seed
# corpus (tests/fuzz/corpus/<target>/).
#   scripts/fuzz.sh                     every target, 10 s each (the test suite's short run)
#   scripts/fuzz.sh --runs 1000000      every target for a million executions each
#   scripts/fuzz.sh --seconds 60 fuzz_store fuzz_tcp_frames
#   scripts/fuzz.sh --seeds             rewrite the binary seeds with today's encoders (after a format change)
# Prints a line per target: executions, seconds, and new inputs found. A crash, leak, sanitizer report or timeout
# fails the run; the input that caused it is kept in build-sanitize-address/artifacts/ (replay: run
# build-sanitize-address/bin/TARGET FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
runs=-1 seconds=10 seeds=0 targets=()
while (($#)); do
  case "$1" in
    --runs) runs=$2 seconds=0; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --seeds) seeds=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
source scripts/lib/sanitized_build.sh
dir=$(sanitized_dir address)
sanitized_build address hetcomm_fuzzers write_seeds
if ((seeds)); then
  "$dir/bin/write_seeds" tests/fuzz/corpus "$src"
  echo "fuzz.sh: seeds written to tests/fuzz/corpus"
  exit 0
fi
if ((${#targets[@]} == 0)); then
  for t in "$dir"/bin/fuzz_*; do targets+=("$(basename "$t")"); done
fi
mkdir -p "$dir/artifacts"
export HETCOMM_DEBUG=${HETCOMM_DEBUG:-NONE}  # malformed input is expected: its warnings would drown the output
failed=0
printf '%-22s %12s %8s %6s\n' target executions seconds new
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/$t
  [ -d "$corpus" ] || { echo "fuzz.sh: no seed corpus at $corpus" >&2; failed=1; continue; }
  work=$(mktemp -d)
  log=$dir/artifacts/$t.log
  start=$(ls "$corpus" | wc -l)
  if "$dir/bin/$t" -runs="$runs" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 -print_final_stats=1 \
      -artifact_prefix="$dir/artifacts/$t-" "$work" "$corpus" >"$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo '?')
    printf '%-22s %12s %8s %6s\n' "$t" "$execs" "$secs" "$(ls "$work" | wc -l)"
  else
    echo "fuzz.sh: $t FAILED (log: $log; its last lines:)" >&2
    tail -30 "$log" >&2
    failed=1
  fi
  rm -rf "$work"
done
exit $failed
