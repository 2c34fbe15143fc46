package store

import (
	"errors"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Res is where a path of a branch resolves.
type Res struct {
	Real  string // the host path to read it at
	Depth int    // the depth of the layer it comes from; 0 is the base
	Kind  kind
	Ino   uint64 // the inode number to report (0: the real file's)
	Lower bool   // a branch other than main sees it below its head: a write copies it up
	Nlink uint32 // for the copy of a hard-linked lower file, the lower file's link count
	// Data, for a metadata-only copy-up (Real holds the metadata), is the
	// real file that holds the data, from the layer at depth DataDepth.
	Data      string
	DataDepth int
	cut       int // for a directory: the depth below which its content is hidden

	// Writer is the count of a descriptor OpenFile opened for writing
	// (nil otherwise), for CloseWrite.
	Writer *Writer
}

// DataReal is the real path to read rel's data at.
func (r Res) DataReal() string {
	if r.Data != "" {
		return r.Data
	}
	return r.Real
}

// IsDir reports whether the path is a directory.
func (r Res) IsDir() bool { return r.Kind == kDir }

// top returns the entry of rel that b sees, among layers at depths in
// [cut, max], and the cut for rel's children.
func (s *Store) top(b *Branch, rel string, cut, max int) (best entry, found bool, childCut int) {
	es := s.index[rel]
	for _, e := range es {
		if e.l.depth < cut || e.l.depth > max || !b.contains(e.l) {
			continue
		}
		if !found || e.l.depth > best.l.depth {
			best, found = e, true
		}
	}
	if !found {
		return best, false, cut
	}
	childCut = cut
	if best.opaque {
		return best, true, best.l.depth
	}
	// Below best, a non-directory (a whiteout or a file the directory
	// replaced) hides everything at and under its depth, and an opaque
	// directory everything under its depth: best above them, made without
	// an opaque marker (a copy-up after a fork), must not let them through.
	for _, e := range es {
		if e.l.depth < cut || e.l.depth >= best.l.depth || !b.contains(e.l) {
			continue
		}
		if c := e.l.depth + 1; e.kind != kDir && c > childCut {
			childCut = c
		}
		if c := e.l.depth; e.kind == kDir && e.opaque && c > childCut {
			childCut = c
		}
	}
	return best, true, childCut
}

// resolve finds rel in b's view, looking only at layers up to depth max
// (len(b.chain) for the whole view). The caller holds s.mu.
func (s *Store) resolve(b *Branch, rel string, max int) (Res, error) {
	var st unix.Stat_t
	res, _, err := s.resolveChecked(b, rel, max, &st)
	return res, err
}

// resolveChecked is resolveStat, strict, in fewer syscalls: the components
// it takes from the base are not lstatted one by one (each an lstat of a
// longer path) but walked once, to the last, with no symlink followed
// (Store.Lstat), which also checks that every one before it is a
// directory. What it lstats is left in st and reported.
func (s *Store) resolveChecked(b *Branch, rel string, max int, st *unix.Stat_t) (Res, bool, error) {
	if rel == "" {
		return s.resolveStat(b, rel, max, st, false)
	}
	res, _, err := s.resolveStat(b, rel, max, nil, true)
	if errors.Is(err, errLazyBase) {
		return s.resolveStat(b, rel, max, st, false)
	}
	if err != nil || res.Depth != 0 {
		return res, false, err
	}
	if err := s.Lstat(res.Real, st); err != nil {
		return Res{}, false, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		res.Kind = kDir
	}
	if s.nlinks > 0 && st.Nlink > 1 && st.Mode&unix.S_IFMT == unix.S_IFREG {
		if r := s.linkRedirect(b, res, st); r.Real != res.Real {
			return r, false, nil
		}
	}
	return res, true, nil
}

// errLazyBase: a lazy resolve met a layer's entry below a component it took
// from the base unchecked; resolving again, strictly, settles it.
var errLazyBase = errors.New("store: a layer below a base path")

// resolveStat is resolve that, when it lstats the path it returns (a path
// of the base), leaves that in st (if not nil) and reports it.
//
// With lazy, it lstats no component of the base: it takes them for
// directories (the last one for a file, its link count unchecked) and
// returns errLazyBase if a layer holds something below one. The caller then
// opens the path with no symlink followed, which checks what the lstats
// would have, in one syscall (OpenRead).
func (s *Store) resolveStat(b *Branch, rel string, max int, out *unix.Stat_t, lazy bool) (Res, bool, error) {
	// A stale branch is read (its work can be rescued: read, listed,
	// diffed, until it is aborted); writableBranch refuses its changes.
	if b.gone || b.committing {
		return Res{}, false, syscall.ESTALE
	}
	res := Res{Real: s.base, Kind: kDir}
	if best, ok, cut := s.top(b, "", 0, max); ok {
		res = Res{Real: best.l.dir, Depth: best.l.depth, Kind: kDir, cut: cut}
	}
	if rel == "" {
		return res, false, nil
	}
	cut := res.cut
	statted, inBase := false, false
	for i := 0; ; {
		j := strings.IndexByte(rel[i:], '/')
		p := rel
		if j >= 0 {
			p = rel[:i+j]
		}
		best, ok, childCut := s.top(b, p, cut, max)
		switch {
		case ok && best.kind == kWhiteout:
			return Res{}, false, syscall.ENOENT
		case ok && inBase:
			return Res{}, false, errLazyBase
		case ok:
			res = Res{Real: best.l.real(p), Depth: best.l.depth, Kind: best.kind, Ino: best.ino, cut: childCut}
			if s.nlinks > 0 && best.kind == kFile && j < 0 {
				if lc, ok := best.l.links[best.ino]; ok && lc.rel == p {
					res.Nlink = lc.nlink
				} else if best.l.depth < len(b.chain) {
					var st unix.Stat_t
					if s.Lstat(res.Real, &st) == nil && st.Nlink > 1 && st.Mode&unix.S_IFMT == unix.S_IFREG {
						res = s.linkRedirect(b, res, &st)
					}
				}
			}
		case cut == 0 && lazy:
			k := kDir
			if j < 0 {
				k = kFile
			}
			res, inBase = Res{Real: s.base + "/" + p, Kind: k}, true
		case cut == 0:
			var st unix.Stat_t
			real := s.base + "/" + p
			if err := s.Lstat(real, &st); err != nil {
				return Res{}, false, err
			}
			k := kFile
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				k = kDir
			}
			res = Res{Real: real, Kind: k}
			if s.nlinks > 0 && st.Nlink > 1 && k == kFile {
				res = s.linkRedirect(b, res, &st)
			}
			if j < 0 && out != nil && res.Real == real {
				*out = st
				statted = true
			}
		default:
			return Res{}, false, syscall.ENOENT
		}
		if j < 0 {
			res.Lower = len(b.chain) > 0 && res.Depth < len(b.chain)
			if ok && best.meta {
				// The data is what the layers below show at this path.
				d, err := s.resolve(b, rel, best.l.depth-1)
				if err != nil {
					return Res{}, false, err
				}
				res.Data, res.DataDepth, res.Lower = d.DataReal(), d.Depth, true
				if d.Data != "" {
					res.DataDepth = d.DataDepth
				}
			}
			return res, statted, nil
		}
		if res.Kind != kDir {
			return Res{}, false, syscall.ENOTDIR
		}
		cut = res.cut
		i += j + 1
	}
}

// linkRedirect: if another name of the hard-linked lower file res was
// copied up into a layer above it, every name must show that one copy.
func (s *Store) linkRedirect(b *Branch, res Res, st *unix.Stat_t) Res {
	ino := res.Ino
	if ino == 0 {
		ino = st.Ino
	}
	for d := len(b.chain); d > res.Depth; d-- {
		if lc, ok := s.linkCopyIn(b.chain[d-1], ino); ok {
			return Res{Real: b.chain[d-1].real(lc.rel), Depth: d, Kind: kFile, Ino: ino, Nlink: lc.nlink}
		}
	}
	return res
}

// Resolve finds rel (a clean relative path, "" for the root) in the branch.
func (s *Store) Resolve(b *Branch, rel string) (Res, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.resolve(b, rel, len(b.chain))
}

// ResolveStat is Resolve followed by an lstat of Res.Real into st, without
// a second lstat where resolving made one already.
func (s *Store) ResolveStat(b *Branch, rel string, st *unix.Stat_t) (Res, error) {
	s.mu.RLock()
	res, ok, err := s.resolveChecked(b, rel, len(b.chain), st)
	s.mu.RUnlock()
	if err != nil || ok {
		return res, err
	}
	if err := s.Lstat(res.Real, st); err != nil {
		return res, err
	}
	return res, s.dataStat(res, st)
}

// dataStat puts the size and the blocks of a metadata-only copy-up's data
// into st, the lstat of its metadata.
func (s *Store) dataStat(res Res, st *unix.Stat_t) error {
	if res.Data == "" {
		return nil
	}
	var dst unix.Stat_t
	if err := s.Lstat(res.Data, &dst); err != nil {
		return err
	}
	st.Size, st.Blocks = dst.Size, dst.Blocks
	return nil
}

// DirEntry is one name in a merged directory listing.
type DirEntry struct {
	Name string
	Mode uint32 // S_IFMT bits
	Ino  uint64
}

// ReadDir lists the merged directory rel of b.
func (s *Store) ReadDir(b *Branch, rel string) ([]DirEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.readDir(b, rel, len(b.chain))
}

func (s *Store) readDir(b *Branch, rel string, max int) ([]DirEntry, error) {
	res, err := s.resolve(b, rel, max)
	if err != nil {
		return nil, err
	}
	if res.Kind != kDir {
		return nil, syscall.ENOTDIR
	}
	// The real directories that make it up, deepest first, down to the
	// cut; the root is in every layer without an index entry (it has one
	// only when opaque or preserved): walk from the top of the view for it.
	type part struct {
		real string
		d    int
	}
	var parts []part
	cut := 0
	if res.Depth > 0 {
		cut = res.cut
	}
	top := res.Depth
	if rel == "" {
		top = max
	}
	opaque := false
	for d := top; d >= 1 && d >= cut; d-- {
		l := b.chain[d-1]
		e, ok := s.get(l, rel)
		if !ok {
			if rel != "" || !l.made {
				continue
			}
			e = entry{l: l, kind: kDir}
		}
		if e.kind != kDir {
			break
		}
		parts = append(parts, part{l.real(rel), d})
		if e.opaque {
			opaque = true
			break
		}
	}
	if cut == 0 && !opaque {
		p := s.base
		if rel != "" {
			p += "/" + rel
		}
		parts = append(parts, part{p, 0})
	}
	// One real directory: nothing to merge, no names to hide (a whiteout
	// there hides nothing below), so no set of the names seen.
	var seen map[string]bool
	if len(parts) > 1 {
		seen = map[string]bool{}
	}
	var out []DirEntry
	for _, pt := range parts {
		ents, err := s.readDirents(pt.real)
		if err != nil {
			if os.IsNotExist(err) || errors.Is(err, syscall.ENOTDIR) {
				continue // a layer not made yet, or a base that has a file there now
			}
			return nil, err
		}
		if out == nil {
			out = make([]DirEntry, 0, len(ents))
		}
		for _, e := range ents {
			n := e.name
			if pt.d > 0 && (e.typ == unix.DT_CHR || e.typ == unix.DT_UNKNOWN) {
				if en, ok := s.get(layerAt(b, pt.d), joinRel(rel, n)); ok && en.kind == kWhiteout {
					if seen != nil {
						seen[n] = true
					}
					continue
				}
			}
			if pt.d > 0 && strings.HasPrefix(n, whPrefix) {
				if n != opqMarker && seen != nil {
					seen[n[len(whPrefix):]] = true
				}
				continue
			}
			if seen != nil {
				if seen[n] {
					continue
				}
				seen[n] = true
			}
			de := DirEntry{Name: n, Mode: dtToMode(e.typ), Ino: e.ino}
			if pt.d > 0 {
				if en, ok := s.get(layerAt(b, pt.d), joinRel(rel, n)); ok && en.ino != 0 {
					de.Ino = en.ino
				}
			}
			out = append(out, de)
		}
	}
	return out, nil
}

func layerAt(b *Branch, d int) *layer { return b.chain[d-1] }
