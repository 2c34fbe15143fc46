package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// latencies collects the duration of each timed op and reports the median
// and the 90th percentile as custom metrics (p50-us, p90-us): the mean
// (ns/op) of a few hundred ops on a shared disk is mostly its outliers.
type latencies []time.Duration

func (l *latencies) time(f func()) {
	t0 := time.Now()
	f()
	*l = append(*l, time.Since(t0))
}

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(s[len(s)/2]), "p50-us")
	b.ReportMetric(us(s[len(s)*9/10]), "p90-us")
}

func baseOf(n int) map[string]string {
	files := make(map[string]string, n)
	for i := range n {
		files[fmt.Sprintf("d%d/f%d", i%100, i)] = "x"
	}
	return files
}

// BenchmarkFork forks main over bases of 100 to 100,000 files: the cost
// must not depend on the size of the base.
func BenchmarkFork(b *testing.B) {
	sizes := []int{100, 10000, 100000}
	if testing.Short() {
		sizes = sizes[:2]
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("base=%d", n), func(b *testing.B) {
			f := newFixture(b, baseOf(n))
			m := f.br(Main)
			i := 0
			var lat latencies
			defer func() { lat.report(b) }()
			for b.Loop() {
				name := fmt.Sprintf("c%d", i)
				i++
				var err error
				lat.time(func() { err = f.s.Fork(Main, name) })
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				// Main writes, so that the next fork takes a new snapshot.
				if err := writeErr(f.s, m, "d0/f0", name); err != nil {
					b.Fatal(err)
				}
				if err := f.s.Abort(name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

var kb = strings.Repeat("k", 1024)

// BenchmarkCommit commits a branch holding one new 1 KB file: into a
// branch parent (metadata only), and into main with and without durability.
func BenchmarkCommit(b *testing.B) {
	cases := []struct {
		name    string
		parent  string
		durable bool
	}{
		{"into-branch", "p", false},
		{"into-branch-durable", "p", true},
		{"into-main", Main, false},
		{"into-main-durable", Main, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			f := newFixture(b, baseOf(100))
			if c.parent != Main {
				f.fork(Main, c.parent)
			}
			i := 0
			var lat latencies
			defer func() { lat.report(b) }()
			for b.Loop() {
				b.StopTimer()
				name := fmt.Sprintf("c%d", i)
				i++
				f.fork(c.parent, name)
				f.write(f.br(name), fmt.Sprintf("new/%d", i), kb)
				b.StartTimer()
				var err error
				lat.time(func() { _, err = f.s.Commit(name, c.durable) })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAbort aborts a branch holding one 1 KB file.
func BenchmarkAbort(b *testing.B) {
	f := newFixture(b, baseOf(100))
	i := 0
	var lat latencies
	defer func() { lat.report(b) }()
	for b.Loop() {
		b.StopTimer()
		name := fmt.Sprintf("c%d", i)
		i++
		f.fork(Main, name)
		f.write(f.br(name), "new", kb)
		b.StartTimer()
		var err error
		lat.time(func() { err = f.s.Abort(name) })
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDepth forks, commits (1 KB, into its parent, not durable) and
// aborts a branch whose parent is at depth 1 or 64 (every level holding a
// change; commit and abort at depth 2 and 65, under a fresh parent each
// time): the target is depth 64 within 1.2x of depth 1. Two controls
// tell depth from the number of branches a depth-64 tree has: width=64 is 64
// siblings under main with the parent among them (as many records, all at
// depth 1), and depth=64-empty is 64 levels of which only the last holds a
// change (as many records, short chains: forks under an empty head share
// the layers below it).
func BenchmarkDepth(b *testing.B) {
	shapes := []struct {
		name  string
		setup func(f *fixture) string // returns the parent
	}{
		{"depth=1", func(f *fixture) string { return chainOf(f, 1, true) }},
		{"depth=64", func(f *fixture) string { return chainOf(f, 64, true) }},
		{"width=64", func(f *fixture) string {
			for i := 1; i <= 64; i++ {
				name := fmt.Sprintf("level-%d", i)
				f.fork(Main, name)
				f.write(f.br(name), fmt.Sprintf(".level-%d", i), "level")
			}
			return "level-64"
		}},
		{"depth=64-empty", func(f *fixture) string { return chainOf(f, 64, false) }},
	}
	for _, shape := range shapes {
		depth := shape.name
		setup := func(b *testing.B) (*fixture, string) {
			f := newFixture(b, baseOf(100))
			return f, shape.setup(f)
		}
		b.Run("fork/"+depth, func(b *testing.B) {
			f, parent := setup(b)
			i := 0
			var lat latencies
			defer func() { lat.report(b) }()
			for b.Loop() {
				name := fmt.Sprintf("c%d", i)
				i++
				var err error
				lat.time(func() { err = f.s.Fork(parent, name) })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, verb := range []string{"commit", "abort"} {
			b.Run(verb+"/"+depth, func(b *testing.B) {
				f, parent := setup(b)
				i := 0
				var lat latencies
				defer func() { lat.report(b) }()
				for b.Loop() {
					// A fresh parent each time: a commit into a branch
					// adds the child's layer to the parent's chain.
					b.StopTimer()
					p, name := fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i)
					i++
					f.fork(parent, p)
					f.fork(p, name)
					f.write(f.br(name), fmt.Sprintf("new/%d", i), kb)
					b.StartTimer()
					var err error
					if verb == "commit" {
						lat.time(func() { _, err = f.s.Commit(name, false) })
					} else {
						lat.time(func() { err = f.s.Abort(name) })
					}
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := f.s.Abort(p); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// chainOf makes branches level-1 .. level-n, each a child of the one
// before, and returns level-n. With every, each level writes a file (its
// own layer in the chain); else only the last one does.
func chainOf(f *fixture, n int, every bool) string {
	parent := Main
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("level-%d", i)
		f.fork(parent, name)
		if every || i == n {
			f.write(f.br(name), fmt.Sprintf(".level-%d", i), "level")
		}
		parent = name
	}
	return parent
}
