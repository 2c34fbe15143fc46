// Package enginetest holds test helpers for the engine and for what sits
// on it: OpenDirFiles, a directory-copy engine.Files that needs no FUSE and
// no root, and New, a real engine over it. The faces' scenarios
// (internal/facetest) run against that real engine. Only tests import it.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// dirFiles is the test double of engine.Files: every branch is a real
// directory holding a full copy of its files, persisted so that a process
// killed at any point reopens to a consistent state.
//
// Layout under dir:
//
//	branches/<name>.<gen>/  the branch's files; gen counts commits into it;
//	                        the highest gen present is current
//	meta/<name>             "<parent> <parent gen at fork>"
//	forks/<name>/           a copy of the parent's files at the fork (Diff)
//	tmp/                    work in progress, emptied at open
//
// A branch exists iff its directory exists. Fork writes meta, then copies
// into tmp and renames into branches/ (the commit point). Commit renames the
// child's directory to the parent's next generation: one rename applies the
// child's files and removes the child branch atomically.
type dirFiles struct {
	dir string

	mu       sync.Mutex // guards branches and closed, and serialises changes on disk
	branches map[string]*dirBranch
	closed   bool
	limit    int64 // recorded by SetDiskLimit, not enforced
}

var _ engine.ContentDiffer = (*dirFiles)(nil)

type dirBranch struct {
	parent  string
	forkGen uint64
	gen     uint64
}

// OpenDirFiles is an engine.OpenFiles whose branches are full directory
// copies (see dirFiles). It passes internal/engine/filestest.
func OpenDirFiles(ctx context.Context, dir, base string) (engine.Files, error) {
	st, err := os.Stat(base)
	if err != nil || !st.IsDir() {
		return nil, api.Errorf(api.ErrNotFound, "base %s is not a directory", base)
	}
	f := &dirFiles{dir: dir, branches: map[string]*dirBranch{}}
	for _, d := range []string{"branches", "meta", "forks", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		return nil, err
	}
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
	ents, err := os.ReadDir(filepath.Join(dir, "branches"))
	if err != nil {
		return nil, err
	}
	gens := map[string][]uint64{}
	for _, e := range ents {
		i := strings.LastIndexByte(e.Name(), '.')
		if i <= 0 {
			continue
		}
		g, err := strconv.ParseUint(e.Name()[i+1:], 10, 64)
		if err != nil {
			continue
		}
		gens[e.Name()[:i]] = append(gens[e.Name()[:i]], g)
	}
	for name, gs := range gens {
		slices.Sort(gs)
		for _, g := range gs[:len(gs)-1] { // superseded by a commit
			os.RemoveAll(filepath.Join(dir, "branches", fmt.Sprintf("%s.%d", name, g)))
		}
		b := &dirBranch{gen: gs[len(gs)-1]}
		if name != engine.MainBranch {
			m, err := os.ReadFile(filepath.Join(dir, "meta", name))
			if err != nil {
				// A branch without meta cannot happen (meta is written
				// first); treat it as garbage.
				os.RemoveAll(filepath.Join(dir, "branches", fmt.Sprintf("%s.%d", name, b.gen)))
				continue
			}
			if _, err := fmt.Sscanf(string(m), "%s %d", &b.parent, &b.forkGen); err != nil {
				return nil, fmt.Errorf("meta %s: %w", name, err)
			}
		}
		f.branches[name] = b
	}
	// A branch whose parent is gone was left by an abort cut short.
	for changed := true; changed; {
		changed = false
		for name, b := range f.branches {
			if name != engine.MainBranch && f.branches[b.parent] == nil {
				os.RemoveAll(f.bdir(name))
				delete(f.branches, name)
				changed = true
			}
		}
	}
	if forks, err := os.ReadDir(filepath.Join(dir, "forks")); err == nil {
		for _, e := range forks {
			if f.branches[e.Name()] == nil { // left by a fork or a removal cut short
				os.RemoveAll(filepath.Join(dir, "forks", e.Name()))
			}
		}
	}
	if f.branches[engine.MainBranch] == nil {
		tmp := filepath.Join(dir, "tmp", "main")
		if err := copyTree(base, tmp); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, filepath.Join(dir, "branches", "main.0")); err != nil {
			return nil, err
		}
		f.branches[engine.MainBranch] = &dirBranch{}
	}
	return f, nil
}

func (f *dirFiles) bdir(name string) string {
	return filepath.Join(f.dir, "branches", fmt.Sprintf("%s.%d", name, f.branches[name].gen))
}

func (f *dirFiles) Fork(ctx context.Context, parent string, children []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.branches[parent]
	if p == nil {
		return api.Errorf(api.ErrNotFound, "fork: branch %q", parent)
	}
	for _, c := range children {
		if f.branches[c] != nil || c == "" || strings.ContainsAny(c, "/. ") {
			return api.Errorf(api.ErrExists, "fork: branch %q exists or is not a name", c)
		}
	}
	for _, c := range children {
		if err := writeAtomic(filepath.Join(f.dir, "meta", c), fmt.Sprintf("%s %d", parent, p.gen)); err != nil {
			return err
		}
		tmp := filepath.Join(f.dir, "tmp", c)
		if err := copyTree(f.bdir(parent), tmp); err != nil {
			return err
		}
		os.RemoveAll(f.forkDir(c))
		if err := copyTree(tmp, f.forkDir(c)); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(f.dir, "branches", c+".0")); err != nil {
			return err
		}
		f.branches[c] = &dirBranch{parent: parent, forkGen: p.gen}
	}
	return nil
}

func (f *dirFiles) Commit(ctx context.Context, child string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.branches[child]
	if c == nil {
		return nil, api.Errorf(api.ErrNotFound, "commit: branch %q", child)
	}
	if child == engine.MainBranch {
		return nil, api.Errorf(api.ErrState, "commit: main has no parent")
	}
	for _, b := range f.branches {
		if b.parent == child {
			return nil, api.Errorf(api.ErrState, "commit %s: it has children", child)
		}
	}
	p := f.branches[c.parent]
	if p.gen != c.forkGen {
		return nil, api.Errorf(api.ErrStale, "commit %s: parent %s changed since the fork", child, c.parent)
	}
	old := f.bdir(c.parent)
	next := filepath.Join(f.dir, "branches", fmt.Sprintf("%s.%d", c.parent, p.gen+1))
	if err := os.Rename(f.bdir(child), next); err != nil { // the commit point
		return nil, err
	}
	delete(f.branches, child)
	p.gen++
	os.RemoveAll(old)
	os.Remove(filepath.Join(f.dir, "meta", child))
	os.RemoveAll(f.forkDir(child))
	var stale []string
	for name, b := range f.branches {
		if b.parent == c.parent && b.forkGen == c.forkGen {
			stale = append(stale, name)
		}
	}
	slices.Sort(stale)
	return stale, nil
}

func (f *dirFiles) Abort(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.branches[name] == nil {
		return api.Errorf(api.ErrNotFound, "abort: branch %q", name)
	}
	if name == engine.MainBranch {
		return api.Errorf(api.ErrState, "abort: main")
	}
	var drop func(n string) error
	drop = func(n string) error {
		for c, b := range f.branches {
			if b.parent == n {
				if err := drop(c); err != nil {
					return err
				}
			}
		}
		if err := os.RemoveAll(f.bdir(n)); err != nil {
			return err
		}
		delete(f.branches, n)
		os.Remove(filepath.Join(f.dir, "meta", n))
		os.RemoveAll(f.forkDir(n))
		return nil
	}
	return drop(name)
}

func (f *dirFiles) forkDir(name string) string { return filepath.Join(f.dir, "forks", name) }

// sides is the directories of a branch's fork point and of its files now.
func (f *dirFiles) sides(op, name string) (then, now string, err error) {
	if f.branches[name] == nil {
		return "", "", api.Errorf(api.ErrNotFound, "%s: branch %q", op, name)
	}
	if name == engine.MainBranch {
		return "", "", api.Errorf(api.ErrBadRequest, "%s: main has no fork point", op)
	}
	return f.forkDir(name), f.bdir(name), nil
}

// Diff lists what the branch changed against the copy made at its fork,
// the way the store does: a path added, deleted, or modified (its type,
// content or symlink target), directories only when added or deleted.
func (f *dirFiles) Diff(name string) ([]api.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	then, now, err := f.sides("diff", name)
	if err != nil {
		return nil, err
	}
	list := func(root string) (map[string]fs.FileMode, error) {
		m := map[string]fs.FileMode{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if rel, _ := filepath.Rel(root, p); rel != "." {
				m[filepath.ToSlash(rel)] = d.Type()
			}
			return nil
		})
		return m, err
	}
	a, err := list(then)
	if err != nil {
		return nil, err
	}
	b, err := list(now)
	if err != nil {
		return nil, err
	}
	var out []api.Change
	for p, tb := range b {
		ta, ok := a[p]
		switch {
		case !ok:
			out = append(out, api.Change{Kind: "added", Path: p})
		case ta != tb || !ta.IsDir() && !sameFile(filepath.Join(then, p), filepath.Join(now, p), ta):
			out = append(out, api.Change{Kind: "modified", Path: p})
		}
	}
	for p := range a {
		if _, ok := b[p]; !ok {
			out = append(out, api.Change{Kind: "deleted", Path: p})
		}
	}
	slices.SortFunc(out, func(x, y api.Change) int { return strings.Compare(x.Path, y.Path) })
	return out, nil
}

// sameFile compares two files of type t: a symlink's target, a regular
// file's bytes.
func sameFile(a, b string, t fs.FileMode) bool {
	read := os.ReadFile
	if t&fs.ModeSymlink != 0 {
		read = func(p string) ([]byte, error) { l, err := os.Readlink(p); return []byte(l), err }
	}
	x, err1 := read(a)
	y, err2 := read(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// DiffFile gives path at the fork and now, a regular file's data when it
// is at most max bytes; a symlink is lstatted, never followed.
func (f *dirFiles) DiffFile(name, path string, max int64) (then, now engine.FileVersion, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, b, err := f.sides("diff", name)
	if err != nil {
		return then, now, err
	}
	if !fs.ValidPath(path) || path == "." {
		return then, now, api.Errorf(api.ErrBadRequest, "diff: path %q", path)
	}
	side := func(root string) (engine.FileVersion, error) {
		p := filepath.Join(root, filepath.FromSlash(path))
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return engine.FileVersion{}, nil
		}
		if err != nil {
			return engine.FileVersion{}, err
		}
		v := engine.FileVersion{Exists: true, Regular: st.Mode().IsRegular(), Size: st.Size()}
		if v.Regular && v.Size <= max {
			if v.Data, err = os.ReadFile(p); err != nil {
				return engine.FileVersion{}, err
			}
		}
		return v, nil
	}
	if then, err = side(a); err == nil {
		now, err = side(b)
	}
	return then, now, err
}

func (f *dirFiles) Path(name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.branches[name] == nil {
		return "", api.Errorf(api.ErrNotFound, "branch %q", name)
	}
	return f.bdir(name), nil
}

func (f *dirFiles) Branches() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.branches {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// DiskUsage is the bytes of the regular files in each branch's copy: the
// double copies whole directories and enforces no limit (SetDiskLimit only
// records it); the real files layer's accounting is tested in workspace.
func (f *dirFiles) DiskUsage() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for name := range f.branches {
		var n int64
		filepath.WalkDir(f.bdir(name), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
		out[name] = n
	}
	return out
}

func (f *dirFiles) SetDiskLimit(max int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = max
	return nil
}

func (f *dirFiles) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// copyTree copies the regular files, directories and symlinks of src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case d.Type().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.Create(to)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
		return nil
	})
}
