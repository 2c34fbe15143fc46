package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
	"github.com/arbor-dev/arbor/internal/engine/filestest"
)

func TestDirFilesConformance(t *testing.T) {
	filestest.Run(t, enginetest.OpenDirFiles)
}

type counter struct {
	mu  sync.Mutex
	ops map[string]int
	err map[string]int
}

func (c *counter) OnOp(op string, d time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops[op]++
	if err != nil {
		c.err[api.Code(err)]++
	}
}

func newEngine(t testing.TB, home string) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Home: home, OpenFiles: enginetest.OpenDirFiles})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func do(t testing.TB, e *engine.Engine, req api.Request) api.Response {
	t.Helper()
	r, err := e.Do(context.Background(), req)
	if err != nil {
		t.Fatalf("%s %+v: %v", req.Op, req, err)
	}
	return r
}

func wantErr(t testing.TB, err, sentinel error, what string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: got %v, want %v", what, err, sentinel)
	}
}

// newBase makes a base directory with one file.
func newBase(t testing.TB) string {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a.txt"), []byte("base"), 0o644); err != nil {
		t.Fatal(err)
	}
	return base
}

func nodeMap(r api.Response) map[string]api.Node {
	m := map[string]api.Node{}
	for _, n := range r.Nodes {
		m[n.ID] = n
	}
	return m
}

func readFile(t testing.TB, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCodingAgentShape walks the demo's shape: fork three children, each
// writes, the best commits, the siblings go stale, the source has the fix.
func TestCodingAgentShape(t *testing.T) {
	obs := &counter{ops: map[string]int{}, err: map[string]int{}}
	e, err := engine.New(engine.Config{Home: t.TempDir(), OpenFiles: enginetest.OpenDirFiles, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "demo"})
	if c.Status != "tree_created" || c.Root != "n1" || c.Path == "" {
		t.Fatalf("create: %+v", c)
	}
	if got := readFile(t, c.Path, "a.txt"); got != "base" {
		t.Fatalf("root sees %q", got)
	}
	src := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "demo", SourceID: "n1", Label: "source"})
	fb := do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "demo", SourceID: src.NodeID, Labels: []string{"minimal", "rewrite", "skip"}})
	if fb.Status != "tree_fork_batch" || len(fb.Forks) != 3 || fb.LatencyNS <= 0 {
		t.Fatalf("fork batch: %+v", fb)
	}
	for i, f := range fb.Forks {
		if f.Path == "" || f.LatencyNS <= 0 || f.Label != []string{"minimal", "rewrite", "skip"}[i] {
			t.Fatalf("fork %d: %+v", i, f)
		}
		os.WriteFile(filepath.Join(f.Path, "a.txt"), []byte(f.Label), 0o644)
	}
	cm := do(t, e, api.Request{Op: api.OpTreeCommit, TreeID: "demo", NodeID: fb.Forks[0].NodeID})
	if cm.Status != "tree_committed" || cm.NodeID != src.NodeID || !slices.Equal(cm.Stale, []string{fb.Forks[1].NodeID, fb.Forks[2].NodeID}) {
		t.Fatalf("commit: %+v", cm)
	}
	if got := readFile(t, cm.Path, "a.txt"); got != "minimal" {
		t.Fatalf("source after commit sees %q", got)
	}
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeCommit, TreeID: "demo", NodeID: fb.Forks[1].NodeID})
	wantErr(t, err, api.ErrStale, "commit of a stale sibling")
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeFork, TreeID: "demo", SourceID: fb.Forks[1].NodeID, Label: "x"})
	wantErr(t, err, api.ErrStale, "fork of a stale node")
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeProtect, TreeID: "demo", NodeID: fb.Forks[1].NodeID})
	wantErr(t, err, api.ErrState, "protect of a stale node")
	nodes := nodeMap(do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "demo"}))
	if len(nodes) != 4 || nodes[fb.Forks[1].NodeID].State != api.StateStale || nodes[fb.Forks[1].NodeID].Path != "" {
		t.Fatalf("nodes: %+v", nodes)
	}
	if nodes[src.NodeID].DiskBytes != int64(len("minimal")) {
		t.Errorf("source disk bytes %d", nodes[src.NodeID].DiskBytes)
	}
	// Protect the winner's home, then prune of it is refused; abort the losers.
	do(t, e, api.Request{Op: api.OpTreeProtect, TreeID: "demo", NodeID: src.NodeID})
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreePrune, TreeID: "demo", NodeID: src.NodeID})
	wantErr(t, err, api.ErrProtected, "prune of protected")
	for _, f := range fb.Forks[1:] {
		do(t, e, api.Request{Op: api.OpTreePrune, TreeID: "demo", NodeID: f.NodeID})
	}
	rb := do(t, e, api.Request{Op: api.OpTreeRollback, TreeID: "demo", NodeID: "n1", Label: "again"})
	if got := readFile(t, rb.Path, "a.txt"); got != "base" {
		t.Fatalf("rollback of the root sees %q", got)
	}
	if err := engine.CheckTree(e, "demo"); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.ops[api.OpTreeForkBatch] != 1 || obs.err[api.CodeStale] != 2 || obs.err[api.CodeProtected] != 1 {
		t.Fatalf("observer saw %v %v", obs.ops, obs.err)
	}
}

func TestBudgetAndEviction(t *testing.T) {
	var tick atomic.Int64
	clock := func() time.Time { return time.Unix(1_700_000_000+tick.Add(1), 0) }
	e, err := engine.New(engine.Config{Home: t.TempDir(), OpenFiles: enginetest.OpenDirFiles, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "b", Budget: &api.Budget{MaxLiveNodes: 4}})
	fb := do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "b", SourceID: "n1", Labels: []string{"a", "b", "c"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, events, err := e.Watch(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fb.Forks[1:] {
		do(t, e, api.Request{Op: api.OpTreeProtect, TreeID: "b", NodeID: f.NodeID})
	}
	// 4 live, 2 protected, root in use: one evictable (n2).
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeForkBatch, TreeID: "b", SourceID: "n1", Labels: []string{"x", "y"}})
	wantErr(t, err, api.ErrBudget, "fork over budget")
	if !strings.Contains(err.Error(), "live nodes 4+2 > max 4; evictable 1") {
		t.Fatalf("message %q lacks the arithmetic", err)
	}
	r := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "b", SourceID: "n1", Label: "x"})
	if !slices.Equal(r.Evicted, []string{fb.Forks[0].NodeID}) {
		t.Fatalf("evicted %v", r.Evicted)
	}
	n := nodeMap(do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "b"}))[fb.Forks[0].NodeID]
	if n.State != api.StateSuspended || n.Path != "" {
		t.Fatalf("evicted node: %+v", n)
	}
	// Resuming it needs room: the root and the new fork were last active at
	// the same instant (the fork), so the tie goes by id: the root.
	rs := do(t, e, api.Request{Op: api.OpTreeResume, TreeID: "b", NodeID: n.ID})
	if rs.Path == "" || !slices.Equal(rs.Evicted, []string{"n1"}) {
		t.Fatalf("resume: %+v", rs)
	}
	var kinds []string
	for len(kinds) < 6 {
		select {
		case ev := <-events:
			kinds = append(kinds, ev.Kind+":"+ev.NodeID)
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far %v", kinds)
		}
	}
	want := []string{"protect:n3", "protect:n4", "fork:" + r.NodeID, "evict:n2", "resume:n2", "evict:n1"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	ev := do(t, e, api.Request{Op: api.OpTreeAutoEvict, TreeID: "b"})
	if ev.Status != "tree_evicted" || ev.Evicted == nil {
		t.Fatalf("auto evict: %+v", ev)
	}
	st := e.Stats()
	if len(st) != 1 || st[0].Nodes[api.StateLive] != 4 || st[0].Nodes[api.StateSuspended] != 1 || st[0].Budget.MaxLiveNodes != 4 {
		t.Fatalf("stats %+v", st)
	}
	if err := engine.CheckTree(e, "b"); err != nil {
		t.Fatal(err)
	}
}

// TestBadRequests: every malformed request gets an api error, never a panic.
func TestBadRequests(t *testing.T) {
	e := newEngine(t, t.TempDir())
	base := newBase(t)
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "t"})
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		req  api.Request
		want error
	}{
		{api.Request{}, api.ErrBadRequest},
		{api.Request{Op: "nope"}, api.ErrBadRequest},
		{api.Request{Op: api.OpWsMount}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeWatch, TreeID: "t"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: "relative"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, Backend: "vm"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "../x"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, TreeID: long}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, Budget: &api.Budget{MaxLiveNodes: -1}}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "t"}, api.ErrExists},
		{api.Request{Op: api.OpTreeCreate, Base: "/does/not/exist"}, api.ErrNotFound},
		{api.Request{Op: api.OpTreeFork}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeFork, TreeID: "zz", SourceID: "n1"}, api.ErrNotFound},
		{api.Request{Op: api.OpTreeFork, TreeID: "t"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n9"}, api.ErrNotFound},
		{api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n1", Label: long}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n1", Label: "a\nb"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n1", Label: "\xff"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeForkBatch, TreeID: "t", SourceID: "n1"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeForkBatch, TreeID: "t", SourceID: "n1", Labels: make([]string, 2000)}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeForkBatch, TreeID: "t", SourceID: "n1", Labels: make([]string, 9)}, api.ErrBudget},
		{api.Request{Op: api.OpTreeCommit, TreeID: "t"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCommit, TreeID: "t", NodeID: "n1"}, api.ErrState},
		{api.Request{Op: api.OpTreeAbort, TreeID: "t", NodeID: "n1"}, api.ErrState},
		{api.Request{Op: api.OpTreePrune, TreeID: "t", NodeID: "n1"}, api.ErrState},
		{api.Request{Op: api.OpTreePrune, TreeID: "t", NodeID: long}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeSuspend, TreeID: "t", NodeID: "n7"}, api.ErrNotFound},
		{api.Request{Op: api.OpTreeResume, TreeID: "t", NodeID: "n1"}, api.ErrState},
		{api.Request{Op: api.OpTreeRollback, TreeID: "t"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeNodes}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeOpen, TreeID: "never"}, api.ErrNotFound},
		{api.Request{Op: api.OpTreeDrop, TreeID: "never"}, api.ErrNotFound},
	} {
		_, err := e.Do(context.Background(), tc.req)
		if !errors.Is(err, tc.want) {
			t.Errorf("%+v: got %v, want %v", tc.req, err, tc.want)
		}
	}
	if err := engine.CheckTree(e, "t"); err != nil {
		t.Fatal(err)
	}
	if r := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "t"}); len(r.Nodes) != 1 {
		t.Fatalf("bad requests changed the tree: %+v", r.Nodes)
	}
}

func TestPersistenceDropOpen(t *testing.T) {
	home := t.TempDir()
	base := newBase(t)
	e := newEngine(t, home)
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "p"})
	fb := do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "p", SourceID: "n1", Labels: []string{"a", "b"}})
	os.WriteFile(filepath.Join(fb.Forks[0].Path, "a.txt"), []byte("a"), 0o644)
	do(t, e, api.Request{Op: api.OpTreeSuspend, TreeID: "p", NodeID: fb.Forks[1].NodeID})
	do(t, e, api.Request{Op: api.OpTreeProtect, TreeID: "p", NodeID: fb.Forks[1].NodeID})
	before := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "p"})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = newEngine(t, home)
	after := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "p"})
	if len(after.Nodes) != len(before.Nodes) {
		t.Fatalf("reopen: %d nodes, want %d", len(after.Nodes), len(before.Nodes))
	}
	for i := range before.Nodes {
		b, a := before.Nodes[i], after.Nodes[i]
		if a.ID != b.ID || a.State != b.State || a.Protected != b.Protected || a.Parent != b.Parent || a.Label != b.Label || a.CreatedAt != b.CreatedAt {
			t.Errorf("node %s: before %+v after %+v", b.ID, b, a)
		}
	}
	if got := readFile(t, nodeMap(after)[fb.Forks[0].NodeID].Path, "a.txt"); got != "a" {
		t.Fatalf("files after reopen: %q", got)
	}
	// New ids continue after the old ones.
	if r := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "p", SourceID: "n1", Label: "c"}); r.NodeID != "n4" {
		t.Fatalf("next id %s, want n4", r.NodeID)
	}
	do(t, e, api.Request{Op: api.OpTreeDrop, TreeID: "p"})
	_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeNodes, TreeID: "p"})
	wantErr(t, err, api.ErrNotFound, "nodes after drop")
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeCreate, TreeID: "p", Base: base})
	wantErr(t, err, api.ErrExists, "create over a dropped tree")
	e.Close()
	e = newEngine(t, home)
	if l := do(t, e, api.Request{Op: api.OpTreeList}); len(l.Trees) != 0 {
		t.Fatalf("dropped tree reloaded: %+v", l.Trees)
	}
	o := do(t, e, api.Request{Op: api.OpTreeOpen, TreeID: "p"})
	if o.Status != "tree_opened" || len(o.Nodes) != 4 {
		t.Fatalf("open: %+v", o)
	}
	do(t, e, api.Request{Op: api.OpTreeOpen, TreeID: "p"}) // idempotent
	if err := engine.CheckTree(e, "p"); err != nil {
		t.Fatal(err)
	}
}

// TestReconcile: branches the tree lacks are aborted, nodes whose branch is
// gone are dropped with their subtree.
func TestReconcile(t *testing.T) {
	home := t.TempDir()
	base := newBase(t)
	e := newEngine(t, home)
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "r"})
	fb := do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "r", SourceID: "n1", Labels: []string{"a", "b"}})
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "r", SourceID: fb.Forks[1].NodeID, Label: "under-b"})
	e.Close()
	// Behind the engine's back: an orphan branch, and b's branch removed.
	f, err := enginetest.OpenDirFiles(context.Background(), filepath.Join(home, "trees", "r"), base)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fork(context.Background(), "main", []string{"n99"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(context.Background(), fb.Forks[1].NodeID); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e = newEngine(t, home)
	r := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "r"})
	ids := []string{}
	for _, n := range r.Nodes {
		ids = append(ids, n.ID)
	}
	if !slices.Equal(ids, []string{"n1", fb.Forks[0].NodeID}) {
		t.Fatalf("after reconcile: %v", ids)
	}
	if err := engine.CheckTree(e, "r"); err != nil {
		t.Fatal(err)
	}
}

func TestWatchEnds(t *testing.T) {
	e := newEngine(t, t.TempDir())
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "w"})
	ctx, cancel := context.WithCancel(context.Background())
	snap, ch, err := e.Watch(ctx, "w")
	if err != nil || snap.Status != "tree_watching" || len(snap.Nodes) != 1 {
		t.Fatalf("watch: %+v %v", snap, err)
	}
	_, all, err := e.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "w", SourceID: "n1", Label: "x"})
	for _, c := range []<-chan api.Event{ch, all} {
		if ev := <-c; ev.Kind != "fork" || ev.NodeID != "n2" || ev.Seq == 0 || ev.TreeID != "w" {
			t.Fatalf("event %+v", ev)
		}
	}
	cancel()
	for range ch {
	}
	for range all {
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.Watchers() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("watchers not released")
		}
		time.Sleep(time.Millisecond)
	}
	// Dropping a tree ends its watch after the drop event.
	_, ch, _ = e.Watch(context.Background(), "w")
	do(t, e, api.Request{Op: api.OpTreeDrop, TreeID: "w"})
	var kinds []string
	for ev := range ch {
		kinds = append(kinds, ev.Kind)
	}
	if !slices.Equal(kinds, []string{"drop"}) {
		t.Fatalf("after drop: %v", kinds)
	}
	_, _, err = e.Watch(context.Background(), "w")
	wantErr(t, err, api.ErrNotFound, "watch of dropped tree")
}

// TestCommitRace: N siblings commit at once; exactly one wins.
func TestCommitRace(t *testing.T) {
	e := newEngine(t, t.TempDir())
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "c", Budget: &api.Budget{MaxLiveNodes: 64}})
	for round := 0; round < 5; round++ {
		labels := make([]string, 12)
		fb := do(t, e, api.Request{Op: api.OpTreeForkBatch, TreeID: "c", SourceID: "n1", Labels: labels})
		var wins, stale atomic.Int32
		var wg sync.WaitGroup
		for _, f := range fb.Forks {
			wg.Go(func() {
				_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeCommit, TreeID: "c", NodeID: f.NodeID})
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, api.ErrStale):
					stale.Add(1)
				default:
					t.Errorf("commit: %v", err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 || stale.Load() != 11 {
			t.Fatalf("round %d: %d winners, %d stale", round, wins.Load(), stale.Load())
		}
		for _, f := range fb.Forks {
			e.Do(context.Background(), api.Request{Op: api.OpTreeAbort, TreeID: "c", NodeID: f.NodeID})
		}
	}
	if err := engine.CheckTree(e, "c"); err != nil {
		t.Fatal(err)
	}
}

// TestCommitLeafOnly: tree_commit of a node with children is refused with
// bad_state naming them; the tree and every node's files stay as they were.
func TestCommitLeafOnly(t *testing.T) {
	e := newEngine(t, t.TempDir())
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "l"})
	a := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "l", SourceID: "n1", Label: "a"})
	os.WriteFile(filepath.Join(a.Path, "in-a"), []byte("a"), 0o644)
	b := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "l", SourceID: a.NodeID, Label: "b"})
	os.WriteFile(filepath.Join(b.Path, "in-b"), []byte("b"), 0o644)
	before := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "l"})
	_, err := e.Do(context.Background(), api.Request{Op: api.OpTreeCommit, TreeID: "l", NodeID: a.NodeID})
	wantErr(t, err, api.ErrState, "commit of a node with a child")
	if !strings.Contains(err.Error(), b.NodeID) {
		t.Fatalf("the refusal does not name the child %s: %v", b.NodeID, err)
	}
	after := nodeMap(do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "l"}))
	if len(after) != len(before.Nodes) || after[b.NodeID].State != api.StateLive || after[a.NodeID].State != api.StateLive {
		t.Fatalf("nodes after the refused commit: %+v", after)
	}
	if got := readFile(t, after[b.NodeID].Path, "in-b"); got != "b" {
		t.Fatalf("b reads %q after the refused commit", got)
	}
	do(t, e, api.Request{Op: api.OpTreeCommit, TreeID: "l", NodeID: b.NodeID})
	cm := do(t, e, api.Request{Op: api.OpTreeCommit, TreeID: "l", NodeID: a.NodeID})
	for _, f := range []string{"in-a", "in-b"} {
		if got := readFile(t, cm.Path, f); got != f[3:] {
			t.Fatalf("the root reads %s = %q after leaf-first commits", f, got)
		}
	}
}
