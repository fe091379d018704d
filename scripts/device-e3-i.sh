#!/usr/bin/env bash
# Issues 10 and 13, GPU sitting I: E3 on the GPU with the next update's binarisation and noise
# drawn on a second host thread while the GPU runs the current one. The checks against the CPU
# engine; E3's speed on the GPU (f32, TF32) against the peer; a GPU run interrupted and resumed
# against the same run uninterrupted (the same held-out numbers); two more rounds on 2 CPU threads
# against the peer. Builds nothing: run from the repository root with the stripped release binary
# and the peer's script in .dev/.
set -u
# At most 8 files come back: the log, and everything else in one archive.
. scripts/device-lib.sh
sitting i
S=.dev/sagd

echo "== 1. CUDA backend against the CPU engine"
time $S bench gpu --repeats 10 --out "$R/gpu.json" | grep -vE '^ |^[{}]'

echo "== 2. E3 on the GPU (f32 and TF32 products; sitting G's build for comparison) and the peer"
$S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu.json" | grep '^| [vs]'
.dev/sagd-g bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/g-mnist-gpu.json" | grep '^| [vs]'
SAGD_GPU_TF32=1 $S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu-tf32.json" | grep '^| [vs]'
peer --device cuda --vae-epochs 2 --vae-max-batches 200 --sagd-epochs 2 --sagd-max-batches 20 --out "$R/peer-gpu.json" > /dev/null
per_batch "$R/peer-gpu.json"

echo "== 3. a GPU run interrupted every 4 updates and resumed, against the same run whole"
small() { $S mnist --device cuda --data data/mnist --train-n 2000 --vae-epochs 2 --sagd-updates 10 \
  --eval-n 50 --eval-k 100 --quiet "$@"; }
time small --out "$R/whole" --pretrained-cache "$R/cache-whole" > /dev/null
small --out "$R/resumed" --pretrained-cache "$R/cache-resumed" --checkpoint-every 3 --interrupt-after 4 > /dev/null 2>&1
for i in $(seq 12); do
  small --out "$R/resumed" --pretrained-cache "$R/cache-resumed" --resume --interrupt-after 4 > /dev/null 2>&1 && break
done
python3 -c "
import json
a = json.load(open('$R/whole/result.json')); b = json.load(open('$R/resumed/result.json'))
same = a['evaluations'] == b['evaluations'] and a['differences'] == b['differences']
print('resumed after', $i, 'restarts: held-out numbers', 'the same' if same else 'DIFFERENT')
for e in a['evaluations']: print(' ', {k: e[k] for k in e if k in ('model', 'log_px', 'mean_log_px')})
"

echo "== 4. E3 on 2 CPU threads, this build against the peer (two rounds)"
for round in 1 2; do
  ours $S new-r$round 2 20 2
  peer_cpu r$round 2 20 1
done
echo "== done"
tar czf "$O/results.tgz" -C "$R" --exclude='cache-*' --exclude='checkpoints' .
