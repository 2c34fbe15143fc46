package facetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// Version is what the fake answers to ping.
const Version = "fake-1"

// Fake is an in-memory Handler. The zero value is not usable; call NewFake.
type Fake struct {
	panicOp atomic.Value // string: the op Do panics on (SetPanic)

	mu       sync.Mutex // guards trees, watchers, seq, next
	trees    map[string]*fakeTree
	watchers map[*watcher]struct{}
	seq      uint64
	next     int
	wg       sync.WaitGroup // watch goroutines
}

type fakeTree struct {
	id, base, backend, root string
	budget                  api.Budget
	nodes                   map[string]*fakeNode
	dropped                 bool // tree_drop: unloaded but kept, for tree_open
}

type fakeNode struct {
	api.Node
	gen     int // bumped when a child commits into this node
	forkGen int // the parent's gen when this node was forked
}

type watcher struct {
	tree string // "" watches every tree
	ch   chan api.Event
}

// NewFake returns an empty fake engine.
func NewFake() *Fake {
	return &Fake{trees: map[string]*fakeTree{}, watchers: map[*watcher]struct{}{}}
}

// SetPanic makes Do panic on op ("" turns it off), to test the faces' recovery.
func (f *Fake) SetPanic(op string) { f.panicOp.Store(op) }

// Wait waits for the goroutines of ended watches (call after their contexts end).
func (f *Fake) Wait() { f.wg.Wait() }

// Watchers reports how many watches are open.
func (f *Fake) Watchers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}

// Do serves one request.
func (f *Fake) Do(ctx context.Context, req api.Request) (api.Response, error) {
	if op, _ := f.panicOp.Load().(string); op != "" && req.Op == op {
		panic("fake: planted panic")
	}
	if err := ctx.Err(); err != nil {
		return api.Response{}, fmt.Errorf("%s: %w: %v", req.Op, api.ErrInternal, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch req.Op {
	case api.OpPing:
		return api.Response{Status: "pong", Version: Version}, nil
	case api.OpTreeCreate:
		return f.create(req)
	case api.OpTreeList:
		var ts []api.Tree
		for _, t := range f.trees {
			if t.dropped {
				continue
			}
			ts = append(ts, api.Tree{ID: t.id, Base: t.base, Backend: t.backend, Root: t.root, Budget: t.budget, Usage: t.usage()})
		}
		slices.SortFunc(ts, func(a, b api.Tree) int { return cmpStr(a.ID, b.ID) })
		return api.Response{Status: "tree_list", Trees: ts}, nil
	case api.OpWsList, api.OpWsMounts:
		return api.Response{Status: api.StatusOK}, nil
	}
	t, ok := f.trees[req.TreeID]
	if ok && t.dropped && req.Op != api.OpTreeOpen && req.Op != api.OpTreeDelete {
		ok = false
	}
	if !ok {
		if req.TreeID == "" {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree_id is required", req.Op)
		}
		return api.Response{}, api.Errorf(api.ErrNotFound, "tree %q", req.TreeID)
	}
	switch req.Op {
	case api.OpTreeNodes:
		return f.nodes(t), nil
	case api.OpTreeDrop:
		t.dropped = true
		f.emit(t.id, "drop", "")
		return api.Response{Status: api.StatusOK}, nil
	case api.OpTreeDelete:
		delete(f.trees, t.id)
		f.emit(t.id, "delete", "")
		return api.Response{Status: api.StatusOK, TreeID: t.id}, nil
	case api.OpTreeOpen:
		t.dropped = false
		return api.Response{Status: "tree_opened", TreeID: t.id, Root: t.root}, nil
	case api.OpTreeAutoEvict:
		return api.Response{Status: "tree_evicted", Evicted: []string{}}, nil
	case api.OpTreeFork:
		if req.Label == "" {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "tree_fork: label is required")
		}
		return f.fork(t, req.SourceID, []string{req.Label}, "tree_forked")
	case api.OpTreeForkBatch:
		if len(req.Labels) == 0 {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "tree_fork_batch: labels must not be empty")
		}
		return f.fork(t, req.SourceID, req.Labels, "tree_fork_batch")
	case api.OpTreeRollback:
		return f.fork(t, req.NodeID, []string{req.Label}, "tree_forked")
	}
	n, ok := t.nodes[req.NodeID]
	if !ok {
		return api.Response{}, api.Errorf(api.ErrNotFound, "tree %q: node %q", t.id, req.NodeID)
	}
	switch req.Op {
	case api.OpTreeCommit:
		return f.commit(t, n)
	case api.OpTreeAbort, api.OpTreePrune:
		if f.protectedIn(t, n) {
			return api.Response{}, api.Errorf(api.ErrProtected, "%s %s: node or a descendant is protected", req.Op, n.ID)
		}
		if n.ID == t.root {
			return api.Response{}, api.Errorf(api.ErrState, "%s: %s is the root", req.Op, n.ID)
		}
		f.remove(t, n)
		f.emit(t.id, map[string]string{api.OpTreeAbort: "abort", api.OpTreePrune: "prune"}[req.Op], n.ID)
		return api.Response{Status: api.StatusOK}, nil
	case api.OpTreeProtect, api.OpTreeUnprotect:
		n.Protected = req.Op == api.OpTreeProtect
		f.emit(t.id, map[bool]string{true: "protect", false: "unprotect"}[n.Protected], n.ID)
		return api.Response{Status: api.StatusOK}, nil
	case api.OpTreeSuspend:
		if n.State != api.StateLive {
			return api.Response{}, api.Errorf(api.ErrState, "suspend %s: node is %s", n.ID, n.State)
		}
		n.State = api.StateSuspended
		f.emit(t.id, "suspend", n.ID)
		return api.Response{Status: api.StatusOK}, nil
	case api.OpTreeResume:
		if n.State != api.StateSuspended {
			return api.Response{}, api.Errorf(api.ErrState, "resume %s: node is %s", n.ID, n.State)
		}
		n.State = api.StateLive
		f.emit(t.id, "resume", n.ID)
		return api.Response{Status: "tree_resumed", NodeID: n.ID, Path: n.Path}, nil
	}
	return api.Response{}, api.Errorf(api.ErrBadRequest, "fake: unsupported op %q", req.Op)
}

// Watch returns a snapshot and the events of treeID ("" for every tree) until ctx ends.
func (f *Fake) Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	snap := api.Response{Status: "tree_watching", TreeID: treeID}
	if treeID != "" {
		t, ok := f.trees[treeID]
		if !ok {
			return api.Response{}, nil, api.Errorf(api.ErrNotFound, "watch: tree %q", treeID)
		}
		snap.Nodes = f.nodes(t).Nodes
	}
	w := &watcher{tree: treeID, ch: make(chan api.Event, 1024)}
	f.watchers[w] = struct{}{}
	f.wg.Go(func() {
		<-ctx.Done()
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.watchers, w)
		close(w.ch)
	})
	return snap, w.ch, nil
}

func (f *Fake) create(req api.Request) (api.Response, error) {
	id := req.TreeID
	if id == "" {
		f.next++
		id = fmt.Sprintf("t%d", f.next)
	}
	if _, dup := f.trees[id]; dup {
		return api.Response{}, api.Errorf(api.ErrExists, "tree %q", id)
	}
	if req.Base == "" {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "tree_create: base is required")
	}
	b := api.DefaultBudget
	if req.Budget != nil {
		b = *req.Budget
	}
	t := &fakeTree{id: id, base: req.Base, backend: req.Backend, budget: b, nodes: map[string]*fakeNode{}}
	root := f.newNode(t, "", "root")
	t.root = root.ID
	f.trees[id] = t
	f.emit(id, "create", root.ID)
	return api.Response{Status: "tree_created", TreeID: id, Root: root.ID, Path: root.Path}, nil
}

func (f *Fake) newNode(t *fakeTree, parent, label string) *fakeNode {
	f.next++
	now := time.Now().UnixNano()
	n := &fakeNode{Node: api.Node{
		ID: fmt.Sprintf("n%d", f.next), Parent: parent, Children: []string{}, State: api.StateLive,
		Label: label, CreatedAt: now, LastActiveAt: now,
	}}
	n.Path = "/fake/" + t.id + "/" + n.ID
	t.nodes[n.ID] = n
	if p := t.nodes[parent]; p != nil {
		p.Children = append(p.Children, n.ID)
		n.forkGen = p.gen
	}
	return n
}

func (f *Fake) fork(t *fakeTree, source string, labels []string, status string) (api.Response, error) {
	src, ok := t.nodes[source]
	if !ok {
		return api.Response{}, api.Errorf(api.ErrNotFound, "tree %q: node %q", t.id, source)
	}
	if src.State == api.StateStale {
		return api.Response{}, api.Errorf(api.ErrStale, "fork from %s", src.ID)
	}
	start := time.Now()
	resp := api.Response{Status: status, TreeID: t.id}
	for _, l := range labels {
		s := time.Now()
		n := f.newNode(t, src.ID, l)
		resp.Forks = append(resp.Forks, api.Fork{NodeID: n.ID, Label: l, Path: n.Path, LatencyNS: time.Since(s).Nanoseconds() + 1})
		f.emit(t.id, "fork", n.ID)
	}
	resp.LatencyNS = time.Since(start).Nanoseconds() + 1
	if len(resp.Forks) == 1 {
		resp.NodeID = resp.Forks[0].NodeID
		resp.Path = resp.Forks[0].Path
	}
	return resp, nil
}

func (f *Fake) commit(t *fakeTree, n *fakeNode) (api.Response, error) {
	p, ok := t.nodes[n.Parent]
	if !ok {
		return api.Response{}, api.Errorf(api.ErrState, "commit %s: the root has no parent", n.ID)
	}
	if n.State == api.StateStale || n.forkGen != p.gen {
		return api.Response{}, api.Errorf(api.ErrStale, "commit %s: parent %s changed since the fork", n.ID, p.ID)
	}
	if len(n.Children) > 0 { // commit is leaf-only, as in the engine
		return api.Response{}, api.Errorf(api.ErrState, "commit %s: it has children %s; commit or abort them first", n.ID, strings.Join(n.Children, ", "))
	}
	resp := api.Response{Status: "tree_committed", TreeID: t.id, NodeID: p.ID, Stale: []string{}}
	for _, c := range p.Children {
		if s := t.nodes[c]; s != nil && c != n.ID && s.forkGen == p.gen {
			s.State = api.StateStale
			resp.Stale = append(resp.Stale, c)
			f.emit(t.id, "stale", c)
		}
	}
	p.gen++
	f.emit(t.id, "commit", n.ID)
	f.remove(t, n)
	return resp, nil
}

func (f *Fake) protectedIn(t *fakeTree, n *fakeNode) bool {
	if n.Protected {
		return true
	}
	for _, c := range n.Children {
		if f.protectedIn(t, t.nodes[c]) {
			return true
		}
	}
	return false
}

func (f *Fake) remove(t *fakeTree, n *fakeNode) {
	for _, c := range n.Children {
		f.remove(t, t.nodes[c])
	}
	delete(t.nodes, n.ID)
	if p := t.nodes[n.Parent]; p != nil {
		p.Children = slices.DeleteFunc(p.Children, func(c string) bool { return c == n.ID })
	}
}

func (t *fakeTree) usage() api.Usage {
	u := api.Usage{TotalNodes: len(t.nodes)}
	for _, n := range t.nodes {
		if n.State == api.StateLive {
			u.LiveNodes++
		}
	}
	return u
}

func (f *Fake) nodes(t *fakeTree) api.Response {
	resp := api.Response{Status: "tree_node_list", TreeID: t.id, Root: t.root}
	for _, n := range t.nodes {
		nn := n.Node
		nn.Children = slices.Clone(n.Children)
		resp.Nodes = append(resp.Nodes, nn)
	}
	slices.SortFunc(resp.Nodes, func(a, b api.Node) int { return cmpStr(a.ID, b.ID) })
	u, b := t.usage(), t.budget
	resp.Usage, resp.Budget = &u, &b
	return resp
}

// emit sends an event to the matching watchers; f.mu is held. A full
// watcher drops the event (the fake's buffer is large enough for tests).
func (f *Fake) emit(tree, kind, node string) {
	f.seq++
	ev := api.Event{Seq: f.seq, Kind: kind, TreeID: tree, NodeID: node, TimeNS: time.Now().UnixNano()}
	for w := range f.watchers {
		if w.tree == "" || w.tree == tree {
			select {
			case w.ch <- ev:
			default:
			}
		}
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
