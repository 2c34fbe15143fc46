package workspace_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/arbor-dev/arbor/internal/workspace"
)

func do(t *testing.T, m *workspace.Manager, r api.Request) api.Response {
	t.Helper()
	resp, err := m.Do(access.WithCred(context.Background(), access.Self()), r)
	if err != nil {
		t.Fatalf("%s: %v", r.Op, err)
	}
	return resp
}

// An abort through mount A of the branch that mount B shows: B must show the
// aborted branch's parent, not main (the real base).
func TestRegressionAbortElsewhereShowsParent(t *testing.T) {
	testenv.NeedFUSE(t)
	m := newManager(t)
	base, a, b := t.TempDir(), filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	do(t, m, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: a})
	do(t, m, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: b})
	do(t, m, api.Request{Op: api.OpWsCreate, Mountpoint: a, Branch: "x"})
	do(t, m, api.Request{Op: api.OpWsSwitch, Mountpoint: b, Branch: "x"})
	do(t, m, api.Request{Op: api.OpWsCreate, Mountpoint: b, Branch: "y"}) // b shows y, child of x
	// abort y through mount a's control file
	if err := os.WriteFile(filepath.Join(a, "@y", ".branchfs_ctl"), []byte("abort"), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	l := do(t, m, api.Request{Op: api.OpWsList, Mountpoint: b})
	t.Logf("mount b shows %q", l.Branch)
	os.WriteFile(filepath.Join(b, "agent-output"), []byte("x"), 0o644)
	if _, err := os.Stat(filepath.Join(base, "agent-output")); err == nil {
		t.Errorf("a write through mount b (which showed y, child of x) landed in the real base")
	}
}

// Close (daemon shutdown) while a commit runs through a control file.
func TestRegressionCloseDuringCtlCommit(t *testing.T) {
	testenv.NeedFUSE(t)
	m, err := workspace.New(workspace.Config{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	base, a, b := t.TempDir(), filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	do(t, m, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: a})
	do(t, m, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: b})
	do(t, m, api.Request{Op: api.OpWsCreate, Mountpoint: a, Branch: "x"})
	for i := range 4000 {
		os.WriteFile(filepath.Join(a, fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
	}
	go os.WriteFile(filepath.Join(a, ".branchfs_ctl"), []byte("commit"), 0)
	time.Sleep(30 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- m.Close() }()
	select {
	case err := <-done:
		t.Logf("Close returned %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Manager.Close deadlocked with a control-file commit in flight")
	}
}
