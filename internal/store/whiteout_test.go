package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWhiteoutOfLongName: a lower name of NAME_MAX bytes can be deleted,
// renamed and made again in a branch (a whiteout takes no more of a name
// than the name), and the deletes hold after the store is opened again.
func TestWhiteoutOfLongName(t *testing.T) {
	n := strings.Repeat("n", 255)
	d := strings.Repeat("d", 255)
	f := newFixture(t, map[string]string{n: "base", d + "/" + n: "inner", "keep": "k"})
	f.fork("main", "b")
	b := f.br("b")
	f.rm(b, n)
	f.rm(b, d+"/"+n)
	f.rm(b, d)
	if got := f.ls(b, ""); got != "keep" {
		t.Fatalf("after deleting the long names: %q", got)
	}
	f.reopen()
	b = f.br("b")
	if got := f.ls(b, ""); got != "keep" {
		t.Fatalf("after a reopen: %q, want the long names still deleted", got)
	}
	if got := f.read(b, n); got != "ENOENT" {
		t.Fatalf("the deleted long name: %s", got)
	}
	f.write(b, n, "new")
	f.mkdir(b, d)
	if got := f.ls(b, d); got != "" {
		t.Fatalf("the directory made over a deleted one shows %q", got)
	}
	f.rename(b, n, "short")
	f.rename(b, "short", n)
	f.reopen()
	b = f.br("b")
	if got, ls := f.read(b, n), f.ls(b, ""); got != "new" || ls != d+"/ keep "+n {
		t.Fatalf("after re-making them and a reopen: %q, listing %q", got, ls)
	}
	if got := f.read(f.br("main"), n); got != "base" {
		t.Fatalf("main: %q", got)
	}
}

// TestOlderWhiteoutsRead: a layer written with the older whiteout form (an
// empty ".wh.NAME" file beside the name) still hides the name after Open,
// and a name made over one removes it.
func TestOlderWhiteoutsRead(t *testing.T) {
	f := newFixture(t, map[string]string{"x": "base", "y": "base"})
	f.fork("main", "b")
	b := f.br("b")
	f.rm(b, "x")
	f.rm(b, "y")
	head := b.head().dir
	for _, name := range []string{"x", "y"} {
		var st unix.Stat_t
		if err := unix.Lstat(head+"/"+name, &st); err != nil || !isWhiteout(&st) {
			t.Fatalf("the whiteout of %s: %v, mode %o rdev %d", name, err, st.Mode, st.Rdev)
		}
		os.Remove(head + "/" + name)
		if err := os.WriteFile(head+"/.wh."+name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.reopen()
	b = f.br("b")
	if got := f.ls(b, ""); got != "" {
		t.Fatalf("older whiteouts: the branch lists %q", got)
	}
	f.write(b, "x", "new")
	if _, err := os.Stat(head + "/.wh.x"); !os.IsNotExist(err) {
		t.Fatalf("the older whiteout of a name made again: %v", err)
	}
	f.reopen()
	if got := f.ls(f.br("b"), ""); got != "x" {
		t.Fatalf("after a reopen: %q", got)
	}
}

// TestIndexBeyondPathMax: a layer holding a path longer than PATH_MAX is
// indexed at Open (walked by descriptors).
func TestIndexBeyondPathMax(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a"})
	f.fork("main", "b")
	b := f.br("b")
	rel := ""
	for len(rel) < 5000 {
		rel = joinRel(rel, strings.Repeat("p", 200))
		if err := mkdirErr(f.s, b, rel); err != nil {
			t.Fatalf("mkdir at %d bytes: %v", len(rel), err)
		}
	}
	if err := f.s.Create(b, rel+"/f", false, func(dir int, name string) error {
		fd, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}); err != nil {
		t.Fatalf("create at %d bytes: %v", len(rel)+2, err)
	}
	f.rm(b, "a")
	f.reopen()
	b = f.br("b")
	if _, err := f.s.Resolve(b, rel+"/f"); err != nil {
		t.Fatalf("after a reopen, the file %d bytes down: %v", len(rel), err)
	}
	if got := f.read(b, "a"); got != "ENOENT" {
		t.Fatalf("a: %s", got)
	}
}

// TestAttackWhiteoutDevice: the kernel lets anyone make a character device
// 0:0 (a whiteout's form in a layer), so a base may hold one. Renamed,
// linked, chmodded or made (Store.Create) in a branch, it must not become
// a whiteout that hides, or a commit deletes, a file of the base other than
// the one it replaces.
func TestAttackWhiteoutDevice(t *testing.T) {
	f := newFixture(t, map[string]string{"victim": "v", "d/victim": "v"})
	for _, p := range []string{"w", "w2", "w3"} {
		if err := unix.Mknod(filepath.Join(f.base, p), unix.S_IFCHR|0o666, 0); err != nil {
			t.Fatal(err)
		}
	}
	f.fork(Main, "b")
	b := f.br("b")
	t.Logf("w in the branch: %q", f.read(b, "w"))
	steps := []struct {
		name string
		do   func() error
	}{
		{"rename w over victim", func() error { return f.s.Rename(b, "w", "victim", 0) }},
		{"link w2 as d/victim2", func() error { return f.s.Link(b, "w2", "d/victim2") }},
		{"chmod w3", func() error {
			real, err := f.s.CopyUpMeta(b, "w3")
			if err != nil {
				return err
			}
			return f.s.Chmod(real, 0o600)
		}},
		{"create a 0:0 device", func() error {
			return f.s.Create(b, "d/new", false, func(dir int, name string) error { return unix.Mknodat(dir, name, unix.S_IFCHR|0o600, 0) })
		}},
	}
	for _, st := range steps {
		err := st.do()
		t.Logf("%s: %v", st.name, err)
		b = f.br("b")
	}
	f.reopen()
	b = f.br("b")
	if got := f.read(b, "d/victim"); got != "v" {
		t.Errorf("d/victim in the branch: %q, want v", got)
	}
	f.commit("b", true)
	if got := f.baseRead("d/victim"); got != "v" {
		t.Errorf("d/victim in the base after the commit: %q", got)
	}
	// The devices themselves do not survive a copy-up (each becomes a
	// whiteout of its own name, so the commit deletes w2 and w3 from the
	// base): a fidelity gap, not a way to hide another file.
}
