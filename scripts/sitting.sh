#!/usr/bin/env bash
# One sitting of measurements, on the GPU machine or here: the checks named on the command line, in
# order, into one log. Builds nothing: run from the repository root with a release binary.
#
#   scripts/sitting.sh NAME CHECK[@SECONDS] [CHECK[@SECONDS] ...]
#
# NAME names the log ($OUT/sitting-NAME.log; OUT defaults to /tmp/sagd-sitting) and the folder of
# the run's files ($RUNS/NAME/, archived into $OUT/NAME.tgz at the end, so that two files come
# back). A check given @SECONDS is stopped after that many seconds, and the log says so, so that
# one check that hangs leaves the sitting's time to the rest.
# Environment:
#   RUNS         where the run's files are written (default $OUT; on the device machine a folder
#                outside its $OUT, so that only the log and the archive come back)
#   BIN          the sagd binary to measure (default .dev/sagd, a stripped release build)
#   BASE         an earlier build, timed in the same rounds as BIN where a check compares builds
#   PEER_PY      a Python with torch, numpy and scipy for peers/torch_peer.py (default python3)
#   JAX_PEER     a JAX script of E2 to time beside it in e2-gpu (none is in the repository yet),
#                run by JAX_PY (default python3)
#   ROUNDS       rounds of alternating timings (default 2)
#   WHEEL        the Python package for py-gpu (default .dev/sagd-*.whl; build it here with
#                `pip wheel ./crates/sagd-py --no-deps -w .dev`: abi3, any Python ≥ 3.9)
#   EXAMPLES     the folder of the example binaries for examples-gpu (default .dev/examples; copy
#                them there from target/release/examples after `cargo build --release --examples`)
#   CPU_REF      the CPU's side of e2-options and e3-schedule, run beforehand by the check cpu-ref
#                (scripts/prepare-sitting.sh writes .dev/cpu-ref): read from there instead of run on
#                the device's minutes (a run's bits do not depend on its number of threads)
#
# Checks (a check with arguments takes them after a colon, comma-separated):
#   gpu-check[:REPEATS]        the CUDA engine against the CPU engine (sagd bench gpu)
#   e3-gpu                     E3's minibatches on the GPU, f32 and TF32 products, and the peer's
#   e3-cpu:THREADS,VAE,SAGD    E3's minibatches on THREADS CPU threads (VAE and SAGD minibatches
#                              timed), BIN, BASE and the peer alternating for ROUNDS rounds
#   e3-resume                  a GPU run interrupted every 4 updates and resumed, against it whole
#   e3-schedule                e3-resume with E3's chain schedule (--delta-decay 0.5 --k-growth 1),
#                              the CPU's run of it against the GPU's
#   e3-default                 the default `sagd mnist` on the GPU, end to end
#   e2-gpu                     one 1-D replication on the GPU against the PyTorch peer (and a JAX
#                              one, JAX_PEER) on the same GPU, and the high-dimensional case
#   e2-table-gpu               Table 1's statistics (exp, 8 replications) on the GPU against the CPU
#   e2-options                 E2's SAGD with each chain option on the GPU (presets theorem3,
#                              refresh, refresh2), end to end, beside the CPU's run of each
#   cpu-ref                    the CPU's runs of e2-options and e3-schedule, into RUNS/NAME (for
#                              CPU_REF)
#   e2-cpu                     one 1-D replication on 16 and 2 threads, whole and phase by phase
#   py-gpu                     Python's sagd.deconvolve with device="cuda" and "cpu" on the same
#                              data (WHEEL installed into a venv over PEER_PY's numpy)
#   examples-gpu               the examples of one's own networks (own_decoder, binary_images, counts)
#                              with --device cuda and cpu: each phase's exact log-likelihood
#   bits                       the same replication on 1, 2 and 16 threads, compared bit for bit
#   paths                      E2 (2 threads, with the peer) and E3 (e3-cpu:2,20,2) with both sides
#                              forced onto AVX2 (SAGD_CPU_CAPABILITY, and PyTorch's ATEN/MKL/oneDNN
#                              switches), then on the native path
#   amx                        E3 with f32 against bf16x3 products on AMX tiles, 16 and 2 threads
#                              (BIN built from the branch experiment/amx-bf16x3)
#   mpi-scaling[:COUNTS]       scripts/mpi_scaling.sh on COUNTS processes (default 1 2 4 8 16,
#                              MPI_BIN: a build with --features mpi; needs mpirun on the machine)
#   mpi-gpu                    E3 and E2 on the GPU split over 2 processes (both on the one GPU)
#                              against one process: E2's results the same bits, E3's held-out
#                              numbers to rounding (MPI_BIN, mpirun)
#
# Examples: the GPU sitting of a change to the engine, each check within its limit,
#   RUNS=/tmp/runs scripts/sitting.sh k gpu-check:10@90 e3-gpu@150 e3-cpu:2,20,2 e3-cpu:16,40,4
# and E3's speed against the peer on this machine, after `cargo build --release`,
#   BIN=target/release/sagd PEER_PY=.venv-peer/bin/python OUT=/tmp/local-e3 \
#     scripts/sitting.sh local-e3 e3-cpu:2,40,2
set -u
[ $# -ge 2 ] || { sed -n '2,60p' "$0"; exit 2; }
NAME=$1; shift
OUT=${OUT:-/tmp/sagd-sitting}
R=${RUNS:-$OUT}/$NAME
mkdir -p "$R" "$OUT"
# SITTING_ONE: this process runs one check of an outer sitting, under its limit, into its log.
[ -n "${SITTING_ONE:-}" ] || exec > >(tee "$OUT/sitting-$NAME.log") 2>&1
S=${BIN:-.dev/sagd}
ROUNDS=${ROUNDS:-2}
TIMEFORMAT='wall %R s'
export PYTHONUNBUFFERED=1
libdir() { local f; f=$(find /usr /opt -name "$1" 2>/dev/null | head -1); [ -n "$f" ] && dirname "$f"; }
export LD_LIBRARY_PATH="$(libdir 'libcublas.so.13*'):$(libdir 'libnvrtc.so.13*'):${LD_LIBRARY_PATH:-}"

if [ -z "${SITTING_ONE:-}" ]; then
  date -u; nproc; grep -m1 'model name' /proc/cpuinfo
  command -v nvidia-smi > /dev/null && nvidia-smi -L
  "$S" --version
fi

# The PyTorch peer (peers/torch_peer.py), and its E3 seconds per minibatch.
peer() { ${PEER_PY:-python3} peers/torch_peer.py "$@"; }
# Our E3 speed: ours BINARY TAG THREADS VAE_BATCHES SAGD_BATCHES; the table's rows (on stderr)
# into the log, the JSON into $R.
ours() { echo "-- $2, $3 threads"; $1 --threads "$3" bench mnist --vae-batches "$4" \
  --sagd-batches "$5" --data data/mnist --out "$R/$2-cpu$3.json" 2>&1 | grep -E '^\| [vs]|error'; }
peer_cpu() { echo "-- peer, $2 threads"; peer e3 --threads "$2" --vae-batches "$3" --sagd-batches "$4" \
  --out "$R/peer-$1-cpu$2.json"; }
phases() { python3 -c "import json,sys; r = json.load(open(sys.argv[1])); print('seconds per phase:', {k: round(v, 3) for k, v in r['mean_time_s'].items()}, 'total', round(r['total_time_s'], 2))" "$1"; }

check_gpu_check() { time $S bench gpu --repeats "${1:-10}" --out "$R/gpu.json" | grep -vE '^ |^[{}]'; }

check_e3_gpu() {
  $S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu.json" 2>&1 | grep -E '^\| [vs]|error'
  SAGD_GPU_TF32=1 $S bench mnist --device cuda --vae-batches 200 --sagd-batches 30 --data data/mnist --out "$R/mnist-gpu-tf32.json" 2>&1 | grep -E '^\| [vs]|error'
  peer e3 --device cuda --vae-batches 200 --sagd-batches 20 --out "$R/peer-gpu.json"
}

check_e3_cpu() {
  local t=$1 v=$2 s=$3
  for round in $(seq "$ROUNDS"); do
    ours "$S" new-r$round "$t" "$v" "$s"
    [ -n "${BASE:-}" ] && ours "$BASE" base-r$round "$t" "$v" "$s"
    peer_cpu r$round "$t" "$v" "$s"
  done
}

check_e3_resume() {
  local extra=("$@")
  small() { $S mnist --device cuda --data data/mnist --train-n 2000 --vae-epochs 2 --sagd-updates 10 \
    --eval-n 50 --eval-k 100 --quiet "${extra[@]}" "$@"; }
  time small --out "$R/whole" --pretrained-cache "$R/cache-whole" > /dev/null
  small --out "$R/resumed" --pretrained-cache "$R/cache-resumed" --checkpoint-every 3 --interrupt-after 4 > /dev/null 2>&1
  local i
  for i in $(seq 12); do
    small --out "$R/resumed" --pretrained-cache "$R/cache-resumed" --resume --interrupt-after 4 > /dev/null 2>&1 && break
  done
  python3 -c "
import json
a = json.load(open('$R/whole/result.json')); b = json.load(open('$R/resumed/result.json'))
same = a['evaluations'] == b['evaluations'] and a['differences'] == b['differences']
print('resumed after', $i, 'restarts: held-out numbers', 'the same' if same else 'DIFFERENT')
"
  rm -rf "$R"/cache-*
}

# The CPU's run of CPU_REF named NAME, when one was made beforehand.
cpu_ref() { [ -n "${CPU_REF:-}" ] && [ -f "$CPU_REF/$1/result.json" ] && echo "$CPU_REF/$1"; }
# The CPU's side of the checks that compare devices, each run written once: E2 with the chain
# preset P on the device D into a folder; E3 with its chain schedule on the CPU into a folder.
e2_option() { $S debias --dist exp --device "$2" --sagd-preset "$1" --quiet --out "$3" > /dev/null; }
e3_scheduled_cpu() {
  $S mnist --data data/mnist --train-n 2000 --vae-epochs 2 --sagd-updates 10 --eval-n 50 --eval-k 100 \
    --quiet --delta-decay 0.5 --k-growth 1 --out "$1" --pretrained-cache "$1-cache" > /dev/null
  rm -rf "$1-cache"
}
check_cpu_ref() {
  local preset
  for preset in theorem3 refresh refresh2; do time e2_option $preset cpu "$R/opt-$preset-cpu"; done
  time e3_scheduled_cpu "$R/e3-schedule-cpu"
}

check_e3_schedule() {
  local R="$R/schedule" cpu
  mkdir -p "$R"
  check_e3_resume --delta-decay 0.5 --k-growth 1
  if cpu=$(cpu_ref e3-schedule-cpu); then
    echo "-- the CPU's run: made beforehand ($cpu)"
  else
    cpu=$R/cpu
    e3_scheduled_cpu "$cpu"
  fi
  python3 - "$R/whole" "$cpu" <<'PY'
import json, sys
gpu, cpu = (json.load(open(f"{d}/result.json")) for d in sys.argv[1:3])
for x, y in zip(gpu["evaluations"], cpu["evaluations"]):
    gap = abs(x["log_px"] - y["log_px"]) / y["log_px_se"]
    print(f"E3 scheduled, {x['model']}: log p(x) {x['log_px']:.4f} on the GPU, {y['log_px']:.4f} on the CPU ({gap:.3f} se apart)")
PY
  rm -rf "$R"/cache-*
}

check_e3_default() {
  time $S mnist --device cuda --data data/mnist --quiet --pretrained-cache /tmp/e3cache --out "$R/mnist-default" | tail -12
  python3 -c "import json; r = json.load(open('$R/mnist-default/result.json')); print('timing_s', r['timing_s'])"
}

check_e2_gpu() {
  time $S bench debias --dist exp --device cuda --out "$R/bench-gpu.json" > /dev/null
  if [ -n "${JAX_PEER:-}" ]; then
    time JAX_PLATFORMS=cuda ${JAX_PY:-python3} "$JAX_PEER" e2 --dist exp --reps 1 --out "$R/jax.json" | tail -12
  else
    echo "no JAX peer (JAX_PEER unset): skipped"
  fi
  time peer e2 --dist exp --device cuda --pretrain-epochs 500 --finetune-epochs 100 --out "$R/torch-exp.json"
  time $S debias --dist exp --device cuda --pretrain-epochs 500 --finetune-epochs 100 --quiet --out "$R/g-exp-tenth" > /dev/null && phases "$R/g-exp-tenth/result.json"
  time $S debias --dist highdim --device cuda --pretrain-epochs 20 --finetune-epochs 2 --quiet --out "$R/g-hd" > /dev/null && phases "$R/g-hd/result.json"
  time peer e2 --dist highdim --device cuda --pretrain-epochs 20 --finetune-epochs 2 --out "$R/torch-hd.json"
}

check_e2_table_gpu() {
  time $S debias --dist exp --reps 8 --device cuda --quiet --out "$R/t-gpu" > /dev/null
  time $S debias --dist exp --reps 8 --quiet --out "$R/t-cpu" > /dev/null
  python3 - "$R" <<'PY'
import json, math, sys
g = json.load(open(sys.argv[1] + "/t-gpu/result.json"))["summary"]
c = json.load(open(sys.argv[1] + "/t-cpu/result.json"))["summary"]
print("| statistic | GPU mean (se) | CPU mean (se) | z |")
print("|---|---|---|---|")
for k in sorted(g):
    a, b = g[k], c[k]
    se = math.hypot(a["se"] or 0, b["se"] or 0)
    z = (a["mean"] - b["mean"]) / se if se > 0 else float("nan")
    print(f"| {k} | {a['mean']:.4f} ({a['se']:.4f}) | {b['mean']:.4f} ({b['se']:.4f}) | {z:+.2f} |")
PY
}

check_e2_options() {
  local preset dev out
  for preset in theorem3 refresh refresh2; do
    for dev in cuda cpu; do
      if [ $dev = cpu ] && out=$(cpu_ref "opt-$preset-cpu"); then
        echo "-- $preset on cpu: made beforehand ($out)"
      else
        out=$R/opt-$preset-$dev
        echo "-- $preset on $dev"
        time e2_option $preset $dev "$out" || continue
      fi
      grep -E '^\| (D|W) \| this run' "$out/table1.md"
    done
  done
}

check_py_gpu() {
  local venv=$R/pyvenv wheel
  wheel=$(ls ${WHEEL:-.dev/sagd-*.whl} 2>/dev/null | head -1)
  [ -n "$wheel" ] || { echo "no wheel (WHEEL unset and none in .dev): skipped"; return; }
  ${PEER_PY:-python3} -m venv --system-site-packages "$venv" &&
    "$venv/bin/pip" install -q --no-deps --no-index "$wheel" || return
  "$venv/bin/python" - <<'PY'
import time
import numpy as np
import sagd
rng = np.random.default_rng(1)
x = rng.normal(2.0, 1.0, 1000) + rng.normal(0.0, 0.5, 1000)
for device in ("cuda", "cpu"):
    t = time.time()
    try:
        r = sagd.deconvolve(x, 0.5, methods=["vae", "sagd"], seed=1, pretrain_epochs=1000,
                            finetune_epochs=200, device=device)
    except Exception as e:  # a sitting reports every device's outcome, whatever it is
        print(device, "failed:", e)
        continue
    laws = {k: (round(float(v.mean()), 3), round(float(v.std()), 3)) for k, v in r.draws.items()}
    print(device, f"{time.time() - t:.1f} s", "mean, sd of Z:", laws, "loglik:", r.loglik_per_point)
PY
}

check_examples_gpu() {
  local ex dev dir=${EXAMPLES:-.dev/examples}
  for ex in own_decoder binary_images counts; do
    [ -x "$dir/$ex" ] || { echo "no $dir/$ex: skipped"; continue; }
    for dev in cuda cpu; do
      echo "-- $ex on $dev"
      time "$dir/$ex" --device $dev
    done
  done
}

check_e2_cpu() {
  for t in 16 2; do time $S --threads $t bench debias --dist exp --out "$R/bench-cpu-$t.json" > /dev/null; done
}

AVX2_BOTH="SAGD_CPU_CAPABILITY=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 DNNL_MAX_CPU_ISA=AVX2"
check_paths() {
  local p
  for p in avx2 native; do
    echo "-- $p"
    if [ $p = avx2 ]; then export $AVX2_BOTH; fi
    $S --threads 2 bench debias --dist exp --peer peers/torch_peer.py --python "${PEER_PY:-python3}" \
      --out "$R/e2-$p.json" 2>&1 | grep -E '^\|'
    check_e3_cpu 2 20 2
    unset SAGD_CPU_CAPABILITY ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS DNNL_MAX_CPU_ISA
  done
}

check_bits() {
  for t in 1 2 16; do
    $S --threads $t debias --dist exp --pretrain-epochs 300 --finetune-epochs 30 --m 20000 --quiet --out "$R/bits$t" > /dev/null
  done
  python3 scripts/same_bits.py "$R/bits1" "$R/bits2" "$R/bits16"
}

check_amx() {
  grep -o -m1 'amx_bf16' /proc/cpuinfo || echo "this CPU has no AMX-BF16: bf16x3 will refuse"
  local t r p
  for t in 16 2; do for r in $(seq "$ROUNDS"); do for p in f32 bf16x3; do
    ours "$S --products $p" "amx-$p-r$r" "$t" 20 2
  done; done; done
}

# MPI's launcher for the mpi checks, or a line saying why they are skipped.
mpi_ready() {
  command -v mpirun > /dev/null || { echo "no mpirun on this machine: skipped"; return 1; }
  [ -x "${MPI_BIN:-}" ] || { echo "MPI_BIN (a build with --features mpi) not set: skipped"; return 1; }
  MPI=(mpirun --oversubscribe --bind-to none); [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
}

check_mpi_scaling() {
  mpi_ready || return 0
  SAGD="$MPI_BIN" scripts/mpi_scaling.sh "${*:-1 2 4 8 16}" | tee "$R/mpi-scaling.md"
}

check_mpi_gpu() {
  mpi_ready || return 0
  small() { "${MPI[@]}" -np "$1" "$MPI_BIN" mnist --device cuda --data data/mnist --train-n 2000 \
    --vae-epochs 2 --sagd-updates 10 --eval-n 50 --eval-k 100 --quiet --out "$R/mnist-np$1" \
    --pretrained-cache "$R/cache-np$1" > /dev/null; }
  time small 1 && time small 2
  python3 - "$R" <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/mnist-np{n}/result.json")) for n in (1, 2))
for x, y in zip(a["evaluations"], b["evaluations"]):
    gap = abs(x["log_px"] - y["log_px"]) / y["log_px_se"]
    print(f"E3 {x['model']}: log p(x) {x['log_px']:.4f} on 1 process, {y['log_px']:.4f} on 2 ({gap:.3f} se apart)")
PY
  local np
  for np in 1 2; do
    "${MPI[@]}" -np $np "$MPI_BIN" debias --dist exp --reps 2 --device cuda --pretrain-epochs 300 \
      --finetune-epochs 30 --m 20000 --quiet --out "$R/e2-np$np" > /dev/null
  done
  python3 scripts/same_bits.py "$R/e2-np1" "$R/e2-np2"
  rm -rf "$R"/cache-np*
}

# Every check named is known and every limit whole seconds before any runs.
for c in "$@"; do
  name=${c%%[:@]*}
  declare -F "check_${name//-/_}" > /dev/null || { echo "unknown check '$name': see the list at the top of $0"; exit 2; }
  [[ $c != *@* || ${c##*@} =~ ^[0-9]+$ ]] || { echo "check '$c': the limit is whole seconds, as in $name@120"; exit 2; }
done
for c in "$@"; do
  limit=""; [[ $c == *@* ]] && { limit=${c##*@}; c=${c%@*}; }
  name=${c%%:*}; args=""; [ "$name" != "$c" ] && args=${c#*:}
  fn=check_${name//-/_}
  if [ -z "${SITTING_ONE:-}" ]; then echo "== $name ${args//,/ }${limit:+ (at most $limit s)}"; fi
  if [ -n "$limit" ]; then
    start=$SECONDS
    SITTING_ONE=1 timeout -k 10 "$limit" bash "$0" "$NAME" "$c"
    rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then
      echo "!! $name stopped at its limit of $limit s: what it printed above is partial"
    else
      echo "-- $name took $((SECONDS - start)) s"
    fi
    continue
  fi
  IFS=, read -r -a argv <<< "$args"
  "$fn" "${argv[@]}"
done
[ -n "${SITTING_ONE:-}" ] && exit 0
echo "== done"
tar czf "$OUT/$NAME.tgz" -C "$R" --exclude='checkpoints' --exclude='cache-*' --exclude='pyvenv' .
