#!/usr/bin/env bash
# Time per update and bytes exchanged per update of runs split over MPI processes, against one
# process on the same cores: automated EM (`sagd em --data`: n points of E1's model, 3 M-steps),
# E2's replications, and E3's minibatches (`sagd mnist` at the paper's minibatch, chains and
# networks on the first 2000 training images: 8 SAGD updates and the control's 8 VAE updates).
#
#   cargo build --release -p sagd-cli --features mpi
#   [N=points] [ROUNDS=3] [EM=1] [E2=1] [E3=1] scripts/mpi_scaling.sh [PROCESS COUNTS, default "1 2"] > table.md
#
# Each row is one run; "threads" is per process. Needs mpirun and python3 (standard library only).
set -euo pipefail
cd "$(dirname "$0")/.."
sagd="${SAGD:-target/release/sagd}"
counts="${1:-1 2}"
cores="$(nproc)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Unbound: Open MPI would pin a process and its threads to one core.
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)

# n observations of E1's model at θ = (0.5, 1): X | Z ~ Gamma(10 σ(0.5 + Z), 1), Z ~ N(0, 1).
data() {
  python3 -c '
import math, random, sys
n, path = int(sys.argv[1]), sys.argv[2]
rng = random.Random(3)
with open(path, "w") as f:
    f.write("x\n")
    for _ in range(n):
        z = rng.gauss(0, 1)
        f.write(f"{rng.gammavariate(10 / (1 + math.exp(-(0.5 + z))), 1.0):.17g}\n")
' "$1" "$work/x$1.csv"
}

em_row() { # n processes threads
  local n=$1 np=$2 th=$3 out="$work/em-$1-$2-$3"
  [ -e "$work/x$n.csv" ] || data "$n"
  "${mpi[@]}" -np "$np" "$sagd" --threads "$th" em --data "$work/x$n.csv" --msteps 3 --surface 8 \
    --quiet --out "$out" >/dev/null 2>"$out.err"
  python3 - "$out/result.json" "$n" "$np" "$th" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); n, np, th = sys.argv[2:5]
updates = len(r["sagd"]["path"]) - 1
t = r["timing_s"]["sagd"]
x = r.get("exchanged", {}).get("sagd", {})
b = (x.get("sent", 0) + x.get("received", 0)) / updates
print(f"| E1 EM, n = {n} | {np} | {th} | {updates} | {1e3 * t / updates:.2f} ms | "
      f"{b / 1e3:.1f} kB | {x.get('calls', 0) / updates:.2f} | {1e3 * x.get('seconds', 0) / updates:.2f} ms |")
EOF
}

e2_row() { # reps processes threads
  local reps=$1 np=$2 th=$3 out="$work/e2-$1-$2-$3"
  "${mpi[@]}" -np "$np" "$sagd" --threads "$th" debias --dist exp --reps "$reps" --quiet \
    --out "$out" >/dev/null 2>"$out.err"
  python3 - "$out/result.json" "$reps" "$np" "$th" "$out.err" <<'EOF'
import json, re, sys
r = json.load(open(sys.argv[1])); reps, np, th, err = sys.argv[2:6]
ex = re.findall(r"process 0 of \d+: (\d+) exchanges, ([\d.]+) MB sent, ([\d.]+) MB received, ([\d.]+) s",
                open(err).read())
calls, sent, recv, sec = ex[0] if ex else (0, 0, 0, 0)
print(f"| E2 exp, {reps} replications (whole run) | {np} | {th} | — | {r['total_time_s']:.2f} s | "
      f"{(float(sent) + float(recv)) * 1e3:.1f} kB in all | {calls} in all | {float(sec):.2f} s in all |")
EOF
}

e3_row() { # processes threads
  local np=$1 th=$2 out="$work/e3-$1-$2"
  # Pre-training once, cached, outside the timings (its first update allocates).
  "${mpi[@]}" -np "$np" "$sagd" --threads "$th" mnist --train-n 2000 --vae-epochs 1 \
    --sagd-updates 8 --eval-n 100 --pretrained-cache "$work/e3.cache" --quiet --out "$out" \
    >/dev/null 2>"$out.err"
  python3 - "$out/result.json" "$np" "$th" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); np, th = sys.argv[2:4]
s = r["settings"]
for phase, what in [("control", "VAE update (the control)"), ("sagd", "SAGD update")]:
    n, t = s["sagd_updates"], r["timing_s"][phase]
    x = r.get("exchanged", {}).get(phase, {})
    b = (x.get("sent", 0) + x.get("received", 0)) / n
    print(f"| E3 MNIST, {what} | {np} | {th} | {n} | {1e3 * t / n:.0f} ms | "
          f"{b / 1e3:.1f} kB | {x.get('calls', 0) / n:.2f} | {1e3 * x.get('seconds', 0) / n:.2f} ms |")
EOF
}

echo "Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $cores cores; $(mpirun --version | head -1)"
echo
echo "| run | processes | threads each | updates | time per update | bytes exchanged per update (process 0, sent + received) | exchanges per update | time in exchanges per update |"
echo "|---|---|---|---|---|---|---|---|"
# Rounds alternating the configurations (the table keeps every run).
n="${N:-1000}"
for round in $(seq "${ROUNDS:-3}"); do
  [ "${EM:-1}" = 1 ] || break
  em_row "$n" 1 1
  em_row "$n" 1 "$cores"
  for np in $counts; do
    if [ "$np" -gt 1 ]; then em_row "$n" "$np" $(( cores / np > 0 ? cores / np : 1 )); fi
  done
done
if [ "${E3:-1}" = 1 ]; then
  for round in $(seq "${ROUNDS:-3}"); do
    e3_row 1 1
    e3_row 1 "$cores"
    for np in $counts; do
      if [ "$np" -gt 1 ]; then e3_row "$np" $(( cores / np > 0 ? cores / np : 1 )); fi
    done
  done
fi
[ "${E2:-1}" = 1 ] || exit 0
reps=2
for np in $counts; do if [ "$np" -gt "$reps" ]; then reps=$np; fi; done
e2_row "$reps" 1 "$cores"
for np in $counts; do
  if [ "$np" -gt 1 ]; then e2_row "$reps" "$np" $(( cores / np > 0 ? cores / np : 1 )); fi
done
