package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/store"
	"golang.org/x/sys/unix"
)

// TreeFiles is one tree's files: a store over the tree's base, mounted
// without control files at <dir>/mnt, where node NAME's files are at
// <dir>/mnt/@NAME. The root node is the branch main, the base itself.
type TreeFiles struct {
	st      *store.Store
	fs      *cowfs.FS
	mnt     string
	release func() // gives the base back to the manager
}

// OpenTreeFiles opens (creating if need be) the files of a tree whose
// private directory is dir, over base.
func (m *Manager) OpenTreeFiles(ctx context.Context, dir, base string) (*TreeFiles, error) {
	base = filepath.Clean(base)
	if err := m.notInMount(base); err != nil { // before opening it: never a request to our own mount
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
	if err := m.notInMount(base); err != nil {
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
	f, err := cowfs.Mount(cowfs.Config{Store: st, Mountpoint: mnt, NoControl: true, Passthrough: m.cfg.Passthrough, Aborter: m.cfg.Aborter, Logger: m.log,
		FsName: MountSource(m.cfg.Home, base)})
	if err != nil {
		st.Close()
		release()
		return nil, err
	}
	return &TreeFiles{st: st, fs: f, mnt: mnt, release: release}, nil
}

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

// Abort drops the branch and its subtree.
func (t *TreeFiles) Abort(ctx context.Context, name string) error {
	return t.st.Abort(name)
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

// Close unmounts and closes the store.
func (t *TreeFiles) Close() error {
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
