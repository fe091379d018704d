#!/usr/bin/env bash
# Issue 13 on the GPU machine, first sitting: does the CUDA backend load and agree with the CPU
# engine, and what do 16 threads buy over 2 on the spec's shapes. Builds nothing: run from the
# repository root with the release binary (stripped) in .dev/. Logs and JSON into $OUT.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
S=.dev/sagd
exec > >(tee "$O/device.log") 2>&1
libdir() { local f; f=$(find /usr /opt -name "$1" 2>/dev/null | head -1); [ -n "$f" ] && dirname "$f"; }
export LD_LIBRARY_PATH="$(libdir 'libcublas.so.13*'):$(libdir 'libnvrtc.so.13*'):${LD_LIBRARY_PATH:-}"
echo "== machine"; nproc; nvidia-smi -L; grep -m1 'model name' /proc/cpuinfo; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
TIMEFORMAT='wall %R s'

echo "== CUDA backend: layers against the CPU engine, and their speed"
time $S bench gpu --out "$O/gpu.json" > /dev/null

echo "== the same bits on 1, 2 and 16 threads (exp, 300 + 30 epochs, spec shapes)"
for t in 1 2 16; do
  time $S --threads $t debias --dist exp --pretrain-epochs 300 --finetune-epochs 30 --m 20000 --quiet --out /tmp/bits$t > /dev/null
done
python3 scripts/same_bits.py /tmp/bits1 /tmp/bits2 /tmp/bits16

echo "== one replication (exp, spec settings): 2 and 16 threads, whole and per phase"
for t in 2 16; do
  time $S --threads $t bench debias --dist exp --out "$O/bench-exp-$t.json" > /dev/null
done

echo "== high-dimensional case, 100 + 5 epochs: 2 and 16 threads"
for t in 2 16; do
  time $S --threads $t debias --dist highdim --pretrain-epochs 100 --finetune-epochs 5 --quiet --out /tmp/hd$t > /dev/null
  python3 -c "import json; r = json.load(open('/tmp/hd$t/result.json')); print('threads $t, seconds per phase:', r['mean_time_s'])"
done

echo "== 16 replications (exp, spec settings) on 16 threads"
time $S --threads 16 debias --dist exp --reps 16 --quiet --out /tmp/reps16 > /dev/null
echo "== done"
