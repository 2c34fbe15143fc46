// Package enginetest holds test helpers for the engine and for what sits
// on it: OpenDirFiles, a directory-copy engine.Files that needs no FUSE and
// no root, and New, a real engine over it. The faces' scenarios
// (internal/facetest) run against that real engine. Only tests import it.
package enginetest

import (
	"context"
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
	for _, d := range []string{"branches", "meta", "tmp"} {
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
		return nil
	}
	return drop(name)
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
