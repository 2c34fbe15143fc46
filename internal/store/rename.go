package store

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Rename renames old to new in b, with renameat2's flags (RENAME_NOREPLACE,
// RENAME_EXCHANGE).
func (s *Store) Rename(b *Branch, old, new string, flags uint32) error {
	if err := checkName(new); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirsChanged()
	return s.renameLocked(b, old, new, flags)
}

// renameLocked is Rename with s.mu held.
func (s *Store) renameLocked(b *Branch, old, new string, flags uint32) error {
	if err := writableBranch(b); err != nil {
		return err
	}
	max := len(b.chain)
	ores, err := s.resolve(b, old, max)
	if err != nil {
		return err
	}
	nres, nerr := s.resolve(b, new, max)
	exists := nerr == nil
	if nerr != nil && nerr != syscall.ENOENT {
		return nerr
	}
	if np, _ := splitRel(new); !exists {
		if pres, err := s.resolve(b, np, max); err != nil {
			return err
		} else if !pres.IsDir() {
			return syscall.ENOTDIR
		}
	}
	exchange := flags&unix.RENAME_EXCHANGE != 0
	switch {
	case old == new:
		return nil
	case exchange && !exists:
		return syscall.ENOENT
	case flags&unix.RENAME_NOREPLACE != 0 && exists:
		return syscall.EEXIST
	case strings.HasPrefix(new, old+"/") || (exchange && strings.HasPrefix(old, new+"/")):
		return syscall.EINVAL
	case exists && !exchange && ores.IsDir() && !nres.IsDir():
		return syscall.ENOTDIR
	case exists && !exchange && !ores.IsDir() && nres.IsDir():
		return syscall.EISDIR
	case exists && !exchange && nres.IsDir():
		ents, err := s.readDir(b, new, max)
		if err != nil {
			return err
		}
		if len(ents) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	if b.Name == Main {
		if err := s.preserve(old, true); err != nil {
			return err
		}
		if err := s.preserve(new, exchange); err != nil {
			return err
		}
		if err := s.rename(ores.Real, s.base+"/"+new, uint(flags)); err != nil {
			return err
		}
		s.moveWriters(ores.Real, s.base+"/"+new, exchange)
		return nil
	}
	h := b.head()
	// Bring old (with its whole subtree) and, for an exchange, new into the head.
	if err := s.copyUpTree(b, old, ores); err != nil {
		return err
	}
	if exchange {
		if err := s.copyUpTree(b, new, nres); err != nil {
			return err
		}
	} else {
		if err := s.ensureParent(b, new); err != nil {
			return err
		}
		if exists {
			// Replace: what was at new goes, leaving a whiteout if a lower layer has it.
			if err := s.remove(b, new, nres.IsDir()); err != nil {
				return err
			}
		}
		if e, ok := s.get(h, new); ok && e.kind == kWhiteout {
			if err := s.removeWhiteout(h, new); err != nil {
				return err
			}
			s.drop(h, new)
		}
	}
	if err := s.rename(h.real(old), h.real(new), uint(flags&unix.RENAME_EXCHANGE)); err != nil {
		return err
	}
	s.moveWriters(h.real(old), h.real(new), exchange)
	s.moveIndex(h, old, new, exchange)
	if !exchange {
		if _, err := s.resolve(b, old, max-1); err == nil {
			if err := s.ensureParent(b, old); err != nil {
				return err
			}
			if err := s.whiteout(h, old); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyUpTree copies rel up into b's head; a directory comes with its whole
// merged subtree and becomes opaque, so that after a rename it hides nothing
// and needs nothing from below.
func (s *Store) copyUpTree(b *Branch, rel string, res Res) error {
	if _, err := s.copyUp(b, rel); err != nil {
		return err
	}
	if !res.IsDir() {
		return nil
	}
	ents, err := s.readDir(b, rel, len(b.chain))
	if err != nil {
		return err
	}
	for _, e := range ents {
		c := joinRel(rel, e.Name)
		cres, err := s.resolve(b, c, len(b.chain))
		if err != nil {
			return err
		}
		if err := s.copyUpTree(b, c, cres); err != nil {
			return err
		}
	}
	h := b.head()
	if e, ok := s.get(h, rel); ok && !e.opaque {
		if err := s.touch(h.real(rel) + "/" + opqMarker); err != nil {
			return err
		}
		// Whiteouts inside are no longer needed once the directory is opaque.
		for p := range h.paths {
			if d, _ := splitRel(p); d == rel {
				if we, ok := s.get(h, p); ok && we.kind == kWhiteout {
					s.removeWhiteout(h, p)
					s.drop(h, p)
				}
			}
		}
		s.put(h, rel, kDir, true, 0)
	}
	return nil
}

// moveIndex re-keys layer l's entries under old to new (or swaps them).
func (s *Store) moveIndex(l *layer, old, new string, exchange bool) {
	type moved struct {
		rel string
		e   entry
	}
	take := func(from string) []moved {
		var out []moved
		for p := range l.paths {
			if p == from || strings.HasPrefix(p, from+"/") {
				e, _ := s.get(l, p)
				out = append(out, moved{p[len(from):], e})
			}
		}
		for _, m := range out {
			s.drop(l, from+m.rel)
		}
		return out
	}
	a := take(old)
	var bm []moved
	if exchange {
		bm = take(new)
	}
	for _, m := range a {
		s.put(l, new+m.rel, m.e.kind, m.e.opaque, m.e.ino)
	}
	for _, m := range bm {
		s.put(l, old+m.rel, m.e.kind, m.e.opaque, m.e.ino)
	}
}

// Writer is one descriptor open for writing, as the store counts it (see
// OpenWrite). Every move of its file (a rename, a commit into main, a fork
// that keeps it apart) carries it, so that its close uncounts the file where
// it is now, never whatever took its old name.
type Writer struct {
	real string // guarded by Store.mu
}

type writing map[*Writer]struct{} // the writers open on one real path

// OpenWrite and CloseWrite count the descriptors open for writing on a real
// path, so that a fork or a snapshot never moves an inode that a writer
// holds: its writes must stay where they are.
func (s *Store) OpenWrite(real string) *Writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addWriter(real)
}

func (s *Store) addWriter(real string) *Writer {
	w := &Writer{real: real}
	if s.writers[real] == nil {
		s.writers[real] = writing{}
	}
	s.writers[real][w] = struct{}{}
	return w
}

// Writing reports whether a descriptor is open for writing on real.
func (s *Store) Writing(real string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.writers[real]) > 0
}

// WriterPath is the real path w's file is at now.
func (s *Store) WriterPath(w *Writer) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return w.real
}

// CloseWrite undoes OpenWrite, and measures what the file allocates now
// (its writes may have been passthrough: see disk.go). A nil w is nothing.
func (s *Store) CloseWrite(w *Writer) {
	if w == nil {
		return
	}
	real := s.WriterPath(w)
	var st unix.Stat_t
	measured := s.Lstat(real, &st) == nil
	s.mu.Lock()
	if set := s.writers[w.real]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(s.writers, w.real)
		}
	}
	if measured && w.real == real {
		s.record(real, st.Blocks*512)
	}
	s.mu.Unlock()
}

// moveWriter carries the writers of the file at old to new.
func (s *Store) moveWriter(old, new string) {
	set := s.writers[old]
	if set == nil {
		return
	}
	delete(s.writers, old)
	if s.writers[new] == nil {
		s.writers[new] = writing{}
	}
	for w := range set {
		w.real = new
		s.writers[new][w] = struct{}{}
	}
}

// moveWriters carries the writers of old and everything under it to new
// (and, for an exchange, those of new to old).
func (s *Store) moveWriters(old, new string, exchange bool) {
	re := map[string]writing{}
	for p, set := range s.writers {
		var to string
		switch {
		case p == old || strings.HasPrefix(p, old+"/"):
			to = new + p[len(old):]
		case exchange && (p == new || strings.HasPrefix(p, new+"/")):
			to = old + p[len(new):]
		default:
			continue
		}
		delete(s.writers, p)
		if re[to] == nil {
			re[to] = writing{}
		}
		for w := range set {
			w.real = to
			re[to][w] = struct{}{}
		}
	}
	for p, set := range re {
		if s.writers[p] == nil {
			s.writers[p] = writing{}
		}
		for w := range set {
			s.writers[p][w] = struct{}{}
		}
	}
}
