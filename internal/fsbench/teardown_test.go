package fsbench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// The mount's server dies (a crash, an OOM kill): Teardown reports it, but
// leaves the dead mount at scratch/mnt, so removing the scratch fails
// (ENOTCONN) and the next Setup stacks on a dead mount.
func TestTeardownAfterServerDied(t *testing.T) {
	testenv.NeedFUSE(t)
	base, scratch := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := NewArbor(1).(*arborSys)
	mnt, err := sys.Setup(t.Context(), base, scratch)
	if err != nil {
		t.Fatal(err)
	}
	sys.cmd.Process.Kill()
	<-sys.done
	err = sys.Teardown(t.Context())
	t.Logf("Teardown: %v", err)
	time.Sleep(50 * time.Millisecond)
	if m, ok := fusemount.Find(mnt); ok && m.IsFUSE() {
		fusemount.Detach(mnt)
		t.Fatalf("after Teardown the dead server's mount is still at %s", mnt)
	}
}

// The server answers "close" and exits at once. Teardown must read that
// answer even when the server's exit (cmd.Wait) comes first: with
// cmd.StdoutPipe, Wait closed the pipe under the read, and Teardown failed
// now and then with "the mount's server is gone: read |0: file already
// closed" (arbor bench fs on the stat-warm..abort-1K group). The hook makes
// the exit come first every time.
func TestTeardownReadsTheLastAnswer(t *testing.T) {
	testenv.NeedFUSE(t)
	base, scratch := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := NewArbor(1).(*arborSys)
	if _, err := sys.Setup(t.Context(), base, scratch); err != nil {
		t.Fatal(err)
	}
	beforeRead = func(a *arborSys) {
		select {
		case <-a.done:
		case <-time.After(30 * time.Second):
			t.Error("the server did not exit after close")
		}
	}
	defer func() { beforeRead = nil }()
	if err := sys.Teardown(t.Context()); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
}
