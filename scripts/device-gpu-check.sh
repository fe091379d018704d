#!/usr/bin/env bash
# Issue 13, GPU sitting A (short): does the CUDA backend agree with the CPU engine, layer by layer
# and estimator by estimator, and does a replication run on it end to end. Run from the
# repository root with the stripped release binary in .dev/; logs into $OUT.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
S=.dev/sagd
exec > >(tee "$O/gpu-check.log") 2>&1
libdir() { local f; f=$(find /usr /opt -name "$1" 2>/dev/null | head -1); [ -n "$f" ] && dirname "$f"; }
export LD_LIBRARY_PATH="$(libdir 'libcublas.so.13*'):$(libdir 'libnvrtc.so.13*'):${LD_LIBRARY_PATH:-}"
TIMEFORMAT='wall %R s'
nvidia-smi -L
echo "== sagd bench gpu: layers and estimators against the CPU engine"
time $S bench gpu --repeats 20 --out "$O/gpu.json" > /dev/null
echo "== one replication on the GPU, short (exp, 500 + 100 epochs)"
time $S debias --dist exp --device cuda --pretrain-epochs 500 --finetune-epochs 100 --quiet --out /tmp/g1 > /dev/null \
  && python3 -c "import json; r = json.load(open('/tmp/g1/result.json')); print(r['mean_time_s']); print({k: round(v['mean'], 4) for k, v in r['summary'].items()})"
echo "== the same on the CPU, 16 threads"
time $S debias --dist exp --pretrain-epochs 500 --finetune-epochs 100 --quiet --out /tmp/c1 > /dev/null \
  && python3 -c "import json; r = json.load(open('/tmp/c1/result.json')); print(r['mean_time_s']); print({k: round(v['mean'], 4) for k, v in r['summary'].items()})"
echo "== high-dim on the GPU, 5 + 1 epochs"
time $S debias --dist highdim --device cuda --pretrain-epochs 5 --finetune-epochs 1 --m 20000 --quiet --out /tmp/g2 > /dev/null \
  && python3 -c "import json; r = json.load(open('/tmp/g2/result.json')); print(r['mean_time_s'])"
echo "== done"
