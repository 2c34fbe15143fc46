package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

// panicFiles panics in Fork, after forking, while armed: a bug halfway
// through a verb, which leaves the files ahead of the tree in memory.
type panicFiles struct {
	engine.Files
	armed *atomic.Bool
}

func (p panicFiles) Fork(ctx context.Context, parent string, children []string) error {
	err := p.Files.Fork(ctx, parent, children)
	if p.armed.Load() {
		panic("injected: a bug halfway through fork")
	}
	return err
}

// TestPanicReloadsTree: a verb that panics fails with internal, its tree
// refuses verbs until it is reloaded from disk, the reloaded tree holds
// (its invariants, its metadata and its branches agree), and another tree
// is served throughout.
func TestPanicReloadsTree(t *testing.T) {
	var armed atomic.Bool
	bad := newBase(t)
	e, err := engine.New(engine.Config{Home: t.TempDir(), OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
		f, err := enginetest.OpenDirFiles(ctx, dir, base)
		if err != nil || base != bad {
			return f, err
		}
		return panicFiles{Files: f, armed: &armed}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t1 := do(t, e, api.Request{Op: api.OpTreeCreate, Base: bad, TreeID: "bad"})
	t2 := do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "good"})
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "bad", SourceID: t1.Root, Label: "kept"})

	armed.Store(true)
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeForkBatch, TreeID: "bad", SourceID: t1.Root, Labels: []string{"a", "b"}})
	wantErr(t, err, api.ErrInternal, "fork that panics")
	armed.Store(false)
	// The other tree is served at once.
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "good", SourceID: t2.Root, Label: "x"})

	// The broken tree refuses (busy) until it is back, then holds.
	var nodes api.Response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		nodes, err = e.Do(context.Background(), api.Request{Op: api.OpTreeNodes, TreeID: "bad"})
		if err == nil {
			break
		}
		if !errors.Is(err, api.ErrBusy) {
			t.Fatalf("tree_nodes of the broken tree: %v, want busy until it is reloaded", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the broken tree was not reloaded within 10s")
		}
	}
	if err := engine.CheckTree(e, "bad"); err != nil {
		t.Fatalf("the reloaded tree: %v", err)
	}
	labels := map[string]bool{}
	for _, n := range nodes.Nodes {
		labels[n.Label] = true
	}
	if !labels["kept"] {
		t.Errorf("the reloaded tree lost node kept: %+v", nodes.Nodes)
	}
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "bad", SourceID: t1.Root, Label: "after"})
	if err := engine.CheckTree(e, "good"); err != nil {
		t.Fatal(err)
	}
}
