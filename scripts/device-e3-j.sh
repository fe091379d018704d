#!/usr/bin/env bash
# Issues 10 and 13, GPU sitting J (prepared, not yet run): after Adam's direction moved to the
# parameters' precision (host and device kernel), gradients written over instead of zeroed, and
# narrow tiles for the 16- and 32-channel products. The checks against the CPU engine (Adam's step
# must still agree to the bit), E3 on the GPU against the peer, and E3 on 2 and 16 CPU threads
# against the peer, this build alternating with the previous one (.dev/sagd-i: a release build of
# 4d0ac41, the build of sitting I). Then the AMX experiment (section 5: does bf16x3 on AMX tiles
# pay on the GPU machine's CPU, where it did not on the 2-core development machine?). Builds
# nothing: run
# from the repository root with the stripped release binaries and the peer's script in .dev/.
set -u
# At most 8 files come back: the log, and everything else in one archive.
. scripts/device-lib.sh
sitting j
S=.dev/sagd

echo "== 1. CUDA backend against the CPU engine (Adam's step: the same bits)"
time $S bench gpu --repeats 10 --out "$R/gpu.json" | grep -vE '^ |^[{}]'

echo "== 2. E3 on the GPU (f32 and TF32 products) and the peer"
$S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu.json" 2>&1 | grep -E '^\| [vs]|error'
SAGD_GPU_TF32=1 $S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu-tf32.json" 2>&1 | grep -E '^\| [vs]|error'
peer --device cuda --vae-epochs 2 --vae-max-batches 200 --sagd-epochs 2 --sagd-max-batches 20 --out "$R/peer-gpu.json" > /dev/null
per_batch "$R/peer-gpu.json"

echo "== 3. E3 on 2 CPU threads: this build, sitting I's build, the peer (two rounds)"
for round in 1 2; do
  ours $S new-r$round 2 20 2
  ours .dev/sagd-i i-r$round 2 20 2
  peer_cpu r$round 2 20 1
done

echo "== 4. E3 on 16 CPU threads: this build, the peer"
ours $S new 16 40 4
peer_cpu all 16 40 2
echo "== 5. The AMX experiment (branch experiment/amx-bf16x3, built into .dev/sagd-amx): E3's"
echo "   minibatches with f32 and with bf16x3 products on AMX tiles, on 16 and 2 threads"
grep -o -m1 'amx_bf16' /proc/cpuinfo || echo "this CPU has no AMX-BF16: bf16x3 will refuse"
for t in 16 2; do
  for r in 1 2; do for p in f32 bf16x3; do
    ours ".dev/sagd-amx --products $p" "amx-$p-r$r" "$t" 20 2
  done; done
done
echo "== done"
tar czf "$O/results.tgz" -C "$R" .
