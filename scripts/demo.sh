#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build arbor, and
# run the coding-agent-fork demo against one daemon of its own (which
# `arbor demo` starts on a home made for this run), then stop that daemon
# and remove the home. The results stay: ./results/<UTC time>/ (or under
# $OUT), beside the base directory the demo forked, ./bases/<UTC time>/.
# With ARBOR_HOME set, that daemon and home are used and kept.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$PWD}
export PATH=$PATH:/usr/local/go/bin
(cd "$repo" && bash scripts/setup.sh && go build -buildvcs=true -o "$repo/bin/arbor" ./cmd/arbor)
arbor=$repo/bin/arbor
own_home=
if [ -z "${ARBOR_HOME:-}" ]; then
  own_home=$(mktemp -d /tmp/arbor-demo.XXXXXX)
  export ARBOR_HOME=$own_home
fi
finish() {
  local rc=$?
  set +e
  [ -n "$own_home" ] || exit "$rc"
  "$arbor" daemon stop >/dev/null 2>&1
  if grep -qF " $own_home/" /proc/self/mountinfo; then
    echo "demo: kept $own_home: something is still mounted under it" >&2
  elif [ "$rc" -ne 0 ]; then
    echo "demo: kept $own_home for its log (arbord.log), since the demo failed" >&2
  else
    rm -rf "$own_home"
  fi
  exit "$rc"
}
trap finish EXIT
"$arbor" demo coding-agent --workdir "$out"
