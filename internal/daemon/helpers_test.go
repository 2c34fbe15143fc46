package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/fusemount"
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
	ms := fusemount.Under(dir)
	for i := len(ms) - 1; i >= 0; i-- {
		fusemount.Detach(ms[i].Point)
	}
}

// abortUnder aborts the FUSE connections of the mounts at or below dir,
// which frees any process waiting on a dead server there.
func abortUnder(dir string) {
	ab := &fusemount.Aborter{}
	for _, m := range fusemount.Under(dir) {
		if m.IsFUSE() {
			ab.Abort(m)
		}
	}
}

// mounted reports whether path is a mountpoint in /proc/self/mountinfo.
func mounted(path string) bool {
	_, ok := fusemount.Find(path)
	return ok
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

// mustDo returns a function that sends a request to cl and fails t on an
// error.
func mustDo(t *testing.T, ctx context.Context, cl *client.Client) func(api.Request) api.Response {
	return func(req api.Request) api.Response {
		t.Helper()
		r, err := cl.Do(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Op, err)
		}
		return r
	}
}

// freeAddr is a loopback TCP address free a moment ago, for a daemon's
// HTTP face.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// sharedDirs makes a directory other uids can reach (0755), with the
// daemon's home and a socket directory in it, for tests whose requests come
// from other uids; it returns the directory, the home and the socket path.
func sharedDirs(t *testing.T) (dir, home, sock string) {
	t.Helper()
	dir = tempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sockDir := filepath.Join(dir, "run")
	if err := os.Mkdir(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, "home"), filepath.Join(sockDir, "arbord.sock")
}
