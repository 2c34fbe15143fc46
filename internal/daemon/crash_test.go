package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// proc is a daemon running as a child process (the test binary re-executed).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	dir  string // the test's directory: every mount of the daemon is under it
}

func spawn(t *testing.T, home, dir string, env ...string) *proc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(home, "arbord.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), daemonHomeEnv+"="+home), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Never outlive the test process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), dir: dir}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill(t) })
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cl.Ping(ctx)
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(home, "arbord.log"))
			t.Fatalf("the daemon exited at start: %s\n%s", cmd.ProcessState, tail(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(home, "arbord.log"))
			t.Fatalf("the daemon did not answer within 20s: %v\n%s", err, tail(string(log)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *proc) kill(t *testing.T) {
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	// A thread waits in the kernel: an invalidation for a directory that a
	// client holds while it waits for the dead server (see recover.go).
	// Abort the connections as the next daemon does (abortMounts).
	t.Logf("daemon pid %d did not die within 5s of SIGKILL: aborting its FUSE connections", p.cmd.Process.Pid)
	abortUnder(p.dir)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Errorf("daemon pid %d still alive after aborting its FUSE connections", p.cmd.Process.Pid)
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// crashFiles is how many files each commit writes, all with one token.
const crashFiles = 4

// attempt is one commit a worker tried: its token, and whether the daemon
// acknowledged it.
type attempt struct {
	token string
	acked bool
}

// TestCrash SIGKILLs the daemon at random points of fork/write/commit loops,
// over a workspace mount and over a tree, and restarts it each time. After
// each kill the kernel mounts are dead (ENOTCONN); after each restart the
// workspace mount works again, the tree's nodes are consistent, and every
// commit is in its base all or none (all if acknowledged).
func TestCrash(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, wsBase, treeBase, mp := filepath.Join(dir, "home"), filepath.Join(dir, "wsbase"), filepath.Join(dir, "treebase"), filepath.Join(dir, "ws")
	for _, d := range []string{home, wsBase, treeBase} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(wsBase, "seed.txt"), "seed")
	writeFile(t, filepath.Join(treeBase, "seed.txt"), "seed")
	sock := filepath.Join(home, "arbord.sock")
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	p := spawn(t, home, dir)
	cl := client.New(sock)
	must := func(req api.Request) api.Response {
		t.Helper()
		r, err := cl.Do(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Op, err)
		}
		return r
	}
	must(api.Request{Op: api.OpWsMount, Base: wsBase, Mountpoint: mp})
	tr := must(api.Request{Op: api.OpTreeCreate, Base: treeBase, TreeID: "crash"})
	root, rootPath := tr.Root, tr.Path

	var mu sync.Mutex
	var wsTries, treeTries []attempt
	const rounds = 6
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for round := range rounds {
		// Two workers until the kill: each stops at its first error.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			wc := client.New(sock)
			defer wc.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("b%d-%d", round, i)
				token := fmt.Sprintf("ws-%d-%d", round, i)
				if _, err := wc.Do(ctx, api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: name, Parent: "main"}); err != nil {
					return
				}
				mu.Lock()
				wsTries = append(wsTries, attempt{token: token})
				k := len(wsTries) - 1
				mu.Unlock()
				for f := range crashFiles {
					if os.WriteFile(filepath.Join(mp, "@"+name, fmt.Sprintf("%s-%d.txt", token, f)), []byte(token), 0o644) != nil {
						return
					}
				}
				if _, err := wc.Do(ctx, api.Request{Op: api.OpWsCommit, Mountpoint: mp, Branch: name}); err != nil {
					return
				}
				mu.Lock()
				wsTries[k].acked = true
				mu.Unlock()
			}
		})
		wg.Go(func() {
			wc := client.New(sock)
			defer wc.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				token := fmt.Sprintf("tree-%d-%d", round, i)
				r, err := wc.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: "crash", SourceID: root, Label: token})
				if err != nil || r.Path == "" {
					return
				}
				mu.Lock()
				treeTries = append(treeTries, attempt{token: token})
				k := len(treeTries) - 1
				mu.Unlock()
				for f := range crashFiles {
					if os.WriteFile(filepath.Join(r.Path, fmt.Sprintf("%s-%d.txt", token, f)), []byte(token), 0o644) != nil {
						return
					}
				}
				if _, err := wc.Do(ctx, api.Request{Op: api.OpTreeCommit, TreeID: "crash", NodeID: r.NodeID}); err != nil {
					return
				}
				mu.Lock()
				treeTries[k].acked = true
				mu.Unlock()
			}
		})
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		p.kill(t)
		close(stop)
		waitGroup(t, &wg, 20*time.Second)
		cl.Close()

		// The kernel mounts of the killed daemon are dead until a restart.
		deadMount(t, round, "mount", filepath.Join(mp, "seed.txt"))
		deadMount(t, round, "tree mount", filepath.Join(rootPath, "seed.txt"))

		p = spawn(t, home, dir)
		cl = client.New(sock)
		checkCrash(t, ctx, cl, round, mp, wsBase, treeBase, &mu, wsTries, treeTries)
		if b, err := os.ReadFile(filepath.Join(rootPath, "seed.txt")); err != nil || string(b) != "seed" {
			t.Fatalf("round %d: the tree's mount does not work after restart: %q %v", round, b, err)
		}
	}
	mu.Lock()
	nws, ntree := 0, 0
	for _, a := range wsTries {
		if a.acked {
			nws++
		}
	}
	for _, a := range treeTries {
		if a.acked {
			ntree++
		}
	}
	mu.Unlock()
	t.Logf("%d rounds: %d/%d workspace commits and %d/%d tree commits acknowledged", rounds, nws, len(wsTries), ntree, len(treeTries))
	if nws == 0 || ntree == 0 {
		t.Errorf("no commit was acknowledged in %d rounds: the loops did not run", rounds)
	}
	// A clean stop unmounts everything.
	cl.Close()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit within 30s of SIGTERM")
	}
	if mounted(mp) {
		log, _ := os.ReadFile(filepath.Join(home, "arbord.log"))
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		t.Errorf("%s still mounted after the daemon's clean exit\n%s\n%s", mp, tail(string(log)), mi)
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("workers still running %s after the kill", d)
	}
}

// checkCrash checks the restarted daemon: the mount is back, every commit is
// all or none in its base (all if acknowledged), the tree is consistent.
func checkCrash(t *testing.T, ctx context.Context, cl *client.Client, round int, mp, wsBase, treeBase string, mu *sync.Mutex, wsTries, treeTries []attempt) {
	t.Helper()
	r, err := cl.Do(ctx, api.Request{Op: api.OpWsMounts})
	if err != nil {
		t.Fatalf("round %d: ws_mounts: %v", round, err)
	}
	if len(r.Mounts) != 1 || r.Mounts[0].Mountpoint != mp {
		t.Fatalf("round %d: mounts after restart: %+v, want %s", round, r.Mounts, mp)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "@main", "seed.txt")); err != nil || string(b) != "seed" {
		t.Fatalf("round %d: the mount does not work after restart: %q %v", round, b, err)
	}
	mu.Lock()
	defer mu.Unlock()
	allOrNone(t, round, "workspace", wsBase, wsTries)
	allOrNone(t, round, "tree", treeBase, treeTries)
	// The workspace's main shows the base.
	for _, a := range wsTries {
		_, errBase := os.Stat(filepath.Join(wsBase, a.token+"-0.txt"))
		_, errMnt := os.Stat(filepath.Join(mp, "@main", a.token+"-0.txt"))
		if (errBase == nil) != (errMnt == nil) {
			t.Errorf("round %d: %s in base %v, in the mount's main %v", round, a.token, errBase, errMnt)
		}
	}

	n, err := cl.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "crash"})
	if err != nil {
		t.Fatalf("round %d: tree_nodes after restart: %v", round, err)
	}
	byID := map[string]api.Node{}
	for _, nd := range n.Nodes {
		byID[nd.ID] = nd
	}
	if _, ok := byID[n.Root]; !ok {
		t.Fatalf("round %d: root %s missing from %+v", round, n.Root, n.Nodes)
	}
	live := 0
	for _, nd := range n.Nodes {
		if nd.ID != n.Root {
			p, ok := byID[nd.Parent]
			if !ok {
				t.Errorf("round %d: node %s has unknown parent %s", round, nd.ID, nd.Parent)
			} else if !strings.Contains(","+strings.Join(p.Children, ",")+",", ","+nd.ID+",") {
				t.Errorf("round %d: node %s not among its parent's children %v", round, nd.ID, p.Children)
			}
		}
		for _, c := range nd.Children {
			if byID[c].Parent != nd.ID {
				t.Errorf("round %d: child %s of %s has parent %q", round, c, nd.ID, byID[c].Parent)
			}
		}
		switch nd.State {
		case api.StateLive:
			live++
			if nd.Path == "" {
				t.Errorf("round %d: live node %s has no path", round, nd.ID)
			} else if _, err := os.Stat(filepath.Join(nd.Path, "seed.txt")); err != nil {
				t.Errorf("round %d: live node %s: %v", round, nd.ID, err)
			}
		case api.StateSuspended, api.StateStale:
		default:
			t.Errorf("round %d: node %s in state %q", round, nd.ID, nd.State)
		}
	}
	if n.Usage == nil || n.Usage.LiveNodes != live || n.Usage.TotalNodes != len(n.Nodes) {
		t.Errorf("round %d: usage %+v, counted %d live of %d", round, n.Usage, live, len(n.Nodes))
	}
	if n.Budget != nil && live > n.Budget.MaxLiveNodes {
		t.Errorf("round %d: %d live nodes over the budget of %d", round, live, n.Budget.MaxLiveNodes)
	}
	// Leftovers of the kill are aborted, so the next round starts clean.
	for _, nd := range n.Nodes {
		if nd.Parent == n.Root {
			if _, err := cl.Do(ctx, api.Request{Op: api.OpTreeAbort, TreeID: "crash", NodeID: nd.ID}); err != nil {
				t.Fatalf("round %d: abort %s: %v", round, nd.ID, err)
			}
		}
	}
}

func allOrNone(t *testing.T, round int, what, base string, tries []attempt) {
	t.Helper()
	for _, a := range tries {
		have := 0
		for f := range crashFiles {
			b, err := os.ReadFile(filepath.Join(base, fmt.Sprintf("%s-%d.txt", a.token, f)))
			if err == nil {
				if string(b) != a.token {
					t.Errorf("round %d: %s commit %s: file %d holds %q", round, what, a.token, f, b)
				}
				have++
			}
		}
		if have != 0 && have != crashFiles {
			t.Errorf("round %d: %s commit %s: %d of %d files in the base (torn)", round, what, a.token, have, crashFiles)
		}
		if a.acked && have != crashFiles {
			t.Errorf("round %d: acknowledged %s commit %s: %d of %d files in the base", round, what, a.token, have, crashFiles)
		}
	}
}

// deadMount checks that a stat of path, in a mount of a killed daemon,
// fails with ENOTCONN. Over FUSE io_uring the kernel tears the daemon's
// rings down after the process is gone, and only then its /dev/fuse: a
// request in between ends ECANCELED (its ring's task is dead) or
// ECONNABORTED (the connection's abort), so those are retried.
func deadMount(t *testing.T, round int, what, path string) {
	t.Helper()
	var st syscall.Stat_t
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := syscall.Stat(path, &st)
		if errors.Is(err, syscall.ENOTCONN) {
			return
		}
		if !errors.Is(err, syscall.ECONNABORTED) && !errors.Is(err, syscall.ECANCELED) || time.Now().After(deadline) {
			t.Fatalf("round %d: stat in the killed daemon's %s: %v, want ENOTCONN", round, what, err)
		}
	}
}
