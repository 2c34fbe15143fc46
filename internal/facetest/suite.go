package facetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// Face is a client of one API face.
type Face interface {
	Do(ctx context.Context, req api.Request) (api.Response, error)
	Watch(ctx context.Context, treeID string) (<-chan api.Event, error)
}

// Setup is what a face's test provides to the suite.
type Setup struct {
	Face Face
	// Raw sends malformed input (a JSON-lines line, or an HTTP body to
	// POST /v1/trees) and returns the error code of the reply.
	Raw func(ctx context.Context, body []byte) (code string, err error)
}

// Handler is what the faces serve (lineapi.Handler and httpapi.Handler).
type Handler interface {
	Do(ctx context.Context, req api.Request) (api.Response, error)
	Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error)
}

// Target is a real handler for RunTarget, and what the scenarios must know of it.
type Target struct {
	Handler Handler
	Base    string // a directory tree_create accepts as a base
	Version string // what ping answers
}

// StartHandler serves h on a face and returns a client of it; it registers
// its cleanups on t.
type StartHandler func(t *testing.T, h Handler) Setup

// probe is what scenarios need of the handler besides the face: planted
// panics and a count of its open watches.
type probe interface {
	SetPanic(op string)
	Watchers() int
}

// env is one scenario's surroundings.
type env struct {
	probe
	base, version string
}

type scenario struct {
	name string
	fn   func(t *testing.T, ctx context.Context, s Setup, e env)
}

var scenarios = []scenario{
	{"Ping", testPing},
	{"CreateAndNodes", testCreateAndNodes},
	{"DropAndDelete", testDropAndDelete},
	{"ForkBatch", testForkBatch},
	{"CommitRace", testCommitRace},
	{"NotFound", testNotFound},
	{"Exists", testExists},
	{"Protected", testProtected},
	{"BadState", testBadState},
	{"CommitLeafOnly", testCommitLeafOnly},
	{"BadInput", testBadInput},
	{"Watch", testWatch},
	{"WatchNotFound", testWatchNotFound},
	{"Concurrent", testConcurrent},
	{"HandlerPanic", testPanic},
}

// Run runs every scenario, each against a fresh real engine (NewEngine)
// served by start.
func Run(t *testing.T, start StartHandler) {
	RunTarget(t, func(t *testing.T) Target {
		return Target{Handler: NewEngine(t).Engine, Base: "/srv/base", Version: Version}
	}, start)
}

// RunTarget runs every scenario against a fresh target from newTarget (the
// real engine, say) served by start. The suite wraps the target's handler to
// plant panics and to count the watches whose streams it has not closed.
func RunTarget(t *testing.T, newTarget func(t *testing.T) Target, start StartHandler) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			tg := newTarget(t)
			w := &wrapped{h: tg.Handler}
			s := start(t, w)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			sc.fn(t, ctx, s, env{probe: w, base: tg.Base, version: tg.Version})
		})
	}
}

// wrapped is a Handler that can panic on an op and counts open watches: a
// watch counts until the inner handler closes its stream.
type wrapped struct {
	h       Handler
	panicOp atomic.Value   // string
	open    atomic.Int64   // watches whose inner stream is open
	wg      sync.WaitGroup // the watches' forwarding goroutines
}

// SetPanic makes Do panic on op ("" turns it off), to test the faces' recovery.
func (w *wrapped) SetPanic(op string) { w.panicOp.Store(op) }

// Watchers reports the watches whose streams the handler has not closed.
func (w *wrapped) Watchers() int { return int(w.open.Load()) }

// Wait waits until the handler has closed the streams of the watches whose
// contexts ended.
func (w *wrapped) Wait() { w.wg.Wait() }

func (w *wrapped) Do(ctx context.Context, req api.Request) (api.Response, error) {
	if op, _ := w.panicOp.Load().(string); op != "" && req.Op == op {
		panic("facetest: planted panic")
	}
	return w.h.Do(ctx, req)
}

func (w *wrapped) Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error) {
	snap, in, err := w.h.Watch(ctx, treeID)
	if err != nil {
		return snap, nil, err
	}
	w.open.Add(1)
	out := make(chan api.Event)
	w.wg.Go(func() {
		defer w.open.Add(-1)
		defer close(out)
		for ev := range in {
			select {
			case out <- ev:
			case <-ctx.Done():
				// Keep draining: the watch counts until the handler closes in.
			}
		}
	})
	return snap, out, nil
}

func mustDo(t *testing.T, ctx context.Context, s Setup, req api.Request) api.Response {
	t.Helper()
	checkRequest(t, req)
	resp, err := s.Face.Do(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", req.Op, err)
	}
	checkReply(t, req.Op, resp)
	return resp
}

// checkRequest checks that a request the suite sends sets only its verb's
// request fields (api's verb table).
func checkRequest(t *testing.T, req api.Request) {
	t.Helper()
	v, ok := api.Lookup(req.Op)
	if !ok {
		t.Fatalf("%s: not in api's verb table", req.Op)
	}
	b, _ := json.Marshal(req)
	var fields map[string]json.RawMessage
	json.Unmarshal(b, &fields)
	for f := range fields {
		if f != "op" && !slices.Contains(v.Request, f) {
			t.Errorf("%s: the request sets %q, not one of the table's request fields %v", req.Op, f, v.Request)
		}
	}
}

// checkReply checks a success reply against api's verb table: its status
// is the verb's, and it sets only the verb's reply fields.
func checkReply(t *testing.T, op string, resp api.Response) {
	t.Helper()
	v, ok := api.Lookup(op)
	if !ok {
		t.Fatalf("%s: not in api's verb table", op)
	}
	if resp.Status != v.Reply {
		t.Errorf("%s: reply status %q, want the table's %q", op, resp.Status, v.Reply)
	}
	b, _ := json.Marshal(resp)
	var fields map[string]json.RawMessage
	json.Unmarshal(b, &fields)
	for f := range fields {
		if f != "status" && !slices.Contains(v.ReplyFields, f) {
			t.Errorf("%s: reply sets %q, not one of the table's reply fields %v", op, f, v.ReplyFields)
		}
	}
}

func wantErr(t *testing.T, err error, sentinel error, what string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, sentinel)
	}
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Message == "" {
		t.Fatalf("%s: error %#v is not an *api.Error with a message", what, err)
	}
}

func newTree(t *testing.T, ctx context.Context, s Setup, e env) (tree, root string) {
	t.Helper()
	r := mustDo(t, ctx, s, api.Request{Op: api.OpTreeCreate, TreeID: "demo", Base: e.base, Backend: "dir"})
	if r.TreeID != "demo" || r.Root == "" {
		t.Fatalf("tree_create: got tree %q root %q", r.TreeID, r.Root)
	}
	return r.TreeID, r.Root
}

func testPing(t *testing.T, ctx context.Context, s Setup, e env) {
	r := mustDo(t, ctx, s, api.Request{Op: api.OpPing})
	if r.Status != "pong" || r.Version != e.version {
		t.Fatalf("ping: got %+v", r)
	}
}

func testCreateAndNodes(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	r := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	if len(r.Nodes) != 1 || r.Nodes[0].ID != root || r.Nodes[0].State != api.StateLive {
		t.Fatalf("tree_nodes: got %+v", r.Nodes)
	}
	if r.Usage == nil || r.Budget == nil || r.Budget.MaxLiveNodes != api.DefaultBudget.MaxLiveNodes {
		t.Fatalf("tree_nodes: usage %v budget %v", r.Usage, r.Budget)
	}
	l := mustDo(t, ctx, s, api.Request{Op: api.OpTreeList})
	if len(l.Trees) != 1 || l.Trees[0].ID != tree || l.Trees[0].Base != e.base {
		t.Fatalf("tree_list: got %+v", l.Trees)
	}
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeOpen, TreeID: tree})
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeDrop, TreeID: tree})
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	wantErr(t, err, api.ErrNotFound, "nodes after drop")
}

// testDropAndDelete: tree_drop unloads a tree that tree_open loads again;
// tree_delete removes it for good (over HTTP: POST .../drop and DELETE).
func testDropAndDelete(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: "x"})
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeDrop, TreeID: tree})
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	wantErr(t, err, api.ErrNotFound, "nodes after drop")
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeOpen, TreeID: tree})
	if r := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree}); len(r.Nodes) != 2 {
		t.Fatalf("nodes after drop and open: %+v, want the root and its child", r.Nodes)
	}
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeDelete, TreeID: tree})
	for _, op := range []string{api.OpTreeNodes, api.OpTreeOpen, api.OpTreeDelete, api.OpTreeDrop} {
		_, err := s.Face.Do(ctx, api.Request{Op: op, TreeID: tree})
		wantErr(t, err, api.ErrNotFound, op+" after delete")
	}
	l := mustDo(t, ctx, s, api.Request{Op: api.OpTreeList})
	for _, tr := range l.Trees {
		if tr.ID == tree {
			t.Fatalf("tree_list after delete still has %s", tree)
		}
	}
}

func testForkBatch(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	labels := []string{"minimal", "rewrite", "skip"}
	r := mustDo(t, ctx, s, api.Request{Op: api.OpTreeForkBatch, TreeID: tree, SourceID: root, Labels: labels})
	if len(r.Forks) != 3 || r.LatencyNS <= 0 {
		t.Fatalf("fork_batch: got %+v", r)
	}
	for i, fk := range r.Forks {
		if fk.Label != labels[i] || fk.NodeID == "" || fk.LatencyNS <= 0 {
			t.Errorf("fork %d: got %+v", i, fk)
		}
	}
	one := mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: "solo"})
	if one.NodeID == "" || len(one.Forks) != 1 {
		t.Fatalf("fork: got %+v", one)
	}
	rb := mustDo(t, ctx, s, api.Request{Op: api.OpTreeRollback, TreeID: tree, NodeID: root, Label: "again"})
	if len(rb.Forks) != 1 {
		t.Fatalf("rollback: got %+v", rb)
	}
	n := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	if len(n.Nodes) != 6 {
		t.Fatalf("after forks: %d nodes, want 6", len(n.Nodes))
	}
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: tree, SourceID: root})
	wantErr(t, err, api.ErrBadRequest, "fork_batch without labels")
}

func testCommitRace(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	r := mustDo(t, ctx, s, api.Request{Op: api.OpTreeForkBatch, TreeID: tree, SourceID: root, Labels: []string{"a", "b", "c", "d"}})
	// Commit every child at once: exactly one wins, the rest are stale.
	var wg sync.WaitGroup
	errs := make([]error, len(r.Forks))
	for i, fk := range r.Forks {
		wg.Go(func() {
			_, errs[i] = s.Face.Do(ctx, api.Request{Op: api.OpTreeCommit, TreeID: tree, NodeID: fk.NodeID})
		})
	}
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, api.ErrStale):
		default:
			t.Errorf("commit %d: unexpected error %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("commit race: %d winners, want exactly 1 (errors %v)", wins, errs)
	}
	n := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	stale := 0
	for _, nd := range n.Nodes {
		if nd.State == api.StateStale {
			stale++
		}
	}
	if stale != 3 {
		t.Fatalf("after commit race: %d stale nodes, want 3", stale)
	}
}

func testNotFound(t *testing.T, ctx context.Context, s Setup, e env) {
	for _, req := range []api.Request{
		{Op: api.OpTreeNodes, TreeID: "nope"},
		{Op: api.OpTreeDrop, TreeID: "nope"},
		{Op: api.OpTreeFork, TreeID: "nope", SourceID: "n1", Label: "x"},
		{Op: api.OpTreeCommit, TreeID: "nope", NodeID: "n1"},
		{Op: api.OpTreeAutoEvict, TreeID: "nope"},
	} {
		_, err := s.Face.Do(ctx, req)
		wantErr(t, err, api.ErrNotFound, req.Op+" on unknown tree")
	}
	tree, _ := newTree(t, ctx, s, e)
	for _, op := range []string{api.OpTreeCommit, api.OpTreeAbort, api.OpTreeProtect, api.OpTreeSuspend, api.OpTreePrune} {
		_, err := s.Face.Do(ctx, api.Request{Op: op, TreeID: tree, NodeID: "n999"})
		wantErr(t, err, api.ErrNotFound, op+" on unknown node")
	}
}

func testExists(t *testing.T, ctx context.Context, s Setup, e env) {
	newTree(t, ctx, s, e)
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "demo", Base: e.base})
	wantErr(t, err, api.ErrExists, "second tree_create")
}

func testProtected(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	c := mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: "keep"}).NodeID
	g := mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: c, Label: "grandchild"}).NodeID
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeProtect, TreeID: tree, NodeID: g})
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreePrune, TreeID: tree, NodeID: c})
	wantErr(t, err, api.ErrProtected, "prune over a protected descendant")
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeUnprotect, TreeID: tree, NodeID: g})
	mustDo(t, ctx, s, api.Request{Op: api.OpTreePrune, TreeID: tree, NodeID: c})
	n := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	if len(n.Nodes) != 1 {
		t.Fatalf("after prune: %d nodes, want 1", len(n.Nodes))
	}
}

func testBadState(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	c := mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: "x"}).NodeID
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeResume, TreeID: tree, NodeID: c})
	wantErr(t, err, api.ErrState, "resume a live node")
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeSuspend, TreeID: tree, NodeID: c})
	r := mustDo(t, ctx, s, api.Request{Op: api.OpTreeResume, TreeID: tree, NodeID: c})
	if r.NodeID != c {
		t.Fatalf("resume: got %+v", r)
	}
	ev := mustDo(t, ctx, s, api.Request{Op: api.OpTreeAutoEvict, TreeID: tree})
	if ev.Status != "tree_evicted" {
		t.Fatalf("auto_evict: got %+v", ev)
	}
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeAbort, TreeID: tree, NodeID: c})
}

// testCommitLeafOnly: a node with children is not committed (bad_state,
// naming them) and nothing changes; leaf first, then its parent, works.
func testCommitLeafOnly(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	x := mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: "x"}).NodeID
	y := mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: x, Label: "y"}).NodeID
	before := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeCommit, TreeID: tree, NodeID: x})
	wantErr(t, err, api.ErrState, "commit of a node with a child")
	if !strings.Contains(err.Error(), y) {
		t.Fatalf("the refusal does not name the child %s: %v", y, err)
	}
	after := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	if len(after.Nodes) != len(before.Nodes) {
		t.Fatalf("a refused commit changed the nodes: %d before, %d after", len(before.Nodes), len(after.Nodes))
	}
	for _, n := range after.Nodes {
		if n.State != api.StateLive {
			t.Fatalf("after a refused commit %s is %s", n.ID, n.State)
		}
	}
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeCommit, TreeID: tree, NodeID: y})
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeCommit, TreeID: tree, NodeID: x})
}

func testBadInput(t *testing.T, ctx context.Context, s Setup, e env) {
	for _, in := range []string{
		`{"op":`,   // truncated
		`not json`, // not JSON at all
		`[1,2]`,    // not an object
		`{"op":"tree_create","base":"/b","bogus":1}`,     // unknown field
		`{"op":"tree_create","base":"/b"} {"op":"ping"}`, // trailing data
		`{"op":"tree_create","base":7}`,                  // wrong type
	} {
		code, err := s.Raw(ctx, []byte(in))
		if err != nil {
			t.Fatalf("raw %q: %v", in, err)
		}
		if code != api.CodeBadRequest {
			t.Errorf("raw %q: code %q, want %q", in, code, api.CodeBadRequest)
		}
	}
	// The face still works afterwards.
	mustDo(t, ctx, s, api.Request{Op: api.OpPing})
}

func testWatch(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := s.Face.Watch(wctx, tree)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	c := mustDo(t, ctx, s, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: "w"}).NodeID
	mustDo(t, ctx, s, api.Request{Op: api.OpTreeProtect, TreeID: tree, NodeID: c})
	want := []string{"fork", "protect"}
	for i, kind := range want {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("watch: stream closed after %d events", i)
			}
			if ev.Kind != kind || ev.NodeID != c || ev.TreeID != tree || ev.Seq == 0 {
				t.Fatalf("event %d: got %+v, want kind %s node %s", i, ev, kind, c)
			}
		case <-ctx.Done():
			t.Fatalf("watch: timed out waiting for event %d (%s)", i, kind)
		}
	}
	cancel()
	// The stream ends, and the face gives the engine's watch back.
	deadline := time.After(5 * time.Second)
	for range events {
	}
	for e.Watchers() != 0 {
		select {
		case <-deadline:
			t.Fatalf("watch still open on the engine after the client went away")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func testWatchNotFound(t *testing.T, ctx context.Context, s Setup, e env) {
	_, err := s.Face.Watch(ctx, "nope")
	wantErr(t, err, api.ErrNotFound, "watch unknown tree")
	mustDo(t, ctx, s, api.Request{Op: api.OpPing})
}

func testConcurrent(t *testing.T, ctx context.Context, s Setup, e env) {
	tree, root := newTree(t, ctx, s, e)
	var wg sync.WaitGroup
	const goroutines, forks = 16, 8
	errs := make(chan error, goroutines*forks)
	for g := range goroutines {
		wg.Go(func() {
			for i := range forks {
				r, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: tree, SourceID: root, Label: fmt.Sprintf("g%d-%d", g, i)})
				if err != nil {
					errs <- err
					return
				}
				if len(r.Forks) != 1 || r.Forks[0].Label != fmt.Sprintf("g%d-%d", g, i) {
					errs <- fmt.Errorf("reply mixed up: %+v", r.Forks)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := mustDo(t, ctx, s, api.Request{Op: api.OpTreeNodes, TreeID: tree})
	if len(n.Nodes) != 1+goroutines*forks {
		t.Fatalf("after concurrent forks: %d nodes, want %d", len(n.Nodes), 1+goroutines*forks)
	}
}

func testPanic(t *testing.T, ctx context.Context, s Setup, e env) {
	e.SetPanic(api.OpTreeList)
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeList})
	wantErr(t, err, api.ErrInternal, "handler panic")
	mustDo(t, ctx, s, api.Request{Op: api.OpPing})
}
