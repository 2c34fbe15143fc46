package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// TestDiskBudgetMeasured: the disk a node's files hold counts as soon as it
// is written, not at its next commit: a fork that the tree has no room for
// is refused with the arithmetic, and Stats (the metrics' figures) shows
// the bytes without a tree_nodes first.
func TestDiskBudgetMeasured(t *testing.T) {
	e := newEngine(t, t.TempDir())
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "d", Base: newBase(t), Budget: &api.Budget{MaxDiskBytes: 1_000_000}})
	child := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "d", SourceID: "n1", Label: "child"})
	if err := os.WriteFile(filepath.Join(child.Path, "big"), make([]byte, 995_000), 0o644); err != nil {
		t.Fatal(err)
	}
	var st engine.TreeStats
	for _, s := range e.Stats() {
		if s.TreeID == "d" {
			st = s
		}
	}
	if st.Usage.DiskBytes < 995_000 || st.Budget.MaxDiskBytes != 1_000_000 {
		t.Fatalf("stats after a write of 995000 bytes: disk %d/%d", st.Usage.DiskBytes, st.Budget.MaxDiskBytes)
	}
	_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeFork, TreeID: "d", SourceID: child.NodeID, Label: "again"})
	wantErr(t, err, api.ErrBudget, "fork of a full tree")
	if !strings.Contains(err.Error(), "disk ") || !strings.Contains(err.Error(), "+8192 > max 1000000 bytes") {
		t.Fatalf("refusal without the arithmetic: %v", err)
	}
	r := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "d"})
	if len(r.Nodes) != 2 {
		t.Fatalf("the refused fork left nodes: %+v", r.Nodes)
	}
	// Freed, it fits again.
	if err := os.Remove(filepath.Join(child.Path, "big")); err != nil {
		t.Fatal(err)
	}
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "d", SourceID: child.NodeID, Label: "again"})
}
