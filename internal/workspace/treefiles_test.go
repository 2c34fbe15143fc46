package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/api"

	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/filestest"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/arbor-dev/arbor/internal/workspace"
)

func newManager(t *testing.T) *workspace.Manager {
	t.Helper()
	m, err := workspace.New(workspace.Config{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
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
