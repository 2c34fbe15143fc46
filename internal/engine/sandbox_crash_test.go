package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

const (
	sandboxCrashHome  = "ARBOR_ENGINE_SANDBOX_CRASH_HOME"
	sandboxCrashBase  = "ARBOR_ENGINE_SANDBOX_CRASH_BASE"
	sandboxCrashPoint = "ARBOR_ENGINE_SANDBOX_CRASH_POINT"
)

// sandboxCrashPoints are the backend steps of doc.go's crash table, each
// with the backend call that SIGKILLs the process once its effect is saved
// and the verb it happens in. Tree "c" is set up as n1 -> n2, n3; n2 -> n4,
// n5; n3 suspended; n4 holding the file "mark".
var sandboxCrashPoints = []struct {
	name, at string
	verb     api.Request
}{
	{"create: root started, before the metadata", "Start:n1", api.Request{}},
	{"fork: children started, source resumed, before the metadata", "Fork:n1", api.Request{Op: api.OpTreeFork, SourceID: "n1", Label: "x"}},
	{"suspend: sandbox suspended, before the metadata", "Suspend:n4", api.Request{Op: api.OpTreeSuspend, NodeID: "n4"}},
	{"resume: sandbox resumed, before the metadata", "Resume:n3", api.Request{Op: api.OpTreeResume, NodeID: "n3"}},
	{"auto_evict: a sandbox suspended, before the metadata", "Suspend:*", api.Request{Op: api.OpTreeAutoEvict}},
	{"abort: a leaf stopped, its parent not yet", "Stop:n4", api.Request{Op: api.OpTreeAbort, NodeID: "n2"}},
	{"prune: the subtree stopped, before the metadata", "Stop:n2", api.Request{Op: api.OpTreePrune, NodeID: "n2"}},
	{"commit: child suspended, before the intent", "Suspend:n4", api.Request{Op: api.OpTreeCommit, NodeID: "n4"}},
	{"commit: files committed, the backend carried the child's state, before the metadata", "Commit:n4", api.Request{Op: api.OpTreeCommit, NodeID: "n4"}},
	{"commit: committed, child stopped, stale sibling not yet", "Stop:n4", api.Request{Op: api.OpTreeCommit, NodeID: "n4"}},
	{"commit: committed, stale sibling stopped", "Stop:n5", api.Request{Op: api.OpTreeCommit, NodeID: "n4"}},
}

// TestSandboxCrashHelper is the subprocess of TestSandboxCrash: it sets up
// tree "c", prints "ready", and runs the point's verb with the double set
// to SIGKILL the process at the point's backend call.
func TestSandboxCrashHelper(t *testing.T) {
	home := os.Getenv(sandboxCrashHome)
	if home == "" {
		t.Skip("the subprocess of TestSandboxCrash")
	}
	fail := func(format string, args ...any) {
		fmt.Printf("fatal "+format+"\n", args...)
		os.Exit(2)
	}
	point := os.Getenv(sandboxCrashPoint)
	var pt = sandboxCrashPoints[0]
	for _, p := range sandboxCrashPoints {
		if p.name == point {
			pt = p
		}
	}
	hb := newHostBackends()
	e, err := engine.New(engine.Config{Home: home, OpenFiles: enginetest.OpenDirFiles, Backends: map[string]engine.OpenBackend{"host": hb.open}})
	if err != nil {
		fail("%v", err)
	}
	ctx := context.Background()
	create := api.Request{Op: api.OpTreeCreate, TreeID: "c", Base: os.Getenv(sandboxCrashBase), Backend: "host"}
	if pt.verb.Op == "" {
		hb.crashAt = pt.at
		fmt.Println("ready")
		e.Do(ctx, create)
		fail("create did not crash")
	}
	for _, r := range []api.Request{create,
		{Op: api.OpTreeForkBatch, TreeID: "c", SourceID: "n1", Labels: []string{"a", "b"}},
		{Op: api.OpTreeForkBatch, TreeID: "c", SourceID: "n2", Labels: []string{"c", "d"}},
		{Op: api.OpTreeSuspend, TreeID: "c", NodeID: "n3"},
	} {
		if _, err := e.Do(ctx, r); err != nil {
			fail("%s: %v", r.Op, err)
		}
	}
	n, err := e.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "c"})
	if err != nil {
		fail("%v", err)
	}
	if err := os.WriteFile(filepath.Join(nodeMap(n)["n4"].Path, "mark"), []byte("n4"), 0o644); err != nil {
		fail("%v", err)
	}
	hb.setRAM("n4", 1<<40) // for auto_evict: far over the default budget
	hb.mu.Lock()
	hb.crashAt = pt.at
	hb.mu.Unlock()
	fmt.Println("ready")
	v := pt.verb
	v.TreeID = "c"
	_, err = e.Do(ctx, v)
	fail("%s did not crash (err %v)", v.Op, err)
}

// TestSandboxCrash SIGKILLs the engine at each backend step of every verb
// (the crash table in doc.go) and checks that the reopened tree is
// consistent and agrees with its backend, and that the verb either happened
// or did not.
func TestSandboxCrash(t *testing.T) {
	for _, pt := range sandboxCrashPoints {
		t.Run(pt.name, func(t *testing.T) {
			home, base := t.TempDir(), newBase(t)
			cmd := exec.Command(os.Args[0], "-test.run=^TestSandboxCrashHelper$", "-test.v=false")
			cmd.Env = append(os.Environ(), sandboxCrashHome+"="+home, sandboxCrashBase+"="+base, sandboxCrashPoint+"="+pt.name)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !strings.Contains(out.String(), "crashing at") {
				t.Fatalf("helper was not killed at %s: %v\n%s", pt.at, err, out.String())
			}
			hb := newHostBackends()
			e := newHostEngine(t, home, hb)
			if pt.verb.Op == "" {
				// The tree was never created: its id is free, and a new
				// create stops what the first one left.
				do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "c", Base: base, Backend: "host"})
				checkAgree(t, e, "c")
				return
			}
			reconciled := hb.calls()
			checkAgree(t, e, "c")
			nodes := nodeMap(do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "c"}))
			state := func(id string) string { return nodes[id].State }
			switch pt.at + " " + pt.verb.Op {
			case "Fork:n1 " + api.OpTreeFork:
				if _, ok := nodes["n6"]; ok {
					t.Fatal("a fork killed before its metadata left its child")
				}
			case "Suspend:n4 " + api.OpTreeSuspend, "Suspend:n4 " + api.OpTreeCommit:
				if state("n4") != api.StateLive {
					t.Fatalf("n4 is %q: the verb never reached its commit point", state("n4"))
				}
			case "Resume:n3 " + api.OpTreeResume:
				if state("n3") != api.StateSuspended {
					t.Fatalf("n3 is %q", state("n3"))
				}
			case "Stop:n4 " + api.OpTreeAbort, "Stop:n2 " + api.OpTreePrune:
				if state("n2") != api.StateLive || state("n4") != api.StateLive {
					t.Fatalf("n2 %q, n4 %q: the removal never reached its commit point; its live nodes are restarted", state("n2"), state("n4"))
				}
			case "Stop:n4 " + api.OpTreeCommit, "Stop:n5 " + api.OpTreeCommit, "Commit:n4 " + api.OpTreeCommit:
				if pt.at == "Commit:n4" && !slices.Contains(reconciled, "commit n4 into n2") {
					t.Fatalf("reopen after a commit cut short: backend calls %v, want the backend's commit again", reconciled)
				}
				if _, ok := nodes["n4"]; ok {
					t.Fatal("a commit past its commit point left its child")
				}
				if state("n5") != api.StateStale {
					t.Fatalf("n5 is %q, want stale", state("n5"))
				}
				if got := readFile(t, nodes["n2"].Path, "mark"); got != "n4" {
					t.Fatalf("the committed mark in n2: %q", got)
				}
			}
		})
	}
}

const sandboxLoopSeed = "ARBOR_ENGINE_SANDBOX_LOOP_SEED"

// TestSandboxLoopHelper is the subprocess of TestSandboxCrashRandom: random
// verbs on tree "c" of the host double, with random RAM, until killed.
func TestSandboxLoopHelper(t *testing.T) {
	home := os.Getenv(sandboxCrashHome)
	if home == "" || os.Getenv(sandboxLoopSeed) == "" {
		t.Skip("the subprocess of TestSandboxCrashRandom")
	}
	var seed uint64
	fmt.Sscan(os.Getenv(sandboxLoopSeed), &seed)
	r := rand.New(rand.NewPCG(seed, 11))
	hb := newHostBackends()
	e, err := engine.New(engine.Config{Home: home, OpenFiles: enginetest.OpenDirFiles, Backends: map[string]engine.OpenBackend{"host": hb.open}})
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(2)
	}
	ctx := context.Background()
	if _, err := e.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "c"}); err != nil {
		if _, err := e.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "c", Base: os.Getenv(sandboxCrashBase), Backend: "host",
			Budget: &api.Budget{MaxLiveNodes: 6, MaxLiveRAMBytes: 1000}}); err != nil {
			fmt.Println("fatal", err)
			os.Exit(2)
		}
	}
	fmt.Println("ready")
	for {
		nodes, err := e.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "c"})
		if err != nil {
			fmt.Println("fatal", err)
			os.Exit(2)
		}
		pick := nodes.Nodes[r.IntN(len(nodes.Nodes))].ID
		hb.setRAM(pick, int64(r.IntN(400)))
		ops := []string{api.OpTreeFork, api.OpTreeForkBatch, api.OpTreeCommit, api.OpTreeAbort, api.OpTreePrune,
			api.OpTreeSuspend, api.OpTreeResume, api.OpTreeAutoEvict, api.OpTreeProtect, api.OpTreeUnprotect}
		op := ops[r.IntN(len(ops))]
		e.Do(ctx, api.Request{Op: op, TreeID: "c", NodeID: pick, SourceID: pick, Label: "x", Labels: []string{"a", "b"}})
	}
}

// TestSandboxCrashRandom SIGKILLs a process running random verbs on a tree
// of the host double at random moments, several times; after each kill the
// reopened tree is consistent and agrees with its backend.
func TestSandboxCrashRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	home, base := t.TempDir(), newBase(t)
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSandboxLoopHelper$", "-test.v=false")
		cmd.Env = append(os.Environ(), sandboxCrashHome+"="+home, sandboxCrashBase+"="+base, fmt.Sprintf("%s=%d", sandboxLoopSeed, round+1))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: helper said %q", round, line)
		}
		time.Sleep(time.Duration(50+rand.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() {
			t.Fatalf("round %d: the helper ended before it was killed: %v", round, cmd.ProcessState)
		}
		e := newHostEngine(t, home, newHostBackends())
		checkAgree(t, e, "c")
		n := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "c"})
		t.Logf("round %d: %d nodes, %d live", round, n.Usage.TotalNodes, n.Usage.LiveNodes)
		e.Close()
	}
}
