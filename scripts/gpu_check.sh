#!/usr/bin/env bash
# gpu_check.sh [BUNDLE]: the checks of CUDA device buffers that need a GPU, on a machine that has one.
#   - the device reduction kernels against the host kernels (cuda_reduce_check);
#   - nccl_abi_check with device buffers on a CUDA stream, 2, 4 and 8 ranks sharing the GPU, every collective x
#     datatype x op, and the stream-ordering checks (host buffers: ctest's nccl_abi_np*);
#   - allreduce bus bandwidth on device buffers (2 and 4 ranks) against the copy bound, and per-call time;
#   - NVIDIA's NCCL on one rank with the same program, as the reference for per-call overhead.
# BUNDLE: a folder with bin/ (hetcomm-run, nccl_abi_check, cuda_reduce_check), lib/ (libhetcomm.so.0,
# libhetcomm-cuda.so and the libraries they need) and lib/nccl/ (hetcomm's libnccl.so.2), as scripts/gpu_bundle.sh
# makes it (a machine without the build's packages can run it); default: the build tree.
set -uo pipefail
bundle=${1:-build}
bin=$bundle/bin
export LD_LIBRARY_PATH="$bundle/lib:$bundle/lib/deps:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ours="$bundle/lib/nccl"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
step() { echo; echo "== $*"; }
check() { "$@" || { echo "FAILED ($?): $*"; fails=$((fails + 1)); }; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
nproc

step "device kernels against host kernels"
check "$bin/cuda_reduce_check"

# Bounded steps (GPU time is scarce): HETCOMM_TIMEOUT makes a stuck rank say where it waits.
export HETCOMM_TIMEOUT=${HETCOMM_TIMEOUT:-30}
for np in 2 4 8; do
  step "nccl_abi_check: device buffers, $np ranks on one GPU"
  mkdir -p "$work/d$np"
  check env LD_LIBRARY_PATH="$ours:$LD_LIBRARY_PATH" timeout 55 "$bin/hetcomm-run" -np $np "$bin/nccl_abi_check" "$work/d$np" device
done

for np in 1 2 4; do
  step "hetcomm: allreduce on device buffers, $np rank(s)"
  mkdir -p "$work/b$np"
  check env LD_LIBRARY_PATH="$ours:$LD_LIBRARY_PATH" timeout 30 "$bin/hetcomm-run" -np $np "$bin/nccl_abi_check" "$work/b$np" device --bench
done

step "NVIDIA NCCL, 1 rank, same program (reference)"
nv=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib \
        /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib 2>/dev/null | while read -r d; do
       [[ -e $d/libnccl.so.2 ]] && echo "$d" && break; done)
if [[ -z "$nv" ]]; then
  nv=$(dirname "$(find / -name 'libnccl.so.2' -not -path "*/$bundle/*" 2>/dev/null | head -1)")
fi
echo "NVIDIA libnccl.so.2 from: ${nv:-none found}"
if [[ -n "$nv" && "$nv" != "." ]]; then
  mkdir -p "$work/nv"
  check env LD_LIBRARY_PATH="$nv:$LD_LIBRARY_PATH" timeout 30 "$bin/nccl_abi_check" "$work/nv" device --bench
fi
echo
echo "gpu_check: $fails step(s) failed"
exit $((fails > 0))
