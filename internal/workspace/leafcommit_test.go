package workspace_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestCommitLeafOnly is issue 16's dropped branch over the API: a branch
// with a child cannot be committed (bad_state, naming the child); nothing
// is dropped, ws_list and ws_mounts stay right, and committing the child
// first, then its parent, lands both files in the base.
func TestCommitLeafOnly(t *testing.T) {
	testenv.NeedFUSE(t)
	m := newStack(t)
	base, mp := t.TempDir(), filepath.Join(t.TempDir(), "m")
	do(t, m, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	// a from main through the root's control file, b from a through a's
	// (a create through a control file leaves the mount where it is).
	for _, c := range []struct{ at, name string }{{mp, "a"}, {filepath.Join(mp, "@a"), "b"}} {
		if err := os.WriteFile(filepath.Join(c.at, ".branchfs_ctl"), []byte("create:"+c.name), 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mp, "@"+c.name, "in-"+c.name), []byte(c.name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.Do(access.WithCred(context.Background(), access.Self()), api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: "a"})
	if !errors.Is(err, api.ErrState) || api.Code(err) != api.CodeState {
		t.Fatalf("ws_commit a (child b): %v, want bad_state", err)
	}
	l := do(t, m, api.Request{Op: api.OpWsList, Mountpoint: mp})
	if len(l.Branches) != 3 || l.Branch != "main" {
		t.Fatalf("after the refused commit: %+v", l)
	}
	for _, b := range l.Branches {
		if b.State != api.StateLive {
			t.Fatalf("after the refused commit %s is %s", b.Name, b.State)
		}
		if b.Name == "b" && b.Parent != "a" {
			t.Fatalf("b's parent is %q, want a", b.Parent)
		}
	}
	if d, err := os.ReadFile(filepath.Join(mp, "@b", "in-b")); err != nil || string(d) != "b" {
		t.Fatalf("b's file after the refused commit: %q, %v", d, err)
	}
	do(t, m, api.Request{Op: api.OpWsSwitch, Mountpoint: mp, Branch: "b"})
	do(t, m, api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: "b"})
	if ms := do(t, m, api.Request{Op: api.OpWsMounts}); len(ms.Mounts) != 1 || ms.Mounts[0].Branch != "a" {
		t.Fatalf("ws_mounts after committing b: %+v, want a", ms.Mounts)
	}
	do(t, m, api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: "a"})
	if ms := do(t, m, api.Request{Op: api.OpWsMounts}); len(ms.Mounts) != 1 || ms.Mounts[0].Branch != "main" {
		t.Fatalf("ws_mounts after committing a: %+v, want main", ms.Mounts)
	}
	for _, n := range []string{"a", "b"} {
		if d, err := os.ReadFile(filepath.Join(base, "in-"+n)); err != nil || string(d) != n {
			t.Fatalf("base in-%s: %q, %v", n, d, err)
		}
		if d, err := os.ReadFile(filepath.Join(mp, "in-"+n)); err != nil || string(d) != n {
			t.Fatalf("mount in-%s: %q, %v", n, d, err)
		}
	}
}
