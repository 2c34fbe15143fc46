package cowfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCommitWithChildrenRefused is issue 16's "a commit silently drops a
// branch": two CREATE ioctls on the root's control file (the second branch
// is a child of the first), a file written in each, then COMMIT of the
// first. Commit is leaf-only: the commit is refused with EBUSY naming
// nothing lost, both branches and both files stay, and the mount keeps
// answering. Committing the child first, then the parent, lands both files.
func TestCommitWithChildrenRefused(t *testing.T) {
	f, base, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "seed"), []byte("seed"), 0o644) })
	ctl := filepath.Join(mnt, ctlName)
	create := func() string {
		t.Helper()
		buf := make([]byte, 128)
		if err := ioctl(t, ctl, ioctlCreate, buf); err != nil {
			t.Fatal(err)
		}
		return string(bytes.TrimRight(buf, "\x00"))
	}
	a := create()
	if err := os.WriteFile(filepath.Join(mnt, "in-a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := create()
	if err := os.WriteFile(filepath.Join(mnt, "in-b"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if br, err := f.Store().Branch(b); err != nil || br.Parent != a {
		t.Fatalf("second CREATE: branch %s, %v; want a child of %s", b, err, a)
	}
	err := ioctl(t, filepath.Join(mnt, "@"+a, ctlName), ioctlCommit, nil)
	if !errors.Is(err, unix.EBUSY) {
		t.Fatalf("COMMIT of %s, which has the child %s: %v, want EBUSY", a, b, err)
	}
	if _, err := f.Commit(a, true); err == nil {
		t.Fatalf("Commit(%s) with a child succeeded", a)
	}
	for _, n := range []string{a, b} {
		if _, err := f.Store().Branch(n); err != nil {
			t.Fatalf("after the refused commit: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "in-a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused commit reached the base: %v", err)
	}
	// The mount still answers everywhere, at once.
	for _, p := range []string{"in-a", "in-b", "seed", ctlName, "@main/seed", "@" + a + "/in-a"} {
		if _, err := os.Stat(filepath.Join(mnt, p)); err != nil {
			t.Fatalf("after the refused commit: %v", err)
		}
	}
	// Leaf first: b into a (through the root's control file, which acts on b), then a into main.
	if err := ioctl(t, ctl, ioctlCommit, nil); err != nil {
		t.Fatalf("COMMIT %s: %v", b, err)
	}
	if f.Current() != a {
		t.Fatalf("after committing %s the mount shows %s, want %s", b, f.Current(), a)
	}
	if err := ioctl(t, ctl, ioctlCommit, nil); err != nil {
		t.Fatalf("COMMIT %s: %v", a, err)
	}
	if f.Current() != "main" {
		t.Fatalf("after committing %s the mount shows %s, want main", a, f.Current())
	}
	for _, n := range []string{"in-a", "in-b"} {
		if d, err := os.ReadFile(filepath.Join(base, n)); err != nil || string(d) != n[3:] {
			t.Fatalf("base %s: %q, %v", n, d, err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := os.Stat(filepath.Join(mnt, "in-b"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount's root after the commits: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var names []string
	for _, bi := range f.Store().Branches() {
		names = append(names, bi.Name)
	}
	if !slices.Equal(names, []string{"main"}) {
		t.Fatalf("branches left: %v", names)
	}
}

// TestStaleRootStaysReachable: when the branch the mount's root shows goes
// stale (a sibling committed first), its files still read (the work can be
// rescued) and every change is ESTALE, and the mount is not stuck: the root, its control file and the @name views still
// answer, so the control file can abort the branch (or switch away), after
// which the root shows the parent, live.
func TestStaleRootStaysReachable(t *testing.T) {
	f, _, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "seed"), []byte("seed"), 0o644) })
	for _, n := range []string{"x", "y"} {
		if err := f.Create(n, "main", 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Switch("x"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "in-x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "@y", "in-y"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ioctl(t, filepath.Join(mnt, "@y", ctlName), ioctlCommit, nil); err != nil {
		t.Fatal(err)
	}
	if d, err := os.ReadFile(filepath.Join(mnt, "in-x")); err != nil || string(d) != "x" {
		t.Fatalf("a file of the stale branch: %q, %v; want its content", d, err)
	}
	for _, p := range []string{"in-x", "new"} {
		if err := os.WriteFile(filepath.Join(mnt, p), []byte("late"), 0o644); !errors.Is(err, unix.ESTALE) {
			t.Fatalf("a write of %s in the stale branch: %v, want ESTALE", p, err)
		}
	}
	if err := os.Remove(filepath.Join(mnt, "in-x")); !errors.Is(err, unix.ESTALE) {
		t.Fatalf("a remove in the stale branch: %v, want ESTALE", err)
	}
	for _, p := range []string{"", ctlName, "@main", "@main/in-y", "@x/in-x", "in-x", "seed"} {
		if _, err := os.Stat(filepath.Join(mnt, p)); err != nil {
			t.Fatalf("stat /%s with a stale root: %v", p, err)
		}
	}
	if ents, err := os.ReadDir(mnt); err != nil || len(ents) == 0 {
		t.Fatalf("listing a stale root: %v, %v", ents, err)
	}
	if d, err := os.ReadFile(filepath.Join(mnt, ctlName)); err != nil || string(d) != "branch:x\n" {
		t.Fatalf("control file with a stale root: %q, %v", d, err)
	}
	if err := ioctl(t, filepath.Join(mnt, ctlName), ioctlAbort, nil); err != nil {
		t.Fatalf("ABORT of the stale branch through the root's control file: %v", err)
	}
	if f.Current() != "main" {
		t.Fatalf("after the abort the mount shows %s, want main", f.Current())
	}
	if d, err := os.ReadFile(filepath.Join(mnt, "in-y")); err != nil || string(d) != "y" {
		t.Fatalf("the root after the abort: %q, %v", d, err)
	}
}
