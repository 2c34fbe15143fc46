package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// tempDir is a short temporary directory (socket paths are limited to 108
// bytes). Its cleanup first detaches any mount left under it, so removing it
// can never reach through a mount into a base.
func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "arbord-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		abortUnder(dir)
		detachUnder(dir)
		os.RemoveAll(dir)
	})
	return dir
}

// detachUnder lazily unmounts every mount at or below dir, deepest first.
func detachUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mps []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mps = append(mps, f[4])
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		unix.Unmount(mps[i], unix.MNT_DETACH)
	}
}

// abortUnder aborts the FUSE connections of the mounts at or below dir
// (fusectl), which frees any process waiting on a dead server there.
func abortUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || (f[4] != dir && !strings.HasPrefix(f[4], dir+"/")) {
			continue
		}
		var major, minor uint64
		if _, err := fmt.Sscanf(f[2], "%d:%d", &major, &minor); err == nil {
			os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", major<<20|minor), []byte("1"), 0)
		}
	}
}

// mounted reports whether path is a mountpoint in /proc/self/mountinfo.
func mounted(path string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// startDaemon runs the daemon in-process until the test ends; it returns
// once the socket accepts connections.
func startDaemon(t testing.TB, cfg Config) {
	t.Helper()
	ready := make(chan struct{})
	cfg.Ready = ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the daemon did not stop within 30s")
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon was not ready within 20s")
	}
}

// rawLine sends one line to the socket and returns the reply.
func rawLine(ctx context.Context, sock, line string) (api.Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return api.Response{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return api.Response{}, err
	}
	b, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return api.Response{}, err
	}
	var r api.Response
	if err := json.Unmarshal(b, &r); err != nil {
		return api.Response{}, errors.New("reply " + string(b) + ": " + err.Error())
	}
	return r, nil
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
