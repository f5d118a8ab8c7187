# emulated_lib.sh: what the tests on emulated clusters share (sourced by emulated_check.sh, link_fault_check.sh):
# check(), the skip where network namespaces cannot be made, and UCX's TCP transport between emulated hosts.
passed=0
failed=0
check() {  # description, condition (exit status of the previous command)
  if [ "$2" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: emulated clusters need root (network namespaces, tc)"
  exit 77
fi
if ! ip netns add "hc-probe-$$" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here"
  exit 77
fi
ip netns del "hc-probe-$$"

# The suite also runs with every pair forced onto UCX. Shared memory cannot span hosts; between the emulated hosts
# (network namespaces of one kernel) UCX's shared-memory transports would connect, but their wake-ups (Unix
# sockets, one namespace each) would not arrive: give UCX its TCP transport too, as any multi-host UCX job has.
if [ "${HETCOMM_TRANSPORT:-}" = ucx ] && [ -n "${UCX_TLS:-}" ] && ! grep -qE "tcp|all" <<<"$UCX_TLS"; then
  export UCX_TLS="$UCX_TLS,tcp"
fi
