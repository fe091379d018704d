#!/usr/bin/env bash
# The CUDA kernels' arithmetic checked without a GPU: kernels.cu compiled as C++ over a shim of
# CUDA (crates/sagd-nn/src/cuda/emulated/shim.h: a block's threads as OS threads), and the
# kernels of the likelihood, the bounds' weights, the posterior's prior and the chains' steps
# run against their closed forms (emulated/check.cpp). Needs a C++20 compiler (g++ 12 here). Non-zero on a mismatch.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=crates/sagd-nn/src/cuda
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Dynamic shared memory as a static buffer of the shim.
sed 's/extern __shared__ float sh\[\];/float* sh = g_dyn;/' "$dir/kernels.cu" > "$work/kernels.cu"
"${CXX:-c++}" -std=c++20 -O1 -pthread -w -I "$dir/emulated" -DKERNELS="\"$work/kernels.cu\"" \
  "$dir/emulated/check.cpp" -o "$work/check"
"$work/check"
