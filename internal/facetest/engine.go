package facetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

// Version is what the engine answers to ping.
const Version = engine.Version

// Engine is the real engine (enginetest.New, over the directory-copy files
// layer: no FUSE, no root) as the faces serve it, with what their tests
// need of it besides: a planted panic (SetPanic) and a count of the watches
// whose streams the engine has not closed yet (Watchers, Wait).
//
// A tree's base is a path under the engine's private root: tree_create
// with base "/b" copies Root()/b, made (with a file a.txt) on first use, so
// tests can name any absolute base without touching the host's.
type Engine struct {
	*wrapped
	Engine *engine.Engine
	root   string
}

// NewEngine returns a real engine closed at t's cleanup. Its home and
// bases are in memory where the host has a tmpfs at /dev/shm (the faces'
// tests do not test durability, and the engine's fsyncs at commits then
// cost nothing: the fuzz targets run five times faster), else in t's
// temporary directory.
func NewEngine(t testing.TB) *Engine {
	t.Helper()
	e := &Engine{root: memDir(t)}
	e.Engine = enginetest.New(t, engine.Config{Home: memDir(t), OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
		if !filepath.IsAbs(base) {
			return nil, api.Errorf(api.ErrBadRequest, "base %q is not absolute", base)
		}
		b := filepath.Join(e.root, base)
		if err := os.MkdirAll(b, 0o755); err != nil {
			return nil, fmt.Errorf("facetest: base %s: %w", base, err)
		}
		if err := os.WriteFile(filepath.Join(b, "a.txt"), []byte("base\n"), 0o644); err != nil {
			return nil, fmt.Errorf("facetest: base %s: %w", base, err)
		}
		return enginetest.OpenDirFiles(ctx, dir, b)
	}})
	e.wrapped = &wrapped{h: e.Engine}
	t.Cleanup(e.Wait) // after the engine's Close (cleanups run last first), which ends every watch
	return e
}

// Root is the directory that the bases trees name are under.
func (e *Engine) Root() string { return e.root }

// KeepTree makes sure tree id is loaded (from base) with at most maxNodes
// nodes: it is deleted and created again when missing, dropped, or larger.
// Fuzz targets share one engine across inputs and call it before each.
func (e *Engine) KeepTree(t testing.TB, id, base string, maxNodes int) {
	t.Helper()
	ctx := context.Background()
	if n, err := e.Engine.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: id}); err == nil && len(n.Nodes) <= maxNodes {
		return
	}
	e.Engine.Do(ctx, api.Request{Op: api.OpTreeDelete, TreeID: id}) // not_found when it is gone already
	if _, err := e.Engine.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: id, Base: base}); err != nil {
		t.Fatalf("facetest: tree %s: %v", id, err)
	}
}

// memDir is a fresh directory on /dev/shm, removed at t's cleanup, or
// t.TempDir() where /dev/shm is not a tmpfs the test can write.
func memDir(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		if d, err := os.MkdirTemp("/dev/shm", "facetest"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}
