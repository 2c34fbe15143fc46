package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/tree"
)

// Views. A workspace mount (arbor mount, create, commit, abort, switch,
// list, diff; BranchFS's control file and ioctls) is a view of a tree: the
// tree of its base directory, opened or created by ws_mount. Its root shows
// one node, every node is at /@NAME, and each ws_* verb is a tree verb on
// that tree (ws_create forks, ws_commit commits, ws_abort aborts), so it
// has the tree's budgets, events, metrics and audit. A BranchFS branch name
// is a node's label; a node is named by its label (when no other node has
// it) or by its id, and the root by "main" too.
//
// A view's record (trees.db: views/<tree>/<mountpoint>) holds its
// mountpoint, the node its root shows and who mounted it; a switch writes
// it before it answers, so a switch survives a SIGKILL. At a tree's load
// its views are mounted again, checked again as the users who made them;
// a view whose node is gone shows the nearest ancestor still there.
//
// Locking: a view's FUSE requests call the engine (control files) and read
// the tree's names table (lookups of /@NAME), which has its own lock and
// never waits for the tree's mutex. A forced unmount of a view therefore
// happens with ts.mu released and ts.dropped set: a control request that
// waits for ts.mu then finds the tree gone, instead of holding the unmount
// up (its FUSE server waits for it).

// viewRec is a view as trees.db records it.
type viewRec struct {
	Tree       string      `json:"tree"`
	Mountpoint string      `json:"mountpoint"`
	Node       string      `json:"node"` // shown at the root
	Cred       access.Cred `json:"cred"` // who mounted it
	// HideControl: the view serves no control files (arbor mount --hide-control).
	HideControl bool `json:"hide_control,omitempty"`
}

type view struct {
	rec viewRec
	v   View
}

// reservedName is the form of node ids: a branch name may not take it, so
// that a name and an id never meet.
var reservedName = regexp.MustCompile(`^n[0-9]+$`)

// names is a tree's table of node names, for its views' lookups: it has
// its own lock, and is rebuilt under ts.mu after each change of the tree.
type names struct {
	mu    sync.RWMutex
	root  string
	ids   map[string]bool
	label map[string]string // label -> node, for labels exactly one node has
	shown map[string]string // node -> the name it is shown by
}

func newNames() *names { return &names{} }

// set rebuilds the table from the tree's nodes.
func (nm *names) set(root string, nodes []tree.Node) {
	ids := make(map[string]bool, len(nodes))
	count := map[string]int{}
	for _, n := range nodes {
		ids[n.ID] = true
		if n.Label != "" {
			count[n.Label]++
		}
	}
	label := map[string]string{}
	shown := make(map[string]string, len(nodes))
	for _, n := range nodes {
		s := n.ID
		if n.ID == root {
			s = MainBranch
		} else if l := n.Label; l != "" && count[l] == 1 && !ids[l] && l != MainBranch {
			label[l] = n.ID
			s = l
		}
		shown[n.ID] = s
	}
	nm.mu.Lock()
	nm.root, nm.ids, nm.label, nm.shown = root, ids, label, shown
	nm.mu.Unlock()
}

// node is the node a user's name names.
func (nm *names) node(name string) (string, bool) {
	nm.mu.RLock()
	defer nm.mu.RUnlock()
	switch {
	case name == MainBranch:
		return nm.root, nm.root != ""
	case nm.ids[name]:
		return name, true
	}
	id, ok := nm.label[name]
	return id, ok
}

// name is how node id is shown.
func (nm *names) name(id string) string {
	nm.mu.RLock()
	defer nm.mu.RUnlock()
	if s, ok := nm.shown[id]; ok {
		return s
	}
	return id
}

// refreshNames brings ts's names table in step with its nodes. ts.mu is held.
func (ts *treeState) refreshNames() {
	ts.names.set(ts.t.Root(), ts.t.Nodes())
}

// resolve is the node a user's name names in ts, for a verb.
func (ts *treeState) resolve(op, name string) (string, error) {
	if id, ok := ts.names.node(name); ok {
		if _, ok := ts.t.Node(id); ok {
			return id, nil
		}
	}
	return "", api.Errorf(api.ErrNotFound, "%s: no branch %q", op, name)
}

// validBranchName checks a (non-empty) name for a new branch: a label that a path can
// name (/@NAME) and that names nothing yet.
func (ts *treeState) validBranchName(op, name string) error {
	if err := validLabel(op, name); err != nil {
		return err
	}
	switch {
	case strings.ContainsAny(name, "/\x00"):
		return api.Errorf(api.ErrBadRequest, "%s: branch name %q must not contain '/'", op, name)
	case name == "." || name == "..":
		return api.Errorf(api.ErrBadRequest, "%s: branch name %q: want a file name", op, name)
	case name == MainBranch || reservedName.MatchString(name):
		return api.Errorf(api.ErrBadRequest, "%s: branch name %q is reserved (main and n<digits> name nodes)", op, name)
	}
	for _, n := range ts.t.Nodes() {
		if n.Label == name {
			return api.Errorf(api.ErrExists, "%s: branch %q exists (node %s)", op, name, n.ID)
		}
	}
	return nil
}

// via serves a verb a view's control file asked for, through the daemon's
// front door when it has one (so it is audited like the faces' requests).
func (e *Engine) via(ctx context.Context, req api.Request) (api.Response, error) {
	if e.cfg.Via != nil {
		return e.cfg.Via(ctx, req)
	}
	return e.Do(ctx, req)
}

// viewControl is one view's ViewControl.
type viewControl struct {
	e     *Engine
	mp    string
	names *names
}

func (c *viewControl) Create(ctx context.Context, parent, name string) (string, error) {
	r, err := c.e.via(ctx, api.Request{Op: api.OpWsCreate, Mountpoint: c.mp, Parent: parent, Branch: name, NoSwitch: true})
	if err != nil {
		return "", err
	}
	if r.NodeID == "" {
		return "", api.Errorf(api.ErrInternal, "ws_create answered no node")
	}
	return c.branch(r.NodeID), nil
}

func (c *viewControl) Commit(ctx context.Context, branch string) error {
	_, err := c.e.via(ctx, api.Request{Op: api.OpWsCommit, Mountpoint: c.mp, Branch: branch})
	return err
}

func (c *viewControl) Abort(ctx context.Context, branch string) error {
	_, err := c.e.via(ctx, api.Request{Op: api.OpWsAbort, Mountpoint: c.mp, Branch: branch})
	return err
}

func (c *viewControl) Switch(ctx context.Context, name string) error {
	_, err := c.e.via(ctx, api.Request{Op: api.OpWsSwitch, Mountpoint: c.mp, Branch: name})
	return err
}

func (c *viewControl) Resolve(name string) (string, bool) {
	id, ok := c.names.node(name)
	if !ok {
		return "", false
	}
	return c.branch(id), true
}

func (c *viewControl) Name(branch string) string {
	if branch == MainBranch {
		return MainBranch
	}
	return c.names.name(branch)
}

func (c *viewControl) branch(id string) string {
	c.names.mu.RLock()
	root := c.names.root
	c.names.mu.RUnlock()
	if id == root {
		return MainBranch
	}
	return id
}

// viewMountpoint is how a mountpoint argument names a view: absolute and
// clean, and, unless a view is there already, with symlinks in its parent
// resolved. A view's own path is never stat-ed (a request to one of our
// own FUSE servers from the daemon itself).
func (e *Engine) viewMountpoint(op, p string) (string, error) {
	if p == "" {
		return "", api.Errorf(api.ErrBadRequest, "%s: no mountpoint given", op)
	}
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", api.Errorf(api.ErrBadRequest, "%s: mountpoint %q must be absolute", op, p)
	}
	c := filepath.Clean(p)
	e.mu.Lock()
	_, ok := e.viewAt[c]
	e.mu.Unlock()
	if ok || c == "/" {
		return c, nil
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(c)); err == nil {
		return filepath.Join(dir, filepath.Base(c)), nil
	}
	return c, nil
}

// viewOf returns the tree (locked) and the view at mountpoint p, checked
// for the requester.
func (e *Engine) viewOf(ctx context.Context, op, p string) (*treeState, *view, error) {
	mp, err := e.viewMountpoint(op, p)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	id, ok := e.viewAt[mp]
	e.mu.Unlock()
	if !ok {
		return nil, nil, api.Errorf(api.ErrNotFound, "%s is not an arbor mount", p)
	}
	ts, err := e.get(op, id)
	if err != nil {
		return nil, nil, err
	}
	vw, ok := ts.views[mp]
	if !ok {
		ts.mu.Unlock()
		return nil, nil, api.Errorf(api.ErrNotFound, "%s is not an arbor mount", p)
	}
	if err := e.mayUseView(ctx, op, vw); err != nil {
		ts.mu.Unlock()
		return nil, nil, err
	}
	return ts, vw, nil
}

// mayUseView refuses a verb on a view unless the requester made it, is
// root, or is the daemon's own uid.
func (e *Engine) mayUseView(ctx context.Context, op string, vw *view) error {
	cred, ok := access.FromContext(ctx)
	if !ok {
		return api.Errorf(api.ErrForbidden, "%s %s: the request carries no requester credentials", op, vw.rec.Mountpoint)
	}
	if cred.UID == 0 || cred.UID == e.self || cred.UID == vw.rec.Cred.UID {
		return nil
	}
	return api.Errorf(api.ErrForbidden, "%s %s: the mount belongs to uid %d; %s may not use it", op, vw.rec.Mountpoint, vw.rec.Cred.UID, cred)
}

// ws serves the ws_* verbs.
func (e *Engine) ws(ctx context.Context, req api.Request) (resp api.Response, err error) {
	switch req.Op {
	case api.OpWsMount:
		return e.wsMount(ctx, req)
	case api.OpWsMounts:
		return e.wsMounts(), nil
	}
	ts, vw, err := e.viewOf(ctx, req.Op, req.Mountpoint)
	if err != nil {
		return api.Response{}, err
	}
	defer ts.mu.Unlock()
	defer e.contain(ts, req.Op, &err)
	switch req.Op {
	case api.OpWsUnmount:
		return e.wsUnmount(ts, vw)
	case api.OpWsCreate:
		return e.wsCreate(ctx, ts, vw, req)
	case api.OpWsCommit:
		return e.wsCommit(ctx, ts, vw, req)
	case api.OpWsAbort:
		return e.wsAbort(ctx, ts, vw, req)
	case api.OpWsSwitch:
		id, err := ts.resolve(req.Op, req.Branch)
		if err != nil {
			return api.Response{}, err
		}
		if n, _ := ts.t.Node(id); n.State == tree.Stale {
			return api.Response{}, api.Errorf(api.ErrStale, "switch %s: the branch is stale", req.Branch)
		}
		if err := e.show(ts, vw, id); err != nil {
			return api.Response{}, err
		}
		e.emit(ts, "switch", id)
		return api.Response{Status: api.StatusOK, TreeID: ts.id, NodeID: id, Branch: ts.names.name(id)}, nil
	case api.OpWsList:
		resp := api.Response{Status: "ws_branches", TreeID: ts.id, Branch: ts.names.name(vw.rec.Node)}
		for _, n := range ts.t.Nodes() {
			b := api.Branch{Name: ts.names.name(n.ID), State: string(n.State), Current: n.ID == vw.rec.Node, NodeID: n.ID}
			if n.Parent != "" {
				b.Parent = ts.names.name(n.Parent)
			}
			resp.Branches = append(resp.Branches, b)
		}
		return resp, nil
	case api.OpWsDiff:
		name := req.Branch
		if name == "" {
			name = ts.names.name(vw.rec.Node)
		}
		id, err := ts.resolve(req.Op, name)
		if err != nil {
			return api.Response{}, err
		}
		d, ok := ts.files.(Differ)
		if !ok {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree %s's files cannot list changes", req.Op, ts.id)
		}
		changes, err := d.Diff(ts.branch(id))
		if err != nil {
			return api.Response{}, err
		}
		return api.Response{Status: "ws_diff", TreeID: ts.id, NodeID: id, Branch: ts.names.name(id), Changes: append([]api.Change{}, changes...)}, nil
	}
	return api.Response{}, api.Errorf(api.ErrBadRequest, "unknown op %q", req.Op)
}

// show makes vw's root show node id, durably first.
func (e *Engine) show(ts *treeState, vw *view, id string) error {
	if vw.rec.Node == id {
		return nil
	}
	rec := vw.rec
	rec.Node = id
	if err := e.meta.putView(rec); err != nil {
		return err
	}
	vw.rec = rec
	if vw.v != nil {
		vw.v.Show(ts.branch(id))
	}
	return nil
}

// showLiving makes every view of ts whose node is gone show its nearest
// ancestor still in the tree (gone: the nodes of a commit or an abort;
// parent: the parent of the node that went). ts.mu is held.
func (e *Engine) showLiving(ts *treeState, parent string) {
	for _, vw := range ts.views {
		if _, ok := ts.t.Node(vw.rec.Node); ok {
			continue
		}
		id := parent
		for {
			if _, ok := ts.t.Node(id); ok || id == "" {
				break
			}
			id = ts.parentOf(id)
		}
		if id == "" {
			id = ts.t.Root()
		}
		if err := e.show(ts, vw, id); err != nil {
			e.log.Warn("record a view's node", "tree", ts.id, "mountpoint", vw.rec.Mountpoint, "err", err)
		}
	}
}

// parentOf is the parent of a node that may be gone from the tree: none
// is known then, and the root stands in.
func (ts *treeState) parentOf(id string) string {
	if n, ok := ts.t.Node(id); ok {
		return n.Parent
	}
	return ""
}

func (e *Engine) wsCreate(ctx context.Context, ts *treeState, vw *view, req api.Request) (api.Response, error) {
	// No name: a branch known by its node id (the CREATE ioctl's).
	name := req.Branch
	if name != "" {
		if err := ts.validBranchName(req.Op, name); err != nil {
			return api.Response{}, err
		}
	}
	parent := vw.rec.Node
	if req.Parent != "" {
		var err error
		if parent, err = ts.resolve(req.Op, req.Parent); err != nil {
			return api.Response{}, err
		}
	}
	if req.QuotaBytes < 0 {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: negative quota", req.Op)
	}
	q, hasQuota := ts.files.(Quotas)
	if req.QuotaBytes > 0 && !hasQuota {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree %s's files take no quota", req.Op, ts.id)
	}
	r, err := e.fork(ctx, ts, api.Request{Op: req.Op}, "tree_forked", parent, []string{name})
	if err != nil {
		return api.Response{}, err
	}
	id := r.NodeID
	if req.QuotaBytes > 0 {
		if err := q.SetQuota(ts.branch(id), req.QuotaBytes); err != nil {
			if _, aerr := e.remove(ctx, ts, api.Request{Op: api.OpTreeAbort, NodeID: id}); aerr != nil {
				return api.Response{}, errors.Join(err, aerr)
			}
			return api.Response{}, err
		}
	}
	if parent == vw.rec.Node && !req.NoSwitch {
		// A branch made from the one the mount shows is shown next (arbor
		// create); a create through a control file switches nothing
		// (BranchFS's rule: N creates on the root's file make N siblings).
		if err := e.show(ts, vw, id); err != nil {
			return api.Response{}, err
		}
	}
	return api.Response{Status: "ws_created", TreeID: ts.id, NodeID: id, Branch: ts.names.name(id), Path: r.Path}, nil
}

func (e *Engine) wsCommit(ctx context.Context, ts *treeState, vw *view, req api.Request) (api.Response, error) {
	name := req.Branch
	if name == "" {
		name = ts.names.name(vw.rec.Node)
	}
	id, err := ts.resolve(req.Op, name)
	if err != nil {
		return api.Response{}, err
	}
	if id == ts.t.Root() {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "commit %s: main has no parent", name)
	}
	r, err := e.commit(ctx, ts, api.Request{Op: req.Op, NodeID: id})
	if err != nil {
		return api.Response{}, err
	}
	e.showLiving(ts, r.NodeID)
	stale := make([]string, 0, len(r.Stale))
	for _, s := range r.Stale {
		stale = append(stale, ts.names.name(s))
	}
	return api.Response{Status: "ws_committed", TreeID: ts.id, NodeID: r.NodeID, Branch: ts.names.name(r.NodeID), Stale: stale}, nil
}

func (e *Engine) wsAbort(ctx context.Context, ts *treeState, vw *view, req api.Request) (api.Response, error) {
	name := req.Branch
	if name == "" {
		name = ts.names.name(vw.rec.Node)
	}
	id, err := ts.resolve(req.Op, name)
	if err != nil {
		return api.Response{}, err
	}
	parent := ts.parentOf(id)
	if _, err := e.remove(ctx, ts, api.Request{Op: api.OpTreeAbort, NodeID: id}); err != nil {
		return api.Response{}, err
	}
	e.showLiving(ts, parent)
	return api.Response{Status: api.StatusOK, TreeID: ts.id, NodeID: vw.rec.Node, Branch: ts.names.name(vw.rec.Node)}, nil
}

func (e *Engine) wsUnmount(ts *treeState, vw *view) (api.Response, error) {
	if vw.v != nil {
		if err := vw.v.Unmount(false); err != nil {
			return api.Response{}, err
		}
	}
	if err := e.meta.deleteView(vw.rec); err != nil {
		return api.Response{}, err
	}
	delete(ts.views, vw.rec.Mountpoint)
	e.mu.Lock()
	delete(e.viewAt, vw.rec.Mountpoint)
	e.mu.Unlock()
	e.emit(ts, "unmount", vw.rec.Node)
	return api.Response{Status: api.StatusOK, TreeID: ts.id}, nil
}

func (e *Engine) wsMounts() api.Response {
	resp := api.Response{Status: "ws_mounts", Mounts: []api.Mount{}}
	for _, ts := range e.loaded() {
		ts.mu.Lock()
		if !ts.dropped {
			for _, vw := range ts.views {
				resp.Mounts = append(resp.Mounts, api.Mount{Mountpoint: vw.rec.Mountpoint, Base: ts.meta.Base,
					Branch: ts.names.name(vw.rec.Node), TreeID: ts.id, NodeID: vw.rec.Node})
			}
		}
		ts.mu.Unlock()
	}
	sort.Slice(resp.Mounts, func(i, j int) bool { return resp.Mounts[i].Mountpoint < resp.Mounts[j].Mountpoint })
	return resp
}

// wsMount mounts a view of the tree of req.Base at req.Mountpoint: the
// tree that holds that base (a dropped one is opened again), or a new one.
func (e *Engine) wsMount(ctx context.Context, req api.Request) (_ api.Response, err error) {
	const op = api.OpWsMount
	for field, p := range map[string]string{"base": req.Base, "mountpoint": req.Mountpoint} {
		if p == "" || !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "mount: %s %q must be an absolute path", field, p)
		}
	}
	cred, ok := access.FromContext(ctx)
	if !ok {
		return api.Response{}, api.Errorf(api.ErrForbidden, "mount: the request carries no requester credentials")
	}
	base := filepath.Clean(req.Base)
	if e.cfg.ResolveBase != nil {
		var err error
		if base, err = e.cfg.ResolveBase(ctx, req.Base); err != nil {
			return api.Response{}, fmt.Errorf("mount: %w", err)
		}
	}
	mp, err := e.viewMountpoint(op, req.Mountpoint)
	if err != nil {
		return api.Response{}, err
	}
	e.life.Lock()
	defer e.life.Unlock()
	if e.isClosed() {
		return api.Response{}, api.Errorf(api.ErrBusy, "%s: engine closed", op)
	}
	ts, made, err := e.treeOfBase(ctx, base, req)
	if err != nil {
		return api.Response{}, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	defer func() {
		if err != nil && made {
			e.discard(ts) // the tree made for this mount goes with it
		}
	}()
	if ts.dropped || ts.broken {
		return api.Response{}, api.Errorf(api.ErrBusy, "%s: tree %s is being reloaded; try again", op, ts.id)
	}
	if err := e.mayDrive(ctx, op, ts); err != nil {
		return api.Response{}, err
	}
	e.mu.Lock()
	other, known := e.viewAt[mp]
	e.mu.Unlock()
	if known && other != ts.id {
		return api.Response{}, api.Errorf(api.ErrExists, "mount %s: already mounted (base %s) as a view of tree %s", req.Mountpoint, e.baseOf(other), other)
	}
	ts.refreshNames() // a tree without views keeps none
	node := ts.t.Root()
	if req.Branch != "" {
		if node, err = ts.resolve(op, req.Branch); err != nil {
			return api.Response{}, err
		}
		if n, _ := ts.t.Node(node); n.State == tree.Stale {
			return api.Response{}, api.Errorf(api.ErrStale, "mount: branch %s is stale", req.Branch)
		}
	}
	if vw, ok := ts.views[mp]; known && ok {
		// The same base at the same place (a restarted daemon mounted it
		// again): nothing to do, unless another branch was asked for.
		if err := e.mayUseView(ctx, op, vw); err != nil {
			return api.Response{}, err
		}
		if req.Branch != "" && node != vw.rec.Node {
			return api.Response{}, api.Errorf(api.ErrExists,
				"mount %s: already mounted, showing %s, not %s (arbor switch changes the branch shown)", req.Mountpoint, ts.names.name(vw.rec.Node), req.Branch)
		}
		return api.Response{Status: "ws_mounted", TreeID: ts.id, NodeID: vw.rec.Node, Path: mp, Branch: ts.names.name(vw.rec.Node), AlreadyMounted: true}, nil
	}
	// The files layer resolves the mountpoint as the requester (mp, the
	// daemon's own resolution, only finds views: a refusal must not name
	// what the requester could not see).
	vw, err := e.mountView(ctx, ts, viewRec{Tree: ts.id, Mountpoint: filepath.Clean(req.Mountpoint), Node: node, Cred: cred, HideControl: req.HideControl})
	if err != nil {
		return api.Response{}, err
	}
	if err := e.meta.putView(vw.rec); err != nil {
		e.unmountView(ts, vw)
		return api.Response{}, err
	}
	e.emit(ts, "mount", node)
	return api.Response{Status: "ws_mounted", TreeID: ts.id, NodeID: node, Path: vw.rec.Mountpoint, Branch: ts.names.name(node)}, nil
}

// baseOf is the base of loaded tree id.
func (e *Engine) baseOf(id string) string {
	e.mu.Lock()
	ts, ok := e.trees[id]
	e.mu.Unlock()
	if !ok || ts == nil {
		return "?"
	}
	return ts.meta.Base // immutable
}

// treeOfBase is the tree that holds base: a loaded one, a dropped one
// (opened again), or a new one made for it. e.life is held.
func (e *Engine) treeOfBase(ctx context.Context, base string, req api.Request) (_ *treeState, made bool, _ error) {
	for _, ts := range e.loaded() {
		ts.mu.Lock()
		b, gone := ts.meta.Base, ts.dropped
		ts.mu.Unlock()
		if b == base && !gone {
			return ts, false, nil
		}
	}
	tms, err := e.meta.trees()
	if err != nil {
		return nil, false, err
	}
	for _, tm := range tms {
		if tm.Base == base && !tm.Open {
			r, err := e.openLocked(ctx, api.Request{Op: api.OpTreeOpen, TreeID: tm.ID})
			if err != nil {
				return nil, false, fmt.Errorf("mount: reopen tree %s of base %s: %w", tm.ID, base, err)
			}
			e.mu.Lock()
			ts := e.trees[r.TreeID]
			e.mu.Unlock()
			return ts, false, nil
		}
	}
	b := api.Budget{MaxLiveNodes: WorkspaceMaxLiveNodes}
	if req.Budget != nil {
		b = *req.Budget
	}
	id, err := e.freeTreeID(filepath.Base(base))
	if err != nil {
		return nil, false, err
	}
	r, err := e.createLocked(ctx, api.Request{Op: api.OpTreeCreate, TreeID: id, Base: base, Budget: &b})
	if err != nil {
		return nil, false, err
	}
	e.mu.Lock()
	ts := e.trees[r.TreeID]
	e.mu.Unlock()
	return ts, true, nil
}

// discard removes a tree that ws_mount made and could not show: it holds
// nothing but its empty root. ts.mu and e.life are held.
func (e *Engine) discard(ts *treeState) {
	e.takeViews(ts)
	e.mu.Lock()
	delete(e.trees, ts.id)
	e.mu.Unlock()
	if err := ts.files.Close(); err != nil {
		e.log.Warn("close the files of a tree made for a mount that failed", "tree", ts.id, "err", err)
	}
	if err := e.meta.remove(ts.id); err != nil {
		e.log.Warn("forget a tree made for a mount that failed", "tree", ts.id, "err", err)
	}
	if err := os.RemoveAll(e.treeDir(ts.id)); err != nil {
		e.log.Warn("remove a tree made for a mount that failed", "tree", ts.id, "err", err)
	}
	e.emit(ts, "delete", "")
	e.hub.endTree(ts.id)
}

// WorkspaceMaxLiveNodes is the live-node budget of a tree that arbor mount
// makes (a BranchFS mount has no limit on its branches); ws_mount's budget
// replaces it.
const WorkspaceMaxLiveNodes = 4096

// freeTreeID is an unused tree id made from a base's name.
func (e *Engine) freeTreeID(name string) (string, error) {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	stem := strings.TrimLeft(b.String(), "._-")
	if len(stem) > 48 {
		stem = stem[:48]
	}
	if stem == "" {
		stem = "ws"
	}
	for i := 1; ; i++ {
		id := stem
		if i > 1 {
			id = fmt.Sprintf("%s-%d", stem, i)
		}
		taken, err := e.meta.exists(id)
		if err != nil {
			return "", err
		}
		if !taken {
			return id, nil
		}
	}
}

// mountView mounts the view rec of ts (held) and adds it to the tables.
func (e *Engine) mountView(ctx context.Context, ts *treeState, rec viewRec) (*view, error) {
	vr, ok := ts.files.(Viewer)
	if !ok {
		return nil, api.Errorf(api.ErrBadRequest, "mount: tree %s's files cannot be shown at a mountpoint", ts.id)
	}
	ts.refreshNames()
	v, err := vr.MountView(access.WithCred(ctx, rec.Cred), ViewSpec{Mountpoint: rec.Mountpoint, Branch: ts.branch(rec.Node), Owner: rec.Cred.UID,
		Control: &viewControl{e: e, mp: rec.Mountpoint, names: ts.names}, HideControl: rec.HideControl})
	if err != nil {
		return nil, err
	}
	rec.Mountpoint = v.Mountpoint()
	vw := &view{rec: rec, v: v}
	ts.views[rec.Mountpoint] = vw
	e.mu.Lock()
	e.viewAt[rec.Mountpoint] = ts.id
	e.mu.Unlock()
	return vw, nil
}

// unmountView unmounts vw (forced) and removes it from the tables, not
// from trees.db.
func (e *Engine) unmountView(ts *treeState, vw *view) {
	if vw.v != nil {
		if err := vw.v.Unmount(true); err != nil {
			e.log.Warn("unmount a view", "tree", ts.id, "mountpoint", vw.rec.Mountpoint, "err", err)
		}
	}
	delete(ts.views, vw.rec.Mountpoint)
	e.mu.Lock()
	if e.viewAt[vw.rec.Mountpoint] == ts.id {
		delete(e.viewAt, vw.rec.Mountpoint)
	}
	e.mu.Unlock()
}

// takeViews sets ts dropped and unmounts its views with ts.mu released
// (see Locking above). ts.mu is held on entry and on return. The views'
// records stay: the tree's next load mounts them again.
func (e *Engine) takeViews(ts *treeState) {
	ts.dropped = true
	vs := make([]*view, 0, len(ts.views))
	for _, vw := range ts.views {
		vs = append(vs, vw)
	}
	if len(vs) == 0 {
		return
	}
	ts.mu.Unlock()
	for _, vw := range vs {
		if vw.v != nil {
			if err := vw.v.Unmount(true); err != nil {
				e.log.Warn("unmount a view", "tree", ts.id, "mountpoint", vw.rec.Mountpoint, "err", err)
			}
		}
	}
	ts.mu.Lock()
	e.mu.Lock()
	for _, vw := range vs {
		delete(ts.views, vw.rec.Mountpoint)
		if e.viewAt[vw.rec.Mountpoint] == ts.id {
			delete(e.viewAt, vw.rec.Mountpoint)
		}
	}
	e.mu.Unlock()
}

// mountViews mounts again the views trees.db records for ts (being
// loaded, not yet shared), each checked as the user who made it. A view
// that no longer mounts is forgotten, and logged.
func (e *Engine) mountViews(ctx context.Context, ts *treeState) error {
	recs, err := e.meta.views(ts.id)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if _, ok := ts.t.Node(rec.Node); !ok {
			rec.Node = ts.t.Root()
		}
		if n, _ := ts.t.Node(rec.Node); n.State == tree.Stale {
			rec.Node = ts.t.Root()
		}
		if _, err := e.mountView(ctx, ts, rec); err != nil {
			e.log.Warn("restore mount", "tree", ts.id, "mountpoint", rec.Mountpoint, "err", err)
			if derr := e.meta.deleteView(rec); derr != nil {
				e.log.Warn("forget mount", "tree", ts.id, "mountpoint", rec.Mountpoint, "err", derr)
			}
			continue
		}
		if err := e.meta.putView(rec); err != nil {
			e.log.Warn("record mount", "tree", ts.id, "mountpoint", rec.Mountpoint, "err", err)
		}
	}
	return nil
}

// mayDrive refuses a verb on ts unless the requester is the tree's owner,
// root or the daemon's own uid. A request without credentials is the
// daemon's own (a reload).
func (e *Engine) mayDrive(ctx context.Context, op string, ts *treeState) error {
	cred, ok := access.FromContext(ctx)
	if !ok || cred.UID == 0 || cred.UID == e.self {
		return nil
	}
	owner := ts.owner()
	if cred.UID == owner {
		return nil
	}
	return api.Errorf(api.ErrForbidden, "%s: tree %s belongs to uid %d; %s may not use it", op, ts.id, owner, cred)
}
