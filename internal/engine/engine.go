package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/tree"
)

// Version is the engine's version, reported by ping.
const Version = "0.1.0"

// Observer hears about every request the engine serves; the metrics layer
// builds its histograms from it. OnOp is called from the serving goroutine
// after the request finished and must not block.
type Observer interface {
	OnOp(op string, d time.Duration, err error)
}

// Config configures New. Home is required; the zero value of every other
// field means its default.
type Config struct {
	// Home is the engine's state directory: trees.db and trees/<id>/.
	Home string
	// OpenFiles opens a tree's files layer. Required.
	OpenFiles OpenFiles
	// Backends are the sandbox backends trees may name at tree_create, by
	// name; nil means only BackendDir (OpenDirBackend).
	Backends map[string]OpenBackend
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives what the engine cannot return: files reclaimed late,
	// trees that failed to reopen. nil discards.
	Logger *slog.Logger
	// Observer, if set, hears about every request.
	Observer Observer
	// Via, if set, is the daemon's front door (audit, then Do): the verbs
	// a view's control files ask for are served through it, so that they
	// are audited like every face's. nil: Do.
	Via func(ctx context.Context, req api.Request) (api.Response, error)
	// ResolveBase is the real path of a base directory a request names,
	// checked as the requester (access.FromContext): how ws_mount finds
	// the tree that holds it. nil: the path as given, cleaned.
	ResolveBase func(ctx context.Context, base string) (string, error)
	// WatchBuffer is each watcher's event buffer; a watcher that falls this
	// far behind is cut off (its channel closed). 0 means 1024.
	WatchBuffer int
}

// Engine serves the tree verbs. It is safe for concurrent use.
//
// Locking: Engine.mu guards trees and closed (held only to look up, insert
// or remove a tree). Engine.life serialises tree_create, tree_open,
// tree_drop and tree_delete with each other, so an id is never created twice. Each
// treeState.mu serialises every verb on that tree, its Files calls and its
// metadata writes. Lock order: life, then a treeState.mu, then its leaseMu,
// then Engine.mu, then hub.mu. hub.mu guards the watchers.
type Engine struct {
	cfg  Config
	meta *meta
	log  *slog.Logger

	// ctx is the engine's own lifetime, ended by Close: backends are
	// opened with it and every exec's lease derives from it, so that no
	// request's context ever becomes a resource's lifetime.
	ctx    context.Context
	cancel context.CancelCauseFunc
	execs  sync.WaitGroup // execs in flight; Close waits for them

	life sync.Mutex

	mu     sync.Mutex
	trees  map[string]*treeState
	viewAt map[string]string // a view's mountpoint -> its tree
	closed bool
	self   uint32 // the daemon's euid: may drive every tree and view, as root may

	hub hub
	bg  sync.WaitGroup // reloads of trees whose verb panicked
}

// treeState is one loaded tree.
type treeState struct {
	id string // immutable

	mu      sync.Mutex // guards every field below
	meta    treeMeta
	t       *tree.Tree
	files   Files
	backend Backend
	views   map[string]*view // by mountpoint
	names   *names           // node names for the views' lookups (its own lock)
	seq     uint64           // the last event's sequence number
	dropped bool             // unloaded: a verb that found this pointer before the drop must report not found
	// broken: a verb panicked halfway, so memory may disagree with disk.
	// The tree refuses verbs until reload replaces it with what is on disk.
	broken bool

	leaseMu sync.Mutex // guards leases; taken after mu, or alone by an exec ending
	// leases are the execs in flight, by node id (see lease.go).
	leases map[string]map[*lease]struct{}
}

// New opens the engine's state in cfg.Home and reloads every open tree,
// reconciling each with its files layer. A tree that fails to reopen is left
// closed (tree_open retries it) and logged.
func New(cfg Config) (*Engine, error) {
	if cfg.Home == "" {
		return nil, api.Errorf(api.ErrBadRequest, "engine: Home is required")
	}
	if cfg.OpenFiles == nil {
		return nil, api.Errorf(api.ErrBadRequest, "engine: OpenFiles is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WatchBuffer <= 0 {
		cfg.WatchBuffer = 1024
	}
	if cfg.Backends == nil {
		cfg.Backends = map[string]OpenBackend{BackendDir: OpenDirBackend}
	}
	if err := os.MkdirAll(filepath.Join(cfg.Home, "trees"), 0o700); err != nil {
		return nil, fmt.Errorf("engine home: %w: %w", api.ErrInternal, err)
	}
	m, err := openMeta(filepath.Join(cfg.Home, "trees.db"))
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, meta: m, log: cfg.Logger, trees: map[string]*treeState{}, viewAt: map[string]string{}, self: uint32(os.Geteuid())}
	e.ctx, e.cancel = context.WithCancelCause(context.Background())
	e.hub.init()
	e.removeDeleted()
	tms, err := m.trees()
	if err != nil {
		e.cancel(nil)
		m.close()
		return nil, err
	}
	for _, tm := range tms {
		if !tm.Open {
			continue
		}
		ts, err := e.load(e.ctx, tm.ID)
		if err != nil {
			e.log.Warn("tree not reopened", "tree", tm.ID, "err", err)
			continue
		}
		e.trees[tm.ID] = ts
	}
	return e, nil
}

// Close ends every exec, closes every tree's backend (stopping what it
// runs) and files layer and the metadata store, and ends every watch. Verbs
// in flight finish first.
func (e *Engine) Close() error {
	defer e.bg.Wait() // a reload waiting for life finds the engine closed
	e.life.Lock()
	defer e.life.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	trees := e.trees
	e.trees = map[string]*treeState{}
	e.mu.Unlock()
	e.cancel(api.Errorf(api.ErrBusy, "the engine closed")) // every exec's lease ends
	e.execs.Wait()
	var errs []error
	for _, ts := range trees {
		ts.mu.Lock()
		e.takeViews(ts)
		if err := ts.closeLayers(); err != nil {
			errs = append(errs, fmt.Errorf("close tree %s: %w", ts.id, err))
		}
		ts.mu.Unlock()
	}
	e.hub.close()
	if err := e.meta.close(); err != nil {
		errs = append(errs, dbErr("close metadata", err))
	}
	return errors.Join(errs...)
}

// get returns tree id locked; the caller unlocks ts.mu.
func (e *Engine) get(op, id string) (*treeState, error) {
	if id == "" {
		return nil, api.Errorf(api.ErrBadRequest, "%s: tree_id is required", op)
	}
	e.mu.Lock()
	ts, ok := e.trees[id]
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, api.Errorf(api.ErrBusy, "%s: engine closed", op)
	}
	if !ok {
		return nil, api.Errorf(api.ErrNotFound, "%s: tree %q", op, id)
	}
	ts.mu.Lock()
	if ts.dropped {
		ts.mu.Unlock()
		return nil, api.Errorf(api.ErrNotFound, "%s: tree %q", op, id)
	}
	if ts.broken {
		ts.mu.Unlock()
		return nil, api.Errorf(api.ErrBusy, "%s: tree %q is being reloaded from disk after an internal error; try again", op, id)
	}
	return ts, nil
}

// contain turns a panic in a verb on ts (held) into an internal error: ts
// is marked broken, so that it refuses verbs, and is reloaded from disk in
// the background. The other trees go on.
func (e *Engine) contain(ts *treeState, op string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	e.log.Error("engine panic; the tree is reloaded from disk", "op", op, "tree", ts.id, "panic", r, "stack", string(debug.Stack()))
	ts.broken = true
	*err = api.Errorf(api.ErrInternal, "%s: internal error; tree %s is reloaded from disk", op, ts.id)
	e.bg.Go(func() { e.reload(ts) })
}

// reload replaces the broken ts with tree ts.id as the metadata store and
// the files layer hold it (load reconciles the two, as after a crash). A
// tree that fails to load is left closed, and tree_open retries it.
func (e *Engine) reload(ts *treeState) {
	e.life.Lock()
	defer e.life.Unlock()
	e.mu.Lock()
	current := !e.closed && e.trees[ts.id] == ts
	e.mu.Unlock()
	if !current {
		return
	}
	// ts stays broken (refusing with busy) until the new state replaces
	// it, and for good after: a verb that found the old pointer retries.
	ts.mu.Lock()
	broken := ts.dropped
	e.takeViews(ts)
	ts.dropped = broken
	if err := ts.closeLayers(); err != nil {
		e.log.Warn("close the backend and files of a broken tree", "tree", ts.id, "err", err)
	}
	ts.mu.Unlock()
	nts, err := e.load(e.ctx, ts.id)
	if err == nil {
		ts.mu.Lock()
		nts.seq = ts.seq // the event sequence goes on
		ts.mu.Unlock()
	}
	e.mu.Lock()
	if err != nil {
		delete(e.trees, ts.id)
	} else {
		e.trees[ts.id] = nts
	}
	e.mu.Unlock()
	// Watchers saw the broken memory: end their streams, so that they
	// watch again and start from a snapshot of what is on disk.
	e.hub.endTree(ts.id)
	if err != nil {
		ts.mu.Lock()
		ts.dropped = true
		ts.mu.Unlock()
	}
	if err != nil {
		e.log.Error("reload a broken tree; it stays closed until tree_open", "tree", ts.id, "err", err)
		return
	}
	e.log.Info("tree reloaded from disk", "tree", ts.id)
}

// Do serves one request. The error it returns wraps an api sentinel.
func (e *Engine) Do(ctx context.Context, req api.Request) (resp api.Response, err error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("engine panic", "op", req.Op, "panic", r, "stack", string(debug.Stack()))
			resp, err = api.Response{}, api.Errorf(api.ErrInternal, "%s: internal error", req.Op)
		}
		if err != nil && !isAPI(err) {
			err = fmt.Errorf("%s: %w: %w", req.Op, api.ErrInternal, err)
		}
		if e.cfg.Observer != nil {
			e.cfg.Observer.OnOp(req.Op, time.Since(start), err)
		}
	}()
	if err := ctx.Err(); err != nil {
		return api.Response{}, fmt.Errorf("%s: %w: %w", req.Op, api.ErrInternal, err)
	}
	if v, ok := engineVerbs[req.Op]; ok {
		return v(e, ctx, req)
	}
	tv, ok := treeVerbs[req.Op]
	if !ok {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "unknown op %q", req.Op)
	}
	ts, err := e.get(req.Op, req.TreeID)
	if err != nil {
		return api.Response{}, err
	}
	defer ts.mu.Unlock()
	defer e.contain(ts, req.Op, &err)
	if err := e.mayDrive(ctx, req.Op, ts); err != nil {
		return api.Response{}, err
	}
	return tv(e, ctx, ts, req)
}

// engineVerbs are the verbs of api's table that the engine serves outside
// any one tree's lock; treeVerbs those it serves on one tree, under its
// mutex. TestDispatch checks them against the table.
var engineVerbs = map[string]func(e *Engine, ctx context.Context, req api.Request) (api.Response, error){
	api.OpPing: func(e *Engine, ctx context.Context, req api.Request) (api.Response, error) {
		return api.Response{Status: "pong", Version: Version}, nil
	},
	api.OpTreeCreate: (*Engine).create,
	api.OpTreeList: func(e *Engine, ctx context.Context, req api.Request) (api.Response, error) {
		return api.Response{Status: "tree_list", Trees: e.list(ctx)}, nil
	},
	api.OpTreeOpen:   (*Engine).open,
	api.OpTreeDrop:   (*Engine).drop,
	api.OpTreeDelete: (*Engine).del,
	api.OpTreeWatch: func(e *Engine, ctx context.Context, req api.Request) (api.Response, error) {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "tree_watch streams: the face calls Watch")
	},
	api.OpTreeExec: func(e *Engine, ctx context.Context, req api.Request) (api.Response, error) {
		if req.Detach {
			return e.spawn(ctx, req)
		}
		return api.Response{}, api.Errorf(api.ErrBadRequest, "tree_exec streams: the face calls Exec")
	},
	// The files and process verbs act on one node outside its tree's
	// mutex, under a lease (nodefiles.go, lease.go).
	api.OpFileRead:   (*Engine).fileVerb,
	api.OpFileWrite:  (*Engine).fileVerb,
	api.OpFileList:   (*Engine).fileVerb,
	api.OpFileStat:   (*Engine).fileVerb,
	api.OpFileRemove: (*Engine).fileVerb,
	api.OpFileMkdir:  (*Engine).fileVerb,
	api.OpExecList:   (*Engine).processVerb,
	api.OpExecKill:   (*Engine).processVerb,
	api.OpExecLogs: func(e *Engine, ctx context.Context, req api.Request) (api.Response, error) {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "exec_logs streams: the face calls Logs")
	},
	// The workspace verbs act on a view of a tree (views.go), which they
	// find, and lock, by its mountpoint.
	api.OpWsMount:   (*Engine).ws,
	api.OpWsUnmount: (*Engine).ws,
	api.OpWsCreate:  (*Engine).ws,
	api.OpWsCommit:  (*Engine).ws,
	api.OpWsAbort:   (*Engine).ws,
	api.OpWsSwitch:  (*Engine).ws,
	api.OpWsList:    (*Engine).ws,
	api.OpWsDiff:    (*Engine).ws,
	api.OpWsMounts:  (*Engine).ws,
}

type treeVerb func(e *Engine, ctx context.Context, ts *treeState, req api.Request) (api.Response, error)

var treeVerbs = map[string]treeVerb{
	api.OpTreeFork: func(e *Engine, ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
		return e.fork(ctx, ts, req, "tree_forked", req.SourceID, []string{req.Label})
	},
	api.OpTreeForkBatch: func(e *Engine, ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
		return e.fork(ctx, ts, req, api.OpTreeForkBatch, req.SourceID, req.Labels)
	},
	api.OpTreeRollback: func(e *Engine, ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
		return e.fork(ctx, ts, req, "tree_forked", req.NodeID, []string{req.Label})
	},
	api.OpTreeCommit:    (*Engine).commit,
	api.OpTreeAbort:     (*Engine).remove,
	api.OpTreePrune:     (*Engine).remove,
	api.OpTreeProtect:   simpleVerb,
	api.OpTreeUnprotect: simpleVerb,
	api.OpTreeSuspend:   simpleVerb,
	api.OpTreeResume:    simpleVerb,
	api.OpTreeAutoEvict: func(e *Engine, ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
		return e.evict(ts)
	},
	api.OpTreeDiff:   (*Engine).diff,
	api.OpTreeRebase: (*Engine).rebase,
	api.OpTreeNodes: func(e *Engine, ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
		e.measure(ts)
		return e.nodesResponse(ts, "tree_node_list"), nil
	},
}

func simpleVerb(e *Engine, ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
	return e.simple(ts, req)
}

// isAPI reports whether err wraps an api sentinel.
func isAPI(err error) bool {
	return api.Code(err) != api.CodeInternal || errors.Is(err, api.ErrInternal)
}

// TreeStats is one tree's state for gauges.
type TreeStats struct {
	TreeID string
	Usage  api.Usage
	Budget api.Budget
	// Nodes counts nodes by state (api.StateLive, api.StateSuspended, api.StateStale).
	Nodes map[string]int
}

// Stats reports every loaded tree, in id order.
func (e *Engine) Stats() []TreeStats {
	var out []TreeStats
	for _, ts := range e.loaded() {
		ts.mu.Lock()
		if !ts.dropped {
			e.measure(ts)
			s := TreeStats{TreeID: ts.id, Usage: ts.t.Usage(), Budget: ts.t.Budget(), Nodes: map[string]int{}}
			for st, n := range ts.t.CountByState() {
				s.Nodes[string(st)] = n
			}
			out = append(out, s)
		}
		ts.mu.Unlock()
	}
	return out
}

// loaded returns the loaded trees in id order.
func (e *Engine) loaded() []*treeState {
	e.mu.Lock()
	out := make([]*treeState, 0, len(e.trees))
	for _, ts := range e.trees {
		out = append(out, ts)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b *treeState) int { return cmpString(a.id, b.id) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// owner is the uid that owns the tree (see treeMeta.Owner).
func (ts *treeState) owner() uint32 {
	if ts.meta.Owner != nil {
		return *ts.meta.Owner
	}
	return uint32(os.Geteuid())
}

// list summarises the loaded trees that ctx's requester may drive.
func (e *Engine) list(ctx context.Context) []api.Tree {
	out := []api.Tree{}
	for _, ts := range e.loaded() {
		ts.mu.Lock()
		if !ts.dropped && e.mayDrive(ctx, api.OpTreeList, ts) == nil {
			e.measure(ts)
			out = append(out, ts.summary())
		}
		ts.mu.Unlock()
	}
	return out
}

func (ts *treeState) summary() api.Tree {
	return api.Tree{ID: ts.meta.ID, Base: ts.meta.Base, Backend: ts.meta.Backend, Root: ts.t.Root(), OwnerUID: ts.owner(),
		Usage: ts.t.Usage(), Budget: ts.t.Budget(), Image: ts.meta.Image, Network: ts.meta.Network}
}
