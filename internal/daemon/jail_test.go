package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestJailTreeOverSocket: through the real daemon (FUSE-mounted tree
// files), a jail tree's child node runs commands in its own sandbox over
// its files, and a commit of the child ends every process it ran (a setsid
// one too), and carries its files into the parent.
func TestJailTreeOverSocket(t *testing.T) {
	needJail(t)
	tg := realTarget(t)
	writeFile(t, filepath.Join(tg.Base, "f"), "from the base\n")
	c := client.New(serveLine(t, tg.Handler))
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := mustDo(t, ctx, c)
	tr := must(api.Request{Op: api.OpTreeCreate, TreeID: "jt", Base: tg.Base, Backend: "jail"})
	if l := must(api.Request{Op: api.OpTreeList}); len(l.Trees) != 1 || l.Trees[0].Backend != "jail" {
		t.Fatalf("tree_list: %+v", l.Trees)
	}
	run := func(node, script string) (string, api.ExecExit, error) { return shIn(ctx, c, "jt", node, script) }
	if out, x, err := run(tr.Root, "echo root > /tmp/r"); err != nil || x.ExitCode != 0 {
		t.Fatalf("exec in the root: %q %+v %v", out, x, err)
	}
	child := must(api.Request{Op: api.OpTreeFork, TreeID: "jt", SourceID: tr.Root, Label: "child"})
	t.Logf("fork of a live jail node: latency_ns %d", child.LatencyNS)
	if child.Processes != api.ProcessesNotCarried || len(child.Forks) != 1 || child.Forks[0].Processes != api.ProcessesNotCarried {
		t.Fatalf("a jail fork's reply says processes %q (%+v), want %q", child.Processes, child.Forks, api.ProcessesNotCarried)
	}

	out, x, err := run(child.NodeID, "echo hi; cat /workspace/f /tmp/r; echo mine > /workspace/g; echo tmp > /tmp/c")
	if err != nil || x.ExitCode != 0 || out != "hi\nfrom the base\nroot\n" {
		t.Fatalf("exec in the child: %q %+v %v", out, x, err)
	}
	if out, _, _ := run(tr.Root, "cat /workspace/g /tmp/c 2>/dev/null"); out != "" {
		t.Fatalf("the parent sees the child's files or /tmp before the commit: %q", out)
	}

	// Processes in the child: one the exec waits for, one it set loose.
	var mu sync.Mutex
	var longOut bytes.Buffer
	up := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, api.Request{TreeID: "jt", NodeID: child.NodeID, Argv: []string{"sh", "-c",
			"setsid sleep 987653 </dev/null >/dev/null 2>&1 & echo up; exec sleep 987654"}}, func(o api.ExecOutput) error {
			mu.Lock()
			longOut.Write(o.Data)
			mu.Unlock()
			once.Do(func() { close(up) })
			return nil
		})
		done <- err
	}()
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("the long command ended: %v", err)
	case <-ctx.Done():
		t.Fatal("the long command never started")
	}
	for _, arg := range []string{"987653", "987654"} {
		waitProcs(t, arg, true)
	}

	must(api.Request{Op: api.OpTreeCommit, TreeID: "jt", NodeID: child.NodeID})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the child's exec still runs after its commit")
	}
	for _, arg := range []string{"987653", "987654"} {
		waitProcs(t, arg, false)
	}
	if out, x, err := run(tr.Root, "cat /workspace/g /tmp/c"); err != nil || x.ExitCode != 0 || out != "mine\ntmp\n" {
		t.Fatalf("the parent after the commit reads %q (%+v %v)", out, x, err)
	}
	if _, err := os.Stat(filepath.Join(tg.Base, "c")); !os.IsNotExist(err) {
		t.Fatalf("the child's /tmp reached the base directory: %v", err)
	}

	// One fork_batch of the live root: three children, each live in a
	// sandbox of its own (its hostname is its node id) over the files.
	fb := must(api.Request{Op: api.OpTreeForkBatch, TreeID: "jt", SourceID: tr.Root, Labels: []string{"a", "b", "c"}})
	if len(fb.Forks) != 3 {
		t.Fatalf("fork_batch: %+v", fb)
	}
	for _, f := range fb.Forks {
		t.Logf("fork_batch child %s: latency_ns %d", f.NodeID, f.LatencyNS)
		if f.Processes != api.ProcessesNotCarried {
			t.Fatalf("fork_batch child %s: processes %q", f.NodeID, f.Processes)
		}
		if out, x, err := run(f.NodeID, "hostname; cat /workspace/g"); err != nil || x.ExitCode != 0 || out != f.NodeID+"\nmine\n" {
			t.Fatalf("exec in batch child %s: %q %+v %v", f.NodeID, out, x, err)
		}
	}
}

// needJail skips (or fails, under ARBOR_TEST_REQUIRE) where the daemon
// cannot serve jail trees.
func needJail(t testing.TB) {
	t.Helper()
	testenv.NeedFUSE(t)
	if err := jailbackend.Available(); err != nil {
		testenv.Missing(t, testenv.Cgroup, "no sandboxes here: "+err.Error())
	}
}

// shIn runs sh -c script in a node through cl and returns its output (both
// streams).
func shIn(ctx context.Context, cl *client.Client, tree, node, script string) (string, api.ExecExit, error) {
	var out bytes.Buffer
	x, err := cl.Exec(ctx, api.Request{TreeID: tree, NodeID: node, Argv: []string{"sh", "-c", script}}, func(o api.ExecOutput) error {
		out.Write(o.Data)
		return nil
	})
	return out.String(), x, err
}

// waitProcs waits until a host process "sleep ARG" exists (want) or none
// does, failing after 10 s.
func waitProcs(t *testing.T, arg string, want bool) {
	t.Helper()
	needle := []byte("sleep\x00" + arg + "\x00")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		found := false
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Equal(b, needle) {
				found = true
				break
			}
		}
		if found == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process sleep %s: present %v after 10 s, want %v", arg, found, want)
		}
	}
}

// TestJailDaemonKilled: a SIGKILLed daemon's sandboxes die with it (a
// setsid process too), and the next daemon on the home reaps what they
// left and runs the live node again over its files, with its /tmp kept.
func TestJailDaemonKilled(t *testing.T) {
	needJail(t)
	dir := tempDir(t)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	for _, d := range []string{home, base} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(base, "f"), "from the base\n")
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	p := spawn(t, home, dir)
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	tr := mustDo(t, ctx, cl)(api.Request{Op: api.OpTreeCreate, TreeID: "jk", Base: base, Backend: "jail"})
	run := func(script string) string {
		t.Helper()
		out, x, err := shIn(ctx, cl, "jk", tr.Root, script)
		if err != nil || x.ExitCode != 0 {
			t.Fatalf("exec %q: %+v %v (output %q)", script, x, err, out)
		}
		return out
	}
	run("echo kept > /tmp/t; setsid sleep 987656 </dev/null >/dev/null 2>&1 &")
	waitProcs(t, "987656", true)
	p.kill(t)
	waitProcs(t, "987656", false)

	p = spawn(t, home, dir)
	cl2 := client.New(filepath.Join(home, "arbord.sock"))
	defer cl2.Close()
	cl = cl2
	if got := run("cat /tmp/t /workspace/f"); got != "kept\nfrom the base\n" {
		t.Fatalf("the live node after a restart reads %q", got)
	}
	// A graceful stop closes the tree's sandboxes and their cgroups,
	// those the killed daemon left included (reaped at the restart).
	label := jailbackend.Label(engine.BackendConfig{Tree: "jk", Dir: filepath.Join(home, "trees", "jk", "backend")})
	if len(jailCgroups(t, label)) == 0 {
		t.Fatalf("no cgroup of label %s found while its sandbox runs", label)
	}
	if _, err := cl.Do(ctx, api.Request{Op: api.OpShutdown}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not exit after shutdown")
	}
	if left := jailCgroups(t, label); len(left) > 0 {
		t.Fatalf("cgroups left after the daemon stopped: %v", left)
	}
}

// jailCgroups are the cgroup directories of a jail label below this
// process's cgroups (cgroup2, a hybrid host's unified tree, v1 controllers).
func jailCgroups(t *testing.T, label string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		roots := []string{filepath.Join("/sys/fs/cgroup", f[1])}
		if f[1] == "" {
			roots = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
		}
		for _, r := range roots {
			d := filepath.Join(r, f[2], "arbor-jail", label)
			if _, err := os.Stat(d); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// TestJailLimitsOverSocket: a jail tree's budget limits each node's
// sandbox: the per-node limits come back in the tree's budget, a command
// past the memory limit ends with oom_killed on the wire, and a fork bomb
// meets EAGAIN.
func TestJailLimitsOverSocket(t *testing.T) {
	needJail(t)
	tg := realTarget(t)
	c := client.New(serveLine(t, tg.Handler))
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := mustDo(t, ctx, c)
	b := &api.Budget{MaxNodeRAMBytes: 64 << 20, MaxNodePids: 32}
	tr := must(api.Request{Op: api.OpTreeCreate, TreeID: "jl", Base: tg.Base, Backend: "jail", Budget: b})
	nodes := must(api.Request{Op: api.OpTreeNodes, TreeID: "jl"})
	if nodes.Budget == nil || nodes.Budget.MaxNodeRAMBytes != 64<<20 || nodes.Budget.MaxNodePids != 32 {
		t.Fatalf("the tree's budget: %+v", nodes.Budget)
	}
	out, x, err := shIn(ctx, c, "jl", tr.Root, `perl -e 'my $x = "a" x (256 << 20)'; echo "exit $?"`)
	if err != nil || !x.OOMKilled || !strings.Contains(out, "exit 137") {
		t.Fatalf("256 MiB under a 64 MiB node limit: %q %+v %v, want oom_killed", out, x, err)
	}
	// What /tmp holds is the node's disk usage too.
	if out, x, err := shIn(ctx, c, "jl", tr.Root, "head -c 3145728 /dev/urandom > /tmp/three"); err != nil || x.ExitCode != 0 {
		t.Fatalf("write /tmp: %q %+v %v", out, x, err)
	}
	var disk int64
	for deadline := time.Now().Add(5 * time.Second); disk < 3<<20 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, n := range must(api.Request{Op: api.OpTreeNodes, TreeID: "jl"}).Nodes {
			if n.ID == tr.Root {
				disk = n.DiskBytes
			}
		}
	}
	if disk < 3<<20 {
		t.Fatalf("the root holds 3 MiB in /tmp, tree_nodes says disk_bytes %d", disk)
	}
	out, x, err = shIn(ctx, c, "jl", tr.Root, `perl -e 'my @k; while (1) { my $p = fork; if (!defined $p) { print $!{EAGAIN} ? "EAGAIN\n" : "$!\n"; kill "KILL", @k; exit 0 } if ($p == 0) { sleep 60; exit 0 } push @k, $p; if (@k > 100) { print "no limit\n"; kill "KILL", @k; exit 0 } }'`)
	if err != nil || x.ExitCode != 0 || out != "EAGAIN\n" {
		t.Fatalf("a fork bomb under a pids limit of 32: %q %+v %v", out, x, err)
	}
}
