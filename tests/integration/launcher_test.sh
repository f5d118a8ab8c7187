#!/usr/bin/env bash
# launcher_test.sh: hetcomm-run seen from outside: prefixed output, the ranks' environment, stopping the job when a
# rank fails or the launcher is signalled, and clear errors for bad command lines.
#
#   launcher_test.sh path/to/hetcomm-run
#
# Every launch runs under `timeout`, so a launcher that hangs fails its check instead of the whole run. The ranks'
# sleeps carry a duration unique to this run (sleep 30.<id>) so the leftover checks ignore other users' processes.
# The ranks' commands are single-quoted on purpose: their variables expand in the rank, not here.
# shellcheck disable=SC2016
set -u

RUN=${1:?usage: launcher_test.sh path/to/hetcomm-run}
PREFIX=()  # a command the launcher runs under (taskset)
TMP=$(mktemp -d)
# Only this shell cleans up: a background subshell (the watchdogs below) killed before it has set its own traps
# still runs this one, and took TMP away under the rest of the test (seen in CI, under load).
MAIN_PID=$$
trap '[ "$BASHPID" = "$MAIN_PID" ] && rm -rf "$TMP"' EXIT
ID="$$$RANDOM"
SLEEP="sleep 30.$ID"
passed=0
failed=0

pass() {
  echo "PASS $1"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL $1: $2"
  failed=$((failed + 1))
  if [ -s "$TMP/err" ]; then head -n 20 "$TMP/err" | sed 's/^/    stderr: /'; fi
}
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
# Runs the launcher with a 20 s safety net; stdout in $TMP/out, stderr in $TMP/err, exit code in $rc, time in $ms.
launch() {
  local start
  start=$(now_ms)
  timeout -k 5 20 "${PREFIX[@]}" "$RUN" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  ms=$(($(now_ms) - start))
}
# True when no sleep of this run is left; ranks killed a moment ago may still be on their way out.
no_leftovers() {
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pgrep -f "$SLEEP" >/dev/null || return 0
    sleep 0.2
  done
  return 1
}
# Kills this run's leftover sleeps (by pid) so that one failed check does not spoil the next.
clean_leftovers() {
  local pid
  for pid in $(pgrep -f "$SLEEP"); do kill -KILL "$pid" 2>/dev/null; done
}

# (a) each rank's lines arrive whole, prefixed with its rank
launch -np 3 sh -c 'echo hello $HETCOMM_RANK'
expected=$'[0] hello 0\n[1] hello 1\n[2] hello 2'
if [ $rc -ne 0 ]; then
  fail "a: prefixed output" "exit code $rc"
elif [ "$(sort "$TMP/out")" != "$expected" ]; then
  fail "a: prefixed output" "got: $(head -c 300 "$TMP/out")"
else
  pass "a: prefixed output"
fi

# (b) the rank environment, and a store listening where it says
vars='$HETCOMM_RANK $HETCOMM_WORLD_SIZE $HETCOMM_LOCAL_RANK $HETCOMM_LOCAL_WORLD_SIZE'
vars+=' $HETCOMM_MASTER_ADDR $HETCOMM_MASTER_PORT $HETCOMM_SECRET $HETCOMM_STORE'
launch -np 2 sh -c "echo \"$vars\""
good=$(grep -cE '^\[([01])\] \1 2 \1 2 127\.0\.0\.1 [0-9]+ [0-9a-f]{32} external$' "$TMP/out")
shared=$(awk '{ print $7, $8 }' "$TMP/out" | sort -u | wc -l)  # port and secret are the job's, not the rank's
if [ $rc -ne 0 ] || [ "$good" -ne 2 ] || [ "$shared" -ne 1 ]; then
  fail "b: environment" "exit code $rc, got: $(cat "$TMP/out")"
else
  pass "b: environment"
fi
if command -v bash >/dev/null; then
  launch -np 1 bash -c 'exec 3<>"/dev/tcp/$HETCOMM_MASTER_ADDR/$HETCOMM_MASTER_PORT" && echo connected'
  if [ $rc -eq 0 ] && [ "$(cat "$TMP/out")" = "[0] connected" ]; then
    pass "b: store listening on HETCOMM_MASTER_PORT"
  else
    fail "b: store listening on HETCOMM_MASTER_PORT" "exit code $rc, got: $(cat "$TMP/out")"
  fi
fi

# (b) torchrun's variables too (torch.distributed's env:// rendezvous): the same rank and size, rank 0's host, and a
# port of their own, the same on every rank; -x may not override them.
launch -np 2 sh -c 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $HETCOMM_MASTER_PORT"'
good=$(grep -cE '^\[([01])\] \1 2 \1 2 127\.0\.0\.1 [0-9]+ [0-9]+$' "$TMP/out")
ports=$(awk '{ print $7 }' "$TMP/out" | sort -u | wc -l)
distinct=$(awk '$7 != $8' "$TMP/out" | wc -l)
if [ $rc -ne 0 ] || [ "$good" -ne 2 ] || [ "$ports" -ne 1 ] || [ "$distinct" -ne 2 ]; then
  fail "b: torchrun variables" "exit code $rc, got: $(cat "$TMP/out")"
else
  pass "b: torchrun variables"
fi
launch -np 1 -x MASTER_PORT=1234 true
if [ $rc -eq 2 ] && grep -q 'MASTER_PORT: hetcomm-run sets it' "$TMP/err"; then
  pass "b: -x MASTER_PORT refused"
else
  fail "b: -x MASTER_PORT refused" "exit code $rc, stderr: $(cat "$TMP/err")"
fi

# (c) a failing rank stops the job quickly, named with its exit code, and nothing is left behind
launch -np 3 sh -c "if [ \$HETCOMM_RANK = 1 ]; then exit 7; fi; $SLEEP"
if [ $rc -ne 7 ]; then
  fail "c: rank failure" "exit code $rc, expected 7"
elif [ $ms -gt 5000 ]; then
  fail "c: rank failure" "took $ms ms"
elif ! grep -q 'rank 1 exited with code 7' "$TMP/err"; then
  fail "c: rank failure" "stderr does not name rank 1 and code 7"
elif ! no_leftovers; then
  fail "c: rank failure" "left behind: $(pgrep -af "$SLEEP")"
else
  pass "c: rank failure"
fi
clean_leftovers

# (c) blame: a rank that exits with an error just before another is killed (a survivor that noticed its dead peer
# first) does not hide the killed one: the launcher names the killed rank as the cause, and the other too
launch -np 3 sh -c "case \$HETCOMM_RANK in 1) sleep 0.3; exit 1;; 2) sleep 0.4; kill -9 \$\$;; esac; $SLEEP"
if [ $rc -ne 137 ]; then
  fail "c: blame" "exit code $rc, expected 137 (the killed rank's)"
elif ! grep -q 'rank 2 was killed by signal SIGKILL; rank 1 exited with code 1' "$TMP/err"; then
  fail "c: blame" "stderr does not name rank 2 first: $(cat "$TMP/err")"
else
  pass "c: blame"
fi
clean_leftovers

# (c) a stopped rank (SIGSTOP) is stopped with the job at once, not after the grace period: it is continued so that
# it acts on SIGTERM
launch --grace 20 -np 2 sh -c "if [ \$HETCOMM_RANK = 1 ]; then kill -STOP \$\$; $SLEEP; fi; sleep 0.5; exit 5"
if [ $rc -ne 5 ]; then
  fail "c: stopped rank" "exit code $rc, expected 5"
elif [ $ms -gt 5000 ]; then
  fail "c: stopped rank" "took $ms ms: the launcher waited out the grace period for the stopped rank"
elif ! no_leftovers; then
  fail "c: stopped rank" "left behind: $(pgrep -af "$SLEEP")"
else
  pass "c: stopped rank"
fi
clean_leftovers

# (d) a rank killed by a signal is named with the signal
launch -np 2 sh -c "if [ \$HETCOMM_RANK = 0 ]; then kill -9 \$\$; fi; $SLEEP"
if [ $rc -ne 137 ] || ! grep -q 'rank 0 was killed by signal SIGKILL' "$TMP/err"; then
  fail "d: rank killed by a signal" "exit code $rc"
elif ! no_leftovers; then
  fail "d: rank killed by a signal" "left behind: $(pgrep -af "$SLEEP")"
else
  pass "d: rank killed by a signal"
fi
clean_leftovers

# (e) SIGTERM (and SIGINT) to the launcher stops every rank quickly, exit 128 + signal. A non-interactive shell starts
# background jobs with SIGINT ignored; env --default-signal undoes that, as a terminal's foreground job would have it.
signal_test() {
  local sig=$1 want=$2 name="e: SIG$1 to the launcher" pid start ready=0
  rm -f "$TMP/out"  # else the previous launch's "ready" lines could be counted before the redirect truncates it
  env --default-signal=INT "$RUN" -np 3 sh -c "echo ready; exec $SLEEP" >"$TMP/out" 2>"$TMP/err" &
  pid=$!
  for _ in $(seq 50); do
    ready=$(grep -cs ready "$TMP/out")
    [ "$ready" -ge 3 ] && break
    sleep 0.1
  done
  start=$(now_ms)
  kill -"$sig" $pid
  # Kills the launcher if it has not ended in 15 s. Its sleep goes with it, and nothing in it holds our stdout:
  # ctest waits for that to close.
  (
    sleep 15 &
    s=$!
    trap 'kill $s; exit 0' TERM
    wait $s
    kill -KILL $pid
  ) >/dev/null 2>&1 &
  local watchdog=$!
  wait $pid
  rc=$?
  ms=$(($(now_ms) - start))
  kill $watchdog 2>/dev/null
  wait $watchdog 2>/dev/null
  if [ "$ready" -lt 3 ]; then
    fail "$name" "ranks did not start"
  elif [ $rc -ne "$want" ]; then
    fail "$name" "exit code $rc, expected $want"
  elif [ $ms -gt 5000 ]; then
    fail "$name" "took $ms ms"
  elif ! no_leftovers; then
    fail "$name" "left behind: $(pgrep -af "$SLEEP")"
  else
    pass "$name"
  fi
  clean_leftovers
}
signal_test TERM 143
signal_test INT 130

# A launcher killed outright takes its ranks with it (PR_SET_PDEATHSIG), rather than leaving them to hang
rm -f "$TMP/out"
"$RUN" -np 2 sh -c "echo ready; exec $SLEEP" >"$TMP/out" 2>/dev/null &
pid=$!
for _ in $(seq 50); do
  [ "$(grep -cs ready "$TMP/out")" -ge 2 ] && break
  sleep 0.1
done
kill -KILL $pid
wait $pid 2>/dev/null
if no_leftovers; then pass "e: SIGKILL to the launcher"; else fail "e: SIGKILL to the launcher" "ranks survived it"; fi
clean_leftovers

# A rank that ignores SIGTERM gets SIGKILL after --grace. Rank 1 fails only once rank 0 ignores SIGTERM.
trapped="$TMP/trapped"
launch -np 2 --grace 0.5 sh -c "if [ \$HETCOMM_RANK = 1 ]; then
    for i in \$(seq 50); do [ -e $trapped ] && break; sleep 0.1; done; exit 3; fi
  trap '' TERM; touch $trapped; $SLEEP; $SLEEP"
if [ $rc -ne 3 ] || [ $ms -gt 5000 ] || ! grep -q 'SIGKILL' "$TMP/err"; then
  fail "e: SIGKILL after --grace" "exit code $rc after $ms ms"
elif ! no_leftovers; then
  fail "e: SIGKILL after --grace" "left behind: $(pgrep -af "$SLEEP")"
else
  pass "e: SIGKILL after --grace"
fi
clean_leftovers

# (f) a program that cannot be executed is named
launch -np 2 "hetcomm-no-such-program-$ID"
if [ $rc -ne 0 ] && grep -q "hetcomm-no-such-program-$ID" "$TMP/err" && grep -q 'not found' "$TMP/err"; then
  pass "f: missing program"
else
  fail "f: missing program" "exit code $rc"
fi
printf '#!/bin/sh\necho hi\n' >"$TMP/not-executable"
launch -np 2 "$TMP/not-executable"
if [ $rc -ne 0 ] && grep -q "not-executable" "$TMP/err" && grep -qi 'permission denied' "$TMP/err"; then
  pass "f: program not executable"
else
  fail "f: program not executable" "exit code $rc"
fi

# (g) a command line the launcher does not understand exits 2 with a message
bad_cmdline() {
  launch "$@"
  if [ $rc -eq 2 ] && [ -s "$TMP/err" ]; then
    pass "g: bad command line: $*"
  else
    fail "g: bad command line: $*" "exit code $rc"
  fi
}
bad_cmdline --bogus -np 2 true
bad_cmdline -np 0 true
bad_cmdline -np two true
bad_cmdline -np 2
bad_cmdline true
bad_cmdline -np 2 -x =oops true
bad_cmdline -np 2 --bind-to socket true
# ... while the program's own options, even ones the launcher has, stay the program's
launch -n 2 -- sh -c 'echo "$@"' sh -np 9 --help --bogus
if [ $rc -eq 0 ] && [ "$(sort "$TMP/out")" = $'[0] -np 9 --help --bogus\n[1] -np 9 --help --bogus' ]; then
  pass "g: program arguments pass through"
else
  fail "g: program arguments pass through" "exit code $rc, got: $(cat "$TMP/out")"
fi

# (h) a 100 KB line and a final line without newline come through whole, prefixed
launch -np 2 sh -c 'head -c 100000 /dev/zero | tr "\0" a; echo; printf "last-$HETCOMM_RANK"'
long=$(awk '/^\[[01]\] a+$/ && length($0) == 100004' "$TMP/out" | wc -l)
if [ $rc -eq 0 ] && [ "$long" -eq 2 ] && grep -qx '\[0\] last-0' "$TMP/out" && grep -qx '\[1\] last-1' "$TMP/out" &&
  [ "$(wc -l <"$TMP/out")" -eq 4 ]; then
  pass "h: long and unterminated lines"
else
  fail "h: long and unterminated lines" "exit code $rc, $long long lines, $(wc -l <"$TMP/out") lines"
fi
# Lines written a few bytes at a time by 4 ranks at once never mix
launch -np 4 awk 'BEGIN { for (i = 0; i < 200; i++) { for (j = 0; j < 40; j++) { printf "%s", ENVIRON["HETCOMM_RANK"]; fflush() } print ""; fflush() } }'
mixed=$(grep -cvE '^\[([0-3])\] \1{40}$' "$TMP/out")
if [ $rc -eq 0 ] && [ "$mixed" -eq 0 ] && [ "$(wc -l <"$TMP/out")" -eq 800 ]; then
  pass "h: lines never interleave"
else
  fail "h: lines never interleave" "exit code $rc, $mixed mixed lines"
fi
# --no-prefix passes bytes unchanged, a missing final newline included
launch -np 1 --no-prefix printf 'x\ny'
if [ $rc -eq 0 ] && [ "$(od -An -c "$TMP/out" | tr -d ' ')" = 'x\ny' ]; then
  pass "h: --no-prefix"
else
  fail "h: --no-prefix" "exit code $rc, got: $(od -An -c "$TMP/out")"
fi
# stderr lines go to stderr, prefixed
launch -np 1 sh -c 'echo to-out; echo to-err >&2'
if [ $rc -eq 0 ] && [ "$(cat "$TMP/out")" = "[0] to-out" ] && grep -qx '\[0\] to-err' "$TMP/err"; then
  pass "h: stderr"
else
  fail "h: stderr" "exit code $rc"
fi

# (i) -x exports NAME=VALUE, and NAME from the launcher's environment
export HC_LAUNCHER_TEST_FROM_ENV="from env"
launch -np 2 -x HC_LAUNCHER_TEST_A=1 -x 'HC_LAUNCHER_TEST_B=a=b c' -x HC_LAUNCHER_TEST_FROM_ENV \
  sh -c 'echo "$HC_LAUNCHER_TEST_A|$HC_LAUNCHER_TEST_B|$HC_LAUNCHER_TEST_FROM_ENV"'
if [ $rc -eq 0 ] && [ "$(sort "$TMP/out")" = $'[0] 1|a=b c|from env\n[1] 1|a=b c|from env' ]; then
  pass "i: -x exports"
else
  fail "i: -x exports" "exit code $rc, got: $(cat "$TMP/out")"
fi
launch -np 1 -x HETCOMM_RANK=5 true
if [ $rc -eq 2 ] && grep -q HETCOMM_RANK "$TMP/err"; then
  pass "i: -x cannot override the rank"
else
  fail "i: -x cannot override the rank" "exit code $rc"
fi

# (j) --bind-to core: rank i on the i-th core this launcher may use, round robin; none (the default) leaves the
# launcher's own mask. The launcher is confined to its last CPU and then to all of them, so the expected lists are
# known whatever the machine (hwloc counts hardware threads of one core as one core).
cpus_of() { sort -t ']' -k1.2n "$TMP/out" | sed -n 's/.*Cpus_allowed_list:[[:space:]]*//p' | tr '\n' ' '; }
last_cpu=$(sed -n 's/.*Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' '\n' | tail -n 1 | sed 's/.*-//')
PREFIX=(taskset -c "$last_cpu")
launch -np 3 --bind-to core sh -c 'grep Cpus_allowed_list /proc/self/status'
if [ $rc -eq 0 ] && [ "$(cpus_of)" = "$last_cpu $last_cpu $last_cpu " ]; then
  pass "j: --bind-to core within the launcher's CPUs"
else
  fail "j: --bind-to core within the launcher's CPUs" "exit code $rc, got: $(cpus_of) (launcher on $last_cpu)"
fi
PREFIX=()
launch -np 1 sh -c 'grep Cpus_allowed_list /proc/self/status'
default_cpus=$(cpus_of)
# The cores among the CPUs this test may use (lscpu: CPU,CORE pairs; the mask: "0-3,8").
allowed=" $(sed -n 's/.*Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' '\n' |
  awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) printf "%d ", c }')"
ncores=$(lscpu -p=CPU,CORE | grep -v '^#' | while IFS=, read -r cpu core; do
  [[ $allowed == *" $cpu "* ]] && echo "$core"
done | sort -u | wc -l)
launch -np $((ncores + 1)) --bind-to core --report-bindings sh -c 'grep Cpus_allowed_list /proc/self/status'
read -r -a bound <<<"$(cpus_of)"
distinct=$(printf '%s\n' "${bound[@]:0:$ncores}" | sort -u | wc -l)
if [ $rc -eq 0 ] && [ "${#bound[@]}" -eq $((ncores + 1)) ] && [ "$distinct" -eq "$ncores" ] &&
  [ "${bound[$ncores]}" = "${bound[0]}" ] && [ "$(grep -c 'bound to core' "$TMP/err")" -eq $((ncores + 1)) ]; then
  pass "j: --bind-to core spreads ranks over cores, round robin"
else
  fail "j: --bind-to core spreads ranks over cores, round robin" "exit code $rc, $ncores cores, got: ${bound[*]}"
fi
launch -np 2 sh -c 'grep Cpus_allowed_list /proc/self/status'
if [ $rc -eq 0 ] && [ "$(cpus_of)" = "$default_cpus$default_cpus" ]; then
  pass "j: no binding by default"
else
  fail "j: no binding by default" "exit code $rc, got: $(cpus_of)"
fi

# All ranks exiting 0 is success, even with more ranks than cores
launch -np 16 true
if [ $rc -eq 0 ] && [ ! -s "$TMP/out" ]; then pass "all ranks succeed"; else fail "all ranks succeed" "exit code $rc"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
