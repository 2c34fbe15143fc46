package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

func newHostEngine(t testing.TB, home string, hb *hostBackends) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Home: home, OpenFiles: enginetest.OpenDirFiles,
		Backends: map[string]engine.OpenBackend{engine.BackendDir: engine.OpenDirBackend, "host": hb.open}})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// hostTree makes tree "h" on the host double with budget b (nil: default).
func hostTree(t testing.TB, b *api.Budget) (*engine.Engine, *hostBackends, string) {
	t.Helper()
	home, hb := t.TempDir(), newHostBackends()
	e := newHostEngine(t, home, hb)
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host", Budget: b})
	return e, hb, home
}

func checkAgree(t testing.TB, e *engine.Engine, id string) {
	t.Helper()
	if err := engine.CheckTree(e, id); err != nil {
		t.Fatal(err)
	}
	if err := engine.CheckBackend(e, id); err != nil {
		t.Fatal(err)
	}
}

func TestTreeBackend(t *testing.T) {
	home, hb := t.TempDir(), newHostBackends()
	e := newHostEngine(t, home, hb)
	base := newBase(t)
	_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeCreate, Base: base, Backend: "jail"})
	wantErr(t, err, api.ErrBadRequest, "unknown backend")
	if !strings.Contains(err.Error(), `"jail"`) || !strings.Contains(err.Error(), "dir, host") {
		t.Fatalf("unknown backend: %v, want it to name the known ones", err)
	}
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "d", Base: base})
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host"})
	backends := func(e *engine.Engine) map[string]string {
		m := map[string]string{}
		for _, tr := range do(t, e, api.Request{Op: api.OpTreeList}).Trees {
			m[tr.ID] = tr.Backend
		}
		return m
	}
	want := map[string]string{"d": "dir", "h": "host"}
	if got := backends(e); !mapsEqual(got, want) {
		t.Fatalf("tree_list backends %v, want %v", got, want)
	}
	if got := hb.calls(); !slices.Equal(got, []string{"start n1"}) {
		t.Fatalf("create: backend calls %v, want the root started", got)
	}
	e.Close()
	e = newHostEngine(t, home, hb)
	if got := backends(e); !mapsEqual(got, want) {
		t.Fatalf("after reopen: tree_list backends %v, want %v", got, want)
	}
	checkAgree(t, e, "h")
	checkAgree(t, e, "d")
	// The double forgets live nodes at Close: the root was restarted.
	if got := hb.calls(); !slices.Equal(got, []string{"start n1"}) {
		t.Fatalf("reopen: backend calls %v, want the lost root restarted", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestDirExecNotSupported(t *testing.T) {
	e := newEngine(t, t.TempDir())
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "d", Base: newBase(t)})
	_, err := e.Exec(context.Background(), api.Request{Op: api.OpTreeExec, TreeID: "d", NodeID: "n1", Argv: []string{"true"}}, func(api.ExecOutput) error { return nil })
	wantErr(t, err, api.ErrNotSupported, "exec on dir")
	if api.Code(err) != api.CodeNotSupported || !strings.Contains(err.Error(), "jail or vm") {
		t.Fatalf("exec on dir: %q (code %s), want not_supported naming jail or vm", err, api.Code(err))
	}
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeExec, TreeID: "d", NodeID: "n1"})
	wantErr(t, err, api.ErrBadRequest, "tree_exec through Do")
}

type collected struct {
	mu  sync.Mutex
	out map[string]string
}

func (c *collected) write(o api.ExecOutput) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		c.out = map[string]string{}
	}
	c.out[o.Stream] += string(o.Data)
	return nil
}

func (c *collected) get(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out[s]
}

func TestExec(t *testing.T) {
	e, _, _ := hostTree(t, nil)
	ctx := context.Background()
	f := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n1", Label: "x"})
	var c collected
	x, err := e.Exec(ctx, api.Request{Op: api.OpTreeExec, TreeID: "h", NodeID: f.NodeID,
		Argv: []string{"sh", "-c", `echo "$K"; cat a.txt >&2; echo made > m.txt; exit 2`}, Env: []string{"K=v"}}, c.write)
	if err != nil || x.ExitCode != 2 || c.get("stdout") != "v\n" || c.get("stderr") != "base" {
		t.Fatalf("exec: %+v %v, stdout %q stderr %q", x, err, c.get("stdout"), c.get("stderr"))
	}
	if got := readFile(t, f.Path, "m.txt"); got != "made\n" {
		t.Fatalf("the command's file in the node: %q", got)
	}
	for _, tc := range []struct {
		req  api.Request
		want error
	}{
		{api.Request{TreeID: "h", NodeID: "n1"}, api.ErrBadRequest},
		{api.Request{TreeID: "h", NodeID: "n1", Argv: []string{"true"}, Env: []string{"NOEQUALS"}}, api.ErrBadRequest},
		{api.Request{TreeID: "h", NodeID: "n1", Argv: []string{"tr\x00ue"}}, api.ErrBadRequest},
		{api.Request{TreeID: "h", NodeID: "n1", Argv: []string{"true"}, TimeoutNS: -1}, api.ErrBadRequest},
		{api.Request{TreeID: "h", NodeID: "n99", Argv: []string{"true"}}, api.ErrNotFound},
		{api.Request{TreeID: "nope", NodeID: "n1", Argv: []string{"true"}}, api.ErrNotFound},
	} {
		tc.req.Op = api.OpTreeExec
		_, err := e.Exec(ctx, tc.req, c.write)
		wantErr(t, err, tc.want, "exec "+strings.Join(tc.req.Argv, " "))
	}
	do(t, e, api.Request{Op: api.OpTreeSuspend, TreeID: "h", NodeID: f.NodeID})
	_, err = e.Exec(ctx, api.Request{Op: api.OpTreeExec, TreeID: "h", NodeID: f.NodeID, Argv: []string{"true"}}, c.write)
	wantErr(t, err, api.ErrState, "exec on a suspended node")
}

// running starts a long exec on node and waits until it runs; the channel
// gets its error.
func running(t *testing.T, e *engine.Engine, ctx context.Context, tree, node string) chan error {
	t.Helper()
	up := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := e.Exec(ctx, api.Request{Op: api.OpTreeExec, TreeID: tree, NodeID: node, Argv: []string{"sh", "-c", "echo up; sleep 30"}},
			func(api.ExecOutput) error { once.Do(func() { close(up) }); return nil })
		done <- err
	}()
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("exec ended before it ran: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("exec never ran")
	}
	if n := engine.LeasesOn(e, tree, node); n != 1 {
		t.Fatalf("leases on %s: %d, want 1", node, n)
	}
	return done
}

func ended(t *testing.T, done chan error, sentinel error, words string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), words) {
			t.Fatalf("exec ended with %v, want %v saying %q", err, sentinel, words)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exec still runs")
	}
}

// TestExecLease: an exec runs outside the tree's mutex (the tree's verbs
// go on meanwhile) and a verb that takes its node away ends it with an
// error naming the verb.
func TestExecLease(t *testing.T) {
	for _, tc := range []struct {
		op, words string
	}{
		{api.OpTreeAbort, "was aborted"},
		{api.OpTreePrune, "was pruned"},
		{api.OpTreeCommit, "committed into its parent"},
		{api.OpTreeSuspend, "suspended"},
	} {
		t.Run(tc.op, func(t *testing.T) {
			e, hb, _ := hostTree(t, nil)
			f := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n1", Label: "x"})
			done := running(t, e, context.Background(), "h", f.NodeID)
			// The mutex is free: other verbs run, on this node too.
			do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "h"})
			do(t, e, api.Request{Op: api.OpTreeProtect, TreeID: "h", NodeID: f.NodeID})
			do(t, e, api.Request{Op: api.OpTreeUnprotect, TreeID: "h", NodeID: f.NodeID})
			hb.calls()
			do(t, e, api.Request{Op: tc.op, TreeID: "h", NodeID: f.NodeID})
			ended(t, done, api.ErrState, tc.words)
			if n := engine.LeasesOn(e, "h", f.NodeID); n != 0 {
				t.Fatalf("leases left: %d", n)
			}
			checkAgree(t, e, "h")
		})
	}
	t.Run("close", func(t *testing.T) {
		e, _, _ := hostTree(t, nil)
		done := running(t, e, context.Background(), "h", "n1")
		e.Close()
		ended(t, done, api.ErrBusy, "engine closed")
	})
	t.Run("request", func(t *testing.T) {
		e, _, _ := hostTree(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := running(t, e, ctx, "h", "n1")
		cancel()
		ended(t, done, context.Canceled, "request ended")
	})
}

// TestForkRAMCost: a fork's children are expected to hold the backend's
// StartRAM, so the RAM budget refuses what the dir backend (RAM 0) allows.
func TestForkRAMCost(t *testing.T) {
	b := &api.Budget{MaxLiveRAMBytes: 250}
	e, _, _ := hostTree(t, b)
	_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeForkBatch, TreeID: "h", SourceID: "n1", Labels: []string{"a", "b"}})
	wantErr(t, err, api.ErrBudget, "fork of 2 at 100 bytes each beside a root of 100, max 250")
	if !strings.Contains(err.Error(), "live RAM 100+200 > max 250") {
		t.Fatalf("budget refusal %q: want the RAM arithmetic", err)
	}
	d := newEngine(t, t.TempDir())
	do(t, d, api.Request{Op: api.OpTreeCreate, TreeID: "d", Base: newBase(t), Budget: b})
	do(t, d, api.Request{Op: api.OpTreeForkBatch, TreeID: "d", SourceID: "n1", Labels: []string{"a", "b"}})
}

// TestRAMEvict: the RAM the backend reports is the tree's; auto-evict
// acts on it and suspends the evicted nodes' sandboxes.
func TestRAMEvict(t *testing.T) {
	clock := time.Unix(1e9, 0)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); clock = clock.Add(time.Second); return clock }
	home, hb := t.TempDir(), newHostBackends()
	e, err := engine.New(engine.Config{Home: home, OpenFiles: enginetest.OpenDirFiles, Now: now,
		Backends: map[string]engine.OpenBackend{"host": hb.open}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host", Budget: &api.Budget{MaxLiveRAMBytes: 1000}})
	do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "h", SourceID: "n1", Labels: []string{"a", "b", "c"}}) // n2 n3 n4
	r := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "h"})
	if r.Usage.LiveRAMBytes != 400 {
		t.Fatalf("live RAM %d, want 4 nodes at 100", r.Usage.LiveRAMBytes)
	}
	hb.setRAM("n2", 400)
	hb.setRAM("n3", 300)
	r = do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "h"})
	if r.Usage.LiveRAMBytes != 900 || nodeMap(r)["n2"].RAMBytes != 400 {
		t.Fatalf("after growth: usage %+v, n2 %+v", r.Usage, nodeMap(r)["n2"])
	}
	hb.calls()
	// 900 >= 85% of 1000: suspend the least recently active (n1, the
	// fork's source, is older than its children) until under it.
	ev := do(t, e, api.Request{Op: api.OpTreeAutoEvict, TreeID: "h"})
	if !slices.Equal(ev.Evicted, []string{"n1"}) {
		t.Fatalf("evicted %v, want [n1]", ev.Evicted)
	}
	if got := hb.calls(); !slices.Equal(got, []string{"suspend n1"}) {
		t.Fatalf("backend calls %v, want n1 suspended", got)
	}
	checkAgree(t, e, "h")
	// A fork of n4 evicts by real RAM: n2 at 400 and n3 at 1000 leave
	// room for n4's child only once n2 and n3 are suspended.
	hb.setRAM("n3", 1000)
	f := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n4", Label: "d"})
	if !slices.Equal(f.Evicted, []string{"n2", "n3"}) {
		t.Fatalf("fork evicted %v, want [n2 n3]", f.Evicted)
	}
	// The evicted are suspended before the children start.
	if got, want := hb.calls(), []string{"suspend n2", "suspend n3", "pause n4"}; len(got) < 3 || !slices.Equal(got[:3], want) {
		t.Fatalf("backend calls %v, want %v first", got, want)
	}
	r = do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "h"})
	if r.Usage.LiveRAMBytes > 1000 {
		t.Fatalf("live RAM %d over budget", r.Usage.LiveRAMBytes)
	}
	checkAgree(t, e, "h")
}

// TestStopOrders: the order of the backend's calls in each verb (doc.go,
// the crash table): a fork's files fork inside the source's pause; abort
// stops leaves first, while their files are still there; commit suspends
// the child first, has the backend carry its state after its files were
// committed, and stops it (and the nodes gone stale) after that.
func TestStopOrders(t *testing.T) {
	e, hb, _ := hostTree(t, nil)
	hb.calls()
	do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "h", SourceID: "n1", Labels: []string{"a", "b"}}) // n2 n3
	want := []string{"pause n1", "files-forked n1", "start-child n2", "start-child n3", "resume-after-fork n1"}
	if got := hb.calls(); !slices.Equal(got, want) {
		t.Fatalf("fork: %v, want %v", got, want)
	}
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n2", Label: "c"}) // n4
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n4", Label: "d"}) // n5
	hb.calls()
	do(t, e, api.Request{Op: api.OpTreeAbort, TreeID: "h", NodeID: "n4"})
	if got, want := hb.calls(), []string{"stop n5 files=yes", "stop n4 files=yes"}; !slices.Equal(got, want) {
		t.Fatalf("abort: %v, want %v", got, want)
	}
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n2", Label: "e"}) // n6
	hb.calls()
	_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeCommit, TreeID: "h", NodeID: "n2"})
	wantErr(t, err, api.ErrState, "commit of a node with a child") // refused by the plan: no backend call
	do(t, e, api.Request{Op: api.OpTreePrune, TreeID: "h", NodeID: "n6"})
	if got, want := hb.calls(), []string{"stop n6 files=yes"}; !slices.Equal(got, want) {
		t.Fatalf("a refused commit, then prune: %v, want %v", got, want)
	}
	do(t, e, api.Request{Op: api.OpTreeCommit, TreeID: "h", NodeID: "n2"})
	if got, want := hb.calls(), []string{"suspend n2", "commit n2 into n1", "stop n2 files=no", "stop n3 files=yes"}; !slices.Equal(got, want) {
		t.Fatalf("commit: %v, want %v (n3 went stale)", got, want)
	}
	do(t, e, api.Request{Op: api.OpTreeSuspend, TreeID: "h", NodeID: "n1"})
	do(t, e, api.Request{Op: api.OpTreeResume, TreeID: "h", NodeID: "n1"})
	if got, want := hb.calls(), []string{"suspend n1", "resume n1"}; !slices.Equal(got, want) {
		t.Fatalf("suspend, resume: %v, want %v", got, want)
	}
	checkAgree(t, e, "h")
}

// failCommit is a Files whose commits fail (ENOSPC from the layer).
type failCommit struct{ engine.Files }

func (failCommit) Commit(context.Context, string) ([]string, error) {
	return nil, api.Errorf(api.ErrNoSpace, "commit: the disk is full")
}

// TestCommitRefusedKeepsChild: a commit the files layer refuses resumes
// the child's sandbox; the child is live as before.
func TestCommitRefusedKeepsChild(t *testing.T) {
	hb := newHostBackends()
	e, err := engine.New(engine.Config{Home: t.TempDir(), Backends: map[string]engine.OpenBackend{"host": hb.open},
		OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
			f, err := enginetest.OpenDirFiles(ctx, dir, base)
			return failCommit{f}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host"})
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n1", Label: "a"})
	hb.calls()
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeCommit, TreeID: "h", NodeID: "n2"})
	wantErr(t, err, api.ErrNoSpace, "commit the files refuse")
	if got, want := hb.calls(), []string{"suspend n2", "resume n2"}; !slices.Equal(got, want) {
		t.Fatalf("refused commit: %v, want %v", got, want)
	}
	if n := nodeMap(do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "h"}))["n2"]; n.State != api.StateLive {
		t.Fatalf("n2 after a refused commit: %+v", n)
	}
	checkAgree(t, e, "h")
}

// writeHeld replaces what the double's backend of tree id holds on disk, as
// a crash could have left it.
func writeHeld(t *testing.T, home, id, state string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(home, "trees", id, "backend", "state.json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBackendReconcile: at open, a sandbox the tree does not know (or holds
// stale) is stopped, one of a suspended node suspended, a suspended one of
// a live node resumed, and a live node whose sandbox is gone restarted
// (LostRestart) or marked suspended (LostSuspend).
func TestBackendReconcile(t *testing.T) {
	home, hb := t.TempDir(), newHostBackends()
	e := newHostEngine(t, home, hb)
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host"})
	do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "h", SourceID: "n1", Labels: []string{"a", "b", "c"}}) // n2 n3 n4
	do(t, e, api.Request{Op: api.OpTreeSuspend, TreeID: "h", NodeID: "n4"})
	e.Close()
	// n1 runs; n2's sandbox is gone; n3's is suspended though n3 is live;
	// n4's runs though n4 is suspended; n9 is nobody's.
	writeHeld(t, home, "h", `{"n1":"live","n3":"suspended","n4":"live","n9":"live"}`)
	hb.calls()
	e = newHostEngine(t, home, hb)
	got := hb.calls()
	slices.Sort(got)
	want := []string{"resume n3", "start n2", "stop n9 files=-", "suspend n4"}
	if !slices.Equal(got, want) {
		t.Fatalf("reconcile: %v, want %v", got, want)
	}
	checkAgree(t, e, "h")
	e.Close()

	// By the LostSuspend rule, live nodes whose sandbox is gone (Close
	// stopped them all) come back suspended, durably.
	hb.caps.Lost = engine.LostSuspend
	e = newHostEngine(t, home, hb)
	states := func(e *engine.Engine) map[string]string {
		m := map[string]string{}
		for _, n := range do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "h"}).Nodes {
			m[n.ID] = n.State
		}
		return m
	}
	allSuspended := map[string]string{"n1": "suspended", "n2": "suspended", "n3": "suspended", "n4": "suspended"}
	if got := states(e); !mapsEqual(got, allSuspended) {
		t.Fatalf("LostSuspend: %v, want %v", got, allSuspended)
	}
	checkAgree(t, e, "h")
	e.Close()
	e = newHostEngine(t, home, hb)
	if got := states(e); !mapsEqual(got, allSuspended) {
		t.Fatalf("LostSuspend, reopened: %v, want %v", got, allSuspended)
	}
	do(t, e, api.Request{Op: api.OpTreeResume, TreeID: "h", NodeID: "n2"})
	checkAgree(t, e, "h")
}

type ctxKey struct{}

// TestRequestContextNotKept: the files layer and the sandboxes a request
// opens or starts get the request's values (its credentials) but outlive
// it: their context ends only when the engine closes.
func TestRequestContextNotKept(t *testing.T) {
	hb := newHostBackends()
	var filesCtxs []context.Context
	e, err := engine.New(engine.Config{Home: t.TempDir(), Backends: map[string]engine.OpenBackend{"host": hb.open},
		OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
			filesCtxs = append(filesCtxs, ctx)
			return enginetest.OpenDirFiles(ctx, dir, base)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "cred"))
	for _, r := range []api.Request{
		{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host"},
		{Op: api.OpTreeFork, TreeID: "h", SourceID: "n1", Label: "a"},
		{Op: api.OpTreeDrop, TreeID: "h"},
		{Op: api.OpTreeOpen, TreeID: "h"},
	} {
		if _, err := e.Do(ctx, r); err != nil {
			t.Fatalf("%s: %v", r.Op, err)
		}
	}
	cancel()
	kept := append(append([]context.Context{}, filesCtxs...), hb.ctxs...)
	if len(filesCtxs) != 2 || len(hb.ctxs) < 3 {
		t.Fatalf("%d files contexts, %d backend contexts: want create's and open's, and create's, fork's and open's", len(filesCtxs), len(hb.ctxs))
	}
	for i, c := range kept {
		if c.Err() != nil {
			t.Fatalf("context %d ended with its request: %v", i, c.Err())
		}
		if c.Value(ctxKey{}) != "cred" {
			t.Fatalf("context %d lost the request's values", i)
		}
	}
	e.Close()
	for i, c := range kept {
		if c.Err() == nil {
			t.Fatalf("context %d outlived the engine", i)
		}
	}
}

// TestForkSaysProcesses: a fork's reply says what became of the source's
// processes, from the backend's Caps: not carried by one that runs
// commands without carrying them (jail), carried by one that carries
// memory (vm), nothing for one that runs none (dir); for every child of a
// batch and for a rollback too.
func TestForkSaysProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps engine.Caps
		want string
	}{
		{"exec", engine.Caps{Exec: true, StartRAM: 100}, api.ProcessesNotCarried},
		{"memory", engine.Caps{Exec: true, ForkCarriesMemory: true, StartRAM: 100}, api.ProcessesCarried},
		{"none", engine.Caps{StartRAM: 100}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hb := newHostBackends()
			hb.caps = tc.caps
			e := newHostEngine(t, t.TempDir(), hb)
			do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host"})
			one := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "h", SourceID: "n1", Label: "a"})
			batch := do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "h", SourceID: "n1", Labels: []string{"b", "c"}})
			rb := do(t, e, api.Request{Op: api.OpTreeRollback, TreeID: "h", NodeID: "n1", Label: "d"})
			for _, r := range []api.Response{one, batch, rb} {
				if r.Processes != tc.want || len(r.Forks) == 0 {
					t.Fatalf("%s reply: processes %q, want %q (%+v)", r.Status, r.Processes, tc.want, r)
				}
				for _, f := range r.Forks {
					if f.Processes != tc.want {
						t.Fatalf("%s child %s: processes %q, want %q", r.Status, f.NodeID, f.Processes, tc.want)
					}
				}
			}
		})
	}
	d := newEngine(t, t.TempDir())
	do(t, d, api.Request{Op: api.OpTreeCreate, TreeID: "d", Base: newBase(t)})
	if r := do(t, d, api.Request{Op: api.OpTreeFork, TreeID: "d", SourceID: "n1", Label: "a"}); r.Processes != "" {
		t.Fatalf("a dir tree's fork says processes %q, want nothing", r.Processes)
	}
}

// TestBackendGetsBudget: a backend is opened with its tree's budget, its
// defaults filled in (a jail limits each node by it), at create and at a
// reopen.
func TestBackendGetsBudget(t *testing.T) {
	home, hb := t.TempDir(), newHostBackends()
	e := newHostEngine(t, home, hb)
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "h", Base: newBase(t), Backend: "host", Budget: &api.Budget{MaxLiveRAMBytes: 1 << 30, MaxNodePids: 64}})
	want := api.Budget{MaxLiveNodes: api.DefaultBudget.MaxLiveNodes, MaxLiveRAMBytes: 1 << 30, MaxNodeRAMBytes: 1 << 30, MaxNodePids: 64}
	if got := hb.last.budget; got != want {
		t.Fatalf("the backend was opened with budget %+v, want %+v", got, want)
	}
	e.Close()
	e = newHostEngine(t, home, hb)
	if got := hb.last.budget; got != want {
		t.Fatalf("after a reopen: budget %+v, want %+v", got, want)
	}
	_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeCreate, Base: newBase(t), Budget: &api.Budget{MaxLiveRAMBytes: 1 << 20, MaxNodeRAMBytes: 2 << 20}})
	wantErr(t, err, api.ErrBadRequest, "a node's RAM over the tree's")
}
