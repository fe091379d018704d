#!/usr/bin/env bash
# Prepares .dev/ (ignored by git, carried to the GPU machine) for a sitting of scripts/sitting.sh:
# the stripped release binary, the examples of one's own networks, the Python wheel, the CPU's side
# of the checks that compare the devices (run here, a few minutes) and, where the shared peers sit
# beside the checkout, the JAX peer (timed, never committed). Run it here, from the
# repository root; then, on the device, with carry [".dev"]:
#
#   OUT=$OUT RUNS=/tmp/runs CPU_REF=.dev/cpu-ref JAX_PEER=.dev/sagd_peer_jax.py \
#     scripts/sitting.sh NAME CHECK@SECONDS ...
#
# PYTHON: a Python with pip (default python3) for the wheel, built in a venv of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .dev/examples
cargo build --release -p sagd-cli
cargo build --release -p sagd-nn --examples
cp target/release/sagd .dev/sagd
for ex in own_decoder binary_images counts; do cp "target/release/examples/$ex" .dev/examples/; done
strip .dev/sagd .dev/examples/*
venv=target/wheel-venv
[ -x "$venv/bin/pip" ] || "${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install -q maturin
rm -f .dev/sagd-*.whl
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/pip" wheel -q ./crates/sagd-py --no-deps -w .dev
# The CPU's side of the checks that compare the devices (e2-options, e3-schedule), run here with
# the binary that travels, so that the device's minutes go to the GPU's side (CPU_REF=.dev/cpu-ref).
rm -rf .dev/cpu-ref
log="$(mktemp -d)"
OUT="$log" RUNS=.dev BIN=.dev/sagd scripts/sitting.sh cpu-ref cpu-ref > /dev/null
for run in opt-theorem3-cpu opt-refresh-cpu opt-refresh2-cpu e3-schedule-cpu; do
  [ -f ".dev/cpu-ref/$run/result.json" ] || { echo "the CPU's run $run failed: see $log" >&2; exit 1; }
done
rm -rf "$log"
# Only what the checks read travels (the working tree and .dev together are limited to 64 MiB).
find .dev/cpu-ref -type f ! -name result.json ! -name table1.md -delete
peer=../shared/peers/jax/sagd_peer_jax.py
if [ -f "$peer" ]; then cp "$peer" .dev/; else echo "no $peer: e2-gpu runs without the JAX peer"; fi
echo "prepared at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)'):"
du -sh .dev/* | sed 's/^/  /'
