package store

import "fmt"

// checkRefs recomputes every layer's reference count from the branches and
// compares: a count too low would free a layer in use, one too high would
// keep a dropped layer until the next Open. Every layer still indexed must
// be held by some live branch, and every held layer must be indexed.
func (s *Store) checkRefs() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	want := map[*layer]int{}
	for _, b := range s.branches {
		if b.stale {
			continue
		}
		for _, l := range b.refLayers() {
			want[l]++
		}
	}
	for l, n := range want {
		if s.layers[l.id] != l {
			return fmt.Errorf("layer %d is held by %d branches but not indexed", l.id, n)
		}
		if l.refs != n {
			return fmt.Errorf("layer %d: refs %d, held by %d branches", l.id, l.refs, n)
		}
	}
	for id, l := range s.layers {
		if want[l] == 0 {
			return fmt.Errorf("layer %d (refs %d) is held by no live branch but still indexed", id, l.refs)
		}
	}
	return nil
}
