package jailbackend

import (
	"time"

	"github.com/arbor-dev/arbor/internal/engine"
)

// LastPause is how long the last Fork of a live source on be held that
// source paused (its freeze, the files' and /tmp's forks, its thaw), for
// the benchmarks and the demo; ok is false when be is not a jail backend
// or has forked no live source yet.
func LastPause(be engine.Backend) (pause time.Duration, ok bool) {
	b, isJail := be.(*backend)
	if !isJail {
		return 0, false
	}
	b.op.Lock()
	defer b.op.Unlock()
	return b.pause, b.pause > 0
}
