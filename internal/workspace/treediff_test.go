package workspace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestTreeDiffOverFUSE: tree_diff over the real files layer, the node's
// files written through its FUSE path: text diffs against the fork point,
// a symlink reported and not followed, a grandchild diffed against its
// parent's files at its fork, not the base's.
func TestTreeDiffOverFUSE(t *testing.T) {
	testenv.NeedFUSE(t)
	s := newStack(t)
	base := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("outside the tree\n"), 0o600)
	os.WriteFile(filepath.Join(base, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	os.WriteFile(filepath.Join(base, "old.txt"), []byte("old\n"), 0o644)
	c := do(t, s, api.Request{Op: api.OpTreeCreate, TreeID: "fd", Base: base})
	f := do(t, s, api.Request{Op: api.OpTreeFork, TreeID: "fd", SourceID: c.Root})
	write := func(dir, name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(f.Path, "main.go", "package main\n\nfunc main() { println(1) }\n")
	write(f.Path, "bin.dat", "\x00\x01")
	if err := os.Remove(filepath.Join(f.Path, "old.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(f.Path, "link")); err != nil {
		t.Fatal(err)
	}

	r := do(t, s, api.Request{Op: api.OpTreeDiff, TreeID: "fd", NodeID: f.NodeID})
	got := map[string]api.Change{}
	for _, ch := range r.Changes {
		got[ch.Path] = ch
	}
	if len(got) != 4 {
		t.Fatalf("changes %+v", r.Changes)
	}
	if ch := got["main.go"]; ch.Kind != "modified" || ch.Diff != "--- a/main.go\n+++ b/main.go\n@@ -1,3 +1,3 @@\n package main\n \n-func main() {}\n+func main() { println(1) }\n" {
		t.Errorf("main.go: %+v", ch)
	}
	if ch := got["bin.dat"]; ch.Kind != "added" || ch.Diff != "" || ch.Note != "no diff: binary" {
		t.Errorf("bin.dat: %+v", ch)
	}
	if ch := got["old.txt"]; ch.Kind != "deleted" || ch.Diff != "" {
		t.Errorf("old.txt: %+v", ch)
	}
	if ch := got["link"]; ch.Kind != "added" || ch.Diff != "" || ch.Note != "" || strings.Contains(ch.Diff, "outside") {
		t.Errorf("link (a symlink, never followed): %+v", ch)
	}

	g := do(t, s, api.Request{Op: api.OpTreeFork, TreeID: "fd", SourceID: f.NodeID})
	write(g.Path, "main.go", "package main\n\nfunc main() { println(2) }\n")
	r = do(t, s, api.Request{Op: api.OpTreeDiff, TreeID: "fd", NodeID: g.NodeID})
	if len(r.Changes) != 1 || r.Changes[0].Path != "main.go" ||
		!strings.Contains(r.Changes[0].Diff, "-func main() { println(1) }\n+func main() { println(2) }\n") {
		t.Errorf("grandchild: %+v", r.Changes)
	}
	if _, err := s.Do(t.Context(), api.Request{Op: api.OpTreeDiff, TreeID: "fd", NodeID: c.Root}); api.Code(err) != api.CodeBadRequest {
		t.Errorf("the root's diff: %v, want bad_request", err)
	}
	// A sibling's commit makes a node stale: its diff still lists its work.
	before := do(t, s, api.Request{Op: api.OpTreeDiff, TreeID: "fd", NodeID: f.NodeID})
	w := do(t, s, api.Request{Op: api.OpTreeFork, TreeID: "fd", SourceID: c.Root})
	do(t, s, api.Request{Op: api.OpTreeCommit, TreeID: "fd", NodeID: w.NodeID})
	after, err := s.Do(t.Context(), api.Request{Op: api.OpTreeDiff, TreeID: "fd", NodeID: f.NodeID})
	if err != nil || len(after.Changes) != len(before.Changes) {
		t.Errorf("a stale node's diff: %+v, %v; want its %d changes", after.Changes, err, len(before.Changes))
	}
}
