package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/tree"
)

// backendName resolves a tree_create backend name ("" and "files" mean
// dir) to one the engine serves.
func (e *Engine) backendName(op, name string) (string, error) {
	if name == "" || name == "files" {
		name = BackendDir
	}
	if _, ok := e.cfg.Backends[name]; ok {
		return name, nil
	}
	known := make([]string, 0, len(e.cfg.Backends))
	for k := range e.cfg.Backends {
		known = append(known, k)
	}
	slices.Sort(known)
	return "", api.Errorf(api.ErrBadRequest, "%s: backend %q is unknown; this daemon serves %s", op, name, strings.Join(known, ", "))
}

// openBackend opens tree id's backend, the one its metadata names, under
// its directory, with the tree's budget (normalized: its defaults filled).
func (e *Engine) openBackend(id string, tm treeMeta, budget api.Budget) (Backend, error) {
	name := tm.Backend
	open, ok := e.cfg.Backends[name]
	if !ok {
		return nil, api.Errorf(api.ErrUnavailable, "tree %s: its backend %q is not served by this daemon", id, name)
	}
	if tm.Owner != nil {
		if err := mayOwnSandboxes(name, *tm.Owner); err != nil {
			return nil, fmt.Errorf("tree %s: %w", id, err)
		}
	}
	dir := filepath.Join(e.treeDir(id), "backend")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tree %s: backend directory: %w: %w", id, api.ErrInternal, err)
	}
	b, err := open(e.ctx, BackendConfig{Tree: id, Dir: dir, Base: tm.Base, Image: tm.Image, Network: tm.Network, Budget: budget})
	if err != nil {
		return nil, fmt.Errorf("tree %s: backend %s: %w", id, name, err)
	}
	return b, nil
}

// closeLayers ends the tree's execs and closes its backend (stopping what
// it runs), then its files layer; ts.mu is held.
func (ts *treeState) closeLayers() error {
	ts.endAllLeases("dropped with its tree (tree_drop, tree_delete, or the daemon stopping)")
	var errs []error
	if ts.backend != nil {
		if err := ts.backend.Close(); err != nil {
			errs = append(errs, fmt.Errorf("backend: %w", err))
		}
	}
	if err := ts.files.Close(); err != nil {
		errs = append(errs, fmt.Errorf("files: %w", err))
	}
	return errors.Join(errs...)
}

// filesPath is node id's files path, whatever its state.
func (ts *treeState) filesPath(id string) (string, error) {
	p, err := ts.files.Path(ts.branch(id))
	if err != nil {
		return "", fmt.Errorf("node %s: files path: %w", id, err)
	}
	return p, nil
}

// stopSandboxes stops nodes ids in the backend, ending their execs first;
// the first failure stops the walk and is returned.
func (e *Engine) stopSandboxes(ctx context.Context, ts *treeState, ids []string, why string) error {
	ts.endLeases(ids, why)
	for _, id := range ids {
		if err := ts.backend.Stop(ctx, id); err != nil {
			return fmt.Errorf("node %s: stop its sandbox: %w", id, err)
		}
	}
	return nil
}

// stopAfter stops nodes that left the tree (or went stale) after the
// verb's commit point: a failure cannot undo the verb, so it is logged and
// left to reconcile, which stops every sandbox the tree holds no live node
// for.
func (e *Engine) stopAfter(ctx context.Context, ts *treeState, ids []string, why string) {
	ts.endLeases(ids, why)
	for _, id := range ids {
		if err := ts.backend.Stop(ctx, id); err != nil {
			e.log.Warn("sandbox of a node that left the tree not stopped yet (reconcile stops it at open)", "tree", ts.id, "node", id, "err", err)
		}
	}
}

// reconcileBackend makes the backend agree with the tree (see doc.go,
// Reconcile): a sandbox of a node the tree lacks, or holds stale, is
// stopped; one of a suspended node is suspended; a suspended sandbox of a
// live node is resumed; a live node whose sandbox is gone is restarted or
// marked suspended, by the backend's Caps.Lost.
func (e *Engine) reconcileBackend(ctx context.Context, ts *treeState) error {
	held, err := ts.backend.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("list the backend's nodes: %w", err)
	}
	have := map[string]HeldState{}
	for _, h := range held {
		have[h.ID] = h.State
		n, ok := ts.t.Node(h.ID)
		switch {
		case !ok || n.State == tree.Stale:
			if err := ts.backend.Stop(ctx, h.ID); err != nil {
				return fmt.Errorf("stop the sandbox of %s, which the tree holds no live node for: %w", h.ID, err)
			}
			delete(have, h.ID)
		case n.State == tree.Suspended && h.State == HeldLive:
			if err := ts.backend.Suspend(ctx, h.ID); err != nil {
				return fmt.Errorf("suspend the sandbox of suspended node %s: %w", h.ID, err)
			}
		case n.State == tree.Live && h.State == HeldSuspended:
			if err := e.resumeSandbox(ctx, ts, h.ID); err != nil {
				return err
			}
		}
	}
	var lost []string
	for _, n := range ts.t.Nodes() {
		if _, ok := have[n.ID]; !ok && n.State == tree.Live {
			lost = append(lost, n.ID)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	if ts.backend.Caps().Lost == LostSuspend {
		for _, id := range lost {
			p, err := ts.t.PlanSuspend(e.cfg.Now(), id)
			if err != nil {
				return err
			}
			if err := e.meta.save(ts.meta, p, nil, false); err != nil {
				return err
			}
			if err := ts.t.Apply(p); err != nil {
				return err
			}
		}
		e.log.Info("reconcile marked suspended the live nodes whose sandbox is gone", "tree", ts.id, "nodes", lost)
		return nil
	}
	for _, id := range lost {
		p, err := ts.filesPath(id)
		if err != nil {
			return err
		}
		if err := ts.backend.Start(ctx, id, p); err != nil {
			return fmt.Errorf("restart the sandbox of live node %s: %w", id, err)
		}
	}
	return nil
}

// forkCost is what each new child of source is expected to hold.
func (ts *treeState) forkCost(source string) tree.Cost {
	c := ts.backend.Caps()
	cost := tree.Cost{DiskBytes: NodeDiskReserve, RAMBytes: c.StartRAM}
	if n, ok := ts.t.Node(source); ok && c.ForkCarriesMemory {
		cost.RAMBytes = n.RAMBytes
	}
	return cost
}

// detach returns a context with the values of a request's ctx (the
// requester's credentials) and the engine's lifetime: what a verb opens
// or starts with it (a files layer, a sandbox) lives until the engine
// closes, not until the request ends.
func (e *Engine) detach(ctx context.Context) context.Context {
	return detached{Context: e.ctx, values: context.WithoutCancel(ctx)}
}

type detached struct {
	context.Context                 // the engine's lifetime: Deadline, Done, Err
	values          context.Context // the request's values, without its cancellation
}

func (d detached) Value(key any) any { return d.values.Value(key) }

// mayOwnSandboxes says whether uid may own a tree on backend: any uid a
// files-only tree (dir), but only root and the daemon's own uid one whose
// backend runs processes. A sandbox's processes run as root inside it (no
// user namespace): they read what only root reads on the host (/etc/shadow
// through the host's /etc) and write root-owned, setuid files into the
// tree's files, which a commit carries into the owner's base directory, a
// root shell for whoever made the tree. Until sandboxes run as their
// owner, a non-root uid admitted on the socket gets ErrForbidden.
func mayOwnSandboxes(backend string, uid uint32) error {
	if backend == BackendDir || uid == 0 || uid == uint32(os.Geteuid()) {
		return nil
	}
	return api.Errorf(api.ErrForbidden, "backend %s runs processes as root in their sandbox: only root may own such a tree, not uid %d (a files-only tree, --backend dir, it may)", backend, uid)
}
