package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"

	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/filestest"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/arbor-dev/arbor/internal/workspace"
	"golang.org/x/sys/unix"
)

func newManager(t *testing.T) *workspace.Manager {
	t.Helper()
	m, err := workspace.New(workspace.Config{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTreeFilesConformance runs the engine's Files suite against the real
// files layer: a store mounted by cowfs.
func TestTreeFilesConformance(t *testing.T) {
	testenv.NeedFUSE(t)
	m := newManager(t)
	filestest.Run(t, func(ctx context.Context, dir, base string) (engine.Files, error) {
		return m.OpenTreeFiles(ctx, dir, base)
	})
}

// TestForkRightAfterClose: a file written and closed
// in a child that is committed into its parent, then a fork of the parent
// right away, and the new child's commit fails as stale ("parent changed
// since the fork"). close(2) returns before the kernel's FUSE RELEASE reaches
// cowfs, so the store still counts the descriptor as an open writer at the
// fork and moves the file into the parent's new head (store.keepWriters).
// The store remembers what it kept for such a writer and does not count it as
// a change while the file is unchanged.
func TestForkRightAfterClose(t *testing.T) {
	testenv.NeedFUSE(t)
	m := newManager(t)
	ctx := t.Context()
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenTreeFiles(ctx, t.TempDir(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Fork(ctx, engine.MainBranch, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	hits := 0
	const rounds = 20 // two commits each
	for i := range rounds {
		c, g := fmt.Sprintf("c%d", i), fmt.Sprintf("g%d", i)
		if err := f.Fork(ctx, "p", []string{c}); err != nil {
			t.Fatal(err)
		}
		pc, _ := f.Path(c)
		if err := os.WriteFile(filepath.Join(pc, "a.txt"), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(ctx, c); errors.Is(err, api.ErrStale) {
			hits++
			if err := f.Abort(ctx, c); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatalf("commit %s: %v", c, err)
		}
		if err := f.Fork(ctx, "p", []string{g}); err != nil {
			t.Fatal(err)
		}
		pg, _ := f.Path(g)
		if err := os.WriteFile(filepath.Join(pg, "b.txt"), []byte(g), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(ctx, g); errors.Is(err, api.ErrStale) {
			hits++
			if err := f.Abort(ctx, g); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatalf("commit %s: %v", g, err)
		}
	}
	if hits > 0 {
		t.Fatalf("%d of %d commits of children forked right after a close were spuriously stale (async FUSE RELEASE vs store.keepWriters)", hits, 2*rounds)
	}
}

// TestTreeFilesReadOnly: an unwritable branch (a suspended node) refuses
// every kind of change through its path with EROFS, and takes them again
// once writable; reads go on.
func TestTreeFilesReadOnly(t *testing.T) {
	testenv.NeedFUSE(t)
	m := newManager(t)
	ctx := t.Context()
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(base, "d"), 0o755)
	f, err := m.OpenTreeFiles(ctx, t.TempDir(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Fork(ctx, engine.MainBranch, []string{"n2"}); err != nil {
		t.Fatal(err)
	}
	p, err := f.Path("n2")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetWritable("n2", false); err != nil {
		t.Fatal(err)
	}
	for what, change := range map[string]func() error{
		"create":   func() error { return os.WriteFile(filepath.Join(p, "new.txt"), []byte("x"), 0o644) },
		"write":    func() error { return os.WriteFile(filepath.Join(p, "a.txt"), []byte("x"), 0o644) },
		"append":   func() error { return appendTo(filepath.Join(p, "a.txt")) },
		"truncate": func() error { return os.Truncate(filepath.Join(p, "a.txt"), 0) },
		"chmod":    func() error { return os.Chmod(filepath.Join(p, "a.txt"), 0o600) },
		"remove":   func() error { return os.Remove(filepath.Join(p, "a.txt")) },
		"rename":   func() error { return os.Rename(filepath.Join(p, "a.txt"), filepath.Join(p, "b.txt")) },
		"mkdir":    func() error { return os.Mkdir(filepath.Join(p, "e"), 0o755) },
		"rmdir":    func() error { return os.Remove(filepath.Join(p, "d")) },
		"symlink":  func() error { return os.Symlink("a.txt", filepath.Join(p, "l")) },
		"link":     func() error { return os.Link(filepath.Join(p, "a.txt"), filepath.Join(p, "h")) },
		"setxattr": func() error { return unix.Setxattr(filepath.Join(p, "a.txt"), "user.k", []byte("v"), 0) },
		"utimes":   func() error { return os.Chtimes(filepath.Join(p, "a.txt"), time.Unix(1, 0), time.Unix(1, 0)) },
	} {
		if err := change(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s in an unwritable branch: %v, want EROFS", what, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(p, "a.txt")); err != nil || string(b) != "a" {
		t.Errorf("read of an unwritable branch: %q, %v", b, err)
	}
	if err := f.SetWritable("n2", true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "a.txt"), []byte("x"), 0o644); err != nil {
		t.Errorf("write after SetWritable(true): %v", err)
	}
	if err := f.SetWritable("nope", false); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("SetWritable of an unknown branch: %v, want ErrNotFound", err)
	}
}

func appendTo(path string) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fh.WriteString("x")
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}
