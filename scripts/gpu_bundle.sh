#!/usr/bin/env bash
# gpu_bundle.sh OUT [BUILD]: the programs scripts/gpu_check.sh runs, stripped, with the shared libraries they need
# from this machine, in OUT (for a GPU machine that lacks the build's packages).
set -euo pipefail
out=$1 build=${2:-build}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/nccl" "$out/lib/deps"
for p in hetcomm-run nccl_abi_check cuda_reduce_check; do strip -o "$out/bin/$p" "$build/bin/$p"; done
strip -o "$out/lib/libhetcomm.so.0" "$build/lib/libhetcomm.so.0"
strip -o "$out/lib/libhetcomm-cuda.so" "$build/lib/libhetcomm-cuda.so"
strip -o "$out/lib/nccl/libnccl.so.2" "$build/lib/nccl/libnccl.so.2"
# Everything they link that is not the C/C++ runtime or CUDA's own.
ldd "$build/lib/libhetcomm.so.0" "$build/bin/hetcomm-run" "$build/bin/cuda_reduce_check" |
  awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl|librt)\.so|libcudart|libhetcomm|/cuda' |
  while read -r lib; do cp -L "$lib" "$out/lib/deps/"; done
du -sh "$out"
