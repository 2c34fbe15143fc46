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
