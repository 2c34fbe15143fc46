#!/usr/bin/env bash
# The test command: set-up, vet, every test under the race detector, and a
# short fuzz of the three decoders and of the path rules. Tests that need
# root, FUSE or namespaces fail instead of skipping here (ARBOR_TEST_REQUIRE).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
bash scripts/setup.sh

export ARBOR_TEST_REQUIRE=${ARBOR_TEST_REQUIRE:-all}
# Everything a test leaves running or mounted is ended on the way out, so
# nothing outlives this script (and holds its output open).
cleanup() {
  local rc=$?
  set +e +o pipefail
  pkill -f '[a]rbor daemon --home /tmp/' 2>/dev/null || true
  pkill -f '[f]use-overlayfs' 2>/dev/null || true
  grep -E ' fuse(\.[a-z-]+)? ' /proc/self/mounts | awk '{print $2}' | grep '^/tmp/' | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT

go vet ./...
go test -race -timeout 20m -count=1 ./...
# Fuzz budgets are counts, not durations: a -fuzztime duration can fail
# with a bare "context deadline exceeded" as it runs out (golang/go#75804,
# fixed in Go 1.27; this is 1.26).
go test -run '^$' -fuzz FuzzLineAPI -fuzztime 50000x ./internal/lineapi
go test -run '^$' -fuzz FuzzHTTP -fuzztime 50000x ./internal/httpapi
go test -run '^$' -fuzz FuzzDecodeRecord -fuzztime 50000x ./internal/store
go test -run '^$' -fuzz FuzzMountpoint -fuzztime 50000x ./internal/access
