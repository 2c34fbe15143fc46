package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	jail.Main() // a sandbox's init is a re-exec of this binary (the daemon's arbor)
	testscript.Main(m, map[string]func(){
		"arbor": func() {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
			stop()
			os.Exit(code)
		},
	})
}

// TestScripts runs testdata/*.txtar: the arbor command end to end, each
// script with its own ARBOR_HOME under $WORK and its own daemon (started by
// the CLI, stopped by the script; a cleanup stops or kills whatever is left
// and detaches any mount under $WORK).
func TestScripts(t *testing.T) {
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root for FUSE mounts"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "no /dev/fuse"
	}
	if why != "" {
		testenv.Missing(t, testenv.FUSE, why)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			home := filepath.Join(env.WorkDir, "home")
			home2 := filepath.Join(env.WorkDir, "home2") // a second daemon's, for scripts that need one
			env.Setenv("ARBOR_HOME", home)
			env.Setenv("HOME2", home2)
			env.Defer(func() {
				stopAll(env.T(), home2, "")
				stopAll(env.T(), home, env.WorkDir)
			})
			return nil
		},
		// [jail]: this host runs sandboxes (backend jail); where
		// ARBOR_TEST_REQUIRE names cgroup, one that does not fails.
		Condition: func(cond string) (bool, error) {
			if cond != "jail" {
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			err := jailbackend.Available()
			if err != nil && testenv.Required(testenv.Cgroup) {
				return false, fmt.Errorf("no sandboxes here (ARBOR_TEST_REQUIRE names %s): %w", testenv.Cgroup, err)
			}
			return err == nil, nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"nodepath": cmdNodePath,
			"freeport": cmdFreePort,
			"httpget":  cmdHTTPGet,
			"waitsock": cmdWaitSock,
			"mcpagent": cmdMCPAgent,
		},
	})
}

// cmdNodePath sets an environment variable to a live node's path:
// nodepath VAR TREE NODE.
func cmdNodePath(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 || neg {
		ts.Fatalf("usage: nodepath VAR TREE NODE")
	}
	cl := client.New(SocketPath(ts.Getenv("ARBOR_HOME")))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cl.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: args[1]})
	ts.Check(err)
	for _, n := range r.Nodes {
		if n.ID == args[2] {
			if n.Path == "" {
				ts.Fatalf("node %s has no path (state %s)", n.ID, n.State)
			}
			ts.Setenv(args[0], n.Path)
			return
		}
	}
	ts.Fatalf("no node %s in tree %s", args[2], args[1])
}

// cmdFreePort sets an environment variable to a loopback TCP port nobody
// listens on: freeport VAR.
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: freeport VAR")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Setenv(args[0], strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	l.Close()
}

// cmdWaitSock waits up to 20 s for a Unix socket to accept a connection
// (a daemon started in the background is ready): waitsock PATH. A client
// run before that would find no daemon and start a second one.
func cmdWaitSock(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: waitsock PATH")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", args[0])
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s accepts no connection after 20s: %v", args[0], err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cmdHTTPGet fetches a URL and writes the body to stdout; with ! it must
// fail to connect: [!] httpget URL.
func cmdHTTPGet(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: httpget URL")
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	res, err := hc.Get(args[0])
	if neg {
		if err == nil {
			res.Body.Close()
			ts.Fatalf("GET %s: HTTP %s, want no answer", args[0], res.Status)
		}
		return
	}
	ts.Check(err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	ts.Check(err)
	if res.StatusCode != http.StatusOK {
		ts.Fatalf("GET %s: HTTP %s: %s", args[0], res.Status, b)
	}
	ts.Stdout().Write(b)
}

// stopAll asks the daemon of home to exit; if it is still there after 20s
// it kills it (found by its exact --home argument); then it detaches any
// mount left under work. Nothing a script starts outlives it.
func stopAll(t testscript.T, home, work string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := client.New(SocketPath(home))
	if _, err := cl.Ping(ctx); err == nil {
		cl.Do(ctx, api.Request{Op: api.OpShutdown})
		t.Log("cleanup: the script left its daemon running; asked it to stop")
	}
	cl.Close()
	if !waitUnlocked(ctx, filepath.Join(home, "arbord.lock")) {
		for _, pid := range daemonPIDs(home) {
			t.Log("cleanup: killing daemon pid " + strconv.Itoa(pid))
			syscall.Kill(pid, syscall.SIGKILL)
		}
		kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
		waitUnlocked(kctx, filepath.Join(home, "arbord.lock"))
		kcancel()
	}
	if work != "" {
		detachUnder(work)
	}
}

// waitUnlocked waits until nobody holds the daemon lock at path.
func waitUnlocked(ctx context.Context, path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	defer f.Close()
	for {
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// daemonPIDs finds the processes running `... daemon --home HOME`.
func daemonPIDs(home string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		for i := 0; i+2 < len(args); i++ {
			if args[i] == "daemon" && args[i+1] == "--home" && args[i+2] == home {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// detachUnder lazily unmounts every mount at or below dir, deepest first.
func detachUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mps []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mps = append(mps, f[4])
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		unix.Unmount(mps[i], unix.MNT_DETACH)
	}
}
