#!/usr/bin/env bash
# Issue 13, GPU sitting B: the CUDA backend's checks (fused kernels and graphs on and off), one
# 1-D replication on the GPU against the JAX and PyTorch peers on the same GPU, the
# high-dimensional case on the GPU against the PyTorch peer, Table 1 statistics on the GPU against
# the CPU's, and the CPU engine's 2- and 16-thread times. Builds nothing: run from the repository
# root with the stripped release binary and the peers' scripts in .dev/. Logs and JSON into $OUT.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
S=.dev/sagd
exec > >(tee "$O/device-b.log") 2>&1
libdir() { local f; f=$(find /usr /opt -name "$1" 2>/dev/null | head -1); [ -n "$f" ] && dirname "$f"; }
export LD_LIBRARY_PATH="$(libdir 'libcublas.so.13*'):$(libdir 'libnvrtc.so.13*'):${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
TIMEFORMAT='wall %R s'
nvidia-smi -L; nproc
phases() { python3 -c "import json,sys; r = json.load(open(sys.argv[1])); print('seconds per phase:', {k: round(v, 3) for k, v in r['mean_time_s'].items()}, 'total', round(r['total_time_s'], 2))" "$1"; }

echo "== 1. CUDA backend against the CPU engine: fused posterior and graphs (default), then off"
time $S bench gpu --repeats 20 --out "$O/gpu.json" > /dev/null
SAGD_GPU_FUSED=0 SAGD_GPU_GRAPHS=0 $S bench gpu --repeats 5 --out /tmp/gpu-plain.json 2>&1 > /dev/null | grep -E "estimator|sagd|vae|iwae|error"

echo "== 2. one 1-D replication (exp, spec settings) on the GPU: whole, then each phase alone"
time $S bench debias --dist exp --device cuda --out "$O/bench-gpu.json" > /dev/null

echo "== 3. the JAX peer on the GPU (exp, one replication)"
time JAX_PLATFORMS=cuda python3 .dev/sagd_peer_jax.py e2 --dist exp --reps 1 --out /tmp/jax.json | tail -12

echo "== 4. the PyTorch peer on the GPU (exp, 500 pre-training + 100 fine-tuning iterations: a tenth)"
time python3 .dev/sagd_peer.py e2 --dist exp --reps 1 --device cuda --pretrain-iters 500 --finetune-iters 100 --out /tmp/torch-exp.json | tail -12
echo "-- sagd on the GPU, the same tenth"
time $S debias --dist exp --device cuda --pretrain-epochs 500 --finetune-epochs 100 --quiet --out /tmp/g-exp-tenth > /dev/null && phases /tmp/g-exp-tenth/result.json

echo "== 5. high-dimensional case, 20 + 2 epochs: sagd on the GPU, the PyTorch peer on the GPU"
time $S debias --dist highdim --device cuda --pretrain-epochs 20 --finetune-epochs 2 --quiet --out /tmp/g-hd > /dev/null && phases /tmp/g-hd/result.json
time python3 .dev/sagd_peer.py e2 --dist highdim --reps 1 --device cuda --pretrain-epochs 20 --finetune-epochs 2 --out /tmp/torch-hd.json | tail -12

echo "== 6. Table 1 statistics (exp, 8 replications, spec settings): GPU, then CPU (16 threads)"
time $S debias --dist exp --reps 8 --device cuda --quiet --out /tmp/t-gpu > /dev/null
time $S debias --dist exp --reps 8 --quiet --out /tmp/t-cpu > /dev/null
python3 - <<'PY'
import json, math
g = json.load(open("/tmp/t-gpu/result.json"))["summary"]
c = json.load(open("/tmp/t-cpu/result.json"))["summary"]
print("| statistic | GPU mean (se) | CPU mean (se) | z |")
print("|---|---|---|---|")
for k in sorted(g):
    a, b = g[k], c[k]
    se = math.hypot(a["se"] or 0, b["se"] or 0)
    z = (a["mean"] - b["mean"]) / se if se > 0 else float("nan")
    print(f"| {k} | {a['mean']:.4f} ({a['se']:.4f}) | {b['mean']:.4f} ({b['se']:.4f}) | {z:+.2f} |")
json.dump({"gpu": g, "cpu": c}, open("/tmp/table-compare.json", "w"), indent=1)
PY
cp /tmp/table-compare.json "$O/table-gpu-cpu.json"

echo "== 7. CPU engine: the same bits on 1, 2 and 16 threads (exp, 300 + 30 epochs)"
for t in 1 2 16; do
  $S --threads $t debias --dist exp --pretrain-epochs 300 --finetune-epochs 30 --m 20000 --quiet --out /tmp/bits$t > /dev/null
done
python3 scripts/same_bits.py /tmp/bits1 /tmp/bits2 /tmp/bits16

echo "== 8. CPU engine: one 1-D replication on 16 and 2 threads, whole and each phase alone"
for t in 16 2; do
  time $S --threads $t bench debias --dist exp --out "$O/bench-cpu-$t.json" > /dev/null
done

echo "== 9. CPU engine: high-dimensional case, 20 + 2 epochs, 16 and 2 threads"
for t in 16 2; do
  time $S --threads $t debias --dist highdim --pretrain-epochs 20 --finetune-epochs 2 --quiet --out /tmp/c-hd$t > /dev/null && phases /tmp/c-hd$t/result.json
done
echo "== done"
