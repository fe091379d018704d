# Shared by the GPU machine's scripts (source it from the repository root): the CUDA libraries of
# the machine's PyTorch installation on the loader's path, and the MNIST peer's helpers.
libdir() { local f; f=$(find /usr /opt -name "$1" 2>/dev/null | head -1); [ -n "$f" ] && dirname "$f"; }
export LD_LIBRARY_PATH="$(libdir 'libcublas.so.13*'):$(libdir 'libnvrtc.so.13*'):${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
TIMEFORMAT='wall %R s'
# mnist_peer.py for timing (no evaluation, no figure) on the shipped data: PEER_PY is a Python with
# PyTorch (default python3), PEER_SCRIPT the peer (default .dev/mnist_peer.py).
peer() { ${PEER_PY:-python3} "${PEER_SCRIPT:-.dev/mnist_peer.py}" run --data data/mnist --quiet \
  --eval-n 0 --fig '' "$@"; }
# Seconds per minibatch of the peer: its fastest epoch over the minibatches it ran (the first epoch
# carries the warm-up).
per_batch() { python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
for k in ('vae', 'sagd'):
    p = r[k]; b = p['batches_per_epoch']; t = p['epoch_times_s']
    best = min(tt / bb for tt, bb in zip(t, b))
    print(f'peer {k}: {best:.4f} s per minibatch, {best * p[\"full_epoch_batches\"]:.1f} s per epoch (fastest of {len(t)} epochs of {b[0]} minibatches)')
" "$1"; }
# sagd's E3 training speed: ours BINARY (with any flags of its own) TAG THREADS VAE_BATCHES SAGD_BATCHES, JSON into $R/TAG-cpuT.json;
# the log keeps the table's rows (printed on stderr) and any error.
ours() { local b=$1 n=$2 t=$3 v=$4 s=$5; echo "-- $n, $t threads"; $b --threads "$t" bench mnist \
  --vae-batches "$v" --sagd-batches "$s" --data data/mnist --out "$R/$n-cpu$t.json" 2>&1 \
  | grep -E '^\| [vs]|error'; }
# The peer's E3 training speed on T threads: peer_cpu TAG THREADS VAE_BATCHES SAGD_BATCHES.
peer_cpu() { peer --threads "$2" --vae-epochs 2 --vae-max-batches "$3" --sagd-epochs 2 \
  --sagd-max-batches "$4" --out "$R/peer-$1-cpu$2.json" > /dev/null; per_batch "$R/peer-$1-cpu$2.json"; }
# A sitting's start: its log in $O (what comes back) and its files in $R; the machine named.
sitting() { O=${OUT:-/tmp/sagd-device}; R=/tmp/sagd-$1; mkdir -p "$O" "$R"
  exec > >(tee "$O/device-$1.log") 2>&1; nvidia-smi -L; nproc; }
