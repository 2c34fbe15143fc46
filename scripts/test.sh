#!/usr/bin/env bash
# The test command: set-up, what the host can do (arbor doctor), vet, every
# test under the race detector, and a short fuzz of the decoders and of the
# path rules. Tests that need root, FUSE or namespaces fail instead of
# skipping here (ARBOR_TEST_REQUIRE).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
bash scripts/setup.sh

export ARBOR_TEST_REQUIRE=${ARBOR_TEST_REQUIRE:-all}
# What tests leave for people to look at (the web view's screenshot): kept
# after the run, unlike the run's directory.
export ARBOR_ARTIFACTS=${ARBOR_ARTIFACTS:-$PWD/artifacts}
mkdir -p "$ARBOR_ARTIFACTS"

# Everything this run makes goes under a temporary directory of its own
# (the tests' temporary files, mounts and daemon homes), and every process
# it starts carries ARBOR_TEST_RUN in its environment. On the way out the
# cleanup ends those processes (by pid) and detaches the FUSE mounts under
# that directory, and nothing else: other runs and other users' work on the
# same machine are left alone.
run_dir=$(mktemp -d /tmp/arbor-test.XXXXXX)
chmod 0755 "$run_dir" # tests run steps as uid 65534 in directories below it
export TMPDIR=$run_dir ARBOR_TEST_RUN=$run_dir
cleanup() {
  local rc=$?
  set +e +o pipefail
  local pids=()
  for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}; pid=${pid%/environ}
    [ "$pid" = "$$" ] && continue
    if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qxF "ARBOR_TEST_RUN=$run_dir"; then
      pids+=("$pid")
    fi
  done
  [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[@]}" 2>/dev/null
  # The mounts under the run's directory, deepest first; a FUSE mount's
  # connection is aborted first, so that nothing waits on a dead server.
  awk -v d="$run_dir" '$5 == d || index($5, d "/") == 1 { print $3 " " $5 }' /proc/self/mountinfo | sort -r -k2 |
    while read -r dev mp; do
      printf -v mp '%b' "$(sed 's/\\\([0-7][0-7][0-7]\)/\\0\1/g' <<<"$mp")" # mountinfo's \040 escapes
      conn=$(( (${dev%%:*} << 20) | ${dev##*:} ))
      [ -w "/sys/fs/fuse/connections/$conn/abort" ] && echo 1 >"/sys/fs/fuse/connections/$conn/abort"
      umount -l "$mp" 2>/dev/null
    done
  rm -rf "$run_dir" 2>/dev/null
  exit "$rc"
}
trap cleanup EXIT

go run ./cmd/arbor doctor || true
go vet ./...
go test -race -timeout 20m -count=1 ./...
# Every mount above read and wrote /dev/fuse (the default); the mount tests
# and the POSIX suite on them run again over io_uring where the kernel has
# it (setup turns it on), but for the test that holds a request on purpose
# (a held RELEASE blocks its queue there: see cowfs/transport.go).
if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
  ARBOR_FUSE_TRANSPORT=uring go test -race -timeout 10m -count=1 -skip 'TestOpenDuringLateRelease' ./internal/cowfs
fi
# The io_uring transport's own tests, in the go-fuse fork (a module of its own).
go test -race -timeout 5m -count=1 -run URing github.com/hanwen/go-fuse/v2/fuse
# The Python SDK (sdk/python, standard library only) against a real arbord
# that its tests start in homes under the run's directory and stop by pid.
go build -o "$run_dir/bin/" ./cmd/arbord
(cd sdk/python && ARBORD=$run_dir/bin/arbord timeout 15m python3 -m unittest discover -t . -s tests)
# Fuzz budgets are counts, not durations: a -fuzztime duration can fail
# with a bare "context deadline exceeded" as it runs out (golang/go#75804,
# fixed in Go 1.27; this is 1.26).
go test -run '^$' -fuzz FuzzLineAPI -fuzztime 50000x ./internal/lineapi
go test -run '^$' -fuzz FuzzHTTP -fuzztime 50000x ./internal/httpapi
go test -run '^$' -fuzz FuzzDecodeRecord -fuzztime 50000x ./internal/store
go test -run '^$' -fuzz FuzzMountpoint -fuzztime 50000x ./internal/access
