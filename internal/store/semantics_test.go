package store

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRenameErrors: renameat2's error cases, in a branch over the base and
// in main.
func TestRenameErrors(t *testing.T) {
	tests := []struct {
		old, new string
		flags    uint32
		want     error
	}{
		{"a", "b", unix.RENAME_NOREPLACE, syscall.EEXIST},
		{"a", "d", unix.RENAME_NOREPLACE, syscall.EEXIST},
		{"d", "d/e/sub", 0, syscall.EINVAL},
		{"d", "d/sub", unix.RENAME_NOREPLACE, syscall.EINVAL},
		{"d/e", "d/e/y/..", 0, syscall.ENOTDIR},
		{"a", "nosuch", unix.RENAME_EXCHANGE, syscall.ENOENT},
		{"nosuch", "x", 0, syscall.ENOENT},
		{"a", "nodir/x", 0, syscall.ENOENT},
		{"a", "b/x", 0, syscall.ENOTDIR},
		{"d", "a", 0, syscall.ENOTDIR},
		{"a", "d", 0, syscall.EISDIR},
		{"empty", "d", 0, syscall.ENOTEMPTY},
		{"a", ".wh.x", 0, syscall.EINVAL},
	}
	for _, branch := range []string{"c", Main} {
		for _, tt := range tests {
			t.Run(branch+"/"+tt.old+"->"+tt.new, func(t *testing.T) {
				f := newFixture(t, isoBase)
				f.fork(Main, "c")
				b := f.br(branch)
				err := f.s.Rename(b, tt.old, tt.new, tt.flags)
				if !errors.Is(err, tt.want) {
					t.Fatalf("rename %s -> %s flags %d = %v, want %v", tt.old, tt.new, tt.flags, err, tt.want)
				}
				for _, p := range []string{"a", "b", "d/x", "d/e/y"} {
					if got := f.read(b, p); got != isoBase[p] {
						t.Errorf("after the failed rename %s = %q, want %q", p, got, isoBase[p])
					}
				}
			})
		}
	}
}

// TestRenameInBranch: renames of objects that live in lower layers.
func TestRenameInBranch(t *testing.T) {
	tests := []struct {
		name  string
		act   func(f *fixture, b *Branch) error
		reads map[string]string
		lists map[string]string
	}{
		{
			name:  "file from the base",
			act:   func(f *fixture, b *Branch) error { return f.s.Rename(b, "a", "a2", 0) },
			reads: map[string]string{"a": "ENOENT", "a2": "a0"},
			lists: map[string]string{"": "a2 b d/ empty/ keep other/"},
		},
		{
			name:  "file over another",
			act:   func(f *fixture, b *Branch) error { return f.s.Rename(b, "a", "b", 0) },
			reads: map[string]string{"a": "ENOENT", "b": "a0"},
			lists: map[string]string{"": "b d/ empty/ keep other/"},
		},
		{
			name:  "dir from the base, with children",
			act:   func(f *fixture, b *Branch) error { return f.s.Rename(b, "d", "d2", 0) },
			reads: map[string]string{"d": "ENOENT", "d/x": "ENOENT", "d2/x": "x0", "d2/e/y": "y0", "d2/e/z": "z0"},
			lists: map[string]string{"": "a b d2/ empty/ keep other/", "d2": "e/ x", "d2/e": "y z", "d": "error: no such file or directory"},
		},
		{
			name:  "dir into another dir",
			act:   func(f *fixture, b *Branch) error { return f.s.Rename(b, "d/e", "other/e", 0) },
			reads: map[string]string{"d/e": "ENOENT", "other/e/y": "y0", "other/w": "w0"},
			lists: map[string]string{"d": "x", "other": "e/ w"},
		},
		{
			name:  "dir over an empty dir",
			act:   func(f *fixture, b *Branch) error { return f.s.Rename(b, "d", "empty", 0) },
			reads: map[string]string{"d": "ENOENT", "empty/x": "x0", "empty/e/z": "z0"},
			lists: map[string]string{"empty": "e/ x"},
		},
		{
			name:  "exchange a file and a dir",
			act:   func(f *fixture, b *Branch) error { return f.s.Rename(b, "a", "d", unix.RENAME_EXCHANGE) },
			reads: map[string]string{"d": "a0", "a/x": "x0", "a/e/y": "y0"},
			lists: map[string]string{"": "a/ b d empty/ keep other/", "a": "e/ x"},
		},
		{
			name:  "noreplace to a free name",
			act:   func(f *fixture, b *Branch) error { return f.s.Rename(b, "b", "b2", unix.RENAME_NOREPLACE) },
			reads: map[string]string{"b": "ENOENT", "b2": "b0"},
		},
		{
			name: "dir with a child changed in a lower layer",
			act: func(f *fixture, b *Branch) error {
				// b is the child of p, which wrote d/x and deleted d/e/z before the fork.
				return f.s.Rename(b, "d", "d2", 0)
			},
			reads: map[string]string{"d2/x": "p", "d2/e/z": "ENOENT", "d2/e/y": "y0", "d/x": "ENOENT"},
			lists: map[string]string{"d2/e": "y"},
		},
		{
			name: "back and forth",
			act: func(f *fixture, b *Branch) error {
				if err := f.s.Rename(b, "d", "d2", 0); err != nil {
					return err
				}
				return f.s.Rename(b, "d2", "d", 0)
			},
			reads: map[string]string{"d2": "ENOENT", "d/x": "p", "d/e/y": "y0", "d/e/z": "ENOENT"},
			lists: map[string]string{"d": "e/ x", "": "a b d/ empty/ keep other/"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, isoBase)
			f.fork(Main, "p")
			p := f.br("p")
			if tt.name == "dir with a child changed in a lower layer" || tt.name == "back and forth" {
				f.write(p, "d/x", "p")
				f.rm(p, "d/e/z")
			}
			f.fork("p", "c")
			c := f.br("c")
			if err := tt.act(f, c); err != nil {
				t.Fatal(err)
			}
			check := func(when string) {
				c := f.br("c")
				for path, want := range tt.reads {
					if got := f.read(c, path); got != want {
						t.Errorf("%s: %s = %q, want %q", when, path, got, want)
					}
				}
				for dir, want := range tt.lists {
					if got := f.ls(c, dir); got != want {
						t.Errorf("%s: ls %q = %q, want %q", when, dir, got, want)
					}
				}
			}
			check("live")
			f.reopen()
			check("after reopen")
			// The parent and the base saw none of it.
			if got := f.ls(f.br("p"), "d/e"); got != "y" && got != "y z" {
				t.Errorf("parent lists d/e = %q", got)
			}
			if got := f.baseRead("d/x"); got != "x0" {
				t.Errorf("base d/x = %q", got)
			}
			// A commit carries the rename into main.
			f.commit("c", false)
			f.commit("p", true)
			for path, want := range tt.reads {
				if got := f.read(f.br(Main), path); got != want {
					t.Errorf("main after commit: %s = %q, want %q", path, got, want)
				}
			}
			for dir, want := range tt.lists {
				if got := f.ls(f.br(Main), dir); got != want {
					t.Errorf("main after commit: ls %q = %q, want %q", dir, got, want)
				}
			}
		})
	}
}

// TestRmdir: rmdir sees the merged directory.
func TestRmdir(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "p")
	p := f.br("p")
	if err := f.s.Remove(p, "d/e", true); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a merged dir with base children = %v, want ENOTEMPTY", err)
	}
	f.mkdir(p, "new")
	f.write(p, "new/f", "f")
	f.fork("p", "c")
	c := f.br("c")
	if err := f.s.Remove(c, "new", true); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a dir whose child is in a lower layer = %v, want ENOTEMPTY", err)
	}
	if err := f.s.Remove(c, "a", true); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("rmdir of a file = %v, want ENOTDIR", err)
	}
	if err := f.s.Remove(c, "d", false); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("unlink of a dir = %v, want EISDIR", err)
	}
	if err := f.s.Remove(c, "nosuch", false); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unlink of nothing = %v, want ENOENT", err)
	}
	// Emptied by whiteouts: rmdir works.
	f.rm(c, "d/e/y")
	f.rm(c, "d/e/z")
	if got := f.ls(c, "d/e"); got != "" {
		t.Fatalf("ls of emptied dir = %q", got)
	}
	f.rm(c, "d/e")
	f.rm(c, "new/f")
	f.rm(c, "new")
	for _, path := range []string{"d/e", "d/e/y", "new", "new/f"} {
		if got := f.read(c, path); got != "ENOENT" {
			t.Errorf("%s after rmdir = %q", path, got)
		}
	}
	if got := f.ls(c, "d"); got != "x" {
		t.Errorf("ls d = %q, want x", got)
	}
	if got := f.read(p, "new/f"); got != "f" {
		t.Errorf("parent lost new/f: %q", got)
	}
}

// TestReadDirMerges: a listing merges every layer of the chain, hides
// whiteouts and the layers' own markers, and prefers the top entry.
func TestReadDirMerges(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "l1")
	l1 := f.br("l1")
	f.write(l1, "d/one", "1")
	f.rm(l1, "d/x")
	f.fork("l1", "l2")
	l2 := f.br("l2")
	f.write(l2, "d/two", "2")
	f.rm(l2, "d/one")
	f.mkdir(l2, "d/x") // a directory where a lower layer deleted a file
	f.fork("l2", "l3")
	l3 := f.br("l3")
	f.write(l3, "d/three", "3")
	f.write(l3, "d/e/y", "y3")
	want := map[string]string{
		"d":   "e/ three two x/",
		"d/e": "y z",
		"":    "a b d/ empty/ keep other/",
	}
	check := func(when string) {
		for dir, w := range want {
			if got := f.ls(f.br("l3"), dir); got != w {
				t.Errorf("%s: ls %q = %q, want %q", when, dir, got, w)
			}
		}
		if got := f.ls(f.br("l1"), "d"); got != "e/ one" {
			t.Errorf("%s: l1 ls d = %q", when, got)
		}
		if got := f.read(f.br("l3"), "d/e/y"); got != "y3" {
			t.Errorf("%s: l3 d/e/y = %q", when, got)
		}
	}
	check("live")
	f.reopen()
	check("after reopen")
	// Inode numbers are stable across copy-up: d/e/y keeps the base's.
	var st unix.Stat_t
	if err := unix.Lstat(f.base+"/d/e/y", &st); err != nil {
		t.Fatal(err)
	}
	ents, err := f.s.ReadDir(f.br("l3"), "d/e")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name == "y" && e.Ino != st.Ino {
			t.Errorf("copied-up d/e/y lists ino %d, want the base's %d", e.Ino, st.Ino)
		}
	}
	if r, _ := f.s.Resolve(f.br("l3"), "d/e/y"); r.Ino != st.Ino {
		t.Errorf("copied-up d/e/y resolves with ino %d, want %d", r.Ino, st.Ino)
	}
}

// TestOpaqueDir: a directory deleted and made again hides the old children,
// in the same layer, across forks, after a reopen and after a commit.
func TestOpaqueDir(t *testing.T) {
	for _, forkBetween := range []bool{false, true} {
		name := "same head"
		if forkBetween {
			name = "fork between"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, isoBase)
			f.fork(Main, "p")
			p := f.br("p")
			for _, c := range []string{"d/e/y", "d/e/z", "d/x"} {
				f.rm(p, c)
			}
			f.rm(p, "d/e")
			f.rm(p, "d")
			b := p
			if forkBetween {
				f.fork("p", "q")
				b = f.br("q")
			}
			f.mkdir(b, "d")
			f.write(b, "d/new", "n")
			// Fork again and copy the dir up in the new head without a marker.
			f.fork(b.Name, "leaf")
			leaf := f.br("leaf")
			f.write(leaf, "d/leaf", "l")
			check := func(when string) {
				for _, br := range []string{b.Name, "leaf"} {
					bb := f.br(br)
					for _, old := range []string{"d/x", "d/e", "d/e/y"} {
						if got := f.read(bb, old); got != "ENOENT" {
							t.Errorf("%s: %s reads old %s = %q", when, br, old, got)
						}
					}
				}
				if got := f.ls(f.br("leaf"), "d"); got != "leaf new" {
					t.Errorf("%s: leaf ls d = %q, want %q", when, got, "leaf new")
				}
				if got := f.ls(f.br(b.Name), "d"); got != "new" {
					t.Errorf("%s: %s ls d = %q, want %q", when, b.Name, got, "new")
				}
			}
			check("live")
			f.reopen()
			check("after reopen")
			f.commit("leaf", false)
			if forkBetween {
				f.commit("q", false)
			}
			f.commit("p", true)
			if got := f.ls(f.br(Main), "d"); got != "leaf new" {
				t.Errorf("main after commit: ls d = %q, want %q", got, "leaf new")
			}
			if _, err := os.Lstat(f.base + "/d/x"); !os.IsNotExist(err) {
				t.Errorf("base still has d/x after the commit: %v", err)
			}
		})
	}
}
