package store

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
)

// Change kinds reported by Diff.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
)

// Change is one path a branch changed against its fork point.
type Change struct {
	Kind string
	Path string
	Meta bool // modified: its metadata only (its data is the fork point's)
}

// Diff lists the paths the branch added, modified or deleted since its fork
// point, sorted by path. It costs time in the size of the change, not of the
// tree.
func (s *Store) Diff(name string) ([]Change, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, err := s.forked(name)
	if err != nil {
		return nil, fmt.Errorf("diff %s: %w", name, err)
	}
	paths := map[string]bool{}
	for _, l := range b.chain[b.forkDepth:] {
		for p := range l.paths {
			if p != "" {
				paths[p] = true
			}
		}
	}
	var out []Change
	for p := range paths {
		now, nerr := s.resolve(b, p, len(b.chain))
		then, terr := s.resolve(b, p, b.forkDepth)
		switch {
		case nerr == nil && terr != nil:
			out = append(out, Change{Kind: Added, Path: p})
		case nerr != nil && terr == nil:
			out = append(out, Change{Kind: Deleted, Path: p})
		case nerr == nil && now.Depth > b.forkDepth && (now.Kind != kDir || then.Kind != kDir):
			meta := now.Data != "" && now.DataDepth <= b.forkDepth
			out = append(out, Change{Kind: Modified, Path: p, Meta: meta})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// forked is the branch name, which must have a fork point to diff
// against (a stale branch has one: its work can be rescued). The caller
// holds s.mu.
func (s *Store) forked(name string) (*Branch, error) {
	b, err := s.branch(name)
	switch {
	case err != nil:
		return nil, err
	case b.Name == Main:
		return nil, api.Errorf(api.ErrBadRequest, "main has no fork point")
	}
	return b, nil
}

// DiskBytes is the bytes of regular files in the branch's own layers.
func (s *Store) DiskBytes(name string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.branches[name]
	if !ok {
		return 0
	}
	return s.usage(b)
}

// SetQuota limits the bytes the branch's own layers may hold (0: none).
func (s *Store) SetQuota(name string, quota int64) error {
	if quota < 0 {
		return api.Errorf(api.ErrBadRequest, "quota %d: must be >= 0", quota)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.branch(name)
	if err != nil {
		return err
	}
	if b.Name == Main {
		return api.Errorf(api.ErrBadRequest, "quota: main writes the base directory and has none")
	}
	old := b.Quota
	b.Quota = quota
	if err := s.save([]*Branch{b}, nil, nil); err != nil {
		b.Quota = old
		return err
	}
	return nil
}

// Version is a path's content on one side of a branch's change.
type Version struct {
	Exists  bool
	Regular bool   // a regular file: only then Size and Data
	Size    int64  // its size in bytes
	Data    []byte // its content, nil when Size is over the caller's max
}

// DiffFile gives rel as the branch saw it at its fork point (then) and as
// it sees it now, each read only if it is a regular file of at most max
// bytes. The paths are resolved under the store's read lock and opened
// there through the descriptor walk that follows no symlink (openChecked);
// the reads are made after the lock is released, on the descriptors, so
// a commit that retires a layer meanwhile cannot change what they read.
func (s *Store) DiffFile(name, rel string, max int64) (then, now Version, err error) {
	if rel == "" || path.Clean(rel) != rel || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		return Version{}, Version{}, api.Errorf(api.ErrBadRequest, "diff %s: path %q is not a clean relative path", name, rel)
	}
	var fds [2]int
	fds[0], fds[1] = -1, -1
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	vs := [2]*Version{&then, &now}
	if err := s.openSides(name, rel, vs, &fds); err != nil {
		return Version{}, Version{}, fmt.Errorf("diff %s %s: %w", name, rel, err)
	}
	for i, v := range vs {
		if fds[i] < 0 || v.Size > max {
			continue
		}
		if v.Data, err = readAll(fds[i], v.Size, max); err != nil {
			return Version{}, Version{}, fmt.Errorf("diff %s %s: %w", name, rel, err)
		}
		if n := int64(len(v.Data)); n > max {
			v.Data, v.Size = nil, n // grown since the fstat
		} else {
			v.Size = n
		}
	}
	return then, now, nil
}

// openSides resolves rel at b's fork depth and at its head, under the read
// lock, and opens each regular file it finds.
func (s *Store) openSides(name, rel string, vs [2]*Version, fds *[2]int) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, err := s.forked(name)
	if err != nil {
		return err
	}
	for i, depth := range [2]int{b.forkDepth, len(b.chain)} {
		var st unix.Stat_t
		res, _, err := s.resolveChecked(b, rel, depth, &st)
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return err
		}
		vs[i].Exists = true
		if res.Kind == kDir {
			continue
		}
		if err := s.Lstat(res.Real, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue // a symlink (not followed), a device, a FIFO
		}
		fd, err := s.openChecked(res.DataReal(), unix.O_RDONLY|unix.O_CLOEXEC, &st, false)
		if err != nil {
			return err
		}
		fds[i] = fd
		vs[i].Regular, vs[i].Size = true, st.Size
	}
	return nil
}

// readAll reads fd from its start: size bytes as fstat said, and never
// more than max+1, so that a file grown since shows as over max.
func readAll(fd int, size, max int64) ([]byte, error) {
	buf := make([]byte, 0, min(size, max)+1)
	for int64(len(buf)) <= max {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Pread(fd, buf[len(buf):min(cap(buf), int(max)+1)], int64(len(buf)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return buf, nil
}
