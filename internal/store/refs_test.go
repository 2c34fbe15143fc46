package store

import "fmt"

// checkRefs recomputes every layer's reference count from the branches and
// compares: a count too low would free a layer in use, one too high would
// keep a dropped layer until the next Open. Every layer still indexed must
// be held by some branch (a stale one keeps its layers until aborted), and
// every held layer must be indexed. It also
// checks each branch's children list against the branches' parent names.
func (s *Store) checkRefs() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	want := map[*layer]int{}
	for _, b := range s.branches {
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
			return fmt.Errorf("layer %d (refs %d) is held by no branch but still indexed", id, l.refs)
		}
	}
	// The children lists agree with the parents' names.
	for _, b := range s.branches {
		kids := map[*Branch]bool{}
		for _, c := range b.kids {
			if s.branches[c.Name] != c {
				return fmt.Errorf("%s lists child %s, which is gone", b.Name, c.Name)
			}
			kids[c] = true
		}
		n := 0
		for _, c := range s.branches {
			if c.Parent == b.Name && c.ID > b.ID {
				n++
				if !kids[c] {
					return fmt.Errorf("%s does not list its child %s", b.Name, c.Name)
				}
			}
		}
		if n != len(b.kids) {
			return fmt.Errorf("%s lists %d children, has %d", b.Name, len(b.kids), n)
		}
	}
	return nil
}
