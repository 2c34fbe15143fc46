package store

import (
	"fmt"
	"strings"
	"testing"
)

// chain forks main and then each level from the one before, n levels in
// all; level i writes its own file lvl<i> (and runs at, if given) before the
// next fork. It returns the leaf's name.
func (f *fixture) chain(n int, at func(level int, b *Branch)) string {
	f.t.Helper()
	parent := Main
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("l%d", i)
		f.fork(parent, name)
		b := f.br(name)
		f.write(b, fmt.Sprintf("lvl%d", i), name)
		if at != nil {
			at(i, b)
		}
		parent = name
	}
	return parent
}

// TestNesting256: 256 levels of forks, each writing a file: the leaf sees
// every level's file, and a whiteout at level 100 hides a base file from
// the levels above it only.
func TestNesting256(t *testing.T) {
	const levels = 256
	f := newFixture(t, map[string]string{"a": "a0", "gone": "g0", "d/x": "x0"})
	leaf := f.chain(levels, func(i int, b *Branch) {
		switch i {
		case 100:
			f.rm(b, "gone")
		case 200:
			f.write(b, "d/x", "x200")
		}
	})
	check := func(when string) {
		lb := f.br(leaf)
		if d := len(lb.chain); d != levels+1 {
			t.Errorf("%s: leaf depth %d, want %d", when, d, levels+1)
		}
		for i := 1; i <= levels; i++ {
			if got, want := f.read(lb, fmt.Sprintf("lvl%d", i)), fmt.Sprintf("l%d", i); got != want {
				t.Fatalf("%s: leaf reads lvl%d = %q, want %q", when, i, got, want)
			}
		}
		for _, c := range []struct {
			branch, path, want string
		}{
			{leaf, "gone", "ENOENT"}, {"l100", "gone", "ENOENT"}, {"l99", "gone", "g0"}, {"l1", "gone", "g0"},
			{leaf, "a", "a0"}, {leaf, "d/x", "x200"}, {"l199", "d/x", "x0"}, {"l10", "lvl11", "ENOENT"},
		} {
			if got := f.read(f.br(c.branch), c.path); got != c.want {
				t.Errorf("%s: %s reads %s = %q, want %q", when, c.branch, c.path, got, c.want)
			}
		}
		ls := f.ls(lb, "")
		if n := strings.Count(ls, "lvl"); n != levels || strings.Contains(ls, "gone") || !strings.Contains(ls, "a d/") {
			t.Errorf("%s: leaf lists %d lvl files (want %d) in %q", when, n, levels, ls)
		}
		if got := f.ls(f.br("l99"), ""); !strings.Contains(got, "gone") {
			t.Errorf("%s: l99 lists %q, without gone", when, got)
		}
	}
	check("live")
	f.reopen()
	check("after reopen")
	// Commit the leaf down the whole chain into main.
	for i := levels; i >= 1; i-- {
		f.commit(fmt.Sprintf("l%d", i), i == 1)
	}
	for i := 1; i <= levels; i++ {
		if got, want := f.baseRead(fmt.Sprintf("lvl%d", i)), fmt.Sprintf("l%d", i); got != want {
			t.Fatalf("base lvl%d = %q, want %q", i, got, want)
		}
	}
	if got := f.baseRead("gone"); got != "ENOENT" {
		t.Errorf("base gone = %q", got)
	}
	if got := f.baseRead("d/x"); got != "x200" {
		t.Errorf("base d/x = %q", got)
	}
	if len(f.s.Branches()) != 1 {
		t.Errorf("branches left: %v", f.s.Branches())
	}
	f.reopen()
	if d := f.layerDirs(); len(d) != 0 {
		t.Errorf("layer dirs left after the commits: %v", d)
	}
}

// BenchmarkLookupDepth resolves a base file and a file of the bottom
// layer from the leaf of a chain of each depth: the cost must not grow with
// the depth.
func BenchmarkLookupDepth(b *testing.B) {
	for _, depth := range []int{1, 64, 256} {
		f := newFixture(b, map[string]string{"d/e/base": "b", "top": "t"})
		leaf := f.chain(depth, func(i int, br *Branch) {
			if i == 1 {
				f.write(br, "sub/bottom", "bottom")
			}
			// A directory every level writes in: it has an entry in each
			// layer, so resolving under it scans them (the known O(depth) case).
			f.write(br, fmt.Sprintf("shared/f%d", i), "s")
		})
		lb := f.br(leaf)
		for _, c := range []struct{ name, path string }{
			{"base", "d/e/base"}, {"bottom", "sub/bottom"}, {"top", "lvl1"}, {"shared-dir", "shared/f1"},
		} {
			b.Run(fmt.Sprintf("%s/%d", c.name, depth), func(b *testing.B) {
				for b.Loop() {
					if _, err := f.s.Resolve(lb, c.path); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
