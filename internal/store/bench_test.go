package store

import (
	"fmt"
	"strings"
	"testing"
)

func baseOf(n int) map[string]string {
	files := make(map[string]string, n)
	for i := range n {
		files[fmt.Sprintf("d%d/f%d", i%100, i)] = "x"
	}
	return files
}

// BenchmarkFork forks main over bases of 100 and 10,000 files: the cost
// must not depend on the size of the base.
func BenchmarkFork(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("base=%d", n), func(b *testing.B) {
			f := newFixture(b, baseOf(n))
			m := f.br(Main)
			i := 0
			for b.Loop() {
				name := fmt.Sprintf("c%d", i)
				i++
				if err := f.s.Fork(Main, name); err != nil {
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
			for b.Loop() {
				b.StopTimer()
				name := fmt.Sprintf("c%d", i)
				i++
				f.fork(c.parent, name)
				f.write(f.br(name), fmt.Sprintf("new/%d", i), kb)
				b.StartTimer()
				if _, err := f.s.Commit(name, c.durable); err != nil {
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
	for b.Loop() {
		b.StopTimer()
		name := fmt.Sprintf("c%d", i)
		i++
		f.fork(Main, name)
		f.write(f.br(name), "new", kb)
		b.StartTimer()
		if err := f.s.Abort(name); err != nil {
			b.Fatal(err)
		}
	}
}
