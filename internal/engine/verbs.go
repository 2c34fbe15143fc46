package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/tree"
)

// NodeDiskReserve is the disk a fork needs free for each new node: the
// least its first change costs (its layer's directory and one block). A
// fork the disk budget has not that room for is refused.
const NodeDiskReserve = 8 << 10

// Limits on request fields.
const (
	MaxLabelBytes = 256
	MaxBatch      = 1024 // labels in one tree_fork_batch
	maxIDBytes    = 64
)

var treeIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// BackendDir names the files-only backend (OpenDirBackend), the default.
const BackendDir = "dir"

func validLabel(op, l string) error {
	if len(l) > MaxLabelBytes {
		return api.Errorf(api.ErrBadRequest, "%s: label longer than %d bytes", op, MaxLabelBytes)
	}
	if !utf8.ValidString(l) {
		return api.Errorf(api.ErrBadRequest, "%s: label is not UTF-8", op)
	}
	for _, r := range l {
		if unicode.IsControl(r) {
			return api.Errorf(api.ErrBadRequest, "%s: label %q has a control character", op, l)
		}
	}
	return nil
}

func validNode(op, field, id string) error {
	if id == "" {
		return api.Errorf(api.ErrBadRequest, "%s: %s is required", op, field)
	}
	if len(id) > maxIDBytes || !utf8.ValidString(id) {
		return api.Errorf(api.ErrBadRequest, "%s: %s is not a node id", op, field)
	}
	return nil
}

// branch is node id's files branch.
func (ts *treeState) branch(id string) string {
	if id == ts.t.Root() {
		return MainBranch
	}
	return id
}

// nodeOf is the node of a files branch.
func (ts *treeState) nodeOf(branch string) string {
	if branch == MainBranch {
		return ts.t.Root()
	}
	return branch
}

// emit streams one event of ts; ts.mu is held, so a tree's events are in order.
func (e *Engine) emit(ts *treeState, kind, node string) {
	ts.seq++
	e.hub.send(api.Event{Seq: ts.seq, Kind: kind, TreeID: ts.id, NodeID: node, TimeNS: e.cfg.Now().UnixNano()})
}

// save writes p (and the tree's next id) in one transaction, then applies
// it to the in-memory tree, after the plan's sandbox and files effects
// (stateEffects); a failed save undoes them.
func (e *Engine) saveApply(ts *treeState, p *tree.Plan, intent *commitIntent, clearIntent bool) error {
	undo, err := e.stateEffects(ts, p)
	if err != nil {
		return err
	}
	return e.save(ts, p, intent, clearIntent, undo)
}

// save is saveApply after the effects: undo undoes them if the save fails.
func (e *Engine) save(ts *treeState, p *tree.Plan, intent *commitIntent, clearIntent bool, undo func() error) error {
	tm := ts.meta
	tm.NextID = p.NextID
	if err := e.meta.save(tm, p, intent, clearIntent); err != nil {
		if uerr := undo(); uerr != nil {
			return fmt.Errorf("%w; undoing it: %w", err, uerr)
		}
		return err
	}
	ts.meta = tm
	if err := ts.t.Apply(p); err != nil {
		return err
	}
	if len(ts.views) > 0 {
		ts.refreshNames()
	}
	return nil
}

// stateEffects performs what p's state changes need before its save (the
// commit point): a node the plan suspends (by name or by eviction) has its
// execs ended, its sandbox suspended and its files made unwritable, in that
// order; one it makes live again has its files made writable and its
// sandbox resumed. A failed step undoes the steps before it, in reverse
// order; on success the returned undo does that for a later failure.
func (e *Engine) stateEffects(ts *treeState, p *tree.Plan) (undo func() error, err error) {
	var freeze, thaw []string
	for _, n := range p.Put {
		old, ok := ts.t.Node(n.ID)
		switch {
		case n.State == tree.Suspended && ok && old.State == tree.Live:
			freeze = append(freeze, n.ID)
		case n.State == tree.Live && ok && old.State == tree.Suspended:
			thaw = append(thaw, n.ID)
		}
	}
	ctx := e.ctx
	var steps []func() error
	undo = func() error {
		var errs []error
		for i := len(steps) - 1; i >= 0; i-- {
			errs = append(errs, steps[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			if uerr := undo(); uerr != nil {
				err = fmt.Errorf("%w; undoing it: %w", err, uerr)
			}
		}
	}()
	if len(freeze) > 0 {
		ts.endLeases(freeze, "suspended (tree_suspend, or evicted)")
	}
	for _, id := range freeze {
		if err := ts.backend.Suspend(ctx, id); err != nil {
			return nil, fmt.Errorf("node %s: suspend its sandbox: %w", id, err)
		}
		steps = append(steps, func() error { return e.resumeSandbox(ctx, ts, id) })
	}
	if err := e.setWritable(ts, freeze, false); err != nil {
		return nil, err
	}
	steps = append(steps, func() error { return e.setWritable(ts, freeze, true) })
	if err := e.setWritable(ts, thaw, true); err != nil {
		return nil, err
	}
	steps = append(steps, func() error { return e.setWritable(ts, thaw, false) })
	for _, id := range thaw {
		if err := e.resumeSandbox(ctx, ts, id); err != nil {
			return nil, err
		}
		steps = append(steps, func() error { return ts.backend.Suspend(ctx, id) })
	}
	return undo, nil
}

// resumeSandbox resumes node id's sandbox over its files.
func (e *Engine) resumeSandbox(ctx context.Context, ts *treeState, id string) error {
	path, err := ts.filesPath(id)
	if err != nil {
		return err
	}
	if err := ts.backend.Resume(ctx, id, path); err != nil {
		return fmt.Errorf("node %s: resume its sandbox: %w", id, err)
	}
	return nil
}

// setWritable makes the files of nodes ids writable or not, if the files
// layer can (Freezer).
func (e *Engine) setWritable(ts *treeState, ids []string, writable bool) error {
	fz, ok := ts.files.(Freezer)
	if !ok {
		return nil
	}
	for _, id := range ids {
		if err := fz.SetWritable(ts.branch(id), writable); err != nil {
			return fmt.Errorf("node %s: make its files writable=%v: %w", id, writable, err)
		}
	}
	return nil
}

func (e *Engine) create(ctx context.Context, req api.Request) (api.Response, error) {
	const op = api.OpTreeCreate
	backend, err := e.backendName(op, req.Backend)
	if err != nil {
		return api.Response{}, err
	}
	if req.Base == "" {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: base is required", op)
	}
	if !filepath.IsAbs(req.Base) || strings.ContainsRune(req.Base, 0) {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: base %q is not an absolute path", op, req.Base)
	}
	var b api.Budget
	if req.Budget != nil {
		b = *req.Budget
	}
	b, err = tree.NormalizeBudget(b)
	if err != nil {
		return api.Response{}, fmt.Errorf("%s: %w", op, err)
	}
	switch req.Network {
	case "", api.NetworkNone:
		req.Network = ""
	case api.NetworkOutbound:
	default:
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: network %q: want %q (the default) or %q", op, req.Network, api.NetworkNone, api.NetworkOutbound)
	}
	if req.Image == "host" { // the default root, named
		req.Image = ""
	}
	if cred, ok := access.FromContext(ctx); ok {
		if err := mayOwnSandboxes(backend, cred.UID); err != nil {
			return api.Response{}, fmt.Errorf("%s: %w", op, err)
		}
	}
	if req.TreeID != "" && !treeIDRE.MatchString(req.TreeID) {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree_id %q: want 1-64 of [A-Za-z0-9._-], not starting with . - _", op, req.TreeID)
	}
	e.life.Lock()
	defer e.life.Unlock()
	if e.isClosed() {
		return api.Response{}, api.Errorf(api.ErrBusy, "%s: engine closed", op)
	}
	req.Backend, req.Budget = backend, &b
	return e.createLocked(ctx, req)
}

// createLocked is tree_create with its request checked; e.life is held.
func (e *Engine) createLocked(ctx context.Context, req api.Request) (api.Response, error) {
	const op = api.OpTreeCreate
	backend := req.Backend
	if backend == "" {
		backend = BackendDir
	}
	var b api.Budget
	if req.Budget != nil {
		b = *req.Budget
	}
	b, err := tree.NormalizeBudget(b)
	if err != nil {
		return api.Response{}, fmt.Errorf("%s: %w", op, err)
	}
	id := req.TreeID
	if id == "" {
		for i := 1; ; i++ {
			id = fmt.Sprintf("t%d", i)
			taken, err := e.meta.exists(id)
			if err != nil {
				return api.Response{}, err
			}
			if !taken {
				break
			}
		}
	} else if taken, err := e.meta.exists(id); err != nil {
		return api.Response{}, err
	} else if taken {
		return api.Response{}, api.Errorf(api.ErrExists, "%s: tree %q exists (tree_open reopens a dropped one)", op, id)
	}
	now := e.cfg.Now()
	t, err := tree.New(b, now)
	if err != nil {
		return api.Response{}, err
	}
	// What the tree opens lives as long as the engine, not the request.
	ctx = e.detach(ctx)
	files, err := e.cfg.OpenFiles(ctx, e.treeDir(id), filepath.Clean(req.Base))
	if err != nil {
		return api.Response{}, fmt.Errorf("%s %s: files: %w", op, id, err)
	}
	if err := files.SetDiskLimit(t.Budget().MaxDiskBytes); err != nil {
		files.Close()
		return api.Response{}, fmt.Errorf("%s %s: files: %w", op, id, err)
	}
	// A crash between a past OpenFiles and its metadata can leave branches
	// behind; a new tree has only main.
	if err := abortExtra(ctx, files, map[string]bool{MainBranch: true}); err != nil {
		files.Close()
		return api.Response{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	ts := &treeState{id: id, t: t, files: files, views: map[string]*view{}, names: newNames(), meta: treeMeta{ID: id, Base: filepath.Clean(req.Base), Backend: backend, Image: req.Image, Network: req.Network,
		Budget: b, Root: t.Root(), NextID: t.NextID(), CreatedAt: now, Open: true}}
	if cred, ok := access.FromContext(ctx); ok {
		ts.meta.Owner = &cred.UID
	}
	// The root's sandbox starts before the metadata: a crash in between
	// leaves a sandbox of a tree that does not exist, which the next
	// tree_create of that id stops (below) before it starts its own.
	if err := e.startRoot(ctx, ts); err != nil {
		files.Close()
		return api.Response{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	if err := e.meta.create(ts.meta, t.Nodes()); err != nil {
		ts.closeLayers()
		return api.Response{}, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	e.mu.Lock()
	e.trees[id] = ts
	e.mu.Unlock()
	e.emit(ts, "create", t.Root())
	return api.Response{Status: "tree_created", TreeID: id, Root: t.Root(), NodeID: t.Root(), Path: e.path(ts, t.Root())}, nil
}

// startRoot opens the backend of new tree ts, stops whatever it holds (left
// by a crash of an earlier create of this id) and starts the root's
// sandbox. On failure the backend is closed again.
func (e *Engine) startRoot(ctx context.Context, ts *treeState) error {
	b, err := e.openBackend(ts.id, ts.meta, ts.t.Budget())
	if err != nil {
		return err
	}
	held, err := b.Nodes(ctx)
	if err == nil {
		for _, h := range held {
			if err = b.Stop(ctx, h.ID); err != nil {
				break
			}
		}
	}
	var path string
	if err == nil {
		path, err = ts.files.Path(MainBranch)
	}
	if err == nil {
		err = b.Start(ctx, ts.t.Root(), path)
	}
	if err != nil {
		if cerr := b.Close(); cerr != nil {
			err = fmt.Errorf("%w; closing the backend: %w", err, cerr)
		}
		return fmt.Errorf("start the root's sandbox: %w", err)
	}
	ts.backend = b
	return nil
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *Engine) treeDir(id string) string { return filepath.Join(e.cfg.Home, "trees", id) }

// abortExtra aborts every branch of files that keep does not name.
func abortExtra(ctx context.Context, files Files, keep map[string]bool) error {
	branches, err := files.Branches()
	if err != nil {
		return fmt.Errorf("list branches: %w", err)
	}
	for _, b := range branches {
		if keep[b] {
			continue
		}
		// Aborting a parent may already have dropped b.
		if err := files.Abort(ctx, b); err != nil && !errors.Is(err, api.ErrNotFound) {
			return fmt.Errorf("abort orphan branch %s: %w", b, err)
		}
	}
	return nil
}

func (e *Engine) open(ctx context.Context, req api.Request) (api.Response, error) {
	const op = api.OpTreeOpen
	if req.TreeID == "" {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree_id is required", op)
	}
	e.life.Lock()
	defer e.life.Unlock()
	if e.isClosed() {
		return api.Response{}, api.Errorf(api.ErrBusy, "%s: engine closed", op)
	}
	return e.openLocked(ctx, req)
}

// openLocked is tree_open; e.life is held.
func (e *Engine) openLocked(ctx context.Context, req api.Request) (api.Response, error) {
	const op = api.OpTreeOpen
	e.mu.Lock()
	ts, ok := e.trees[req.TreeID]
	e.mu.Unlock()
	if !ok {
		var err error
		if ts, err = e.load(e.detach(ctx), req.TreeID); err != nil {
			return api.Response{}, err
		}
		tm := ts.meta
		tm.Open = true
		if err := e.meta.saveMeta(tm); err != nil {
			ts.files.Close()
			return api.Response{}, err
		}
		ts.meta = tm
		e.mu.Lock()
		e.trees[req.TreeID] = ts
		e.mu.Unlock()
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.broken {
		return api.Response{}, api.Errorf(api.ErrBusy, "%s: tree %q is being reloaded from disk after an internal error; try again", op, req.TreeID)
	}
	if err := e.mayDrive(ctx, op, ts); err != nil {
		return api.Response{}, err
	}
	e.measure(ts)
	r := e.nodesResponse(ts, "tree_opened")
	return r, nil
}

func (e *Engine) drop(ctx context.Context, req api.Request) (api.Response, error) {
	e.life.Lock()
	defer e.life.Unlock()
	ts, err := e.get(api.OpTreeDrop, req.TreeID)
	if err != nil {
		return api.Response{}, err
	}
	defer ts.mu.Unlock()
	if err := e.mayDrive(ctx, api.OpTreeDrop, ts); err != nil {
		return api.Response{}, err
	}
	tm := ts.meta
	tm.Open = false
	if err := e.meta.saveMeta(tm); err != nil {
		return api.Response{}, err
	}
	ts.meta = tm
	e.takeViews(ts)
	e.mu.Lock()
	delete(e.trees, ts.id)
	e.mu.Unlock()
	if err := ts.closeLayers(); err != nil {
		e.log.Warn("close the backend and files of a dropped tree", "tree", ts.id, "err", err)
	}
	e.emit(ts, "drop", "")
	e.hub.endTree(ts.id)
	return api.Response{Status: api.StatusOK, TreeID: ts.id}, nil
}

// del is tree_delete: the tree leaves the daemon, its metadata and its
// directory (layers, mount, store) go; the base directory stays. It works on
// a loaded and on a dropped tree alike. Order, for a crash at any step: the
// files layer is closed (unmounted), the directory renamed aside (a tree
// whose directory is gone fails to load and can be deleted again), the
// metadata deleted in one transaction (the id is free from then on), and
// the renamed directory removed (New removes what a crash left of it).
func (e *Engine) del(ctx context.Context, req api.Request) (api.Response, error) {
	const op = api.OpTreeDelete
	if req.TreeID == "" {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree_id is required", op)
	}
	e.life.Lock()
	defer e.life.Unlock()
	if e.isClosed() {
		return api.Response{}, api.Errorf(api.ErrBusy, "%s: engine closed", op)
	}
	// Only an id the metadata knows names a directory (ids were checked at
	// create), so a crafted id never reaches the filesystem.
	known, err := e.meta.exists(req.TreeID)
	if err != nil {
		return api.Response{}, err
	}
	if !known {
		return api.Response{}, api.Errorf(api.ErrNotFound, "%s: tree %q", op, req.TreeID)
	}
	e.mu.Lock()
	ts, loaded := e.trees[req.TreeID]
	e.mu.Unlock()
	if loaded {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if err := e.mayDrive(ctx, op, ts); err != nil {
			return api.Response{}, err
		}
		e.takeViews(ts)
		if err := ts.closeLayers(); err != nil {
			ts.dropped = false
			return api.Response{}, fmt.Errorf("%s %s: close its backend and files: %w", op, ts.id, err)
		}
		e.mu.Lock()
		delete(e.trees, ts.id)
		e.mu.Unlock()
	}
	dir := e.treeDir(req.TreeID)
	aside := filepath.Join(e.cfg.Home, "trees", deletedPrefix+req.TreeID)
	if err := os.Rename(dir, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
		return api.Response{}, fmt.Errorf("%s %s: %w: %w", op, req.TreeID, api.ErrInternal, err)
	}
	if err := e.meta.remove(req.TreeID); err != nil {
		return api.Response{}, fmt.Errorf("%s %s: %w", op, req.TreeID, err)
	}
	if err := os.RemoveAll(aside); err != nil {
		// The tree is gone (its id is free); New retries the removal.
		e.log.Warn("remove deleted tree's directory", "tree", req.TreeID, "dir", aside, "err", err)
	}
	if loaded {
		e.emit(ts, "delete", "")
		e.hub.endTree(ts.id)
	}
	return api.Response{Status: api.StatusOK, TreeID: req.TreeID}, nil
}

// deletedPrefix names a deleted tree's directory set aside for removal; a
// tree id cannot start with it (treeIDRE).
const deletedPrefix = ".deleted-"

// removeDeleted removes what an interrupted tree_delete left under
// HOME/trees.
func (e *Engine) removeDeleted() {
	ents, err := os.ReadDir(filepath.Join(e.cfg.Home, "trees"))
	if err != nil {
		return
	}
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), deletedPrefix) {
			p := filepath.Join(e.cfg.Home, "trees", ent.Name())
			if err := os.RemoveAll(p); err != nil {
				e.log.Warn("remove deleted tree's directory", "dir", p, "err", err)
			}
		}
	}
}

// load reads tree id from the metadata store, opens its files layer and
// reconciles the two (see doc.go, Crash safety).
func (e *Engine) load(ctx context.Context, id string) (*treeState, error) {
	tm, nodes, intent, err := e.meta.load(id)
	if err != nil {
		return nil, err
	}
	t, _, err := tree.Restore(tm.Budget, tm.Root, tm.NextID, nodes)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	files, err := e.cfg.OpenFiles(ctx, e.treeDir(id), tm.Base)
	if err != nil {
		return nil, fmt.Errorf("tree %s: files: %w", id, err)
	}
	if err := files.SetDiskLimit(t.Budget().MaxDiskBytes); err != nil {
		files.Close()
		return nil, fmt.Errorf("tree %s: files: %w", id, err)
	}
	if tm.Backend == "" { // trees made before backends were recorded
		tm.Backend = BackendDir
	}
	b, err := e.openBackend(id, tm, t.Budget())
	if err != nil {
		files.Close()
		return nil, err
	}
	ts := &treeState{id: id, meta: tm, t: t, files: files, backend: b, views: map[string]*view{}, names: newNames()}
	if err := e.reconcile(ctx, ts, intent); err != nil {
		ts.closeLayers()
		return nil, fmt.Errorf("tree %s: reconcile: %w", id, err)
	}
	if err := e.mountViews(ctx, ts); err != nil {
		e.takeViews(ts)
		ts.closeLayers()
		return nil, fmt.Errorf("tree %s: views: %w", id, err)
	}
	// Its files are reachable again: remove what writes cut short by a
	// crash left (not an error for the tree: the names stay visible).
	if n, err := e.writes(id).Reap(); err != nil || n > 0 {
		e.log.Info("tree: temporaries of cut writes removed", "tree", id, "removed", n, "err", err)
	}
	return ts, nil
}

func (e *Engine) reconcile(ctx context.Context, ts *treeState, intent *commitIntent) error {
	branches, err := ts.files.Branches()
	if err != nil {
		return fmt.Errorf("list branches: %w", err)
	}
	have := map[string]bool{}
	for _, b := range branches {
		have[b] = true
	}
	if !have[MainBranch] {
		return api.Errorf(api.ErrInternal, "files layer has no %s branch", MainBranch)
	}
	now := e.cfg.Now()
	// A commit in flight whose child branch is gone happened: finish it.
	if intent != nil {
		if _, ok := ts.t.Node(intent.Child); ok && !have[ts.branch(intent.Child)] {
			if p, err := ts.t.PlanCommit(now, intent.Child); err == nil {
				if err := ts.backend.Commit(ctx, intent.Child, intent.Parent); err != nil {
					return fmt.Errorf("finish the commit of %s: the backend: %w", intent.Child, err)
				}
				if err := ts.t.Apply(p); err != nil {
					return err
				}
			}
		}
	}
	// Keep the nodes whose branch exists (and, by Restore, their ancestry).
	var keep []tree.Node
	for _, n := range ts.t.Nodes() {
		if have[ts.branch(n.ID)] {
			keep = append(keep, n)
		}
	}
	t, dropped, err := tree.Restore(ts.meta.Budget, ts.meta.Root, ts.t.NextID(), keep)
	if err != nil {
		return err
	}
	if err := t.Check(); err != nil {
		return err
	}
	if len(dropped) > 0 {
		e.log.Info("reconcile dropped nodes without files", "tree", ts.id, "nodes", dropped)
	}
	ts.t = t
	ts.meta.NextID = t.NextID()
	if err := e.meta.create(ts.meta, t.Nodes()); err != nil {
		return err
	}
	// Branches the tree lacks are orphans of a fork or an abort cut short.
	keepB := map[string]bool{}
	for _, n := range t.Nodes() {
		keepB[ts.branch(n.ID)] = true
	}
	if err := abortExtra(ctx, ts.files, keepB); err != nil {
		return err
	}
	if err := e.reconcileBackend(ctx, ts); err != nil {
		return err
	}
	// The files layer forgets what was unwritable: suspended nodes again.
	var suspended []string
	for _, n := range ts.t.Nodes() {
		if n.State == tree.Suspended {
			suspended = append(suspended, n.ID)
		}
	}
	if err := e.setWritable(ts, suspended, false); err != nil {
		return err
	}
	e.measure(ts)
	return nil
}

// measure refreshes every node's disk usage from the files layer (whose
// figures are at most a second old: see Files.DiskUsage) and every live
// node's RAM from the backend (Backend.RAM; a suspended node keeps its last
// figure, what it is expected to hold when resumed). Bytes held by a
// branch the tree has no node for (none after reconcile) count to the root,
// so that the tree's total is all the files layer holds. A backend that
// fails to report leaves the RAM figures as they were (logged).
func (e *Engine) measure(ts *treeState) {
	ram, err := ts.backend.RAM(e.ctx)
	if err != nil {
		e.log.Warn("backend RAM not measured; the last figures stand", "tree", ts.id, "err", err)
	}
	u := ts.files.DiskUsage()
	var held map[string]int64 // what the backend keeps on disk, by node id
	if du, ok := ts.backend.(DiskUser); ok {
		held = du.DiskUsage()
	}
	var orphan int64
	for b, n := range u {
		if _, ok := ts.t.Node(ts.nodeOf(b)); !ok {
			orphan += n
		}
	}
	for _, n := range ts.t.Nodes() {
		d := u[ts.branch(n.ID)] + held[n.ID]
		if n.ID == ts.t.Root() {
			d += orphan
		}
		r := n.RAMBytes
		if n.State == tree.Live && err == nil {
			r = max(ram[n.ID], 0)
		}
		if d != n.DiskBytes || r != n.RAMBytes {
			ts.t.SetUsage(n.ID, r, d)
		}
	}
}

// path is node id's files path if it is live.
func (e *Engine) path(ts *treeState, id string) string {
	n, ok := ts.t.Node(id)
	if !ok || n.State != tree.Live {
		return ""
	}
	p, err := ts.files.Path(ts.branch(id))
	if err != nil {
		return ""
	}
	return p
}

func (e *Engine) apiNode(ts *treeState, n tree.Node) api.Node {
	a := api.Node{ID: n.ID, Parent: n.Parent, Children: append([]string{}, n.Children...), State: string(n.State),
		Label: n.Label, Protected: n.Protected, CreatedAt: n.CreatedAt.UnixNano(), LastActiveAt: n.LastActiveAt.UnixNano(),
		DiskBytes: n.DiskBytes}
	if n.State == tree.Live {
		a.RAMBytes = n.RAMBytes
		a.Path = e.path(ts, n.ID)
	}
	return a
}

func (e *Engine) nodesResponse(ts *treeState, status string) api.Response {
	nodes := ts.t.Nodes()
	r := api.Response{Status: status, TreeID: ts.id, Root: ts.t.Root(), Nodes: make([]api.Node, 0, len(nodes))}
	for _, n := range nodes {
		r.Nodes = append(r.Nodes, e.apiNode(ts, n))
	}
	u, b := ts.t.Usage(), ts.t.Budget()
	r.Usage, r.Budget = &u, &b
	return r
}

func (e *Engine) emitEvicted(ts *treeState, p *tree.Plan) {
	for _, id := range p.Evicted {
		e.emit(ts, "evict", id)
	}
}

func (e *Engine) fork(ctx context.Context, ts *treeState, req api.Request, status, source string, labels []string) (api.Response, error) {
	op := req.Op
	field := "source_id"
	if op == api.OpTreeRollback {
		field = "node_id"
	}
	if err := validNode(op, field, source); err != nil {
		return api.Response{}, err
	}
	if len(labels) == 0 {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: labels must not be empty", op)
	}
	if len(labels) > MaxBatch {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: %d labels, at most %d", op, len(labels), MaxBatch)
	}
	for _, l := range labels {
		if err := validLabel(op, l); err != nil {
			return api.Response{}, err
		}
	}
	start := time.Now()
	now := e.cfg.Now()
	// The disk budget is checked against what the tree holds now (the new
	// nodes' reserve stays in their figures until the next measurement,
	// which every reply that shows usage makes first).
	e.measure(ts)
	cost := ts.forkCost(source)
	var p *tree.Plan
	var err error
	if op == api.OpTreeRollback {
		p, err = ts.t.PlanRollback(now, source, labels[0], cost)
	} else {
		p, err = ts.t.PlanFork(now, source, labels, cost)
	}
	if err != nil {
		return api.Response{}, err
	}
	// The nodes the fork evicts are suspended first, so that the RAM they
	// free is free when the children start. Then files and sandboxes, the
	// files' fork inside the source's pause: a crash after it leaves
	// orphan branches and sandboxes, which reconcile aborts and stops.
	undo, err := e.stateEffects(ts, p)
	if err != nil {
		return api.Response{}, fmt.Errorf("%s %s: evict: %w", op, source, err)
	}
	forked := false
	unwind := func() {
		for _, c := range p.Created {
			if err := ts.backend.Stop(context.WithoutCancel(ctx), c); err != nil {
				e.log.Warn("unwind fork: stop sandbox", "tree", ts.id, "node", c, "err", err)
			}
		}
		for _, c := range p.Created {
			if !forked {
				break
			}
			if aerr := ts.files.Abort(context.WithoutCancel(ctx), c); aerr != nil {
				e.log.Warn("unwind fork", "tree", ts.id, "branch", c, "err", aerr)
			}
		}
	}
	err = ts.backend.Fork(e.detach(ctx), source, p.Created, func(ctx context.Context) ([]string, error) {
		if err := ts.files.Fork(ctx, ts.branch(source), p.Created); err != nil {
			return nil, fmt.Errorf("files: %w", err)
		}
		forked = true
		paths := make([]string, len(p.Created))
		for i, c := range p.Created {
			var err error
			if paths[i], err = ts.filesPath(c); err != nil {
				return nil, err
			}
		}
		return paths, nil
	})
	if err != nil {
		unwind()
		if uerr := undo(); uerr != nil {
			err = fmt.Errorf("%w; undoing the eviction: %w", err, uerr)
		}
		return api.Response{}, fmt.Errorf("%s %s: %w", op, source, err)
	}
	ready := time.Since(start)
	if err := e.save(ts, p, nil, false, undo); err != nil {
		unwind()
		return api.Response{}, err
	}
	var timed ForkTimings
	if ft, ok := ts.backend.(ForkTimer); ok {
		timed = ft.LastFork()
	}
	r := api.Response{Status: status, TreeID: ts.id, Evicted: p.Evicted, PauseNS: timed.Pause.Nanoseconds(), Processes: ts.backend.Caps().ForkProcesses()}
	for i, id := range p.Created {
		f := api.Fork{NodeID: id, Label: labels[i], Path: e.path(ts, id), LatencyNS: max(ready.Nanoseconds(), 1), Processes: r.Processes}
		if i < len(timed.Starts) {
			f.StartNS = timed.Starts[i].Nanoseconds()
		}
		r.Forks = append(r.Forks, f)
		e.emit(ts, "fork", id)
	}
	e.emitEvicted(ts, p)
	if len(r.Forks) == 1 {
		r.NodeID, r.Path = r.Forks[0].NodeID, r.Forks[0].Path
	}
	r.LatencyNS = max(time.Since(start).Nanoseconds(), 1)
	return r, nil
}

func (e *Engine) commit(ctx context.Context, ts *treeState, req api.Request) (_ api.Response, err error) {
	const op = api.OpTreeCommit
	if err := validNode(op, "node_id", req.NodeID); err != nil {
		return api.Response{}, err
	}
	now := e.cfg.Now()
	p, err := ts.t.PlanCommit(now, req.NodeID)
	if err != nil {
		return api.Response{}, err
	}
	// The child's sandbox is suspended first, so that nothing writes its
	// files while they are applied (undone if the commit fails); then the
	// intent: if we die after Files.Commit, reconcile sees the child's
	// branch gone and finishes the commit.
	ts.endLeases([]string{req.NodeID}, "committed into its parent")
	filesCommitted := false
	if c, _ := ts.t.Node(req.NodeID); c.State == tree.Live {
		if err := ts.backend.Suspend(ctx, req.NodeID); err != nil {
			return api.Response{}, fmt.Errorf("%s %s: suspend its sandbox: %w", op, req.NodeID, err)
		}
		defer func() {
			if err == nil || filesCommitted {
				return
			}
			if rerr := e.resumeSandbox(context.WithoutCancel(ctx), ts, req.NodeID); rerr != nil {
				err = fmt.Errorf("%w; resuming it again: %w", err, rerr)
			}
		}()
	}
	tm := ts.meta
	if err := e.meta.save(tm, nil, &commitIntent{Child: req.NodeID, Parent: p.Parent}, false); err != nil {
		return api.Response{}, err
	}
	if err := e.meta.sync(); err != nil { // the intent is on disk before the files change
		return api.Response{}, err
	}
	staleBranches, err := ts.files.Commit(ctx, ts.branch(req.NodeID))
	filesCommitted = err == nil
	if err != nil {
		if cerr := e.meta.save(tm, nil, nil, true); cerr != nil {
			e.log.Warn("clear commit intent", "tree", ts.id, "err", cerr)
		}
		return api.Response{}, fmt.Errorf("%s %s: files: %w", op, req.NodeID, err)
	}
	extra := make([]string, 0, len(staleBranches))
	for _, b := range staleBranches {
		extra = append(extra, ts.nodeOf(b))
	}
	if p2, err := ts.t.PlanCommit(now, req.NodeID, extra...); err == nil {
		p = p2
	}
	if err := ts.backend.Commit(context.WithoutCancel(ctx), req.NodeID, p.Parent); err != nil {
		// Past the commit point: the intent stays, and the next open
		// carries the rest of the child's state. Memory follows the files.
		if aerr := ts.t.Apply(p); aerr != nil {
			e.log.Error("apply commit", "tree", ts.id, "err", aerr)
		}
		return api.Response{}, fmt.Errorf("%s %s: committed its files, but the backend did not carry the rest of its state (retried at the next open): %w", op, req.NodeID, err)
	}
	if err := e.saveApply(ts, p, nil, true); err != nil {
		// The files committed (the commit point); the intent makes the next
		// open finish the metadata. Keep memory in step with the files.
		if aerr := ts.t.Apply(p); aerr != nil {
			e.log.Error("apply commit", "tree", ts.id, "err", aerr)
		}
		return api.Response{}, fmt.Errorf("%s %s: committed, but the metadata was not saved (reconciled at the next open): %w", op, req.NodeID, err)
	}
	// The plan is not synced: the intent, synced before the files
	// committed, finishes it at the next open if a power loss takes it.
	// After the commit point: the child's sandbox and those of the nodes
	// gone stale end (a failure is reconcile's, at the next open).
	e.stopAfter(context.WithoutCancel(ctx), ts, []string{req.NodeID}, "committed into its parent")
	e.stopAfter(context.WithoutCancel(ctx), ts, p.Stale, "made stale (a sibling committed first)")
	e.measure(ts)
	e.emit(ts, "commit", req.NodeID)
	for _, s := range p.Stale {
		e.emit(ts, "stale", s)
	}
	stale := append([]string{}, p.Stale...)
	return api.Response{Status: "tree_committed", TreeID: ts.id, NodeID: p.Parent, Path: e.path(ts, p.Parent), Stale: stale}, nil
}

func (e *Engine) remove(ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
	if err := validNode(req.Op, "node_id", req.NodeID); err != nil {
		return api.Response{}, err
	}
	now := e.cfg.Now()
	var p *tree.Plan
	var err error
	kind := "abort"
	if req.Op == api.OpTreePrune {
		kind = "prune"
		p, err = ts.t.PlanPrune(now, req.NodeID)
	} else {
		p, err = ts.t.PlanAbort(now, req.NodeID)
	}
	if err != nil {
		return api.Response{}, err
	}
	// The sandboxes first, leaves first (a failure fails the verb: what
	// the node runs must end); then the metadata (the commit point); the
	// branches go after. A crash after the sandboxes leaves live nodes
	// whose sandbox is gone (reconcile: Caps.Lost); one after the metadata,
	// orphan branches, which reconcile aborts.
	sub := ts.t.Subtree(req.NodeID)
	slices.Reverse(sub)
	if err := e.stopSandboxes(context.WithoutCancel(ctx), ts, sub, map[string]string{"abort": "aborted", "prune": "pruned"}[kind]+" (it or an ancestor)"); err != nil {
		return api.Response{}, fmt.Errorf("%s %s: %w", req.Op, req.NodeID, err)
	}
	if err := e.saveApply(ts, p, nil, false); err != nil {
		return api.Response{}, err
	}
	if err := ts.files.Abort(context.WithoutCancel(ctx), ts.branch(req.NodeID)); err != nil {
		e.log.Warn("files of removed node not reclaimed yet (reconcile retries at open)", "tree", ts.id, "node", req.NodeID, "err", err)
	}
	e.emit(ts, kind, req.NodeID)
	return api.Response{Status: api.StatusOK, TreeID: ts.id, NodeID: req.NodeID}, nil
}

// simple serves the verbs that change only metadata.
func (e *Engine) simple(ts *treeState, req api.Request) (api.Response, error) {
	if err := validNode(req.Op, "node_id", req.NodeID); err != nil {
		return api.Response{}, err
	}
	now := e.cfg.Now()
	var p *tree.Plan
	var err error
	var kind string
	switch req.Op {
	case api.OpTreeProtect:
		kind = "protect"
		p, err = ts.t.PlanProtect(req.NodeID, true)
	case api.OpTreeUnprotect:
		kind = "unprotect"
		p, err = ts.t.PlanProtect(req.NodeID, false)
	case api.OpTreeSuspend:
		// Files-only nodes hold no RAM: suspending is bookkeeping.
		kind = "suspend"
		p, err = ts.t.PlanSuspend(now, req.NodeID)
	case api.OpTreeResume:
		kind = "resume"
		e.measure(ts) // make room by the RAM the live nodes hold now
		p, err = ts.t.PlanResume(now, req.NodeID)
	}
	if err != nil {
		return api.Response{}, err
	}
	if err := e.saveApply(ts, p, nil, false); err != nil {
		return api.Response{}, err
	}
	e.emit(ts, kind, req.NodeID)
	e.emitEvicted(ts, p)
	if req.Op == api.OpTreeResume {
		return api.Response{Status: "tree_resumed", TreeID: ts.id, NodeID: req.NodeID, Path: e.path(ts, req.NodeID), Evicted: p.Evicted}, nil
	}
	return api.Response{Status: api.StatusOK, TreeID: ts.id, NodeID: req.NodeID}, nil
}

func (e *Engine) evict(ts *treeState) (api.Response, error) {
	e.measure(ts) // evict by the RAM the nodes hold now
	p := ts.t.PlanAutoEvict(e.cfg.Now())
	if len(p.Put) > 0 {
		if err := e.saveApply(ts, p, nil, false); err != nil {
			return api.Response{}, err
		}
	}
	e.emitEvicted(ts, p)
	return api.Response{Status: "tree_evicted", TreeID: ts.id, Evicted: append([]string{}, p.Evicted...)}, nil
}
