package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/store"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// TreeFiles is one tree's files: a store over the tree's base, mounted
// without control files at <dir>/mnt, where node NAME's files are at
// <dir>/mnt/@NAME, and shown by the views the engine mounts (MountView).
// The root node is the branch main, the base itself.
type TreeFiles struct {
	m       *Manager
	st      *store.Store
	fs      *cowfs.FS
	mnt     string
	base    string
	release func() // gives the base back to the manager

	mu    sync.Mutex // guards views; never held across a FUSE call or an unmount
	views map[string]*cowfs.FS
}

// OpenTreeFiles opens (creating if need be) the files of a tree whose
// private directory is dir, over base.
func (m *Manager) OpenTreeFiles(ctx context.Context, dir, base string) (*TreeFiles, error) {
	base = filepath.Clean(base)
	if err := m.notInMount(base, base); err != nil { // before opening it: never a request to our own mount
		return nil, fmt.Errorf("tree files: %w", err)
	}
	// The requester's credentials, or the daemon's own for a caller with
	// none (the engine reopening its trees at start).
	cred, ok := access.FromContext(ctx)
	if !ok {
		cred = access.Self()
	}
	d, err := m.rules.Base(cred, base)
	if err != nil {
		return nil, fmt.Errorf("tree files: %w", err)
	}
	base = d.Path
	d.Close()
	if err := m.apart(base); err != nil {
		return nil, fmt.Errorf("tree files: %w", err)
	}
	if err := m.notInMount(base, base); err != nil {
		return nil, fmt.Errorf("tree files: %w", err)
	}
	m.mu.Lock()
	if err := m.holdable(base, dir); err != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("tree files: %w", err)
	}
	m.trees[base] = dir
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		if m.trees[base] == dir {
			delete(m.trees, base)
		}
		m.mu.Unlock()
	}
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "store"), Base: base, Logger: m.log})
	if err != nil {
		release()
		return nil, err
	}
	mnt := filepath.Join(dir, "mnt")
	fusemount.DetachStale(mnt)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		st.Close()
		release()
		return nil, err
	}
	t := &TreeFiles{m: m, st: st, mnt: mnt, base: base, release: release, views: map[string]*cowfs.FS{}}
	f, err := cowfs.Mount(cowfs.Config{Store: st, Mountpoint: mnt, NoControl: true, Passthrough: m.cfg.Passthrough, Transport: m.cfg.Transport, Aborter: m.cfg.Aborter, Logger: m.log,
		FsName: MountSource(m.cfg.Home, base),
		// The views keep their roots in step (a view that showed a branch
		// that went shows its parent).
		OnCommit: func(res store.CommitResult, child string) {
			for _, v := range t.shown() {
				v.Committed(res, child)
			}
		},
		OnAbort: func(dropped []string, parent string) {
			for _, v := range t.shown() {
				v.Aborted(dropped, parent)
			}
		},
	})
	if err != nil {
		st.Close()
		release()
		return nil, err
	}
	t.fs = f
	return t, nil
}

// shown lists the views mounted.
func (t *TreeFiles) shown() []*cowfs.FS {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*cowfs.FS, 0, len(t.views))
	for _, v := range t.views {
		out = append(out, v)
	}
	return out
}

// MountView mounts a view of the tree's branches at spec.Mountpoint
// (engine.Viewer): an empty directory the requester may mount on
// (access.Rules.Mountpoint), outside every base and the daemon's home.
func (t *TreeFiles) MountView(ctx context.Context, spec engine.ViewSpec) (engine.View, error) {
	m := t.m
	cred, ok := access.FromContext(ctx)
	if !ok {
		return nil, api.Errorf(api.ErrForbidden, "mount: the request carries no requester credentials")
	}
	if err := checkAbs(spec.Mountpoint); err != nil {
		return nil, fmt.Errorf("mount: mountpoint: %w", err)
	}
	fusemount.DetachStale(spec.Mountpoint) // a dead mount of a daemon killed there
	// Paths are resolved and checked as the requester: what they could
	// not see is never named in a refusal. The placement rules are checked
	// before the access rules, which make a missing mountpoint, and again
	// on the directory those opened.
	if parent, err := m.rules.Resolve(cred, filepath.Dir(spec.Mountpoint)); err == nil {
		if err := t.placeable(filepath.Join(parent, filepath.Base(spec.Mountpoint))); err != nil {
			return nil, err
		}
	}
	dir, err := m.rules.Mountpoint(cred, spec.Mountpoint)
	if err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	defer dir.Close() // the mount, once made, holds the directory
	mp := dir.Path
	if err := t.placeable(mp); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.views[mp]; ok {
		return nil, api.Errorf(api.ErrExists, "mount %s: already mounted", mp)
	}
	v := &view{t: t}
	f, err := cowfs.Mount(cowfs.Config{
		Store: t.st, Mountpoint: mp, MountDir: dir.File(), Branch: spec.Branch, Passthrough: m.cfg.Passthrough, Transport: m.cfg.Transport, Aborter: m.cfg.Aborter, Logger: m.log,
		Owner: spec.Owner, FsName: MountSource(m.cfg.Home, t.base), Control: callerControl{spec.Control},
		NoControl: spec.HideControl,
	})
	if err != nil {
		return nil, err
	}
	v.FS = f
	m.views[mp] = f
	t.mu.Lock()
	t.views[mp] = f
	t.mu.Unlock()
	return v, nil
}

// placeable refuses a view at mp inside or around the tree's base or the
// daemon's home, or inside another tree's base.
func (t *TreeFiles) placeable(mp string) error {
	m := t.m
	if inside(mp, t.base) || inside(t.base, mp) {
		return api.Errorf(api.ErrBadRequest, "mount: mountpoint %s and base %s must not contain each other", mp, t.base)
	}
	if inside(mp, m.cfg.Home) || inside(m.cfg.Home, mp) {
		return api.Errorf(api.ErrBadRequest, "mount: mountpoint %s and the daemon's home %s must not contain each other", mp, m.cfg.Home)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.outsideBases(mp); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	return nil
}

// view is a mounted view: its cowfs mount, which the tables forget when
// it is unmounted.
type view struct {
	*cowfs.FS
	t *TreeFiles
}

func (v *view) Unmount(force bool) error {
	if err := v.FS.Unmount(force); err != nil {
		return err
	}
	mp := v.FS.Mountpoint()
	v.t.mu.Lock()
	delete(v.t.views, mp)
	v.t.mu.Unlock()
	v.t.m.mu.Lock()
	if v.t.m.views[mp] == v.FS {
		delete(v.t.m.views, mp)
	}
	v.t.m.mu.Unlock()
	return nil
}

// callerControl passes a control file's requests on with the caller's
// credentials (the FUSE request's) as the requester's.
type callerControl struct{ engine.ViewControl }

func (c callerControl) with(ctx context.Context) context.Context {
	if caller, ok := fuse.FromContext(ctx); ok {
		return access.WithCred(ctx, access.Cred{UID: caller.Uid, GID: caller.Gid})
	}
	return ctx
}

func (c callerControl) Create(ctx context.Context, parent, name string) (string, error) {
	return c.ViewControl.Create(c.with(ctx), parent, name)
}

func (c callerControl) Commit(ctx context.Context, branch string) error {
	return c.ViewControl.Commit(c.with(ctx), branch)
}

func (c callerControl) Abort(ctx context.Context, branch string) error {
	return c.ViewControl.Abort(c.with(ctx), branch)
}

func (c callerControl) Switch(ctx context.Context, name string) error {
	return c.ViewControl.Switch(c.with(ctx), name)
}

// Diff lists what branch changed against its fork point.
func (t *TreeFiles) Diff(branch string) ([]api.Change, error) {
	changes, err := t.st.Diff(branch)
	if err != nil {
		return nil, err
	}
	out := make([]api.Change, 0, len(changes))
	for _, c := range changes {
		out = append(out, api.Change{Kind: c.Kind, Path: c.Path, Meta: c.Meta})
	}
	return out, nil
}

// Replay replays from's changes onto into (store.Replay).
func (t *TreeFiles) Replay(from, into string) ([]api.Conflict, error) {
	cs, err := t.st.Replay(from, into)
	out := make([]api.Conflict, 0, len(cs))
	for _, c := range cs {
		out = append(out, api.Conflict{Path: c.Path, Kind: c.Kind, Aside: c.Aside})
	}
	return out, err
}

// DiffFile gives path at branch's fork point and now (store.DiffFile).
func (t *TreeFiles) DiffFile(branch, path string, max int64) (then, now engine.FileVersion, err error) {
	a, b, err := t.st.DiffFile(branch, path, max)
	conv := func(v store.Version) engine.FileVersion {
		return engine.FileVersion{Exists: v.Exists, Regular: v.Regular, Size: v.Size, Data: v.Data}
	}
	return conv(a), conv(b), err
}

// SetQuota caps what branch's own layer may hold (store.SetQuota).
func (t *TreeFiles) SetQuota(branch string, bytes int64) error { return t.st.SetQuota(branch, bytes) }

// Fork makes children of parent, O(1) each.
func (t *TreeFiles) Fork(ctx context.Context, parent string, children []string) error {
	return t.st.Fork(parent, children...)
}

// Commit applies child to its parent (durably when the parent is the base)
// and returns the branches that became stale.
func (t *TreeFiles) Commit(ctx context.Context, child string) ([]string, error) {
	res, err := t.fs.Commit(child, true)
	if err != nil {
		return nil, err
	}
	return res.Stale, nil
}

// Abort drops the branch and its subtree (the views that showed one of
// them show the branch's parent).
func (t *TreeFiles) Abort(ctx context.Context, name string) error {
	return t.fs.Abort(name)
}

// Path is where the branch's files are on the host.
func (t *TreeFiles) Path(name string) (string, error) {
	b, err := t.st.Branch(name)
	if err != nil {
		return "", err
	}
	if t.st.IsStale(b) {
		return "", api.Errorf(api.ErrStale, "branch %s is stale", name)
	}
	return filepath.Join(t.mnt, "@"+name), nil
}

// Branches lists every branch.
func (t *TreeFiles) Branches() ([]string, error) {
	var out []string
	for _, b := range t.st.Branches() {
		out = append(out, b.Name)
	}
	return out, nil
}

// SetWritable makes the branch refuse every change through its path with
// EROFS (a suspended node), or take them again.
func (t *TreeFiles) SetWritable(name string, writable bool) error {
	return t.st.SetWritable(name, writable)
}

// DiskUsage is the bytes each branch's own layers allocate on disk (see
// store.Store.Held).
func (t *TreeFiles) DiskUsage() map[string]int64 { return t.st.Held() }

// SetDiskLimit limits what the tree's layers may allocate (store.SetLimit).
func (t *TreeFiles) SetDiskLimit(max int64) error { return t.st.SetLimit(max) }

// Close unmounts (the views the engine left, then the tree's own mount)
// and closes the store.
func (t *TreeFiles) Close() error {
	for _, v := range t.shown() {
		vw := &view{FS: v, t: t}
		if err := vw.Unmount(true); err != nil {
			t.m.log.Warn("unmount a view", "mountpoint", v.Mountpoint(), "err", err)
		}
	}
	err := t.fs.Unmount(true)
	if err2 := t.st.Close(); err == nil {
		err = err2
	}
	t.release()
	if err != nil {
		if derr := fusemount.Detach(t.mnt); derr != nil && !errors.Is(derr, unix.EINVAL) {
			err = fmt.Errorf("%w; %w", err, derr)
		}
		return fmt.Errorf("close tree files: %w", err)
	}
	return nil
}

var _ engine.ContentDiffer = (*TreeFiles)(nil)
