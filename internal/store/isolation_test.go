package store

import (
	"os"
	"syscall"
	"testing"
)

var isoBase = map[string]string{
	"a":       "a0",
	"b":       "b0",
	"d/x":     "x0",
	"d/e/y":   "y0",
	"empty/":  "",
	"keep":    "k0",
	"d/e/z":   "z0",
	"other/w": "w0",
}

// TestMainWritesAfterFork: main keeps writing the base in place after a
// fork; the fork keeps seeing the fork-time state (origin copy-on-write).
func TestMainWritesAfterFork(t *testing.T) {
	tests := []struct {
		name     string
		act      func(f *fixture, m *Branch)
		child    map[string]string // path -> what the child reads
		childLs  map[string]string // dir -> what the child lists
		main     map[string]string // path -> what main reads afterwards
		mainLs   map[string]string
		childMod map[string]os.FileMode
	}{
		{
			name:  "overwrite",
			act:   func(f *fixture, m *Branch) { f.write(m, "a", "a1") },
			child: map[string]string{"a": "a0"}, main: map[string]string{"a": "a1"},
		},
		{
			name:  "overwrite twice",
			act:   func(f *fixture, m *Branch) { f.write(m, "a", "a1"); f.write(m, "a", "a2") },
			child: map[string]string{"a": "a0"}, main: map[string]string{"a": "a2"},
		},
		{
			name:    "create",
			act:     func(f *fixture, m *Branch) { f.write(m, "new", "n"); f.write(m, "d/new", "n") },
			child:   map[string]string{"new": "ENOENT", "d/new": "ENOENT"},
			childLs: map[string]string{"": "a b d/ empty/ keep other/", "d": "e/ x"},
			main:    map[string]string{"new": "n", "d/new": "n"},
			mainLs:  map[string]string{"": "a b d/ empty/ keep new other/"},
		},
		{
			name:    "create in new dir",
			act:     func(f *fixture, m *Branch) { f.write(m, "n1/n2/f", "n") },
			child:   map[string]string{"n1": "ENOENT", "n1/n2/f": "ENOENT"},
			childLs: map[string]string{"": "a b d/ empty/ keep other/"},
			main:    map[string]string{"n1/n2/f": "n"},
		},
		{
			name:    "delete",
			act:     func(f *fixture, m *Branch) { f.rm(m, "a"); f.rm(m, "d/x") },
			child:   map[string]string{"a": "a0", "d/x": "x0"},
			childLs: map[string]string{"": "a b d/ empty/ keep other/", "d": "e/ x"},
			main:    map[string]string{"a": "ENOENT", "d/x": "ENOENT"},
		},
		{
			name: "delete a whole dir",
			act: func(f *fixture, m *Branch) {
				f.rm(m, "d/e/y")
				f.rm(m, "d/e/z")
				f.rm(m, "d/e")
			},
			child:   map[string]string{"d/e/y": "y0", "d/e/z": "z0"},
			childLs: map[string]string{"d/e": "y z", "d": "e/ x"},
			main:    map[string]string{"d/e": "ENOENT"},
		},
		{
			name:    "rename a file",
			act:     func(f *fixture, m *Branch) { f.rename(m, "a", "a2") },
			child:   map[string]string{"a": "a0", "a2": "ENOENT"},
			childLs: map[string]string{"": "a b d/ empty/ keep other/"},
			main:    map[string]string{"a": "ENOENT", "a2": "a0"},
		},
		{
			name:  "rename a file over another",
			act:   func(f *fixture, m *Branch) { f.rename(m, "a", "b") },
			child: map[string]string{"a": "a0", "b": "b0"},
			main:  map[string]string{"a": "ENOENT", "b": "a0"},
		},
		{
			name:    "rename a dir with children",
			act:     func(f *fixture, m *Branch) { f.rename(m, "d", "d2") },
			child:   map[string]string{"d/x": "x0", "d/e/y": "y0", "d2": "ENOENT", "d2/x": "ENOENT"},
			childLs: map[string]string{"": "a b d/ empty/ keep other/", "d": "e/ x", "d/e": "y z"},
			main:    map[string]string{"d": "ENOENT", "d2/x": "x0", "d2/e/y": "y0"},
		},
		{
			name: "write a child then rename its dir",
			act: func(f *fixture, m *Branch) {
				f.write(m, "d/x", "x1")
				f.write(m, "d/e/new", "n")
				f.rm(m, "d/e/z")
				f.rename(m, "d", "d2")
			},
			child:   map[string]string{"d/x": "x0", "d/e/new": "ENOENT", "d/e/z": "z0", "d2": "ENOENT"},
			childLs: map[string]string{"d": "e/ x", "d/e": "y z"},
			main:    map[string]string{"d2/x": "x1", "d2/e/new": "n", "d2/e/z": "ENOENT"},
		},
		{
			name: "rename a dir then write under it",
			act: func(f *fixture, m *Branch) {
				f.rename(m, "d", "d2")
				f.write(m, "d2/x", "x1")
				f.rename(m, "d2", "d")
				f.write(m, "d/x", "x2")
			},
			child: map[string]string{"d/x": "x0", "d/e/y": "y0", "d2": "ENOENT"},
			main:  map[string]string{"d/x": "x2"},
		},
		{
			name: "exchange",
			act: func(f *fixture, m *Branch) {
				if err := f.s.Rename(m, "a", "d", RenameExchange); err != nil {
					f.t.Fatal(err)
				}
			},
			child: map[string]string{"a": "a0", "d/x": "x0"},
			main:  map[string]string{"d": "a0", "a/x": "x0"},
		},
		{
			name: "chmod a file and a dir",
			act: func(f *fixture, m *Branch) {
				for _, p := range []string{"a", "d"} {
					real, err := f.s.CopyUp(m, p)
					if err != nil {
						f.t.Fatal(err)
					}
					if err := os.Chmod(real, 0o700); err != nil {
						f.t.Fatal(err)
					}
				}
			},
			child:    map[string]string{"a": "a0", "d/x": "x0"},
			childMod: map[string]os.FileMode{"a": 0o644, "d": 0o755},
			childLs:  map[string]string{"d": "e/ x"},
		},
		{
			name: "truncate in place",
			act: func(f *fixture, m *Branch) {
				real, err := f.s.CopyUp(m, "keep")
				if err != nil {
					f.t.Fatal(err)
				}
				if err := os.Truncate(real, 0); err != nil {
					f.t.Fatal(err)
				}
			},
			child: map[string]string{"keep": "k0"}, main: map[string]string{"keep": ""},
		},
		{
			name: "hard link",
			act: func(f *fixture, m *Branch) {
				if err := f.s.Link(m, "a", "alink"); err != nil {
					f.t.Fatal(err)
				}
				f.write(m, "alink", "a1")
			},
			child: map[string]string{"a": "a0", "alink": "ENOENT"},
			main:  map[string]string{"a": "a1", "alink": "a1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, isoBase)
			f.fork(Main, "c", "sib")
			m, c := f.br(Main), f.br("c")
			tt.act(f, m)
			check := func(when string) {
				t.Helper()
				c := f.br("c")
				for p, want := range tt.child {
					if got := f.read(c, p); got != want {
						t.Errorf("%s: child reads %s = %q, want %q", when, p, got, want)
					}
				}
				for p, want := range tt.childLs {
					if got := f.ls(c, p); got != want {
						t.Errorf("%s: child lists %q = %q, want %q", when, p, got, want)
					}
				}
				for p, want := range tt.childMod {
					if got := f.mode(c, p); got != want {
						t.Errorf("%s: child mode of %s = %o, want %o", when, p, got, want)
					}
				}
				for p, want := range tt.main {
					if got := f.read(f.br(Main), p); got != want {
						t.Errorf("%s: main reads %s = %q, want %q", when, p, got, want)
					}
				}
				for p, want := range tt.mainLs {
					if got := f.ls(f.br(Main), p); got != want {
						t.Errorf("%s: main lists %q = %q, want %q", when, p, got, want)
					}
				}
			}
			check("live")
			// A second fork made now sees main's new state.
			f.fork(Main, "late")
			for p, want := range tt.main {
				if got := f.read(f.br("late"), p); got != want {
					t.Errorf("a fork made after the writes reads %s = %q, want %q", p, got, want)
				}
			}
			f.reopen()
			check("after reopen")
			_ = c
		})
	}
}

// TestBranchIsolation: after a fork of a branch, writes on either side and
// between siblings are invisible to the others.
func TestBranchIsolation(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "p")
	p := f.br("p")
	f.write(p, "a", "p-before")
	f.fork("p", "c1", "c2")
	c1, c2 := f.br("c1"), f.br("c2")

	f.write(p, "a", "p-after")
	f.write(p, "pnew", "p")
	f.rm(p, "b")
	f.write(c1, "a", "c1")
	f.write(c1, "d/c1new", "c1")
	f.rm(c1, "d/x")
	f.write(c2, "keep", "c2")
	f.rename(c2, "d", "d2")

	want := map[string]map[string]string{
		"p":  {"a": "p-after", "pnew": "p", "b": "ENOENT", "d/x": "x0", "d/c1new": "ENOENT", "keep": "k0", "d2": "ENOENT"},
		"c1": {"a": "c1", "pnew": "ENOENT", "b": "b0", "d/x": "ENOENT", "d/c1new": "c1", "keep": "k0", "d2": "ENOENT"},
		"c2": {"a": "p-before", "pnew": "ENOENT", "b": "b0", "d": "ENOENT", "d2/x": "x0", "d2/e/y": "y0", "keep": "c2", "d2/c1new": "ENOENT"},
		Main: {"a": "a0", "pnew": "ENOENT", "b": "b0", "d/x": "x0", "keep": "k0", "d2": "ENOENT"},
	}
	wantLs := map[string]map[string]string{
		"p":  {"": "a d/ empty/ keep other/ pnew", "d": "e/ x"},
		"c1": {"": "a b d/ empty/ keep other/", "d": "c1new e/"},
		"c2": {"": "a b d2/ empty/ keep other/", "d2": "e/ x", "d2/e": "y z"},
		Main: {"": "a b d/ empty/ keep other/", "d": "e/ x"},
	}
	check := func(when string) {
		for name, files := range want {
			b := f.br(name)
			for path, w := range files {
				if got := f.read(b, path); got != w {
					t.Errorf("%s: %s reads %s = %q, want %q", when, name, path, got, w)
				}
			}
			for dir, w := range wantLs[name] {
				if got := f.ls(b, dir); got != w {
					t.Errorf("%s: %s lists %q = %q, want %q", when, name, dir, got, w)
				}
			}
		}
	}
	check("live")
	f.reopen()
	check("after reopen")
	for _, n := range []string{"a", "b", "d/x", "keep"} {
		if got := f.baseRead(n); got != isoBase[n] {
			t.Errorf("base %s = %q, want %q", n, got, isoBase[n])
		}
	}
}

// TestOpenWriterAcrossFork: a descriptor open for writing when the fork
// happens keeps writing its own branch; the fork sees the fork-time bytes.
func TestOpenWriterAcrossFork(t *testing.T) {
	for _, parent := range []string{Main, "p"} {
		t.Run(parent, func(t *testing.T) {
			f := newFixture(t, isoBase)
			if parent != Main {
				f.fork(Main, "p")
			}
			pb := f.br(parent)
			f.write(pb, "a", "before")
			real, err := f.s.CopyUp(pb, "a")
			if err != nil {
				t.Fatal(err)
			}
			fd, err := os.OpenFile(real, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			w := f.s.OpenWrite(real)
			t.Cleanup(func() { fd.Close() })

			f.fork(parent, "c")
			if err := fd.Truncate(0); err != nil {
				t.Fatal(err)
			}
			if _, err := fd.WriteAt([]byte("after"), 0); err != nil {
				t.Fatal(err)
			}
			if err := fd.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := f.read(f.br("c"), "a"); got != "before" {
				t.Errorf("fork reads %q, want the fork-time %q", got, "before")
			}
			if got := f.read(pb, "a"); got != "after" {
				t.Errorf("%s reads %q after writing through its descriptor, want %q", parent, got, "after")
			}
			// A second write after another fork: the descriptor is still tracked.
			f.fork(parent, "c2")
			if _, err := fd.WriteAt([]byte("+more"), 5); err != nil {
				t.Fatal(err)
			}
			if got := f.read(f.br("c2"), "a"); got != "after" {
				t.Errorf("second fork reads %q, want %q", got, "after")
			}
			if got := f.read(f.br("c"), "a"); got != "before" {
				t.Errorf("first fork reads %q, want %q", got, "before")
			}
			if got := f.read(pb, "a"); got != "after+more" {
				t.Errorf("%s reads %q, want %q", parent, got, "after+more")
			}
			fd.Close()
			f.s.CloseWrite(w)
		})
	}
}

// RenameExchange is renameat2's flag, for readability.
const RenameExchange = 1 << 1

var _ = syscall.ENOENT
