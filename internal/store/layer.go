package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of a files writer's temporary (nodefs.Write
// writes beside the target under ".arbor-write-PID-N", then renames it
// over the target). Only a crash leaves one behind, and no write outlives
// the daemon: Open removes every regular file so named from the layers.
const TempPrefix = ".arbor-write-"

const (
	whPrefix   = ".wh."
	opqMarker  = ".wh..wh..opq"
	inoXattr   = "user.arbor.ino"   // the inode number a copied-up file or directory keeps reporting
	nlinkXattr = "user.arbor.nlink" // the link count of a hard-linked file it was copied from
	// metaXattr marks a metadata-only copy-up (metacopy): an empty file
	// whose metadata is the path's and whose data is the lower file's.
	metaXattr = "user.arbor.metacopy"
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
	ino    uint64 // for a copied-up file or directory, the inode number it reports
	// meta: a metadata-only copy-up; the data is what the layers below
	// show at the same path (see Store.CopyUpMeta).
	meta bool
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

// indexLayer reads a layer's directory into the index (at Open), walking
// it by descriptors: a path in a layer may be longer than PATH_MAX.
func (s *Store) indexLayer(l *layer) error {
	fd, err := s.open(l.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // empty layer
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	l.made = true
	s.accountRoot(l)
	if hasOpaque(fd) {
		s.put(l, "", kDir, true, 0)
	}
	return s.indexDir(l, fd, "")
}

// hasOpaque reports whether the directory dir holds the opaque marker.
func hasOpaque(dir int) bool {
	var st unix.Stat_t
	return unix.Fstatat(dir, opqMarker, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// indexDir indexes what the directory dir (rel in layer l) holds.
func (s *Store) indexDir(l *layer, dir int, rel string) error {
	ents, err := direntsOf(dir, l.real(rel))
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.name
		p := joinRel(rel, name)
		switch {
		case name == opqMarker:
			continue
		case strings.HasPrefix(name, whPrefix):
			s.put(l, joinRel(rel, name[len(whPrefix):]), kWhiteout, false, 0) // the older form
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("store: index %s: %w", l.real(p), err)
		}
		switch {
		case isWhiteout(&st):
			s.put(l, p, kWhiteout, false, 0)
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			cfd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("store: index %s: %w", l.real(p), err)
			}
			s.putAlloc(l, p, kDir, hasOpaque(cfd), s.readXattrUint(l.real(p), inoXattr), st.Blocks*512)
			err = s.indexDir(l, cfd, p)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		case st.Mode&unix.S_IFMT == unix.S_IFREG && strings.HasPrefix(name, TempPrefix) && unix.Unlinkat(dir, name, 0) == nil:
			continue // a write a crash cut short
		default:
			ino := s.readXattrUint(l.real(p), inoXattr)
			if st.Mode&unix.S_IFMT == unix.S_IFREG {
				l.bytes += st.Size
			}
			s.putAlloc(l, p, kFile, false, ino, st.Blocks*512)
			if st.Size == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG && s.readXattrUint(l.real(p), metaXattr) == 1 {
				s.setMeta(l, p)
			}
			if nl := s.readXattrUint(l.real(p), nlinkXattr); nl > 1 && ino != 0 {
				s.addLink(l, ino, p, uint32(nl))
			}
		}
	}
	return nil
}

// A whiteout is a character device 0:0 under the deleted name, as
// overlayfs makes them (the kernel lets anyone make one): it takes no more
// of a name than the name itself, so a name of NAME_MAX bytes can be
// deleted. Layers written before 2026-12 hold the older form, an empty file
// ".wh.NAME" beside the name; both are read, and removed where found.
func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// removeWhiteout removes the whiteout of rel in layer l, in either form.
func (s *Store) removeWhiteout(l *layer, rel string) error {
	real := l.real(rel)
	var st unix.Stat_t
	if s.Lstat(real, &st) == nil && isWhiteout(&st) {
		return s.unlinkPath(real)
	}
	err := s.unlinkPath(l.real(whiteoutPath(rel)))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENAMETOOLONG) {
		return nil
	}
	return err
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
			if k == kDir && ino == 0 && es[i].kind == kDir {
				// The same directory, made opaque or measured again: it
				// keeps the inode number it reports.
				ino = es[i].ino
			}
			es[i].kind, es[i].opaque, es[i].ino, es[i].meta = k, opaque, ino, false
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

// setMeta marks rel's entry in layer l a metadata-only copy-up.
func (s *Store) setMeta(l *layer, rel string) {
	es := s.index[rel]
	for i := range es {
		if es[i].l == l {
			es[i].meta = true
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
