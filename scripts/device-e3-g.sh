#!/usr/bin/env bash
# Issues 10 and 13, GPU sitting G: the engine with packed wide weights, blocked large products and
# chunked convolutions. E3 training speed on 2 and 16 CPU threads, the previous build (b5eab1c,
# .dev/sagd-base) and this one side by side with the PyTorch peer, twice on 2 threads; the GPU
# checks against the CPU engine (which this build changed); E3 on the GPU against the peer.
# Builds nothing: run from the repository root with the stripped release binaries and the peer's
# script in .dev/.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
# At most 8 files come back: the log, and everything else in one archive.
R=/tmp/sagd-g
mkdir -p "$R"
exec > >(tee "$O/device-g.log") 2>&1
. scripts/device-lib.sh
nvidia-smi -L; nproc

# bench mnist on T threads with binary B, tagged N: VAE and SAGD minibatches through the runner.
ours() { local b=$1 n=$2 t=$3 v=$4 s=$5; echo "-- $n, $t threads"; $b --threads "$t" bench mnist \
  --vae-batches "$v" --sagd-batches "$s" --data data/mnist --out "$R/$n-cpu$t.json" | grep '^| [vs]'; }

echo "== 1. E3 on 2 CPU threads: previous build, this build, the peer (twice, alternating)"
for round in 1 2; do
  ours .dev/sagd-base base-r$round 2 20 2
  ours .dev/sagd new-r$round 2 20 2
  peer --threads 2 --vae-epochs 2 --vae-max-batches 20 --sagd-epochs 2 --sagd-max-batches 1 --out "$R/peer-r$round-cpu2.json" > /dev/null
  per_batch "$R/peer-r$round-cpu2.json"
done

echo "== 2. E3 on 16 CPU threads: previous build, this build, the peer"
ours .dev/sagd-base base 16 40 4
ours .dev/sagd new 16 40 4
peer --threads 16 --vae-epochs 2 --vae-max-batches 40 --sagd-epochs 2 --sagd-max-batches 2 --out "$R/peer-cpu16.json" > /dev/null
per_batch "$R/peer-cpu16.json"

echo "== 3. CUDA backend against this build's CPU engine: networks, estimators, E3 training"
time .dev/sagd bench gpu --repeats 10 --out "$R/gpu.json"

echo "== 4. E3 on the GPU (f32 and TF32 products) and the peer"
.dev/sagd bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu.json" | grep '^| [vs]'
SAGD_GPU_TF32=1 .dev/sagd bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu-tf32.json" | grep '^| [vs]'
peer --device cuda --vae-epochs 2 --vae-max-batches 200 --sagd-epochs 2 --sagd-max-batches 20 --out "$R/peer-gpu.json" > /dev/null
per_batch "$R/peer-gpu.json"
echo "== done"
tar czf "$O/results.tgz" -C "$R" .
