#!/usr/bin/env bash
# Issue 10, GPU sitting H: E3 training speed on 2 CPU threads after the ReLU fused into the
# products' stores and the windows' offsets tabulated, against the PyTorch peer in the same run,
# three rounds alternating (this build, the build of sitting G in .dev/sagd-g, the peer); then 16
# threads. Builds nothing: run from the repository root with the stripped release binaries and the
# peer's script in .dev/.
set -u
# At most 8 files come back: the log, and everything else in one archive.
. scripts/device-lib.sh
sitting h

echo "== 1. E3 on 2 CPU threads: this build, sitting G's build, the peer (three rounds)"
for round in 1 2 3; do
  ours .dev/sagd new-r$round 2 20 2
  ours .dev/sagd-g g-r$round 2 20 2
  peer_cpu r$round 2 20 1
done

echo "== 2. E3 on 16 CPU threads: this build, the peer"
ours .dev/sagd new 16 40 4
peer_cpu all 16 40 2
echo "== done"
tar czf "$O/results.tgz" -C "$R" .
