package store

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// dlKey names a directory of a branch's view in Store.dirLinks.
type dlKey struct {
	b   *Branch
	rel string
}

// maxDirLinks bounds Store.dirLinks; past it the cache starts again.
const maxDirLinks = 1 << 16

// DirLinks returns the link count of the directory rel of b, 2 plus its
// subdirectories in b's view, when its content is merged from several real
// directories (layers, the base); merged is false when it comes from one
// real directory, whose own link count is then right.
//
// The count of a merged directory is cached until a directory is made,
// removed or renamed in any view, or a fork, commit or abort changes the
// views: making and removing files, which never changes it, keeps it, so
// that filling a merged directory does not list it at every GETATTR.
func (s *Store) DirLinks(b *Branch, rel string) (nlink uint32, merged bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	res, err := s.resolve(b, rel, len(b.chain))
	if err != nil {
		return 0, false, err
	}
	if !res.IsDir() {
		return 0, false, syscall.ENOTDIR
	}
	if !s.merged(b, rel, res) {
		return 0, false, nil
	}
	k := dlKey{b, rel}
	s.dlMu.Lock()
	n, ok := s.dirLinks[k]
	s.dlMu.Unlock()
	if ok {
		return n, true, nil
	}
	ents, err := s.readDir(b, rel, len(b.chain))
	if err != nil {
		return 0, false, err
	}
	n = 2
	for _, e := range ents {
		if e.Mode == syscall.S_IFDIR {
			n++
		}
	}
	// Stored under s.mu held shared: a change that would make it wrong
	// holds s.mu exclusively when it clears the cache, so it cannot fall
	// between the listing and this.
	s.dlMu.Lock()
	if s.dirLinks == nil || len(s.dirLinks) >= maxDirLinks {
		s.dirLinks = map[dlKey]uint32{}
	}
	s.dirLinks[k] = n
	s.dlMu.Unlock()
	return n, true, nil
}

// merged reports whether more than one real directory makes up the
// directory rel of b (res is its resolution); it walks the layers as
// readDir does, without listing them.
func (s *Store) merged(b *Branch, rel string, res Res) bool {
	if rel == "" {
		// The root is in every layer that has been made, without an
		// index entry.
		for _, l := range b.chain {
			if l.made {
				return true
			}
		}
		return res.Depth > 0
	}
	if res.Depth == 0 {
		return false
	}
	n := 0
	for d := res.Depth; d >= 1 && d >= res.cut; d-- {
		e, ok := s.get(b.chain[d-1], rel)
		if !ok {
			continue
		}
		if e.kind != kDir {
			break
		}
		if n++; n > 1 {
			return true
		}
		if e.opaque {
			return false
		}
	}
	if res.cut == 0 {
		var st unix.Stat_t
		if s.Lstat(s.base+"/"+rel, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			n++
		}
	}
	return n > 1
}

// dirsChanged drops the cached link counts; the caller holds s.mu
// exclusively.
func (s *Store) dirsChanged() {
	s.dlMu.Lock()
	s.dirLinks = nil
	s.dlMu.Unlock()
}
