package workspace_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// BranchFS's ioctl numbers (cowfs serves them).
const (
	ioctlCreate = 0x80806200 // _IOR('b', 0, char[128]): fills the new branch's name
	ioctlCommit = 0x6201
	ioctlAbort  = 0x6202
)

// ctlIoctl issues a BranchFS ioctl on path's control file and returns the
// name a CREATE filled in.
func ctlIoctl(t *testing.T, dir string, cmd uintptr) (string, error) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, ".branchfs_ctl"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	var buf [128]byte
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), cmd, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return "", e
	}
	return strings.TrimRight(string(buf[:]), "\x00"), nil
}

// TestBranchFSControlRules: BranchFS's library forks N attempts from the
// root with N CREATE ioctls and expects N siblings, the mount left where
// it was; a losing attempt's control file still opens and its COMMIT
// fails with ESTALE (what the library turns into its conflict error),
// ABORT works; the root of a mount whose branch is valid never answers
// ESTALE because a branch elsewhere committed; ws_list shows the stale
// branches.
func TestBranchFSControlRules(t *testing.T) {
	testenv.NeedFUSE(t)
	s := newStack(t)
	base, mp := t.TempDir(), filepath.Join(t.TempDir(), "m")
	os.WriteFile(filepath.Join(base, "f"), []byte("base"), 0o644)
	do(t, s, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	var names []string
	for range 3 {
		name, err := ctlIoctl(t, mp, ioctlCreate)
		if err != nil {
			t.Fatalf("CREATE on the root's control file: %v", err)
		}
		names = append(names, name)
	}
	l := do(t, s, api.Request{Op: api.OpWsList, Mountpoint: mp})
	if l.Branch != "main" {
		t.Errorf("after three CREATE ioctls the mount shows %s, want main (the ioctls never switch)", l.Branch)
	}
	for _, b := range l.Branches {
		if b.Name != "main" && b.Parent != "main" {
			t.Errorf("branch %s has parent %s: three CREATEs on the root must make siblings", b.Name, b.Parent)
		}
	}
	for i, n := range names {
		if err := os.WriteFile(filepath.Join(mp, "@"+n, "f"), []byte(n), 0o644); err != nil {
			t.Fatalf("write in attempt %d (%s): %v", i, n, err)
		}
	}
	if _, err := ctlIoctl(t, filepath.Join(mp, "@"+names[0]), ioctlCommit); err != nil {
		t.Fatalf("COMMIT of the first attempt: %v", err)
	}
	if l := do(t, s, api.Request{Op: api.OpWsList, Mountpoint: mp}); l.Branch != "main" {
		t.Errorf("after an ioctl COMMIT elsewhere the mount shows %s, want main", l.Branch)
	}
	// The root shows main, still valid: it answers.
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != names[0] {
		t.Errorf("the root after a sibling's commit: %q, %v; want the committed content", b, err)
	}
	if _, err := os.ReadDir(mp); err != nil {
		t.Errorf("listing the root after a commit: %v", err)
	}
	// The losers: their control files open, COMMIT is ESTALE, ABORT works.
	if _, err := ctlIoctl(t, filepath.Join(mp, "@"+names[1]), ioctlCommit); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("COMMIT of a stale attempt: %v, want ESTALE", err)
	}
	l = do(t, s, api.Request{Op: api.OpWsList, Mountpoint: mp})
	stale := 0
	for _, b := range l.Branches {
		if b.State == api.StateStale {
			stale++
		}
	}
	if stale != 2 {
		t.Errorf("ws_list shows %d stale branches, want the two losers: %+v", stale, l.Branches)
	}
	if _, err := ctlIoctl(t, filepath.Join(mp, "@"+names[2]), ioctlAbort); err != nil {
		t.Errorf("ABORT of a stale attempt: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mp, "@"+names[1], ".branchfs_ctl"), []byte("abort"), 0); err != nil {
		t.Errorf("abort written to a stale attempt's control file: %v", err)
	}
	if l := do(t, s, api.Request{Op: api.OpWsList, Mountpoint: mp}); len(l.Branches) != 1 {
		t.Errorf("after aborting the losers: %+v, want main alone", l.Branches)
	}
}

// TestMountHideControl: ws_mount with hide_control (arbor mount
// --hide-control) serves no control file, not even by name, and a daemon
// that mounts the view again after a restart keeps it hidden; a mount
// without it answers .branchfs_ctl by name but never lists it.
func TestMountHideControl(t *testing.T) {
	testenv.NeedFUSE(t)
	home := t.TempDir()
	s := openStack(t, home)
	base, hidden := t.TempDir(), filepath.Join(t.TempDir(), "m")
	do(t, s, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: hidden, HideControl: true})
	do(t, s, api.Request{Op: api.OpWsCreate, Mountpoint: hidden, Branch: "b"})
	check := func(when string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(hidden, "@b")); err != nil {
			t.Fatalf("%s: the view is not mounted: %v", when, err)
		}
		for _, dir := range []string{hidden, filepath.Join(hidden, "@b")} {
			if _, err := os.Stat(filepath.Join(dir, ".branchfs_ctl")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: the control file of %s with hide_control: %v, want ENOENT", when, dir, err)
			}
		}
	}
	check("mounted")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStack(t, home)
	defer func() {
		do(t, s, api.Request{Op: api.OpWsUnmount, Mountpoint: hidden})
		s.Close()
	}()
	check("after a restart")

	plain := filepath.Join(t.TempDir(), "m")
	do(t, s, api.Request{Op: api.OpWsMount, Base: t.TempDir(), Mountpoint: plain})
	defer do(t, s, api.Request{Op: api.OpWsUnmount, Mountpoint: plain})
	if _, err := os.Stat(filepath.Join(plain, ".branchfs_ctl")); err != nil {
		t.Errorf("the control file of a plain mount: %v", err)
	}
	ents, err := os.ReadDir(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == ".branchfs_ctl" {
			t.Errorf("the plain mount lists its control file")
		}
	}
}

// TestStaleWorkRescued: the loser of a first-commit-wins race keeps its
// work until it is aborted: its files read and list through /@NAME
// (writes are ESTALE), ws_diff and tree_diff list its changes with their
// text diffs, its commit is ErrStale, and its abort works.
func TestStaleWorkRescued(t *testing.T) {
	testenv.NeedFUSE(t)
	s := newStack(t)
	base, mp := t.TempDir(), filepath.Join(t.TempDir(), "m")
	os.WriteFile(filepath.Join(base, "f"), []byte("base\n"), 0o644)
	do(t, s, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	defer do(t, s, api.Request{Op: api.OpWsUnmount, Mountpoint: mp})
	for _, n := range []string{"win", "lose"} {
		do(t, s, api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: n, NoSwitch: true})
	}
	lose := filepath.Join(mp, "@lose")
	os.WriteFile(filepath.Join(mp, "@win", "f"), []byte("win\n"), 0o644)
	if err := os.WriteFile(filepath.Join(lose, "f"), []byte("lose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lose, "work"), []byte("partial\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	do(t, s, api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: "win"})
	for p, want := range map[string]string{"f": "lose\n", "work": "partial\n"} {
		if d, err := os.ReadFile(filepath.Join(lose, p)); err != nil || string(d) != want {
			t.Errorf("the stale branch's %s: %q, %v; want %q", p, d, err, want)
		}
	}
	if ents, err := os.ReadDir(lose); err != nil || len(ents) != 2 {
		t.Errorf("listing the stale branch: %v, %v", ents, err)
	}
	if err := os.WriteFile(filepath.Join(lose, "work"), []byte("more"), 0o644); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("a write to the stale branch: %v, want ESTALE", err)
	}
	d := do(t, s, api.Request{Op: api.OpWsDiff, Mountpoint: mp, Branch: "lose"})
	got := map[string]string{}
	for _, c := range d.Changes {
		got[c.Path] = c.Kind
	}
	if got["f"] != "modified" || got["work"] != "added" || len(got) != 2 {
		t.Errorf("ws_diff of the stale branch: %+v", d.Changes)
	}
	td := do(t, s, api.Request{Op: api.OpTreeDiff, TreeID: d.TreeID, NodeID: d.NodeID})
	for _, c := range td.Changes {
		if c.Path == "work" && !strings.Contains(c.Diff, "+partial") {
			t.Errorf("tree_diff of the stale node: %s's diff %q", c.Path, c.Diff)
		}
	}
	if len(td.Changes) != 2 {
		t.Errorf("tree_diff of the stale node: %+v", td.Changes)
	}
	_, err := s.Do(access.WithCred(context.Background(), access.Self()), api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: "lose"})
	if !errors.Is(err, api.ErrStale) {
		t.Errorf("commit of the stale branch: %v, want ErrStale", err)
	}
	do(t, s, api.Request{Op: api.OpWsAbort, Mountpoint: mp, Branch: "lose"})
	// The kernel forgets the view by an invalidation, sent at once but
	// asynchronously.
	var err2 error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err2 = os.Stat(filepath.Join(lose, "work")); errors.Is(err2, os.ErrNotExist) {
			break
		}
	}
	if !errors.Is(err2, os.ErrNotExist) {
		t.Errorf("the aborted branch's view: %v", err2)
	}
}

// TestMetadataOnlyChange: a chmod in a branch is a metadata-only change:
// ws_diff and tree_diff say so, and its commit into main changes the base
// file's mode in place (the same inode: its data is not rewritten).
func TestMetadataOnlyChange(t *testing.T) {
	testenv.NeedFUSE(t)
	s := newStack(t)
	base, mp := t.TempDir(), filepath.Join(t.TempDir(), "m")
	os.WriteFile(filepath.Join(base, "f"), []byte("data\n"), 0o644)
	var before unix.Stat_t
	unix.Stat(filepath.Join(base, "f"), &before)
	do(t, s, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	defer do(t, s, api.Request{Op: api.OpWsUnmount, Mountpoint: mp})
	do(t, s, api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: "b"})
	if err := os.Chmod(filepath.Join(mp, "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := do(t, s, api.Request{Op: api.OpWsDiff, Mountpoint: mp})
	if len(d.Changes) != 1 || !d.Changes[0].Meta || d.Changes[0].Kind != "modified" {
		t.Fatalf("ws_diff after a chmod: %+v, want f modified, metadata only", d.Changes)
	}
	td := do(t, s, api.Request{Op: api.OpTreeDiff, TreeID: d.TreeID, NodeID: d.NodeID})
	if len(td.Changes) != 1 || !td.Changes[0].Meta || td.Changes[0].Diff != "" {
		t.Fatalf("tree_diff after a chmod: %+v", td.Changes)
	}
	do(t, s, api.Request{Op: api.OpWsCommit, Mountpoint: mp})
	var after unix.Stat_t
	if err := unix.Stat(filepath.Join(base, "f"), &after); err != nil {
		t.Fatal(err)
	}
	if after.Ino != before.Ino || after.Mode&07777 != 0o600 {
		t.Fatalf("the base's f after the commit: ino %d (was %d), mode %#o", after.Ino, before.Ino, after.Mode&07777)
	}
}

// TestRebaseStaleBranch: tree_rebase of the loser of a commit race makes a
// new child of the parent's state now with the loser's changes: text both
// changed merged line by line, a clash marked and listed, a binary change
// kept both ways; the new node's commit is refused until they are
// resolved, then lands.
func TestRebaseStaleBranch(t *testing.T) {
	testenv.NeedFUSE(t)
	s := newStack(t)
	base, mp := t.TempDir(), filepath.Join(t.TempDir(), "m")
	text := "1\n2\n3\n4\n5\n6\n7\n8\n"
	for n, d := range map[string]string{"merge": text, "clash": text, "bin": "\x00base"} {
		os.WriteFile(filepath.Join(base, n), []byte(d), 0o644)
	}
	do(t, s, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	defer do(t, s, api.Request{Op: api.OpWsUnmount, Mountpoint: mp})
	for _, n := range []string{"win", "lose"} {
		do(t, s, api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: n, NoSwitch: true})
	}
	write := func(branch, name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(mp, "@"+branch, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("win", "merge", strings.Replace(text, "8\n", "8 win\n", 1))
	write("win", "clash", strings.Replace(text, "4\n", "4 win\n", 1))
	write("win", "bin", "\x00win")
	write("lose", "merge", strings.Replace(text, "1\n", "1 lose\n", 1))
	write("lose", "clash", strings.Replace(text, "4\n", "4 lose\n", 1))
	write("lose", "bin", "\x00lose")
	write("lose", "new", "new\n")
	do(t, s, api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: "win"})
	d := do(t, s, api.Request{Op: api.OpWsDiff, Mountpoint: mp, Branch: "lose"})
	r := do(t, s, api.Request{Op: api.OpTreeRebase, TreeID: d.TreeID, NodeID: d.NodeID, Label: "again"})
	if r.Status != "tree_rebased" || r.NodeID == "" || r.NodeID == d.NodeID {
		t.Fatalf("tree_rebase: %+v", r)
	}
	kinds := map[string]string{}
	for _, c := range r.Conflicts {
		kinds[c.Path] = c.Kind
	}
	if len(r.Conflicts) != 2 || kinds["clash"] != "text" || kinds["bin"] != "both" {
		t.Fatalf("conflicts: %+v", r.Conflicts)
	}
	view := filepath.Join(mp, "@again")
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(view, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("merge"); got != strings.Replace(strings.Replace(text, "1\n", "1 lose\n", 1), "8\n", "8 win\n", 1) {
		t.Errorf("merge: %q", got)
	}
	if got := read("clash"); !strings.Contains(got, "<<<<<<< ") || !strings.Contains(got, "4 lose\n=======\n4 win\n") {
		t.Errorf("clash: %q", got)
	}
	if read("bin") != "\x00lose" || read("bin~theirs") != "\x00win" || read("new") != "new\n" {
		t.Errorf("bin %q, bin~theirs %q, new %q", read("bin"), read("bin~theirs"), read("new"))
	}
	self := access.WithCred(context.Background(), access.Self())
	if _, err := s.Do(self, api.Request{Op: api.OpTreeCommit, TreeID: d.TreeID, NodeID: r.NodeID}); !errors.Is(err, api.ErrState) {
		t.Fatalf("commit with conflicts: %v, want ErrState", err)
	}
	if err := os.WriteFile(filepath.Join(view, "clash"), []byte(strings.Replace(text, "4\n", "4 both\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(view, "bin~theirs")); err != nil {
		t.Fatal(err)
	}
	do(t, s, api.Request{Op: api.OpTreeCommit, TreeID: d.TreeID, NodeID: r.NodeID})
	for n, want := range map[string]string{"clash": strings.Replace(text, "4\n", "4 both\n", 1), "bin": "\x00lose", "new": "new\n"} {
		if b, _ := os.ReadFile(filepath.Join(base, n)); string(b) != want {
			t.Errorf("the base's %s after the commit: %q, want %q", n, b, want)
		}
	}
}

// TestRebaseTypeChange: over a real mount, the winner turned a directory
// the loser wrote beneath into a symlink out of the tree, and took the
// name bin~theirs: the rebase records both as conflicts (the symlink moved
// to d~theirs, never followed; the winner's bin at bin~theirs.1) and writes
// nothing outside the tree.
func TestRebaseTypeChange(t *testing.T) {
	testenv.NeedFUSE(t)
	s := newStack(t)
	base, mp, outside := t.TempDir(), filepath.Join(t.TempDir(), "m"), t.TempDir()
	os.Mkdir(filepath.Join(base, "d"), 0o755)
	for n, d := range map[string]string{"d/keep": "k", "bin": "\x00base"} {
		os.WriteFile(filepath.Join(base, n), []byte(d), 0o644)
	}
	do(t, s, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	defer do(t, s, api.Request{Op: api.OpWsUnmount, Mountpoint: mp})
	for _, n := range []string{"win", "lose"} {
		do(t, s, api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: n, NoSwitch: true})
	}
	win, lose := filepath.Join(mp, "@win"), filepath.Join(mp, "@lose")
	for _, err := range []error{
		os.RemoveAll(filepath.Join(win, "d")),
		os.Symlink(outside, filepath.Join(win, "d")),
		os.WriteFile(filepath.Join(win, "bin"), []byte("\x00win"), 0o644),
		os.WriteFile(filepath.Join(win, "bin~theirs"), []byte("win's own"), 0o644),
		os.WriteFile(filepath.Join(lose, "d/keep"), []byte("lose"), 0o644),
		os.WriteFile(filepath.Join(lose, "d/new"), []byte("lose"), 0o644),
		os.WriteFile(filepath.Join(lose, "bin"), []byte("\x00lose"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	do(t, s, api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: "win"})
	d := do(t, s, api.Request{Op: api.OpWsDiff, Mountpoint: mp, Branch: "lose"})
	r := do(t, s, api.Request{Op: api.OpTreeRebase, TreeID: d.TreeID, NodeID: d.NodeID, Label: "again"})
	aside := map[string]string{}
	for _, c := range r.Conflicts {
		aside[c.Path] = c.Aside
	}
	if len(r.Conflicts) != 2 || aside["d"] != "d~theirs" || aside["bin"] != "bin~theirs.1" {
		t.Fatalf("conflicts: %+v", r.Conflicts)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the rebase wrote outside the tree: %v", ents)
	}
	view := filepath.Join(mp, "@again")
	for n, want := range map[string]string{"d/keep": "lose", "d/new": "lose", "bin": "\x00lose", "bin~theirs": "win's own", "bin~theirs.1": "\x00win"} {
		if b, err := os.ReadFile(filepath.Join(view, n)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v, want %q", n, b, err, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(view, "d~theirs")); err != nil || target != outside {
		t.Errorf("d~theirs: %q, %v, want the winner's symlink", target, err)
	}
}
