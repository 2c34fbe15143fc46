package engine

import (
	"context"
	"sync"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
)

// hub fans events out to watchers. Sends never block: a watcher whose
// buffer is full is cut off (its channel closed), so a slow client cannot
// stall the verbs.
type hub struct {
	mu       sync.Mutex // guards watchers and closed
	watchers map[*watcher]struct{}
	closed   bool
	done     chan struct{} // closed by close: ends every watcher goroutine
	wg       sync.WaitGroup
}

type watcher struct {
	tree string // "" for every tree
	ch   chan api.Event
	gone bool // ch closed
}

func (h *hub) init() {
	h.watchers = map[*watcher]struct{}{}
	h.done = make(chan struct{})
}

// end closes w's channel; h.mu is held.
func (h *hub) end(w *watcher) {
	if !w.gone {
		w.gone = true
		close(w.ch)
	}
	delete(h.watchers, w)
}

func (h *hub) send(ev api.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		if w.tree != "" && w.tree != ev.TreeID {
			continue
		}
		select {
		case w.ch <- ev:
		default:
			h.end(w)
		}
	}
}

// endTree ends the watchers of one tree (after its drop event).
func (h *hub) endTree(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		if w.tree == id {
			h.end(w)
		}
	}
}

// add registers a watcher that ends with ctx; false if the hub is closed.
func (h *hub) add(ctx context.Context, tree string, buf int) (*watcher, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	w := &watcher{tree: tree, ch: make(chan api.Event, buf)}
	h.watchers[w] = struct{}{}
	h.wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-h.done:
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.end(w)
	})
	return w, true
}

func (h *hub) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Watchers is the number of open watches.
func (e *Engine) Watchers() int {
	e.hub.mu.Lock()
	defer e.hub.mu.Unlock()
	return len(e.hub.watchers)
}

// Watch returns a snapshot of tree treeID (Status "tree_watching", with its
// nodes, usage and budget) and its events from that snapshot on, until ctx
// ends, the tree is dropped or the engine closes; then the channel is
// closed. treeID "" watches every tree (the snapshot lists them; it is taken
// without stopping the trees, so it may already include the first events
// of the stream). A watcher
// that falls WatchBuffer events behind is cut off.
func (e *Engine) Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error) {
	if treeID == "" {
		if cred, ok := access.FromContext(ctx); ok && cred.UID != 0 && cred.UID != e.self {
			return api.Response{}, nil, api.Errorf(api.ErrForbidden, "watch: every tree's events are for root and the daemon's uid; %s may watch its own trees by id", cred)
		}
		w, ok := e.hub.add(ctx, "", e.cfg.WatchBuffer)
		if !ok {
			return api.Response{}, nil, api.Errorf(api.ErrBusy, "watch: engine closed")
		}
		return api.Response{Status: "tree_watching", Trees: e.list(ctx)}, w.ch, nil
	}
	ts, err := e.get("watch", treeID)
	if err != nil {
		return api.Response{}, nil, err
	}
	defer ts.mu.Unlock()
	if err := e.mayDrive(ctx, "watch", ts); err != nil {
		return api.Response{}, nil, err
	}
	// Under ts.mu no event of this tree is emitted: the snapshot and the
	// stream meet exactly.
	w, ok := e.hub.add(ctx, treeID, e.cfg.WatchBuffer)
	if !ok {
		return api.Response{}, nil, api.Errorf(api.ErrBusy, "watch: engine closed")
	}
	e.measure(ts)
	return e.nodesResponse(ts, "tree_watching"), w.ch, nil
}
