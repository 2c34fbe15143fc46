package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// dialAs connects to the socket from a thread whose credentials are uid
// and gid (SO_PEERCRED records the connecting thread's). The thread is
// never given back to the scheduler: its goroutine exits locked.
func dialAs(t *testing.T, sock string, uid, gid int) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			ch <- res{err: e}
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			ch <- res{err: e}
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			ch <- res{err: e}
			return
		}
		c, err := net.Dial("unix", sock)
		ch <- res{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("dial as uid %d: %v", uid, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

// ask sends one request on c and returns the reply (an error reply as *api.Error).
func ask(t *testing.T, c net.Conn, req api.Request) (api.Response, error) {
	t.Helper()
	b, _ := json.Marshal(req)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("%s: reading the reply: %v", req.Op, err)
	}
	var r api.Response
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatal(err)
	}
	if r.Status == api.StatusError {
		return r, &api.Error{Code: r.Code, Message: r.Message}
	}
	return r, nil
}

// unmountIfOurs detaches an arbor mount at p, should a regression have made one.
func unmountIfOurs(p string) {
	if m, ok := fusemount.Find(p); ok && m.FSType == "fuse.branchfs" {
		unix.Unmount(p, unix.MNT_DETACH)
	}
}

// TestMountRules tries the attacks of issue 16 against a daemon with
// --allow-uid 65534: a mount over /etc, a mount by uid 65534 of its own
// directory over a root-owned one, a tree on /root and a mount on another
// user's mount. Each is refused naming the rule, and nothing is mounted.
func TestMountRules(t *testing.T) {
	testenv.NeedFUSE(t)
	dir, home, sock := sharedDirs(t)
	mk := func(rel string, uid int) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rootBase := mk("rootbase", 0)
	writeFile(t, filepath.Join(rootBase, "a.txt"), "a")
	evil := mk("evil", 65534)
	writeFile(t, filepath.Join(evil, "passwd"), "root::0:0::/root:/bin/sh\n")
	os.Chown(filepath.Join(evil, "passwd"), 65534, 65534)
	victim := mk("victim", 0)
	writeFile(t, filepath.Join(victim, "passwd"), "root:x:0:0::/root:/bin/bash\n")
	own := mk("ownmp", 65534)
	startDaemon(t, Config{Home: home, Socket: sock, AllowUIDs: []int{65534}})
	t.Cleanup(func() { unmountIfOurs("/etc") })

	refused := func(what string, err error, rule string) {
		t.Helper()
		if !errors.Is(err, api.ErrForbidden) || !strings.Contains(err.Error(), fmt.Sprintf("rule %q", rule)) {
			t.Errorf("%s: %v, want forbidden by rule %q", what, err, rule)
		}
	}
	root := dialAs(t, sock, 0, 0)
	_, err := ask(t, root, api.Request{Op: api.OpWsMount, Base: rootBase, Mountpoint: "/etc"})
	refused("root mounts over /etc", err, "system")
	if mounted("/etc") {
		t.Fatal("/etc is shadowed by a mount")
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("/etc/passwd: %v", err)
	}

	nobody := dialAs(t, sock, 65534, 65534)
	_, err = ask(t, nobody, api.Request{Op: api.OpWsMount, Base: evil, Mountpoint: victim})
	refused("uid 65534 mounts its dir over a root-owned dir", err, "owner")
	if b, _ := os.ReadFile(filepath.Join(victim, "passwd")); !strings.HasPrefix(string(b), "root:x:") || mounted(victim) {
		t.Fatalf("the victim directory is shadowed: %q", b)
	}
	_, err = ask(t, nobody, api.Request{Op: api.OpWsMount, Base: rootBase, Mountpoint: own})
	refused("uid 65534 mounts a root-owned base", err, "read-write")
	_, err = ask(t, nobody, api.Request{Op: api.OpTreeCreate, Base: "/root"})
	if !errors.Is(err, api.ErrForbidden) {
		t.Errorf("uid 65534 makes a tree of /root: %v, want forbidden", err)
	}

	// What uid 65534 may do: its own base on its own empty directory.
	r, err := ask(t, nobody, api.Request{Op: api.OpWsMount, Base: evil, Mountpoint: own})
	if err != nil {
		t.Fatalf("uid 65534 mounts its own base on its own directory: %v", err)
	}
	if r.Path != own || !mounted(own) {
		t.Fatalf("mounted at %q (mounted: %v), want %s", r.Path, mounted(own), own)
	}
	// Root's mount is root's: uid 65534 may not drive it.
	rootMp := mk("rootmp", 0)
	if _, err := ask(t, root, api.Request{Op: api.OpWsMount, Base: rootBase, Mountpoint: rootMp}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{api.OpWsCreate, api.OpWsCommit, api.OpWsAbort, api.OpWsSwitch, api.OpWsUnmount} {
		_, err := ask(t, nobody, api.Request{Op: op, Mountpoint: rootMp, Branch: "x"})
		if !errors.Is(err, api.ErrForbidden) {
			t.Errorf("uid 65534 %s on root's mount: %v, want forbidden", op, err)
		}
	}
	if _, err := ask(t, nobody, api.Request{Op: api.OpWsCreate, Mountpoint: own, Branch: "try"}); err != nil {
		t.Errorf("uid 65534 creates a branch on its own mount: %v", err)
	}
	if _, err := ask(t, root, api.Request{Op: api.OpWsUnmount, Mountpoint: own}); err != nil {
		t.Errorf("root unmounts uid 65534's mount: %v", err)
	}
}

// TestHTTPToken: without --token the daemon makes HOME/http.token (0600,
// 64 hex digits) at its first start, logs it once, keeps it across restarts,
// and every route but /healthz wants it.
func TestHTTPToken(t *testing.T) {
	testenv.NeedFUSE(t)
	home := filepath.Join(tempDir(t), "home")
	addr := freeAddr(t)
	var log lockedBuf
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Config{Home: home, HTTPAddr: addr, Ready: ready, Logger: newTextLogger(&log)})
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatal(err)
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
		}
	}
	stop := run()
	fi, err := os.Stat(filepath.Join(home, api.HTTPTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	tok, err := client.LoadToken(home)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
		t.Fatalf("token %q is not 32 random bytes in hex", tok)
	}
	waitHTTP(t, addr)
	get := func(path, auth string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/v1/trees", "", 401},
		{"/v1/trees", "Bearer wrong", 401},
		{"/v1/trees", "Bearer " + tok[:63], 401},
		{"/metrics", "", 401},
		{"/healthz", "", 200},
		{"/v1/trees", "Bearer " + tok, 200},
	} {
		if got := get(c.path, c.auth); got != c.want {
			t.Errorf("GET %s with %q: HTTP %d, want %d", c.path, c.auth, got, c.want)
		}
	}
	if _, err := client.NewHTTP("http://"+addr, tok, nil).Do(t.Context(), api.Request{Op: api.OpTreeList}); err != nil {
		t.Errorf("client with the file's token: %v", err)
	}
	stop()
	if n := strings.Count(log.String(), tok); n != 1 {
		t.Errorf("the token appears %d times in the log, want once at generation", n)
	}
	stop = run()
	defer stop()
	if again, _ := client.LoadToken(home); again != tok {
		t.Errorf("the token changed across a restart")
	}
	waitHTTP(t, addr)
	if got := get("/v1/trees", "Bearer "+tok); got != 200 {
		t.Errorf("after a restart: HTTP %d", got)
	}
	if strings.Count(log.String(), tok) != 1 {
		t.Errorf("the token was logged again at a restart")
	}
}

// lockedBuf is a log sink safe to read while the daemon writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func waitHTTP(t *testing.T, addr string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("HTTP at %s did not come up", addr)
}

// runDaemon starts the daemon and returns its stop.
func runDaemon(t *testing.T, cfg Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	cfg.Ready = ready
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}
}

// TestRestoreRechecks: a mount is restored at start-up only if its paths
// still pass the rules for the uid that made it. uid 65534 mounts on its own
// directory, then (daemon down) puts a symlink to a root-owned directory in
// its place: the restart must not mount there.
func TestRestoreRechecks(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	home, sockDir := filepath.Join(dir, "home"), filepath.Join(dir, "run")
	for _, p := range []string{sockDir, filepath.Join(dir, "evil"), filepath.Join(dir, "mp"), filepath.Join(dir, "victim")} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	evil, mp, victim := filepath.Join(dir, "evil"), filepath.Join(dir, "mp"), filepath.Join(dir, "victim")
	for _, p := range []string{evil, mp} {
		os.Chown(p, 65534, 65534)
	}
	writeFile(t, filepath.Join(victim, "passwd"), "root:x:0:0::/root:/bin/bash\n")
	cfg := Config{Home: home, Socket: filepath.Join(sockDir, "arbord.sock"), AllowUIDs: []int{65534}}
	stop := runDaemon(t, cfg)
	nobody := dialAs(t, cfg.Socket, 65534, 65534)
	if _, err := ask(t, nobody, api.Request{Op: api.OpWsMount, Base: evil, Mountpoint: mp}); err != nil {
		t.Fatal(err)
	}
	nobody.Close()
	stop()
	if err := os.Remove(mp); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, mp); err != nil {
		t.Fatal(err)
	}
	stop = runDaemon(t, cfg)
	defer stop()
	if mounted(victim) {
		unmountIfOurs(victim)
		t.Fatal("the restart mounted uid 65534's base over the root-owned directory its symlink names")
	}
	c := client.New(cfg.Socket)
	defer c.Close()
	r, err := c.Do(t.Context(), api.Request{Op: api.OpWsMounts})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mounts) != 0 {
		t.Errorf("mounts after the refused restore: %+v", r.Mounts)
	}
}
