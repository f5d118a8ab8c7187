# sanitized_build.sh (sourced by scripts/sanitize.sh and scripts/fuzz.sh): configures and builds a clang tree with
# sanitizers. address: ASan + UBSan, plus libFuzzer's instrumentation, so the fuzz targets and the sanitized tests
# share one build (build-sanitize-address/); thread: TSan (build-sanitize-thread/). -O1 -g1: much less compile
# time than -O2 -g, and still line numbers in every report.
#   sanitized_build KIND TARGET...     builds those targets into $(sanitized_dir KIND)
sanitized_dir() { echo "${SANITIZE_BUILD_DIR:-build-sanitize-$1}"; }

sanitized_build() {
  local kind=$1
  shift
  local flags extra=()
  case "$kind" in
    address) flags=address,undefined; extra=(-DHETCOMM_FUZZ=ON) ;;
    thread) flags=thread ;;
    *) echo "sanitize: KIND is address or thread, not '$kind'" >&2; return 2 ;;
  esac
  command -v clang++ >/dev/null || { echo "sanitize: clang++ is missing (scripts/setup.sh installs clang)" >&2; return 1; }
  local dir
  dir=$(sanitized_dir "$kind")
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DHETCOMM_SANITIZE="$flags" -DHETCOMM_TORCH=OFF "${extra[@]}" >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target "$@"
}

# What a finding does: fail the process that has it, with a stack. Leaks are findings too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=0}
# hwloc's PCI plugin (libpciaccess) leaks when it is unloaded, from code LSan can no longer name, so no suppression
# can match it: sanitized runs discover the machine without it (hetcomm's own PCI and NIC code still runs).
export HWLOC_COMPONENTS=${HWLOC_COMPONENTS:--pci}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp}
