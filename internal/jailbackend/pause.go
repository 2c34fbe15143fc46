package jailbackend

import (
	"slices"

	"github.com/arbor-dev/arbor/internal/engine"
)

// LastFork is engine.ForkTimer: how long the last Fork held its source
// paused (its freeze, the files' and /tmp's forks, its thaw; zero for a
// suspended source), and each child's sandbox start.
func (b *backend) LastFork() engine.ForkTimings {
	b.op.Lock()
	defer b.op.Unlock()
	return engine.ForkTimings{Pause: b.pause, Starts: slices.Clone(b.starts)}
}

var _ engine.ForkTimer = (*backend)(nil)
