#!/usr/bin/env bash
# Issue 10's speed check on this machine: E3's seconds per VAE and per SAGD minibatch on 2 threads,
# sagd against mnist_peer.py in the same sitting, alternating, ROUNDS rounds (default 3). Run from
# the repository root after `cargo build --release`:
#   PEER_PY=/path/to/python-with-torch PEER_SCRIPT=../shared/peers/torch/mnist_peer.py \
#     scripts/local-e3-speed.sh [OTHER_SAGD_BINARY]
# The log and the JSON files go to docs/results/issue10-local/ (OUT to change it); a second
# binary (an earlier build) is timed in the same rounds when given.
set -u
. scripts/device-lib.sh
O=${OUT:-docs/results/issue10-local}
R=$O
mkdir -p "$O"
exec > >(tee "$O/speed.log") 2>&1
date -u; nproc; grep -m1 'model name' /proc/cpuinfo
${PEER_PY:-python3} -c 'import torch; print("torch", torch.__version__, torch.backends.cpu.get_cpu_capability())'
for round in $(seq "${ROUNDS:-3}"); do
  echo "== round $round"
  ours target/release/sagd new-r$round 2 40 2
  if [ $# -ge 1 ]; then ours "$1" base-r$round 2 40 2; fi
  peer_cpu r$round 2 40 2
done
