#!/usr/bin/env bash
# Issues 10 and 13, GPU sitting D: E3 (MNIST) with the whole update on the GPU (Adam's moments kept
# there), with and without TF32 products, against the PyTorch peer in the same run; the checks
# (networks, estimators, device-side training against the CPU's); E3 on 2 and 16 CPU threads
# against the peer; and the default `sagd mnist` run on the GPU. Builds nothing: run from the
# repository root with the stripped release binary and the peer's script in .dev/.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
# At most 8 files come back: the log, and everything else in one archive.
R=/tmp/sagd-d
mkdir -p "$R"
S=.dev/sagd
exec > >(tee "$O/device-d.log") 2>&1
. scripts/device-lib.sh
nvidia-smi -L; nproc

echo "== 1. CUDA backend against the CPU engine: networks, estimators, E3 training with the update on the device"
time $S bench gpu --repeats 10 --out "$R/gpu.json" > /dev/null

echo "== 2. E3 training speed on the GPU: sagd (f32 products), sagd (TF32 products), the PyTorch peer"
time $S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu.json" > /dev/null
time SAGD_GPU_TF32=1 $S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu-tf32.json" > /dev/null
time peer --device cuda --vae-epochs 2 --vae-max-batches 200 --sagd-epochs 2 --sagd-max-batches 20 --out "$R/peer-gpu.json" | tail -4
per_batch "$R/peer-gpu.json"

echo "== 3. E3 on 16 and 2 CPU threads: sagd, then the peer"
time $S --threads 16 bench mnist --vae-batches 40 --sagd-batches 4 --data data/mnist --out "$R/mnist-cpu16.json" > /dev/null
time peer --threads 16 --vae-epochs 2 --vae-max-batches 40 --sagd-epochs 2 --sagd-max-batches 2 --out "$R/peer-cpu16.json" | tail -4
per_batch "$R/peer-cpu16.json"
time $S --threads 2 bench mnist --vae-batches 20 --sagd-batches 2 --data data/mnist --out "$R/mnist-cpu2.json" > /dev/null
time peer --threads 2 --vae-epochs 2 --vae-max-batches 20 --sagd-epochs 2 --sagd-max-batches 1 --out "$R/peer-cpu2.json" | tail -4
per_batch "$R/peer-cpu2.json"

echo "== 4. the default sagd mnist on the GPU (f32 products; evaluation on the CPU's 16 threads)"
time $S mnist --device cuda --data data/mnist --quiet --pretrained-cache /tmp/e3cache --out "$R/mnist-default" | tail -12
python3 -c "import json; r = json.load(open('$R/mnist-default/result.json')); print('timing_s', r['timing_s'])"
echo "== done"
tar czf "$O/results.tgz" -C "$R" .
