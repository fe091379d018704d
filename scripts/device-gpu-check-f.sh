#!/usr/bin/env bash
# GPU sitting F (short): the CUDA backend's checks, and one VAE and SAGD timing, on the final build
# of the session (E3's passes share one input-and-encoder step). Run from the repository root with
# the stripped release binary in .dev/; the log into $OUT.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
exec > >(tee "$O/device-f.log") 2>&1
. scripts/device-lib.sh
nvidia-smi -L
time .dev/sagd bench gpu --repeats 5 --out "$O/gpu.json" > /dev/null
time .dev/sagd bench mnist --device cuda --vae-batches 100 --sagd-batches 10 --data data/mnist > /dev/null
echo "== done"
