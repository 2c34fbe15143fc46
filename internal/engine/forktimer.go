package engine

import "time"

// ForkTimings is what a backend measured of its last Fork.
type ForkTimings struct {
	// Pause is how long the source stayed paused (zero: it ran nothing).
	Pause time.Duration
	// Starts are the children's sandbox starts, in the children's order.
	Starts []time.Duration
}

// ForkTimer is a Backend that measures its forks (jail): the engine puts
// the figures in the fork's reply (pause_ns, and each fork's start_ns).
// LastFork is called right after Fork returns, under the tree's lock.
type ForkTimer interface {
	LastFork() ForkTimings
}
