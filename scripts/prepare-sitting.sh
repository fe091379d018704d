#!/usr/bin/env bash
# Prepares .dev/ (ignored by git, carried to the GPU machine) for a sitting of scripts/sitting.sh:
# the stripped release binary, the examples of one's own networks, the Python wheel and, where the
# shared peers sit beside the checkout, the JAX peer (timed, never committed). Run it here, from the
# repository root; then, on the device, with carry [".dev"]:
#
#   OUT=$OUT RUNS=/tmp/runs JAX_PEER=.dev/sagd_peer_jax.py scripts/sitting.sh NAME CHECK@SECONDS ...
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
peer=../shared/peers/jax/sagd_peer_jax.py
if [ -f "$peer" ]; then cp "$peer" .dev/; else echo "no $peer: e2-gpu runs without the JAX peer"; fi
echo "prepared at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)'):"
du -sh .dev/* | sed 's/^/  /'
