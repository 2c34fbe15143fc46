package store

import (
	"fmt"
	"sort"

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
}

// Diff lists the paths the branch added, modified or deleted since its fork
// point, sorted by path. It costs time in the size of the change, not of the
// tree.
func (s *Store) Diff(name string) ([]Change, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, err := s.branch(name)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	if b.Name == Main {
		return nil, api.Errorf(api.ErrBadRequest, "diff: main has no fork point")
	}
	if b.stale {
		return nil, api.Errorf(api.ErrStale, "diff %s: the branch is stale", name)
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
			out = append(out, Change{Added, p})
		case nerr != nil && terr == nil:
			out = append(out, Change{Deleted, p})
		case nerr == nil && now.Depth > b.forkDepth && (now.Kind != kDir || then.Kind != kDir):
			out = append(out, Change{Modified, p})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
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
