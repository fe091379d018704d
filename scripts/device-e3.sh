#!/usr/bin/env bash
# Issues 10 and 13, GPU sitting C: E3 (MNIST) on the GPU and on the GPU machine's CPU, side by side
# with the PyTorch peer in the same run. The CUDA backend's checks (every network, now with E3's
# convolutional pair, and every estimator, now with E3's VAE and SAGD passes, against the CPU
# engine), E3 training speed on the GPU against `mnist_peer.py --device cuda`, on 2 and 16 CPU
# threads against `mnist_peer.py --threads 2|16`, and a short `sagd mnist --device cuda` end to
# end. Builds nothing: run from the repository root with the stripped release binary and the
# peer's script in .dev/. Logs and JSON into $OUT.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
S=.dev/sagd
exec > >(tee "$O/device-c.log") 2>&1
. scripts/device-lib.sh
nvidia-smi -L; nproc; grep -m1 'model name' /proc/cpuinfo

echo "== 1. CUDA backend against the CPU engine (E2 and E3 networks and estimators)"
time $S bench gpu --repeats 10 --out "$O/gpu.json" > /dev/null

echo "== 2. E3 training speed on the GPU: sagd, then the PyTorch peer"
time $S bench mnist --device cuda --vae-batches 100 --sagd-batches 20 --data data/mnist --out "$O/mnist-gpu.json" > /dev/null
time peer --device cuda --vae-epochs 2 --vae-max-batches 100 --sagd-epochs 2 --sagd-max-batches 10 --out "$O/peer-gpu.json" | tail -4
per_batch "$O/peer-gpu.json"

echo "== 3. E3 training speed on 2 CPU threads: sagd, then the peer"
time $S --threads 2 bench mnist --vae-batches 20 --sagd-batches 2 --data data/mnist --out "$O/mnist-cpu2.json" > /dev/null
time peer --threads 2 --vae-epochs 2 --vae-max-batches 20 --sagd-epochs 2 --sagd-max-batches 1 --out "$O/peer-cpu2.json" | tail -4
per_batch "$O/peer-cpu2.json"

echo "== 4. E3 training speed on 16 CPU threads: sagd, then the peer"
time $S --threads 16 bench mnist --vae-batches 40 --sagd-batches 4 --data data/mnist --out "$O/mnist-cpu16.json" > /dev/null
time peer --threads 16 --vae-epochs 2 --vae-max-batches 40 --sagd-epochs 2 --sagd-max-batches 2 --out "$O/peer-cpu16.json" | tail -4
per_batch "$O/peer-cpu16.json"

echo "== 5. sagd mnist on the GPU end to end, short (1 VAE epoch, 100 SAGD updates, 200 test images x 500)"
time $S mnist --device cuda --data data/mnist --vae-epochs 1 --sagd-updates 100 --eval-n 200 --eval-k 500 --quiet --pretrained-cache /tmp/e3cache --out "$O/mnist-run" | tail -12
ls "$O/mnist-run"
echo "== done"
