package jailbackend

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/store"
)

// tmpLayer keeps every node's /tmp: a store of its own (Arbor's layers,
// internal/store) over a private, empty base under the backend's
// directory, mounted without control files by cowfs. Node ID's /tmp is
// the store's branch ID, seen at <mnt>/@ID; main, the private base, is
// never written (every node's branch is forked from it, the root's at its
// Start), so no commit ever goes into a base directory.
type tmpLayer struct {
	st  *store.Store
	fs  *cowfs.FS
	mnt string
}

// Where the /tmp layer lives under the backend's directory.
const (
	tmpBaseDir  = "tmp-base"  // the store's base: empty, never written
	tmpStoreDir = "tmp-store" // its metadata and layers
	tmpMountDir = "tmp-mnt"   // its mount: node ID's /tmp at @ID
)

// openTmp opens (creating if need be) the /tmp layer under dir, limited
// to maxDisk bytes (0: no limit).
func openTmp(dir string, maxDisk int64) (_ *tmpLayer, err error) {
	base := filepath.Join(dir, tmpBaseDir)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("%w: /tmp layer: %w", api.ErrInternal, err)
	}
	// What every node's /tmp root shows until it changes it: a /tmp is
	// world-writable and sticky (Mkdir's mode is cut by the umask).
	if err := os.Chmod(base, 0o777|os.ModeSticky); err != nil {
		return nil, fmt.Errorf("%w: /tmp layer: %w", api.ErrInternal, err)
	}
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, tmpStoreDir), Base: base})
	if err != nil {
		return nil, fmt.Errorf("/tmp layer: %w", err)
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	if err := st.SetLimit(maxDisk); err != nil {
		return nil, fmt.Errorf("/tmp layer: %w", err)
	}
	mnt := filepath.Join(dir, tmpMountDir)
	fusemount.DetachStale(mnt) // what a killed daemon left
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, fmt.Errorf("%w: /tmp layer: %w", api.ErrInternal, err)
	}
	cfs, err := cowfs.Mount(cowfs.Config{Store: st, Mountpoint: mnt, NoControl: true})
	if err != nil {
		return nil, fmt.Errorf("/tmp layer: mount: %w", err)
	}
	return &tmpLayer{st: st, fs: cfs, mnt: mnt}, nil
}

// checkTmpName refuses a node id that cannot be a branch of its own.
func checkTmpName(id string) error {
	if id == store.Main {
		return api.Errorf(api.ErrBadRequest, "jail backend: node id %q is reserved (the /tmp layer's empty base)", id)
	}
	return store.ValidName(id)
}

// has reports whether node id has a /tmp.
func (t *tmpLayer) has(id string) bool {
	_, err := t.st.Branch(id)
	return err == nil
}

// nodes lists every node with a /tmp.
func (t *tmpLayer) nodes() []string {
	var out []string
	for _, b := range t.st.Branches() {
		if b.Name != store.Main {
			out = append(out, b.Name)
		}
	}
	return out
}

// ensure gives node id an empty /tmp if it has none (a root's start).
func (t *tmpLayer) ensure(id string) error {
	if t.has(id) {
		return nil
	}
	if err := t.st.Fork(store.Main, id); err != nil {
		return fmt.Errorf("node %s's /tmp: %w", id, err)
	}
	return nil
}

// path is where node id's /tmp is on the host.
func (t *tmpLayer) path(id string) (string, error) {
	if err := checkTmpName(id); err != nil {
		return "", err
	}
	if !t.has(id) {
		return "", api.Errorf(api.ErrNotFound, "jail backend: node %s has no /tmp", id)
	}
	return filepath.Join(t.mnt, "@"+id), nil
}

// fork gives children a /tmp each that starts as source's is now: O(1),
// the store's fork (source's head layer frozen and shared, fresh heads).
func (t *tmpLayer) fork(source string, children []string) error {
	if err := t.st.Fork(source, children...); err != nil {
		return fmt.Errorf("fork /tmp: %w", err)
	}
	return nil
}

// commit makes child's /tmp its parent's, whatever the parent's became
// since the fork (store.CommitOver): the commit point of the node was the
// files' commit, which this may not refuse. A child with no /tmp left was
// committed already (the engine calls again after a crash): nothing to do.
func (t *tmpLayer) commit(child, parent string) error {
	b, err := t.st.Branch(child)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if b.Parent != parent {
		return api.Errorf(api.ErrInternal, "jail backend: commit %s into %s: its /tmp was forked from %q", child, parent, b.Parent)
	}
	res, err := t.st.CommitOver(child, true)
	if err != nil {
		return fmt.Errorf("commit /tmp: %w", err)
	}
	t.fs.Committed(res, child)
	return nil
}

// drop removes node id's /tmp (and, as the store drops subtrees, those of
// its descendants, which the engine ends first or together). Idempotent.
func (t *tmpLayer) drop(id string) error {
	if !t.has(id) {
		return nil
	}
	if err := t.fs.Abort(id); err != nil && !errors.Is(err, api.ErrNotFound) {
		return fmt.Errorf("drop /tmp: %w", err)
	}
	return nil
}

// usage is the bytes each node's /tmp holds on disk (its own layers), by
// node id.
func (t *tmpLayer) usage() map[string]int64 {
	out := t.st.Held()
	delete(out, store.Main) // layers no branch holds, on their way out
	return out
}

// setWritable makes node id's /tmp refuse changes (EROFS: a suspended
// node, which nothing should change behind its back) or take them again.
func (t *tmpLayer) setWritable(id string, writable bool) error {
	if err := t.st.SetWritable(id, writable); err != nil {
		return fmt.Errorf("node %s's /tmp: %w", id, err)
	}
	return nil
}

// close unmounts the layer (every sandbox stopped first) and closes its
// store.
func (t *tmpLayer) close() error {
	err := t.fs.Unmount(true)
	if err != nil {
		if derr := fusemount.Detach(t.mnt); derr == nil {
			err = nil
		}
	}
	return errors.Join(err, t.st.Close())
}

// migrate moves the plain /tmp directories of an earlier version
// (<Dir>/tmp/<id>) into the /tmp layer: each becomes node id's branch
// (copied in through the mount: names, data, modes, owners and symlinks;
// not xattrs or times), then goes. A crash midway copies it again at the
// next open, over what the branch holds.
func (b *backend) migrate() error {
	ents, err := os.ReadDir(b.legacy)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", api.ErrInternal, err)
	}
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || checkID(id) != nil {
			continue
		}
		if err := b.tmp.ensure(id); err != nil {
			return err
		}
		dst, err := b.tmp.path(id)
		if err != nil {
			return err
		}
		if err := copyTree(filepath.Join(b.legacy, id), dst); err != nil {
			return fmt.Errorf("%w: move node %s's /tmp into the layer: %w", api.ErrInternal, id, err)
		}
		if err := os.RemoveAll(filepath.Join(b.legacy, id)); err != nil {
			return fmt.Errorf("%w: %w", api.ErrInternal, err)
		}
	}
	if err := os.Remove(b.legacy); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", api.ErrInternal, err)
	}
	return nil
}

// copyTree copies the tree at src over dst (which exists): directories,
// regular files and symlinks, with their modes and owners.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			os.Remove(to)
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(p, to); err != nil {
				return err
			}
		default:
			return nil // sockets, fifos, devices: not state a /tmp keeps across a restart
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return os.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid))
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
