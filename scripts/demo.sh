#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build arbor, run
# the coding-agent-fork demo against a daemon of its own, and stop it again.
# Results go to ./results/<unix-ts>/ (or $OUT/results/...).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$PWD}
export PATH=$PATH:/usr/local/go/bin
(cd "$repo" && bash scripts/setup.sh && go build -o "$repo/bin/arbor" ./cmd/arbor)
home=${ARBOR_HOME:-$(mktemp -d /tmp/arbor-demo.XXXXXX)}
mkdir -p "$home"
"$repo/bin/arbor" daemon --home "$home" >>"$home/arbord.log" 2>&1 </dev/null &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
ARBOR_HOME=$home "$repo/bin/arbor" demo coding-agent --workdir "$out"
