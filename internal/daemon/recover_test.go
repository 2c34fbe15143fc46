package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
)

// TestLockHolder: the holder of the home's lock is found from /proc/locks,
// and a live process is not taken for a dying one.
func TestLockHolder(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) is not installed")
	}
	path := filepath.Join(t.TempDir(), "arbord.lock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("flock", "-x", "-o", path, "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pid int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var ok bool
		if pid, ok = lockHolder(f); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no holder found in /proc/locks")
		}
	}
	// flock(1) holds it (-o: not its child).
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(data), "30") {
		t.Fatalf("holder %d: %q %v", pid, data, err)
	}
	if dying(pid) {
		t.Fatalf("live holder %d taken for dying", pid)
	}
	start := time.Now()
	if err := lockHeld(f, t.TempDir(), &fusemount.Aborter{}, time.Second); err == nil || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("lock held by a live process: %v after %v, want an error at once", err, time.Since(start))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if err := lockHeld(f, t.TempDir(), &fusemount.Aborter{}, time.Second); err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
}
