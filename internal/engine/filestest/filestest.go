// Package filestest is the behaviour every engine.Files implementation must
// show: run Run from the implementation's tests (the engine runs it against
// its directory-copy test double; internal/store + cowfs should run it too).
package filestest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// Run checks open against the engine's expectations. Each subtest gets a
// fresh base directory (holding "a.txt" = "base") and tree directory.
func Run(t *testing.T, open engine.OpenFiles) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, f engine.Files, reopen func() engine.Files)
	}{
		{"MainShowsBase", testMain},
		{"ForkIsolation", testIsolation},
		{"CommitFirstWins", testCommit},
		{"AbortSubtree", testAbort},
		{"Errors", testErrors},
		{"Reopen", testReopen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			base, dir := t.TempDir(), t.TempDir()
			write(t, filepath.Join(base, "a.txt"), "base")
			var cur engine.Files
			openNow := func() engine.Files {
				f, err := open(ctx, dir, base)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				cur = f
				return f
			}
			f := openNow()
			t.Cleanup(func() { cur.Close() })
			tc.fn(t, ctx, f, func() engine.Files {
				if err := cur.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				return openNow()
			})
		})
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func path(t *testing.T, f engine.Files, b string) string {
	t.Helper()
	p, err := f.Path(b)
	if err != nil {
		t.Fatalf("path %s: %v", b, err)
	}
	return p
}

// read returns the content of name in branch b, or "<none>".
func read(t *testing.T, f engine.Files, b, name string) string {
	t.Helper()
	buf, err := os.ReadFile(filepath.Join(path(t, f, b), name))
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		t.Fatalf("read %s in %s: %v", name, b, err)
	}
	return string(buf)
}

func want(t *testing.T, f engine.Files, b, name, content string) {
	t.Helper()
	if got := read(t, f, b, name); got != content {
		t.Errorf("%s in %s = %q, want %q", name, b, got, content)
	}
}

func branches(t *testing.T, f engine.Files) []string {
	t.Helper()
	bs, err := f.Branches()
	if err != nil {
		t.Fatalf("branches: %v", err)
	}
	slices.Sort(bs)
	return bs
}

func mustFork(t *testing.T, ctx context.Context, f engine.Files, parent string, children ...string) {
	t.Helper()
	if err := f.Fork(ctx, parent, children); err != nil {
		t.Fatalf("fork %s -> %v: %v", parent, children, err)
	}
}

func testMain(t *testing.T, ctx context.Context, f engine.Files, _ func() engine.Files) {
	want(t, f, engine.MainBranch, "a.txt", "base")
	if bs := branches(t, f); !slices.Equal(bs, []string{engine.MainBranch}) {
		t.Fatalf("branches %v, want [main]", bs)
	}
}

func testIsolation(t *testing.T, ctx context.Context, f engine.Files, _ func() engine.Files) {
	mustFork(t, ctx, f, engine.MainBranch, "n2", "n3")
	want(t, f, "n2", "a.txt", "base")
	write(t, filepath.Join(path(t, f, "n2"), "a.txt"), "two")
	write(t, filepath.Join(path(t, f, "n3"), "new.txt"), "three")
	want(t, f, "n2", "a.txt", "two")
	want(t, f, "n3", "a.txt", "base")
	want(t, f, engine.MainBranch, "a.txt", "base")
	want(t, f, "n2", "new.txt", "<none>")
	// A fork of a fork sees its parent's writes; its parent does not see its own.
	mustFork(t, ctx, f, "n2", "n4")
	want(t, f, "n4", "a.txt", "two")
	write(t, filepath.Join(path(t, f, "n4"), "a.txt"), "four")
	want(t, f, "n2", "a.txt", "two")
	if bs := branches(t, f); !slices.Equal(bs, []string{"main", "n2", "n3", "n4"}) {
		t.Fatalf("branches %v", bs)
	}
	u := f.DiskUsage()
	for _, b := range []string{"main", "n2", "n3", "n4"} {
		if n, ok := u[b]; !ok || n < 0 {
			t.Fatalf("disk usage of %s: %d, %v (all: %v)", b, n, ok, u)
		}
	}
	if u["n4"] == 0 || u["n3"] == 0 {
		t.Errorf("disk usage %v: n3 and n4 wrote files and hold nothing", u)
	}
}

func testCommit(t *testing.T, ctx context.Context, f engine.Files, _ func() engine.Files) {
	mustFork(t, ctx, f, engine.MainBranch, "n2")
	mustFork(t, ctx, f, "n2", "n3", "n4", "n5")
	write(t, filepath.Join(path(t, f, "n3"), "a.txt"), "winner")
	stale, err := f.Commit(ctx, "n3")
	if err != nil {
		t.Fatalf("commit n3: %v", err)
	}
	slices.Sort(stale)
	if !slices.Equal(stale, []string{"n4", "n5"}) {
		t.Errorf("stale %v, want [n4 n5]", stale)
	}
	want(t, f, "n2", "a.txt", "winner")
	if slices.Contains(branches(t, f), "n3") {
		t.Error("the committed child's branch is still there")
	}
	if _, err := f.Commit(ctx, "n4"); !errors.Is(err, api.ErrStale) {
		t.Errorf("second sibling commit: %v, want ErrStale", err)
	}
	// A fork after the commit starts from the new state and can commit.
	mustFork(t, ctx, f, "n2", "n6")
	want(t, f, "n6", "a.txt", "winner")
	write(t, filepath.Join(path(t, f, "n6"), "b.txt"), "b")
	if _, err := f.Commit(ctx, "n6"); err != nil {
		t.Fatalf("commit n6: %v", err)
	}
	want(t, f, "n2", "b.txt", "b")
	want(t, f, "n2", "a.txt", "winner")
	// Committing into main changes main.
	if err := f.Abort(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(ctx, "n5"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(ctx, "n2"); err != nil {
		t.Fatalf("commit n2 into main: %v", err)
	}
	want(t, f, engine.MainBranch, "a.txt", "winner")
}

func testAbort(t *testing.T, ctx context.Context, f engine.Files, _ func() engine.Files) {
	mustFork(t, ctx, f, engine.MainBranch, "n2", "n3")
	mustFork(t, ctx, f, "n2", "n4")
	if err := f.Abort(ctx, "n2"); err != nil {
		t.Fatalf("abort n2: %v", err)
	}
	if bs := branches(t, f); !slices.Equal(bs, []string{"main", "n3"}) {
		t.Fatalf("after abort: %v, want [main n3]", bs)
	}
	if _, err := f.Path("n4"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("path of aborted descendant: %v, want ErrNotFound", err)
	}
	want(t, f, "n3", "a.txt", "base")
}

func testErrors(t *testing.T, ctx context.Context, f engine.Files, _ func() engine.Files) {
	if err := f.Fork(ctx, "nope", []string{"n2"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("fork of unknown parent: %v, want ErrNotFound", err)
	}
	mustFork(t, ctx, f, engine.MainBranch, "n2")
	if err := f.Fork(ctx, engine.MainBranch, []string{"n2"}); !errors.Is(err, api.ErrExists) {
		t.Errorf("fork onto existing name: %v, want ErrExists", err)
	}
	if _, err := f.Commit(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("commit unknown: %v, want ErrNotFound", err)
	}
	if err := f.Abort(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("abort unknown: %v, want ErrNotFound", err)
	}
	if _, err := f.Commit(ctx, engine.MainBranch); err == nil {
		t.Error("commit of main succeeded")
	}
}

func testReopen(t *testing.T, ctx context.Context, f engine.Files, reopen func() engine.Files) {
	mustFork(t, ctx, f, engine.MainBranch, "n2", "n3")
	write(t, filepath.Join(path(t, f, "n2"), "a.txt"), "kept")
	f = reopen()
	if bs := branches(t, f); !slices.Equal(bs, []string{"main", "n2", "n3"}) {
		t.Fatalf("after reopen: %v", bs)
	}
	want(t, f, "n2", "a.txt", "kept")
	// Staleness survives a reopen: n2 commits, then n3 (same fork point) is stale.
	if _, err := f.Commit(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	f = reopen()
	if _, err := f.Commit(ctx, "n3"); !errors.Is(err, api.ErrStale) {
		t.Errorf("commit of stale sibling after reopen: %v, want ErrStale", err)
	}
}
