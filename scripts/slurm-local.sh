#!/usr/bin/env bash
# slurm-local.sh: a single-node Slurm cluster on this machine, for tests and trials of the README's Slurm commands.
#
#   scripts/slurm-local.sh up DIR      starts munged, slurmctld and slurmd with their state, logs and config in DIR
#                                      and prints the line to use it: export SLURM_CONF=DIR/slurm.conf
#   scripts/slurm-local.sh down DIR    stops them and removes DIR
#
# Nothing system-wide changes: munged runs on a socket and key of its own (not /run/munge), and the daemons and
# clients read DIR/slurm.conf through SLURM_CONF (not /etc/slurm). The node offers --cpus CPUs (default 8, more
# than this machine may have: ranks oversubscribe cores, as with mpirun --oversubscribe), one partition, "hc".
# The packages (slurmctld, slurmd, slurm-client, munge) come from scripts/setup.sh. Needs root: the daemons run as
# root here. Exit status 77 when a daemon cannot start, with its log's last lines.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "slurm-local: $*" >&2; exit "${2:-1}"; }

CMD=${1:-}
DIR=${2:-}
CPUS=8
[[ ${3:-} == --cpus ]] && CPUS=${4:?--cpus N}
[[ -n $CMD && -n $DIR ]] || usage 2

pid_of() { [[ -r $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null && cat "$1"; }

down() {
  local dir=$1
  [[ -d $dir ]] || return 0
  for p in slurmd slurmctld munge/munged; do
    if pid=$(pid_of "$dir/$p.pid"); then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
}

# A TCP port nothing listens on: the kernel picks one.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

up() {
  local dir=$1
  [[ $(id -u) -eq 0 ]] || die "needs root (the daemons run as root)"
  for b in munged mungekey slurmctld slurmd srun sbatch scontrol; do
    command -v "$b" >/dev/null || die "$b not found: scripts/setup.sh installs slurmctld, slurmd, slurm-client, munge" 77
  done
  [[ ! -e $dir/slurm.conf ]] || die "$dir already holds a cluster: $0 down $dir first"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
  dir=$(cd "$dir" && pwd)
  chmod 700 "$dir/munge"
  trap 'down "$dir"' ERR
  mungekey -c -k "$dir/munge/munge.key" -b 1024
  chmod 600 "$dir/munge/munge.key"
  munged -f --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" --log-file="$dir/munge/munged.log" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
    || { tail -n 5 "$dir/munge/munged.log" >&2; down "$dir"; die "munged did not start" 77; }
  local host ctld_port slurmd_port
  host=$(hostname -s)
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-local.sh: one node, this machine.
ClusterName=hetcomm
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=hc Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
  slurmctld -f "$dir/slurm.conf" || { tail -n 5 "$dir/slurmctld.log" >&2; down "$dir"; die "slurmctld did not start" 77; }
  slurmd -f "$dir/slurm.conf" || { tail -n 5 "$dir/slurmd.log" >&2; down "$dir"; die "slurmd did not start" 77; }
  # Ready when the node takes jobs (within a minute: a loaded machine, the test suite beside it, takes its time).
  for _ in $(seq 300); do
    if SLURM_CONF=$dir/slurm.conf sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "export SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.2
  done
  tail -n 5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
  down "$dir"
  die "the node never became idle" 77
}

case $CMD in
  up) up "$DIR" ;;
  down) down "$DIR" ;;
  -h|--help) usage 0 ;;
  *) usage 2 ;;
esac
