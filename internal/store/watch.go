package store

import "sync"

// Event says that what a branch shows changed, for those who cache it (a
// mount's kernel cache). The store publishes the events of commits and
// aborts itself; the mounts publish those of the changes they make.
type Event struct {
	Branch string
	// Path changed: with Entry its name was made, removed or replaced
	// (its parent directory changed too), else its attributes or content.
	Path  string
	Entry bool
	// All: anything in the branch may have changed (a commit into it, its
	// abort, its commit, a sibling's commit making it stale).
	All bool
	// Origin is who made the change and knows of it already (nil: none).
	Origin any
	// Attr: only Path's attributes changed, by a copy-up below it (an
	// entry made in the head's copy of the directory changes its ctime),
	// which no request on Path told the kernel of. A mount forgets them in
	// every view, the one that wrote too, before the publisher goes on:
	// the request that copied up has not answered yet.
	Attr bool
}

// watchers are the functions Watch registered, called in order by Publish.
type watchers struct {
	mu   sync.RWMutex
	next int
	fns  map[int]func(Event)
}

// Watch calls fn with every event published on the store, from the
// goroutine that publishes it, possibly with the store's lock held: fn must
// not block and must not call the store. The returned function stops it.
func (s *Store) Watch(fn func(Event)) (stop func()) {
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(Event){}
	}
	id := w.next
	w.next++
	w.fns[id] = fn
	return func() {
		w.mu.Lock()
		delete(w.fns, id)
		w.mu.Unlock()
	}
}

// Publish hands ev to every watcher.
func (s *Store) Publish(ev Event) {
	w := &s.watch
	w.mu.RLock()
	defer w.mu.RUnlock()
	for _, fn := range w.fns {
		fn(ev)
	}
}

// maxCommitPaths bounds the paths a commit publishes one by one; past it the
// parent's views are invalidated whole.
const maxCommitPaths = 256

// publishCommit publishes what a commit of child into parent changed:
// paths of the parent (all of it past maxCommitPaths or when paths is
// nil), the child (gone) and the branches it made stale.
func (s *Store) publishCommit(parent, child string, paths []string, stale []string) {
	if paths == nil || len(paths) > maxCommitPaths {
		s.Publish(Event{Branch: parent, All: true})
	} else {
		for _, p := range paths {
			s.Publish(Event{Branch: parent, Path: p, Entry: true})
		}
	}
	s.Publish(Event{Branch: child, All: true})
	for _, b := range stale {
		s.Publish(Event{Branch: b, All: true})
	}
}
