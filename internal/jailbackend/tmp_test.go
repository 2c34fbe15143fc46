package jailbackend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// fork forks source into children, each child's files a fresh directory.
func (f *fixture) fork(source string, children ...string) {
	f.t.Helper()
	err := f.b.Fork(f.ctx, source, children, func(context.Context) ([]string, error) {
		var out []string
		for _, c := range children {
			out = append(out, f.files(c, "", ""))
		}
		return out, nil
	})
	if err != nil {
		f.t.Fatalf("fork %s: %v", source, err)
	}
}

func (f *fixture) tmpPath(node string) string {
	f.t.Helper()
	p, err := f.b.(*backend).TmpPath(node)
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// TestTmpIsNodeState: children see their source's /tmp as of the fork; what
// the source writes later, and what each child writes, no other node sees;
// a suspended node's /tmp is kept and refuses changes; a reopen keeps every
// /tmp; a commit makes the child's /tmp the parent's (the parent's own
// writes since the fork go), twice without harm, and writes nothing into
// the base directory; a sibling made stale and the committed child stop.
func TestTmpIsNodeState(t *testing.T) {
	f := newFixture(t)
	p1 := f.files("n1", "", "")
	if err := f.b.Start(f.ctx, "n1", p1); err != nil {
		t.Fatal(err)
	}
	f.sh("n1", "echo src > /tmp/a; mkdir /tmp/d; echo deep > /tmp/d/x; ln -s a /tmp/link")
	f.fork("n1", "n2", "n3")
	if got := f.sh("n2", "cat /tmp/a /tmp/d/x /tmp/link; stat -c %a /tmp"); got != "src\ndeep\nsrc\n1777\n" {
		t.Fatalf("the child's /tmp as of the fork: %q", got)
	}
	f.sh("n1", "echo src2 > /tmp/a; echo late > /tmp/late")
	f.sh("n2", "echo child > /tmp/b; rm /tmp/d/x")
	if got := f.sh("n2", "cat /tmp/a; ls /tmp"); got != "src\na\nb\nd\nlink\n" {
		t.Fatalf("n2 after its source wrote: %q", got)
	}
	if got := f.sh("n1", "cat /tmp/a /tmp/d/x; ls /tmp"); got != "src2\ndeep\na\nd\nlate\nlink\n" {
		t.Fatalf("n1 after its child wrote: %q", got)
	}
	if got := f.sh("n3", "cat /tmp/a /tmp/d/x; ls /tmp"); got != "src\ndeep\na\nd\nlink\n" {
		t.Fatalf("n3 after its source and sibling wrote: %q", got)
	}

	// Suspended: kept, and unwritable from the host too.
	if err := f.b.Suspend(f.ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.tmpPath("n2"), "host"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("a write into a suspended node's /tmp: %v, want EROFS", err)
	}
	if err := f.b.Resume(f.ctx, "n2", f.files("n2", "", "")); err != nil {
		t.Fatal(err)
	}
	if got := f.sh("n2", "cat /tmp/b"); got != "child\n" {
		t.Fatalf("n2's /tmp after suspend and resume: %q", got)
	}

	// A daemon restart: everything held suspended, every /tmp kept.
	f.reopen()
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := f.b.Resume(f.ctx, n, f.files(n, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.sh("n2", "cat /tmp/a /tmp/b"); got != "src\nchild\n" {
		t.Fatalf("n2's /tmp after a reopen: %q", got)
	}
	if got := f.sh("n1", "cat /tmp/a /tmp/late"); got != "src2\nlate\n" {
		t.Fatalf("n1's /tmp after a reopen: %q", got)
	}

	// Commit n2 into n1, as the engine does: n2 suspended, n1 running.
	if err := f.b.Suspend(f.ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := f.b.Commit(f.ctx, "n2", "n1"); err != nil {
			t.Fatalf("commit #%d: %v", i+1, err)
		}
	}
	if got := f.sh("n1", "cat /tmp/a /tmp/b; ls /tmp /tmp/d"); got != "src\nchild\n/tmp:\na\nb\nd\nlink\n\n/tmp/d:\n" {
		t.Fatalf("n1's /tmp after the commit: %q, want n2's", got)
	}
	for _, n := range []string{"n2", "n3"} {
		if err := f.b.Stop(f.ctx, n); err != nil {
			t.Fatalf("stop %s: %v", n, err)
		}
	}
	f.wantHeld("n1:live")
	if got := f.sh("n1", "cat /tmp/b"); got != "child\n" {
		t.Fatalf("n1's /tmp after its children stopped: %q", got)
	}
	// The tree's base holds only the nodes' (empty) files directories of
	// this fixture; the /tmp layer's own base nothing.
	for _, d := range []string{f.cfg.Base, filepath.Join(f.cfg.Dir, tmpBaseDir)} {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				err = fmt.Errorf("%s: a /tmp was written into a base", p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestTmpCommitAfterCrash: the engine calls Commit again at the next open
// when a crash came between the files' commit and the metadata: before the
// first Commit (it carries the /tmp then) and after it (nothing to do).
func TestTmpCommitAfterCrash(t *testing.T) {
	f := newFixture(t)
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	f.fork("n1", "n2")
	f.sh("n2", "echo won > /tmp/w")
	if err := f.b.Suspend(f.ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	f.reopen() // the crash came before Backend.Commit
	if err := f.b.Commit(f.ctx, "n2", "n1"); err != nil {
		t.Fatal(err)
	}
	f.reopen() // and after it
	if err := f.b.Commit(f.ctx, "n2", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := f.b.Stop(f.ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	f.wantHeld("n1:suspended")
	if err := f.b.Resume(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	if got := f.sh("n1", "cat /tmp/w"); got != "won\n" {
		t.Fatalf("n1's /tmp after the commit: %q", got)
	}
	// A commit into a node that is not the child's parent is refused.
	f.fork("n1", "n3")
	if err := f.b.Commit(f.ctx, "n3", "n9"); !errors.Is(err, api.ErrInternal) {
		t.Fatalf("commit n3 into n9: %v, want it refused", err)
	}
}

// TestTmpDroppedOnStop: a stopped node's /tmp is gone, at once and after a
// reopen.
func TestTmpDroppedOnStop(t *testing.T) {
	f := newFixture(t)
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	f.fork("n1", "n2")
	f.sh("n2", "head -c 1048576 /dev/zero > /tmp/big")
	if err := f.b.Stop(f.ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.(*backend).TmpPath("n2"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a stopped node's /tmp: %v, want not found", err)
	}
	f.reopen()
	f.wantHeld("n1:suspended")
}

// TestTmpMigrate: a plain per-node /tmp directory of the earlier layout
// becomes the node's /tmp in the layer at open.
func TestTmpMigrate(t *testing.T) {
	f := newFixture(t)
	f.b.Close()
	old := filepath.Join(f.cfg.Dir, "tmp", "n1")
	if err := os.MkdirAll(filepath.Join(old, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "d", "f"), []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/f", filepath.Join(old, "l")); err != nil {
		t.Fatal(err)
	}
	f.b = nil
	f.reopen()
	f.wantHeld("n1:suspended")
	if _, err := os.Stat(filepath.Join(f.cfg.Dir, "tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old /tmp directories: %v, want them gone", err)
	}
	if err := f.b.Resume(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	if got := f.sh("n1", "cat /tmp/l; stat -c %a /tmp/d/f"); got != "kept\n600\n" {
		t.Fatalf("the migrated /tmp: %q", got)
	}
}

func (f *fixture) wantHeld(want ...string) {
	f.t.Helper()
	ns, err := f.b.Nodes(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	var got []string
	for _, n := range ns {
		got = append(got, n.ID+":"+string(n.State))
	}
	if len(got) != len(want) {
		f.t.Fatalf("held %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			f.t.Fatalf("held %v, want %v", got, want)
		}
	}
}

var _ = engine.HeldLive

// TestTmpForkStartFails: a fork whose second child cannot start (its files
// path is missing) fails, and leaves no child held and no child's /tmp.
func TestTmpForkStartFails(t *testing.T) {
	f := newFixture(t)
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	f.sh("n1", "echo a > /tmp/a")
	err := f.b.Fork(f.ctx, "n1", []string{"n2", "n3", "n4"}, func(context.Context) ([]string, error) {
		return []string{f.files("n2", "", ""), filepath.Join(f.cfg.Base, "missing"), f.files("n4", "", "")}, nil
	})
	if !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("fork with a child's files missing: %v, want it refused", err)
	}
	f.wantHeld("n1:live")
	for _, c := range []string{"n2", "n3", "n4"} {
		if _, err := f.b.(*backend).TmpPath(c); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("%s's /tmp after the failed fork: %v, want none", c, err)
		}
	}
	if got := f.sh("n1", "cat /tmp/a"); got != "a\n" {
		t.Fatalf("the source after the failed fork: %q", got)
	}
}
