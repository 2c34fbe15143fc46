package cowfs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestUnmountWithACopyElsewhere: a process that made a mount namespace
// while the mount was there holds a copy of it, so unmounting it here does
// not end its FUSE connection and the server's loops would wait for ever
// (a daemon hung at shutdown this way). Unmount returns, having aborted
// the connection, and the copy in the other namespace is dead.
func TestUnmountWithACopyElsewhere(t *testing.T) {
	testenv.NeedRoot(t, "mounts as root and makes a mount namespace")
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "a"), []byte("base"), 0o644) })
	mnt := filepath.Join(t.TempDir(), "m")
	os.Mkdir(mnt, 0o755)
	f, err := Mount(Config{Store: st, Mountpoint: mnt})
	if err != nil {
		t.Fatal(err)
	}
	// A copy in a new mount namespace, held by a process that reads the
	// mount's file on request.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `echo ready; read x; cat "$1" && echo ok || echo gone`, "sh", filepath.Join(mnt, "a"))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Unmount(true)
		testenv.Missing(t, testenv.Root, "unshare --mount: "+err.Error())
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	if l, _ := out.ReadString('\n'); strings.TrimSpace(l) != "ready" {
		t.Fatalf("the namespace's process said %q", l)
	}
	done := make(chan error, 1)
	go func() { done <- f.Unmount(false) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("unmount: %v", err)
		}
	case <-time.After(4*loopsGrace + 10*time.Second):
		t.Fatal("Unmount did not return: it waits for a server whose mount lives on in another namespace")
	}
	stdin.Write([]byte("\n"))
	rest, _ := out.ReadString('\n')
	if strings.TrimSpace(rest) == "base" {
		t.Errorf("the copy in the other namespace still reads through the server after the unmount")
	}
	cmd.Wait()
}
