#!/usr/bin/env bash
# Issue 10, GPU sitting H: E3 training speed on 2 CPU threads after the ReLU fused into the
# products' stores and the windows' offsets tabulated, against the PyTorch peer in the same run,
# three rounds alternating (this build, the build of sitting G in .dev/sagd-g, the peer); then 16
# threads. Builds nothing: run from the repository root with the stripped release binaries and the
# peer's script in .dev/.
set -u
O=${OUT:-/tmp/sagd-device}
mkdir -p "$O"
R=/tmp/sagd-h
mkdir -p "$R"
exec > >(tee "$O/device-h.log") 2>&1
. scripts/device-lib.sh
nvidia-smi -L; nproc

ours() { local b=$1 n=$2 t=$3 v=$4 s=$5; echo "-- $n, $t threads"; $b --threads "$t" bench mnist \
  --vae-batches "$v" --sagd-batches "$s" --data data/mnist --out "$R/$n-cpu$t.json" | grep '^| [vs]'; }

echo "== 1. E3 on 2 CPU threads: this build, sitting G's build, the peer (three rounds)"
for round in 1 2 3; do
  ours .dev/sagd new-r$round 2 20 2
  ours .dev/sagd-g g-r$round 2 20 2
  peer --threads 2 --vae-epochs 2 --vae-max-batches 20 --sagd-epochs 2 --sagd-max-batches 1 --out "$R/peer-r$round-cpu2.json" > /dev/null
  per_batch "$R/peer-r$round-cpu2.json"
done

echo "== 2. E3 on 16 CPU threads: this build, the peer"
ours .dev/sagd new 16 40 4
peer --threads 16 --vae-epochs 2 --vae-max-batches 40 --sagd-epochs 2 --sagd-max-batches 2 --out "$R/peer-cpu16.json" > /dev/null
per_batch "$R/peer-cpu16.json"
echo "== done"
tar czf "$O/results.tgz" -C "$R" .
