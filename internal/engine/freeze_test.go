package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

// freezeFiles is dirFiles that records which branches the engine made
// unwritable (engine.Freezer).
type freezeFiles struct {
	engine.Files
	mu sync.Mutex
	ro map[string]bool
}

func (f *freezeFiles) SetWritable(name string, writable bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ro[name] = !writable
	return nil
}

func (f *freezeFiles) readOnly(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ro[name]
}

// TestSuspendFreezesFiles: a node the engine suspends (by tree_suspend or
// by eviction) has its files made unwritable, a resumed one writable again,
// and a restart makes the suspended ones unwritable again.
func TestSuspendFreezesFiles(t *testing.T) {
	home, base := t.TempDir(), t.TempDir()
	var last *freezeFiles
	open := func(ctx context.Context, dir, b string) (engine.Files, error) {
		f, err := enginetest.OpenDirFiles(ctx, dir, b)
		if err != nil {
			return nil, err
		}
		last = &freezeFiles{Files: f, ro: map[string]bool{}}
		return last, nil
	}
	e, err := engine.New(engine.Config{Home: home, OpenFiles: open})
	if err != nil {
		t.Fatal(err)
	}
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: base, Budget: &api.Budget{MaxLiveNodes: 3}})
	do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "t", SourceID: "n1", Labels: []string{"a", "b"}})
	do(t, e, api.Request{Op: api.OpTreeSuspend, TreeID: "t", NodeID: "n2"})
	if !last.readOnly("n2") || last.readOnly("n3") {
		t.Fatalf("after suspend n2: read-only %v, want n2 only", last.ro)
	}
	do(t, e, api.Request{Op: api.OpTreeResume, TreeID: "t", NodeID: "n2"})
	if last.readOnly("n2") {
		t.Fatal("n2 still read-only after resume")
	}
	// Over the live budget: a fork evicts the least recently used.
	r := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n1", Label: "c"})
	if len(r.Evicted) == 0 {
		t.Fatalf("fork past max_live_nodes evicted nothing: %+v", r)
	}
	for _, id := range r.Evicted {
		if !last.readOnly(id) {
			t.Errorf("evicted %s is writable", id)
		}
	}
	evicted := r.Evicted
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = engine.New(engine.Config{Home: home, OpenFiles: open})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, id := range evicted {
		if !last.readOnly(id) {
			t.Errorf("after a restart, suspended %s is writable", id)
		}
	}
}

// TestTreeDelete: tree_delete removes a loaded or a dropped tree's
// metadata and directory (the id is free again), keeps the base, and ends
// the tree's watchers with a delete event; an unknown tree is not_found.
func TestTreeDelete(t *testing.T) {
	home, base := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(base, "a.txt"), []byte("a"), 0o644)
	e := newEngine(t, home)
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: base})
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n1", Label: "x"})
	_, events, err := e.Watch(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, "trees", "t")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("tree dir: %v", err)
	}
	do(t, e, api.Request{Op: api.OpTreeDelete, TreeID: "t"})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("tree dir after delete: %v", err)
	}
	var kinds []string
	for ev := range events {
		kinds = append(kinds, ev.Kind)
	}
	if len(kinds) == 0 || kinds[len(kinds)-1] != "delete" {
		t.Errorf("watch events %v, want a last delete", kinds)
	}
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeNodes, TreeID: "t"})
	wantErr(t, err, api.ErrNotFound, "nodes of a deleted tree")
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeOpen, TreeID: "t"})
	wantErr(t, err, api.ErrNotFound, "open of a deleted tree")
	if b, err := os.ReadFile(filepath.Join(base, "a.txt")); err != nil || string(b) != "a" {
		t.Errorf("base after delete: %q, %v", b, err)
	}
	// The id is free again, and a dropped tree deletes too.
	r := do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: base})
	if r.Root != "n1" {
		t.Errorf("recreated tree: root %q, want n1", r.Root)
	}
	do(t, e, api.Request{Op: api.OpTreeDrop, TreeID: "t"})
	do(t, e, api.Request{Op: api.OpTreeDelete, TreeID: "t"})
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeOpen, TreeID: "t"})
	wantErr(t, err, api.ErrNotFound, "open of a dropped then deleted tree")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dropped tree's dir after delete: %v", err)
	}
	for _, id := range []string{"t", "nope", "../trees"} {
		_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeDelete, TreeID: id})
		wantErr(t, err, api.ErrNotFound, "delete of "+id)
	}
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeDelete})
	wantErr(t, err, api.ErrBadRequest, "delete without a tree id")
	// A delete cut short after the rename leaves a directory aside; New
	// removes it.
	aside := filepath.Join(home, "trees", ".deleted-old")
	os.MkdirAll(filepath.Join(aside, "x"), 0o755)
	e.Close()
	e2 := newEngine(t, home)
	_ = e2
	if _, err := os.Stat(aside); !os.IsNotExist(err) {
		t.Errorf("leftover of a cut-short delete after New: %v", err)
	}
}
