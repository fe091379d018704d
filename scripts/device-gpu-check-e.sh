#!/usr/bin/env bash
# GPU sitting E: the CUDA backend's checks after the device-side Adam's own check and the training
# check against the CPU's rounding floor were added; then E3 on the GPU with TF32 products, 200 VAE
# epochs and 3000 SAGD updates (10 epochs), evaluated on the CPU. Run from the repository root
# with the stripped release binary in .dev/; the log and the run's files into $OUT.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
exec > >(tee "$O/device-e.log") 2>&1
. scripts/device-lib.sh
nvidia-smi -L
time .dev/sagd bench gpu --repeats 5 --out "$O/gpu.json" > /dev/null
echo "== E3 on the GPU (TF32 products): 200 VAE epochs, 3000 SAGD updates and as many for the control"
time SAGD_GPU_TF32=1 .dev/sagd mnist --device cuda --data data/mnist --vae-epochs 200 --sagd-updates 3000 --quiet --pretrained-cache /tmp/e3cache --out "$O/run200" | tail -12
python3 -c "import json; r = json.load(open('$O/run200/result.json')); print('timing_s', r['timing_s'])"
echo "== done"
