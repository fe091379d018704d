#!/usr/bin/env bash
# Issues 10 and 13, GPU sitting G: the engine with packed wide weights, blocked large products and
# chunked convolutions. E3 training speed on 2 and 16 CPU threads, the previous build (b5eab1c,
# .dev/sagd-base) and this one side by side with the PyTorch peer, twice on 2 threads; the GPU
# checks against the CPU engine (which this build changed); E3 on the GPU against the peer.
# Builds nothing: run from the repository root with the stripped release binaries and the peer's
# script in .dev/.
set -u
# At most 8 files come back: the log, and everything else in one archive.
. scripts/device-lib.sh
sitting g

echo "== 1. E3 on 2 CPU threads: previous build, this build, the peer (twice, alternating)"
for round in 1 2; do
  ours .dev/sagd-base base-r$round 2 20 2
  ours .dev/sagd new-r$round 2 20 2
  peer_cpu r$round 2 20 1
done

echo "== 2. E3 on 16 CPU threads: previous build, this build, the peer"
ours .dev/sagd-base base 16 40 4
ours .dev/sagd new 16 40 4
peer_cpu all 16 40 2

echo "== 3. CUDA backend against this build's CPU engine: networks, estimators, E3 training"
time .dev/sagd bench gpu --repeats 10 --out "$R/gpu.json"

echo "== 4. E3 on the GPU (f32 and TF32 products) and the peer"
.dev/sagd bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu.json" | grep '^| [vs]'
SAGD_GPU_TF32=1 .dev/sagd bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu-tf32.json" | grep '^| [vs]'
peer --device cuda --vae-epochs 2 --vae-max-batches 200 --sagd-epochs 2 --sagd-max-batches 20 --out "$R/peer-gpu.json" > /dev/null
per_batch "$R/peer-gpu.json"
echo "== done"
tar czf "$O/results.tgz" -C "$R" .
