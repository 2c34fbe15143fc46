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
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestJailTreeOverSocket: through the real daemon (FUSE-mounted tree
// files), a jail tree's child node runs commands in its own sandbox over
// its files, and a commit of the child ends every process it ran (a setsid
// one too), and carries its files into the parent.
func TestJailTreeOverSocket(t *testing.T) {
	testenv.NeedFUSE(t)
	if err := jailbackend.Available(); err != nil {
		testenv.Missing(t, testenv.Cgroup, "no sandboxes here: "+err.Error())
	}
	tg := realTarget(t)
	writeFile(t, filepath.Join(tg.Base, "f"), "from the base\n")
	c := client.New(serveLine(t, tg.Handler))
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := func(req api.Request) api.Response {
		t.Helper()
		r, err := c.Do(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Op, err)
		}
		return r
	}
	tr := must(api.Request{Op: api.OpTreeCreate, TreeID: "jt", Base: tg.Base, Backend: "jail"})
	if l := must(api.Request{Op: api.OpTreeList}); len(l.Trees) != 1 || l.Trees[0].Backend != "jail" {
		t.Fatalf("tree_list: %+v", l.Trees)
	}
	child := must(api.Request{Op: api.OpTreeFork, TreeID: "jt", SourceID: tr.Root, Label: "child"})
	t.Logf("fork of a live jail node: latency_ns %d", child.LatencyNS)

	run := func(node, script string) (string, api.ExecExit, error) {
		var out bytes.Buffer
		x, err := c.Exec(ctx, api.Request{TreeID: "jt", NodeID: node, Argv: []string{"sh", "-c", script}}, func(o api.ExecOutput) error {
			out.Write(o.Data)
			return nil
		})
		return out.String(), x, err
	}
	out, x, err := run(child.NodeID, "echo hi; cat /workspace/f; echo mine > /workspace/g")
	if err != nil || x.ExitCode != 0 || out != "hi\nfrom the base\n" {
		t.Fatalf("exec in the child: %q %+v %v", out, x, err)
	}
	if out, _, _ := run(tr.Root, "cat /workspace/g 2>&1"); strings.Contains(out, "mine") {
		t.Fatalf("the parent sees the child's file before the commit: %q", out)
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
	if out, x, err := run(tr.Root, "cat /workspace/g"); err != nil || x.ExitCode != 0 || out != "mine\n" {
		t.Fatalf("the parent after the commit reads %q (%+v %v)", out, x, err)
	}

	// One fork_batch of the live root: three children, each live in a
	// sandbox of its own (its hostname is its node id) over the files.
	fb := must(api.Request{Op: api.OpTreeForkBatch, TreeID: "jt", SourceID: tr.Root, Labels: []string{"a", "b", "c"}})
	if len(fb.Forks) != 3 {
		t.Fatalf("fork_batch: %+v", fb)
	}
	for _, f := range fb.Forks {
		t.Logf("fork_batch child %s: latency_ns %d", f.NodeID, f.LatencyNS)
		if out, x, err := run(f.NodeID, "hostname; cat /workspace/g"); err != nil || x.ExitCode != 0 || out != f.NodeID+"\nmine\n" {
			t.Fatalf("exec in batch child %s: %q %+v %v", f.NodeID, out, x, err)
		}
	}
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
