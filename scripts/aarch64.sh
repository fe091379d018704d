#!/usr/bin/env bash
# The aarch64 build, and the same bits from its NEON kernels, checked on an x86_64 machine:
# rustup's aarch64 standard library, Debian's cross linker, and the tests run under qemu-user
# (the products' tests, NEON tiles against the definition and the scalar row loop, and the
# fingerprint of every path in `tests/paths.rs`, the constant the x86_64 paths give), with the
# NEON code's warnings as errors. Emulation says nothing about speed. Exits 3, having changed
# nothing, when rustup cannot install the aarch64 standard library (no network to its server).
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
# (A machine that cannot reach rustup's server may wait on it: two minutes at most.)
if ! timeout 120 rustup target add "$target" >/dev/null 2>&1; then
  echo "aarch64: rustup could not install the $target standard library" >&2
  exit 3
fi
if ! (command -v aarch64-linux-gnu-gcc && command -v qemu-aarch64) >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
  $sudo apt-get install -y -q $pkgs >/dev/null ||
    { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q $pkgs >/dev/null; }
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-D warnings"
# The large products run on matrixmultiply's own kernels: not ours, and slow under emulation.
cargo test --release --target "$target" -q -p sagd-nn --lib gemm -- --skip a_large_product
cargo test --release --target "$target" -q -p sagd-nn --test paths
echo "ci (aarch64, under qemu): the NEON kernels give the x86_64 paths' bits"
