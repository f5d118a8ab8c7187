#!/usr/bin/env bash
# launchers_check.sh: the README's launcher commands (docs/launching.md, "On a real cluster"), started for real on
# this one host: Open MPI's mpirun, torchrun, and Slurm (a single-node cluster, scripts/slurm-local.sh).
#
#   launchers_check.sh mpirun|torchrun|slurm BUILD_DIR SOURCE_DIR
#
# Each runs perf tools (checking their results: #wrong 0), hetcomm-train or a DDP script, and, where the PyTorch
# backend is built, the backend's op checks. The commands are the documented ones with this host's names in place
# of node1 (and, as root on 2 cores, Open MPI's --allow-run-as-root --oversubscribe). Exit 77 (skipped) only when
# Slurm's daemons cannot start here, with the reason.
set -uo pipefail
SECTION=${1:?usage: launchers_check.sh mpirun|torchrun|slurm BUILD_DIR SOURCE_DIR}
BUILD=$(cd "${2:?build dir}" && pwd)
SRC=$(cd "${3:?source dir}" && pwd)
BIN=$BUILD/bin
PY=$(grep -E '^HETCOMM_PYTHON:' "$BUILD/CMakeCache.txt" | cut -d= -f2)
PY=${PY:-/usr/bin/python3}
TORCH=0
ls "$BUILD"/python/hetcomm/_torch_backend*.so >/dev/null 2>&1 && TORCH=1
export PYTHONPATH=$BUILD/python OMP_NUM_THREADS=1
WORK=$(mktemp -d /tmp/hetcomm-launchers.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
NODE1=$(hostname -s)
passed=0 failed=0

# check NAME LOG RC [PATTERN...]: passes when RC is 0 and the log holds every pattern.
check() {
  local name=$1 log=$2 rc=$3
  shift 3
  local missing=""
  for p in "$@"; do grep -qE -- "$p" "$log" || missing+=" '$p'"; done
  if [[ $rc -eq 0 && -z $missing ]]; then
    echo "PASS $SECTION: $name"
    passed=$((passed + 1))
  else
    echo "FAIL $SECTION: $name (exit $rc${missing:+, missing$missing})"
    # The ranks' own errors first: a launcher's summary (torchrun's) can push them out of the tail.
    grep -m 8 -E "failed|error|HETCOMM WARN" "$log" | grep -v "^ *error_file" | sed 's/^/    /'
    tail -n 15 "$log" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}
PERF_OK='Out of bounds values : 0 OK'
TRAIN=(--config "$SRC/configs/gpt-tiny.json" --steps 4 --warmup 1 --log-every 1 --eval-every 0)

case $SECTION in
  mpirun)
    MPI=(mpirun --allow-run-as-root --oversubscribe)
    # As documented: -x HETCOMM_MASTER_ADDR=node1 -x HETCOMM_SECRET=$(openssl rand -hex 16)
    SECRET=$(openssl rand -hex 16)
    timeout 120 "${MPI[@]}" -np 4 -H "$NODE1:4" -x HETCOMM_MASTER_ADDR="$NODE1" -x HETCOMM_SECRET="$SECRET" \
      "$BIN/all_reduce_perf" -b 8 -e 1M -f 8 -n 3 -w 1 >"$WORK/ar.log" 2>&1
    check "all_reduce_perf -np 4" "$WORK/ar.log" $? "$PERF_OK"
    timeout 120 "${MPI[@]}" -np 3 -x HETCOMM_MASTER_ADDR="$NODE1" -x HETCOMM_SECRET="$SECRET" \
      "$BIN/alltoall_perf" -b 8 -e 256K -f 8 -n 3 -w 1 >"$WORK/a2a.log" 2>&1
    check "alltoall_perf -np 3" "$WORK/a2a.log" $? "$PERF_OK"
    timeout 300 "${MPI[@]}" -np 2 -x HETCOMM_MASTER_ADDR="$NODE1" "$BIN/hetcomm-train" "${TRAIN[@]}" \
      >"$WORK/train.log" 2>&1
    check "hetcomm-train -np 2" "$WORK/train.log" $? 'summary: 4 steps'
    if [[ $TORCH -eq 1 ]]; then
      timeout 300 "${MPI[@]}" -np 2 -x PYTHONPATH -x OMP_NUM_THREADS "$PY" \
        "$SRC/tests/integration/torch_ops_check.py" >"$WORK/torch.log" 2>&1
      check "torch backend op checks -np 2" "$WORK/torch.log" $? 'all checks passed'
    fi
    ;;
  torchrun)
    RUN=("$PY" -m torch.distributed.run)
    PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # As documented, on one node: --nnodes 1 --rdzv_endpoint node1:PORT
    timeout 180 "${RUN[@]}" --nnodes 1 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint "$NODE1:$PORT" \
      -r 2 -t 2 --no_python "$BIN/all_reduce_perf" -b 8 -e 1M -f 8 -n 3 -w 1 >"$WORK/ar.log" 2>&1
    check "all_reduce_perf, 2 processes" "$WORK/ar.log" $? "$PERF_OK"
    timeout 180 "${RUN[@]}" --standalone --nproc_per_node 3 -r 2 -t 2 --no_python \
      "$BIN/reduce_scatter_perf" -b 8 -e 256K -f 8 -n 3 -w 1 >"$WORK/rs.log" 2>&1
    check "reduce_scatter_perf, 3 processes" "$WORK/rs.log" $? "$PERF_OK"
    if [[ $TORCH -eq 1 ]]; then
      timeout 300 "${RUN[@]}" --standalone --nproc_per_node 2 -r 2 -t 2 \
        "$SRC/tests/integration/torch_ddp_check.py" >"$WORK/ddp.log" 2>&1
      check "DDP script, 2 processes" "$WORK/ddp.log" $? 'DDP losses match gloo'
    fi
    ;;
  slurm)
    CLUSTER=$WORK/slurm
    up=$("$SRC/scripts/slurm-local.sh" up "$CLUSTER" 2>"$WORK/slurm-up.err")
    rc=$?
    if [[ $rc -ne 0 ]]; then
      echo "SKIP slurm: the single-node cluster did not start: $(tail -n 3 "$WORK/slurm-up.err")"
      [[ $rc -eq 77 ]] && exit 77
      exit 1
    fi
    eval "$up"  # export SLURM_CONF=...
    trap '"$SRC/scripts/slurm-local.sh" down "$CLUSTER"; rm -rf "$WORK"' EXIT
    HETCOMM_MASTER_ADDR=$NODE1 timeout 180 srun -n 4 "$BIN/all_reduce_perf" -b 8 -e 1M -f 8 -n 3 -w 1 \
      >"$WORK/ar.log" 2>&1
    check "srun -n 4 all_reduce_perf" "$WORK/ar.log" $? "$PERF_OK"
    HETCOMM_MASTER_ADDR=$NODE1 timeout 180 srun -n 4 "$BIN/broadcast_perf" -b 8 -e 1M -f 8 -n 3 -w 1 \
      >"$WORK/bc.log" 2>&1
    check "srun -n 4 broadcast_perf" "$WORK/bc.log" $? "$PERF_OK"
    # sbatch: a short training job, its srun line as documented.
    cat >"$WORK/train.sbatch" <<EOF
#!/bin/bash
#SBATCH -N 1
#SBATCH -n 2
#SBATCH -o $WORK/train.log
HETCOMM_MASTER_ADDR=\$(scontrol show hostnames "\$SLURM_JOB_NODELIST" | head -1) \\
    srun -N 1 --ntasks-per-node=2 $BIN/hetcomm-train ${TRAIN[*]}
EOF
    timeout 300 sbatch --wait "$WORK/train.sbatch" >"$WORK/sbatch.out" 2>&1
    rc=$?
    cat "$WORK/sbatch.out" >>"$WORK/train.log"
    check "sbatch: hetcomm-train on 2 tasks" "$WORK/train.log" $rc 'summary: 4 steps'
    if [[ $TORCH -eq 1 ]]; then
      timeout 300 srun -n 2 "$PY" "$SRC/tests/integration/torch_ops_check.py" >"$WORK/torch.log" 2>&1
      check "srun -n 2: torch backend op checks" "$WORK/torch.log" $? 'all checks passed'
    fi
    ;;
  *)
    echo "launchers_check: unknown section $SECTION (mpirun, torchrun, slurm)" >&2
    exit 2
    ;;
esac
echo "launchers_check $SECTION: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
