package engine_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

const (
	crashHomeEnv = "ARBOR_ENGINE_CRASH_HOME"
	crashBaseEnv = "ARBOR_ENGINE_CRASH_BASE"
	crashSeedEnv = "ARBOR_ENGINE_CRASH_SEED"
)

// TestCrashHelper is the subprocess of TestCrash: it runs verb loops on tree
// "c" until it is killed, printing "begin <verb> <node>" before a verb and
// "ack <verb> <node> [<children>...]" once the engine acknowledged it.
func TestCrashHelper(t *testing.T) {
	home := os.Getenv(crashHomeEnv)
	if home == "" {
		t.Skip("the subprocess of TestCrash")
	}
	var seed uint64
	fmt.Sscan(os.Getenv(crashSeedEnv), &seed)
	r := rand.New(rand.NewPCG(seed, 7))
	ctx := context.Background()
	e, err := engine.New(engine.Config{Home: home, OpenFiles: enginetest.OpenDirFiles})
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(2)
	}
	if _, err := e.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "c"}); err != nil {
		if _, err := e.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "c", Base: os.Getenv(crashBaseEnv), Budget: &api.Budget{MaxLiveNodes: 10}}); err != nil {
			fmt.Println("fatal", err)
			os.Exit(2)
		}
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	for i := 0; ; i++ {
		nodes, err := e.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "c"})
		if err != nil {
			say("fatal nodes %v", err)
			os.Exit(2)
		}
		pick := nodes.Nodes[r.IntN(len(nodes.Nodes))].ID
		switch r.IntN(6) {
		case 0, 1: // a marked commit into the root
			say("begin fork n1")
			f, err := e.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: "c", SourceID: "n1", Label: "m"})
			if err != nil {
				continue
			}
			say("ack fork n1 %s", f.NodeID)
			if err := os.WriteFile(filepath.Join(f.Path, "m-"+f.NodeID), []byte(f.NodeID), 0o644); err != nil {
				say("fatal write %v", err)
				os.Exit(2)
			}
			say("ack mark %s", f.NodeID)
			say("begin commit %s", f.NodeID)
			if _, err := e.Do(ctx, api.Request{Op: api.OpTreeCommit, TreeID: "c", NodeID: f.NodeID}); err == nil {
				say("ack commit %s", f.NodeID)
			}
		case 2:
			say("begin fork %s", pick)
			f, err := e.Do(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: "c", SourceID: pick, Labels: []string{"a", "b"}})
			if err == nil {
				say("ack fork %s %s %s", pick, f.Forks[0].NodeID, f.Forks[1].NodeID)
			}
		case 3:
			op := []string{api.OpTreeAbort, api.OpTreePrune}[r.IntN(2)]
			say("begin %s %s", op, pick)
			if _, err := e.Do(ctx, api.Request{Op: op, TreeID: "c", NodeID: pick}); err == nil {
				say("ack %s %s", op, pick)
			}
		case 4:
			op := []string{api.OpTreeSuspend, api.OpTreeResume, api.OpTreeProtect, api.OpTreeUnprotect, api.OpTreeAutoEvict}[r.IntN(5)]
			e.Do(ctx, api.Request{Op: op, TreeID: "c", NodeID: pick})
		case 5:
			say("begin commit %s", pick)
			if _, err := e.Do(ctx, api.Request{Op: api.OpTreeCommit, TreeID: "c", NodeID: pick}); err == nil {
				say("ack commit %s", pick)
			}
		}
	}
}

// TestCrash SIGKILLs a process running verb loops at random points, several
// times, and after each kill reopens the engine and checks: the tree's
// invariants hold and its metadata and files agree; every acknowledged
// commit into the root left its marker file in the root and its node gone;
// every acknowledged fork's node is still there unless a later verb (acked
// or in flight) could have removed it.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	home, base := t.TempDir(), newBase(t)
	parent := map[string]string{}
	marked := map[string]bool{}
	var commits []string
	var forks []string
	var removals [][2]string // {verb, node} begun
	deadline := time.Now().Add(10 * time.Second)
	rounds := 0
	for ; rounds < 8 && time.Now().Before(deadline); rounds++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.v=false")
		cmd.Env = append(os.Environ(), crashHomeEnv+"="+home, crashBaseEnv+"="+base, fmt.Sprintf("%s=%d", crashSeedEnv, rounds))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1<<16)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		kill := time.After(time.Duration(150+rand.IntN(500)) * time.Millisecond)
		var acks int
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				f := strings.Fields(l)
				switch {
				case f[0] == "fatal":
					t.Fatalf("helper: %s", l)
				case f[0] == "ack" && f[1] == "fork":
					for _, c := range f[3:] {
						parent[c] = f[2]
						forks = append(forks, c)
					}
					acks++
				case f[0] == "ack" && f[1] == "mark":
					marked[f[2]] = true
				case f[0] == "ack" && f[1] == "commit":
					acks++
					if marked[f[2]] {
						commits = append(commits, f[2])
					}
				case f[0] == "begin" && f[1] != "fork":
					removals = append(removals, [2]string{f[1], f[2]})
				}
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				kill = nil
			}
		}
		cmd.Wait()
		// Reopen and check.
		e, err := engine.New(engine.Config{Home: home, OpenFiles: enginetest.OpenDirFiles})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", rounds, err)
		}
		if err := engine.CheckTree(e, "c"); err != nil {
			e.Close()
			t.Fatalf("round %d: %v", rounds, err)
		}
		r, err := e.Do(context.Background(), api.Request{Op: api.OpTreeNodes, TreeID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		present := nodeMap(r)
		root := present["n1"]
		for _, c := range commits {
			if _, ok := present[c]; ok {
				t.Errorf("round %d: acknowledged commit %s: node still there", rounds, c)
			}
			if root.Path == "" {
				// A suspended root has no path; read its branch directly.
				root.Path = mainPath(t, home)
			}
			if _, err := os.Stat(filepath.Join(root.Path, "m-"+c)); err != nil {
				t.Errorf("round %d: acknowledged commit %s: marker missing in the root: %v", rounds, c, err)
			}
		}
		for _, c := range forks {
			if _, ok := present[c]; ok || mayBeRemoved(c, parent, removals) {
				continue
			}
			t.Errorf("round %d: acknowledged fork %s is gone", rounds, c)
		}
		e.Close()
		t.Logf("round %d: %d acks, %d nodes, %d commits into the root so far", rounds, acks, len(present), len(commits))
	}
	if len(commits) == 0 {
		t.Fatal("no commit was acknowledged: the test checked nothing")
	}
}

// mayBeRemoved: some begun abort, prune or commit named c or an ancestor.
func mayBeRemoved(c string, parent map[string]string, removals [][2]string) bool {
	for _, rm := range removals {
		for x := c; x != ""; x = parent[x] {
			if rm[1] == x {
				return true
			}
		}
	}
	return false
}

func mainPath(t *testing.T, home string) string {
	m, _ := filepath.Glob(filepath.Join(home, "trees", "c", "branches", "main.*"))
	if len(m) != 1 {
		t.Fatalf("main branch dirs: %v", m)
	}
	return m[0]
}
