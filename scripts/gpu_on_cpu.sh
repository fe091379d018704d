#!/usr/bin/env bash
# The GPU backend's host code run without a GPU: a CUDA driver, NVRTC and cuBLAS of the CPU
# (crates/sagd-nn/src/cuda/emulated/driver.cpp, with kernels.cu compiled in as C++ over shim.h)
# built as one library under the three names cudarc loads, then the commands given run with it
# first on LD_LIBRARY_PATH (default: the GPU-against-CPU checks of every network, E2's estimators
# and training, Adam's step, and E3's passes and training on a small convolutional model; and
# random networks of the engine's layers).
# It checks the host code's logic (buffers, shapes, launches, graphs), not a GPU's arithmetic,
# memory model or speed: the sittings on a GPU still do that. Needs a C++20 compiler.
set -euo pipefail
[ "$(uname -m)" = x86_64 ] || { echo "gpu_on_cpu.sh: the CPU driver switches fibers in x86-64 code; this is $(uname -m)" >&2; exit 1; }
cd "$(dirname "$0")/.."
dir=crates/sagd-nn/src/cuda
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sed 's/extern __shared__ float sh\[\];/float* sh = g_dyn;/' "$dir/kernels.cu" > "$work/kernels.cu"
# Each kernel, and whether its threads meet at __syncthreads.
awk '/extern "C" __global__ void/ { if (name) print "K(" name ", " (sync ? "true" : "false") ")";
       match($0, /void [a-z_0-9]+/); name = substr($0, RSTART + 5, RLENGTH - 5); sync = 0 }
     /__syncthreads/ { sync = 1 }
     END { print "K(" name ", " (sync ? "true" : "false") ")" }' "$work/kernels.cu" > "$work/kernels.list"
mkdir -p "$work/lib"
"${CXX:-c++}" -std=c++20 -O3 -march=native -ffp-contract=off -shared -fPIC -pthread -w -I "$dir/emulated" \
  -DKERNELS="\"$work/kernels.cu\"" -DKERNEL_LIST="\"$work/kernels.list\"" \
  "$dir/emulated/driver.cpp" -o "$work/lib/libcuda.so"
ln -s libcuda.so "$work/lib/libnvrtc.so"
ln -s libcuda.so "$work/lib/libcublas.so"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ $# -eq 0 ]; then
  # E3's checks on its own networks (the_gpu_agrees_with_the_cpu) take about 15 minutes here:
  # run them by name.
  cargo test --release -p sagd-nn --test cuda -- --include-ignored
  cargo test --release -p sagd-apps --test gpu_check -- --include-ignored \
    --skip the_gpu_agrees_with_the_cpu
else
  "$@"
fi
