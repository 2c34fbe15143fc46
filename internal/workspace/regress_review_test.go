package workspace_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// An abort through mount A of the branch that mount B shows: B must show the
// aborted branch's parent, not main (the real base).
func TestRegressionAbortElsewhereShowsParent(t *testing.T) {
	testenv.NeedFUSE(t)
	m := newStack(t)
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
	if l := do(t, m, api.Request{Op: api.OpWsList, Mountpoint: b}); l.Branch != "x" {
		t.Fatalf("after y's abort through mount a, mount b shows %q, want its parent x", l.Branch)
	}
	if err := os.WriteFile(filepath.Join(b, "agent-output"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write through mount b after the abort: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "agent-output")); err == nil {
		t.Errorf("a write through mount b (which showed y, child of x) landed in the real base")
	}
	if got, err := os.ReadFile(filepath.Join(a, "@x", "agent-output")); err != nil || string(got) != "x" {
		t.Errorf("the write through mount b is not in x: %q, %v", got, err)
	}
}

// Close (daemon shutdown) while a commit into main runs through a control
// file: Close returns, and the commit is all or none in the base, all if it
// was acknowledged, once a manager opens the home again.
func TestRegressionCloseDuringCtlCommit(t *testing.T) {
	testenv.NeedFUSE(t)
	home := t.TempDir()
	m := openStack(t, home)
	base, a, b := t.TempDir(), filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	do(t, m, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: a})
	do(t, m, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: b})
	do(t, m, api.Request{Op: api.OpWsCreate, Mountpoint: a, Branch: "x"})
	const files = 4000
	for i := range files {
		if err := os.WriteFile(filepath.Join(a, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed := make(chan error, 1)
	go func() { committed <- os.WriteFile(filepath.Join(a, ".branchfs_ctl"), []byte("commit"), 0) }()
	// The commit is in flight once its first file shows in the base.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		if ents, _ := os.ReadDir(base); len(ents) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the commit wrote nothing into the base within 20s")
		}
	}
	select {
	case err := <-committed:
		t.Fatalf("the commit ended (%v) before Close could start: nothing was in flight; make it larger", err)
	default:
	}
	done := make(chan error, 1)
	go func() { done <- m.Close() }()
	select {
	case err := <-done:
		t.Logf("Close returned %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close deadlocked with a control-file commit in flight")
	}
	var cerr error
	select {
	case cerr = <-committed:
		t.Logf("the commit returned %v", cerr)
	case <-time.After(20 * time.Second):
		t.Fatal("the control-file commit did not return after Close")
	}
	m2 := openStack(t, home) // replays an unfinished commit
	defer m2.Close()
	ents, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case len(ents) == files:
	case len(ents) == 0 && cerr != nil:
	default:
		t.Fatalf("after Close and a reopen the base holds %d of the commit's %d files (commit returned %v): want all or none, all if acknowledged", len(ents), files, cerr)
	}
}
