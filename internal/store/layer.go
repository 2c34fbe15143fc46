package store

import (
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	whPrefix   = ".wh."
	opqMarker  = ".wh..wh..opq"
	inoXattr   = "user.arbor.ino"   // the inode number a copied-up file keeps reporting
	nlinkXattr = "user.arbor.nlink" // the link count of a hard-linked file it was copied from
)

type kind uint8

const (
	kFile     kind = iota + 1 // any non-directory
	kDir                      // a directory
	kWhiteout                 // a deleted name
)

// layer is one directory of changes. Its fields are guarded by Store.mu.
type layer struct {
	id    uint64
	depth int
	dir   string
	paths map[string]struct{} // the paths it has index entries for
	bytes int64               // bytes of regular files it holds (their sizes), for quotas
	// alloc is the allocated size (st_blocks) of each file and directory it
	// holds, as last measured, and held their sum plus its own directory's:
	// what it costs on disk, for the store's limit (see disk.go).
	alloc     map[string]int64
	held      int64
	rootAlloc int64  // its own directory's share of held
	made      bool   // its directory exists
	mark      uint64 // reclaimLocked's stamp: in use at its last marking
	refs      int    // live branches holding it (see hold)
	// kept records the files moved or copied here at a fork because a
	// writer held them open, with their signature then (see keepWriters).
	kept map[string]fileSig
	// links maps the inode number of a hard-linked lower file to the copy
	// of it this layer holds, so that its other names find the same copy.
	links map[uint64]linkCopy
}

// linkCopy is the copy-up of a lower file with several names.
type linkCopy struct {
	rel   string
	nlink uint32 // the lower file's link count
}

func (l *layer) empty() bool { return len(l.paths) == 0 }

// entry is one path in one layer.
type entry struct {
	l      *layer
	kind   kind
	opaque bool
	ino    uint64 // for a copied-up file, the inode number it reports
}

func (l *layer) real(rel string) string {
	if rel == "" {
		return l.dir
	}
	return l.dir + "/" + rel
}

func whiteoutPath(rel string) string {
	d, n := splitRel(rel)
	return joinRel(d, whPrefix+n)
}

func splitRel(rel string) (dir, name string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// indexLayer reads a layer's directory into the index (at Open).
func (s *Store) indexLayer(l *layer) error {
	if !s.exists(l.dir) {
		return nil // empty layer
	}
	l.made = true
	return filepath.WalkDir(l.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == l.dir {
			s.accountRoot(l)
			if s.exists(p + "/" + opqMarker) {
				s.put(l, "", kDir, true, 0)
			}
			return nil
		}
		rel := p[len(l.dir)+1:]
		name := d.Name()
		switch {
		case name == opqMarker:
			return nil
		case strings.HasPrefix(name, whPrefix):
			dir, _ := splitRel(rel)
			s.put(l, joinRel(dir, name[len(whPrefix):]), kWhiteout, false, 0)
		case d.IsDir():
			s.putAlloc(l, rel, kDir, s.exists(p+"/"+opqMarker), 0, allocOf(d))
		default:
			ino := s.readXattrUint(p, inoXattr)
			fi, err := d.Info()
			var alloc int64
			if err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					alloc = st.Blocks * 512
				}
				if fi.Mode().IsRegular() {
					l.bytes += fi.Size()
				}
			}
			s.putAlloc(l, rel, kFile, false, ino, alloc)
			if nl := s.readXattrUint(p, nlinkXattr); nl > 1 && ino != 0 {
				s.addLink(l, ino, rel, uint32(nl))
			}
		}
		return nil
	})
}

func (s *Store) readXattrUint(p, name string) uint64 {
	var buf [24]byte
	n, err := s.Getxattr(p, name, buf[:])
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(string(buf[:n]), 10, 64)
	return v
}

func (s *Store) addLink(l *layer, ino uint64, rel string, nlink uint32) {
	if l.links == nil {
		l.links = map[uint64]linkCopy{}
	}
	if _, ok := l.links[ino]; !ok {
		s.nlinks++
	}
	l.links[ino] = linkCopy{rel: rel, nlink: nlink}
}

// linkCopyIn returns layer l's copy of the lower inode ino, if it still holds it.
func (s *Store) linkCopyIn(l *layer, ino uint64) (linkCopy, bool) {
	lc, ok := l.links[ino]
	if !ok {
		return lc, false
	}
	if e, ok := s.get(l, lc.rel); !ok || e.kind != kFile || e.ino != ino {
		return lc, false
	}
	return lc, true
}

// put sets rel's entry in layer l, measuring what it allocates there.
func (s *Store) put(l *layer, rel string, k kind, opaque bool, ino uint64) {
	s.putAlloc(l, rel, k, opaque, ino, s.measure(l, rel, k))
}

// putAlloc is put with the allocated size already known.
func (s *Store) putAlloc(l *layer, rel string, k kind, opaque bool, ino uint64, alloc int64) {
	s.setAlloc(l, rel, alloc)
	es := s.index[rel]
	for i := range es {
		if es[i].l == l {
			es[i].kind, es[i].opaque, es[i].ino = k, opaque, ino
			return
		}
	}
	s.index[rel] = append(es, entry{l: l, kind: k, opaque: opaque, ino: ino})
	if l.paths == nil {
		l.paths = map[string]struct{}{}
	}
	l.paths[rel] = struct{}{}
}

// drop removes rel's entry in layer l.
func (s *Store) drop(l *layer, rel string) {
	es := s.index[rel]
	for i := range es {
		if es[i].l == l {
			es[i] = es[len(es)-1]
			es = es[:len(es)-1]
			delete(l.paths, rel)
			s.setAlloc(l, rel, 0)
			if len(es) == 0 {
				delete(s.index, rel)
			} else {
				s.index[rel] = es
			}
			return
		}
	}
}

// dropTree removes rel and everything under it from layer l's index.
func (s *Store) dropTree(l *layer, rel string) {
	s.drop(l, rel)
	prefix := rel + "/"
	for p := range l.paths {
		if rel == "" || strings.HasPrefix(p, prefix) {
			s.drop(l, p)
		}
	}
}

func (s *Store) get(l *layer, rel string) (entry, bool) {
	for _, e := range s.index[rel] {
		if e.l == l {
			return e, true
		}
	}
	return entry{}, false
}

func (s *Store) unindexLayer(l *layer) {
	s.nlinks -= len(l.links)
	l.links = nil
	for p := range l.paths {
		s.drop(l, p)
	}
	s.used -= l.held // its own directory's blocks: all that is left
	l.held, l.rootAlloc = 0, 0
}

// ensureDir makes layer l's directory at its first write, if the store's
// limit has room for it.
func (s *Store) ensureDir(l *layer) error {
	if l.made {
		return nil
	}
	if err := s.fits(dirBlock); err != nil {
		return err
	}
	if err := s.mkdir(l.dir, 0o755); err != nil && err != unix.EEXIST {
		return err
	}
	l.made = true
	s.accountRoot(l)
	return nil
}

// fileSig identifies a file's content as far as its metadata tells.
type fileSig struct {
	ino          uint64
	size         int64
	mtime, ctime unix.Timespec
}

func (s *Store) sigOf(p string) fileSig {
	var st unix.Stat_t
	if s.Lstat(p, &st) != nil {
		return fileSig{}
	}
	return sigOfStat(&st)
}

func sigOfStat(st *unix.Stat_t) fileSig {
	return fileSig{ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// keep records that rel was kept here for a writer, as live shows it now.
func (s *Store) keep(l *layer, rel, live string) {
	if l.kept == nil {
		l.kept = map[string]fileSig{}
	}
	l.kept[rel] = s.sigOf(live)
}
