package daemon

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestStopWithBusyMount: the daemon exits promptly even while a process
// holds its cwd in a workspace mount (the forced unmount detaches and aborts
// the connection instead of waiting for the process), and the mount is gone.
func TestStopWithBusyMount(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, base, mp := filepath.Join(dir, "home"), filepath.Join(dir, "base"), filepath.Join(dir, "ws")
	writeFile(t, filepath.Join(base, "a.txt"), "a")
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{Home: home, Ready: ready, Logger: testLogger(t)}) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	if _, err := cl.Do(ctx, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp}); err != nil {
		t.Fatal(err)
	}
	busy := exec.Command("sleep", "60")
	busy.Dir = mp
	busy.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()
	if _, err := cl.Do(ctx, api.Request{Op: api.OpWsUnmount, Mountpoint: mp}); err == nil {
		t.Fatal("unmount of a busy mount succeeded")
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		abortUnder(dir)
		t.Fatal("the daemon did not stop within 15s while a process held a cwd in its mount")
	}
	t.Logf("stopped in %s with a busy mount", time.Since(start))
	if mounted(mp) {
		t.Errorf("%s still mounted after the daemon stopped", mp)
	}
	checkFuseCtlMode(t)
}
