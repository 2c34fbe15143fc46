package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/jailbackend"
)

// The jail backend under load, through the daemon: a prune of a subtree of
// 32 live sandboxes each running a shell loop, and SIGKILLs of arbord at
// random points of start, exec, fork and kill.

// loadSize is how many live sandboxes a load subtree holds.
const loadSize = 32

// loadSubtree is a subtree of loadSize live jail nodes under one ancestor,
// each running a shell loop over tree_exec.
type loadSubtree struct {
	ancestor string
	nodes    []string // the ancestor first
	mark     string   // in every loop's command line
	wg       sync.WaitGroup
	mu       sync.Mutex // guards exits
	exits    map[string]execResult
}

type execResult struct {
	exit api.ExecExit
	err  error
}

// loopScript prints "up" and forks a sleep every 50 ms until killed.
const loopScript = `echo up; while :; do sleep 0.05; done`

// startLoadSubtree forks a child of root (the ancestor), fork_batches 15
// children of it and 16 of its first child (32 sandboxes, three levels),
// and starts a shell loop in each; it returns once every loop printed.
// The loops end when their sandbox does; wait collects how.
func startLoadSubtree(tb testing.TB, ctx context.Context, cl *client.Client, tree, root, mark string) *loadSubtree {
	tb.Helper()
	do := func(req api.Request) api.Response {
		tb.Helper()
		r, err := cl.Do(ctx, req)
		if err != nil {
			tb.Fatalf("%s: %v", req.Op, err)
		}
		return r
	}
	labels := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = prefix + strconv.Itoa(i)
		}
		return out
	}
	ls := &loadSubtree{mark: mark, exits: map[string]execResult{}}
	ls.ancestor = do(api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: "ancestor"}).NodeID
	ls.nodes = append(ls.nodes, ls.ancestor)
	fb := do(api.Request{Op: api.OpTreeForkBatch, TreeID: tree, SourceID: ls.ancestor, Labels: labels("c", 15)})
	// The jail backend measures its forks of a live source: the pause, and
	// each child's sandbox start.
	if fb.PauseNS <= 0 || fb.PauseNS >= fb.LatencyNS {
		tb.Errorf("fork_batch of a live node: pause_ns %d (latency_ns %d)", fb.PauseNS, fb.LatencyNS)
	}
	kids := fb.Forks
	for _, f := range kids {
		if f.StartNS <= 0 || f.StartNS >= fb.LatencyNS {
			tb.Errorf("fork_batch child %s: start_ns %d (latency_ns %d)", f.NodeID, f.StartNS, fb.LatencyNS)
		}
		ls.nodes = append(ls.nodes, f.NodeID)
	}
	for _, f := range do(api.Request{Op: api.OpTreeForkBatch, TreeID: tree, SourceID: kids[0].NodeID, Labels: labels("g", 16)}).Forks {
		ls.nodes = append(ls.nodes, f.NodeID)
	}
	if len(ls.nodes) != loadSize {
		tb.Fatalf("%d nodes in the load subtree, want %d", len(ls.nodes), loadSize)
	}
	up := make(chan string, len(ls.nodes))
	for _, n := range ls.nodes {
		ls.wg.Go(func() {
			var once sync.Once
			x, err := cl.Exec(ctx, api.Request{TreeID: tree, NodeID: n, Argv: []string{"sh", "-c", loopScript, mark}}, func(o api.ExecOutput) error {
				if bytes.Contains(o.Data, []byte("up")) {
					once.Do(func() { up <- n })
				}
				return nil
			})
			ls.mu.Lock()
			ls.exits[n] = execResult{x, err}
			ls.mu.Unlock()
			once.Do(func() { up <- "" }) // ended before it printed: reported below
		})
	}
	for range ls.nodes {
		select {
		case n := <-up:
			if n == "" {
				ls.wg.Wait()
				tb.Fatalf("a loop ended before it started: %+v", ls.exits)
			}
		case <-ctx.Done():
			tb.Fatal("the loops did not all start")
		}
	}
	return ls
}

// wait waits for every loop's exec to end (bounded) and returns how each
// ended.
func (ls *loadSubtree) wait(tb testing.TB, d time.Duration) map[string]execResult {
	tb.Helper()
	done := make(chan struct{})
	go func() { ls.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		tb.Fatalf("loops still running %s after their sandboxes were stopped", d)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.exits
}

// jailTree creates a jail tree over a one-file base whose budget fits the
// load subtree and the root.
func jailTree(tb testing.TB, ctx context.Context, cl *client.Client, base, id string) api.Response {
	tb.Helper()
	writeFile(tb, filepath.Join(base, "f"), "from the base\n")
	r, err := cl.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: id, Base: base, Backend: "jail", Budget: &api.Budget{MaxLiveNodes: loadSize + 8}})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// procsMarked are the host pids whose command line holds mark.
func procsMarked(mark string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Contains(b, []byte(mark)) {
			out = append(out, pid)
		}
	}
	return out
}

// procsInJail maps each running host process in a cgroup of the jail
// label to the sandbox (cgroup directory below the label) it is in. A
// zombie is not running: a killed daemon's inits are reparented to the
// host's init, which reaps them when it will (on some hosts never), and
// a zombie keeps its cgroup.
func procsInJail(label string) map[int]string {
	out := map[int]string{}
	needle := "/arbor-jail/" + label + "/"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || exited(pid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, needle); i >= 0 {
				out[pid] = strings.SplitN(line[i+len(needle):], "/", 2)[0]
				break
			}
		}
	}
	return out
}

// TestJailPrune32: one tree_prune of the common ancestor of 32 live
// sandboxes, each running a shell loop, returns with every process of
// them gone (by their command lines and by their cgroups, which are
// removed too); each loop's exec ends with SIGKILL, and the root's sandbox
// runs on.
func TestJailPrune32(t *testing.T) {
	needJail(t)
	dir := tempDir(t)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	startDaemon(t, Config{Home: home})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	tr := jailTree(t, ctx, cl, base, "load")
	label := jailbackend.Label(engine.BackendConfig{Tree: "load", Dir: filepath.Join(home, "trees", "load", "backend")})
	mark := fmt.Sprintf("arbor-load-%d", os.Getpid())
	ls := startLoadSubtree(t, ctx, cl, "load", tr.Root, mark)

	// A loop shell's fork before it execs a sleep has its command line
	// for a moment: count the marked processes whose parent is not. Such a
	// fork may also exit between the reads of /proc (its parent then reads
	// as 0), so the count is taken again until it settles.
	var marked []int
	loops := 0
	for deadline := time.Now().Add(10 * time.Second); ; {
		marked, loops = procsMarked(mark), 0
		for _, pid := range marked {
			if pp := parentOf(pid); pp != 0 && !slices.Contains(marked, pp) {
				loops++
			}
		}
		if loops == loadSize || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if loops != loadSize {
		t.Fatalf("%d loop shells on the host, want %d (%v)", loops, loadSize, cmdlines(marked))
	}
	inJail := procsInJail(label)
	for _, n := range ls.nodes {
		found := false
		for _, sb := range inJail {
			found = found || sb == n
		}
		if !found {
			t.Fatalf("no process in the cgroup of node %s: %v", n, inJail)
		}
	}

	t0 := time.Now()
	if _, err := cl.Do(ctx, api.Request{Op: api.OpTreePrune, TreeID: "load", NodeID: ls.ancestor}); err != nil {
		t.Fatal(err)
	}
	t.Logf("prune of %d live sandboxes: %s", loadSize, time.Since(t0))

	// When the prune answers, nothing of the subtree runs.
	if left := procsMarked(mark); len(left) > 0 {
		t.Errorf("loop shells left after the prune: %v", left)
	}
	pruned := map[string]bool{}
	for _, n := range ls.nodes {
		pruned[n] = true
	}
	for pid, sb := range procsInJail(label) {
		if pruned[sb] {
			t.Errorf("pid %d still in the cgroup of pruned node %s", pid, sb)
		}
	}
	for _, d := range jailCgroups(t, label) {
		for _, n := range ls.nodes {
			if _, err := os.Stat(filepath.Join(d, n)); err == nil {
				t.Errorf("cgroup %s of pruned node %s left", filepath.Join(d, n), n)
			}
		}
	}
	for n, r := range ls.wait(t, 10*time.Second) {
		if r.err == nil && r.exit.Signal != "KILL" {
			t.Errorf("the loop of %s ended %+v, want signal KILL", n, r.exit)
		}
		if r.err != nil && !errors.Is(r.err, api.ErrState) {
			t.Errorf("the loop of %s: %v", n, r.err)
		}
	}
	if out, x, err := shIn(ctx, cl, "load", tr.Root, "cat /workspace/f"); err != nil || x.ExitCode != 0 || out != "from the base\n" {
		t.Fatalf("the root after the prune: %q %+v %v", out, x, err)
	}
	nodes, err := cl.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "load"})
	if err != nil || len(nodes.Nodes) != 1 {
		t.Fatalf("tree_nodes after the prune: %+v %v", nodes.Nodes, err)
	}
}

// BenchmarkJailPrune32 times one tree_prune of the ancestor of 32 live
// sandboxes, each running a shell loop, through the daemon (in-process,
// over its socket) until it answers, all of them gone; the p50 is
// reported as prune-ns. Building the subtree is off the clock.
//
//	go test -run '^$' -bench JailPrune32 -benchtime 10x ./internal/daemon/
func BenchmarkJailPrune32(b *testing.B) {
	needJail(b)
	dir := tempDir(b)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	startDaemon(b, Config{Home: home})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	b.Cleanup(func() { cl.Close() })
	ctx := context.Background()
	tr := jailTree(b, ctx, cl, base, "bload")
	var ds []time.Duration
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		ls := startLoadSubtree(b, ctx, cl, "bload", tr.Root, fmt.Sprintf("arbor-bload-%d-%d", os.Getpid(), i))
		b.StartTimer()
		t0 := time.Now()
		if _, err := cl.Do(ctx, api.Request{Op: api.OpTreePrune, TreeID: "bload", NodeID: ls.ancestor}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		ls.wait(b, 10*time.Second)
	}
	p50(b, ds, "prune-ns")
}

// TestJailCrash SIGKILLs arbord at random points of fork_batch (sandbox
// starts), exec (a shell loop and setsid'd sleeps), prune and abort
// (kills) on a jail tree, and restarts it each time. After each restart no
// process of a sandbox runs unowned: nothing the killed daemon's sandboxes
// ran is left (by command line), and every process in a cgroup of the
// tree's label is a descendant of the new daemon, in the cgroup of a node
// the tree holds live or of the new daemon's spare. The tree holds: its
// nodes are consistent, and every live node runs commands over its files.
func TestJailCrash(t *testing.T) {
	needJail(t)
	dir := tempDir(t)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(home, "arbord.sock")
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	p := spawn(t, home, dir)
	cl := client.New(sock)
	tr := jailTree(t, ctx, cl, base, "jc")
	cl.Close()
	label := jailbackend.Label(engine.BackendConfig{Tree: "jc", Dir: filepath.Join(home, "trees", "jc", "backend")})
	mark := fmt.Sprintf("arbor-crash-%d", os.Getpid())
	rng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	const rounds = 5
	var forks, execs, kills int
	for round := range rounds {
		stop := make(chan struct{})
		stopped := func() bool {
			select {
			case <-stop:
				return true
			default:
				return false
			}
		}
		var mu sync.Mutex // guards the counts
		var wg sync.WaitGroup
		// Starts and kills: fork_batch of the root, a loop in one child,
		// a prune of one and an abort of the rest.
		wg.Go(func() {
			wc := client.New(sock)
			defer wc.Close()
			var loops sync.WaitGroup
			defer loops.Wait()
			for i := 0; !stopped(); i++ {
				fb, err := wc.Do(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: "jc", SourceID: tr.Root, Labels: []string{"x", "y", "z"}})
				if err != nil {
					return
				}
				mu.Lock()
				forks++
				mu.Unlock()
				x := fb.Forks[0].NodeID
				loops.Go(func() {
					wc.Exec(ctx, api.Request{TreeID: "jc", NodeID: x, Argv: []string{"sh", "-c", loopScript, mark}}, func(api.ExecOutput) error { return nil })
				})
				if _, err := wc.Do(ctx, api.Request{Op: api.OpTreePrune, TreeID: "jc", NodeID: x}); err != nil {
					return
				}
				for _, f := range fb.Forks[1:] {
					if _, err := wc.Do(ctx, api.Request{Op: api.OpTreeAbort, TreeID: "jc", NodeID: f.NodeID}); err != nil {
						return
					}
				}
				mu.Lock()
				kills++
				mu.Unlock()
			}
		})
		// Execs in the root: each leaves a setsid'd sleep behind.
		wg.Go(func() {
			wc := client.New(sock)
			defer wc.Close()
			for !stopped() {
				x, err := wc.Exec(ctx, api.Request{TreeID: "jc", NodeID: tr.Root, Argv: []string{"sh", "-c",
					"setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $0 >/dev/null", mark}}, func(api.ExecOutput) error { return nil })
				if err != nil || x.ExitCode != 0 {
					return
				}
				mu.Lock()
				execs++
				mu.Unlock()
			}
		})
		time.Sleep(time.Duration(100+rng.IntN(600)) * time.Millisecond)
		p.kill(t)
		close(stop)
		waitGroup(t, &wg, 20*time.Second)

		p = spawn(t, home, dir)
		cl = client.New(sock)
		checkJailCrash(t, ctx, cl, round, home, label, mark, p.cmd.Process.Pid)
		cl.Close()
	}
	t.Logf("%d rounds: %d fork_batches, %d execs, %d prunes acknowledged", rounds, forks, execs, kills)
	if forks == 0 || execs == 0 {
		t.Errorf("no fork or no exec acknowledged in %d rounds: the loops did not run", rounds)
	}
	// A graceful stop leaves no cgroup of the label behind, those the
	// killed daemons left included (reaped at each restart).
	cl = client.New(sock)
	defer cl.Close()
	if _, err := cl.Do(ctx, api.Request{Op: api.OpShutdown}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not exit after shutdown")
	}
	if left := jailCgroups(t, label); len(left) > 0 {
		t.Errorf("cgroups left after the daemon stopped: %v", left)
	}
}

// checkJailCrash checks a restarted daemon's jail tree "jc" (see
// TestJailCrash) and aborts the root's children for the next round.
func checkJailCrash(t *testing.T, ctx context.Context, cl *client.Client, round int, home, label, mark string, daemonPid int) {
	t.Helper()
	n, err := cl.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "jc"}) // the tree is open: its backend has reaped
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(home, "arbord.log"))
		t.Fatalf("round %d: tree_nodes after restart: %v\n%s", round, err, tail(string(log)))
	}
	byID := map[string]api.Node{}
	for _, nd := range n.Nodes {
		byID[nd.ID] = nd
	}
	// The sleeps keep the mark in their parent's argv only: the sleeps are
	// in the root's cgroup, checked below. Nothing marked may be left.
	if left := procsMarked(mark); len(left) > 0 {
		t.Errorf("round %d: processes of the killed daemon's sandboxes left: %v", round, cmdlines(left))
	}
	for pid, sb := range procsInJail(label) {
		nd, ok := byID[sb]
		if !(ok && nd.State == api.StateLive) && !strings.HasPrefix(sb, fmt.Sprintf(".spare-%d-", daemonPid)) {
			t.Errorf("round %d: pid %d (%v) in cgroup %s, which is no live node's nor the new daemon's spare", round, pid, cmdlines([]int{pid}), sb)
		}
		if !descendantOf(pid, daemonPid) {
			t.Errorf("round %d: pid %d (%v) in cgroup %s is not the new daemon's (pid %d)", round, pid, cmdlines([]int{pid}), sb, daemonPid)
		}
	}
	for _, d := range jailCgroups(t, label) {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			nd, ok := byID[e.Name()]
			if !(ok && nd.State == api.StateLive) && !strings.HasPrefix(e.Name(), fmt.Sprintf(".spare-%d-", daemonPid)) {
				t.Errorf("round %d: cgroup %s left, of no live node", round, filepath.Join(d, e.Name()))
			}
		}
	}
	if _, ok := byID[n.Root]; !ok {
		t.Fatalf("round %d: root %s missing from %+v", round, n.Root, n.Nodes)
	}
	for _, nd := range n.Nodes {
		if nd.ID != n.Root {
			p, ok := byID[nd.Parent]
			if !ok || !strings.Contains(","+strings.Join(p.Children, ",")+",", ","+nd.ID+",") {
				t.Errorf("round %d: node %s not among the children of its parent %s", round, nd.ID, nd.Parent)
			}
		}
		if nd.State != api.StateLive {
			continue
		}
		if out, x, err := shIn(ctx, cl, "jc", nd.ID, "cat /workspace/f"); err != nil || x.ExitCode != 0 || out != "from the base\n" {
			t.Errorf("round %d: live node %s after restart: %q %+v %v", round, nd.ID, out, x, err)
		}
	}
	for _, nd := range n.Nodes {
		if nd.Parent == n.Root {
			if _, err := cl.Do(ctx, api.Request{Op: api.OpTreeAbort, TreeID: "jc", NodeID: nd.ID}); err != nil {
				t.Fatalf("round %d: abort %s: %v", round, nd.ID, err)
			}
		}
	}
}

// descendantOf says whether pid is ancestor or below it on the host.
func descendantOf(pid, ancestor int) bool {
	for i := 0; pid > 1 && i < 64; i++ {
		if pid == ancestor {
			return true
		}
		pid = parentOf(pid)
	}
	return pid == ancestor
}

// parentOf is pid's parent on the host (0 if it is gone).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// cmdlines are the command lines of pids, for messages.
func cmdlines(pids []int) []string {
	var out []string
	for _, pid := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("%d:%s", pid, strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " ")))
	}
	return out
}
