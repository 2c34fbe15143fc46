package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkName refuses names the layers reserve.
func checkName(rel string) error {
	_, n := splitRel(rel)
	if strings.HasPrefix(n, whPrefix) {
		return syscall.EINVAL
	}
	return nil
}

// liveSnaps returns the snapshots of main that a live branch still reads.
func (s *Store) liveSnaps() []*layer {
	var out []*layer
	seen := map[*layer]bool{}
	for _, b := range s.branches {
		if b.snap != nil && !b.stale && !seen[b.snap] {
			seen[b.snap] = true
			out = append(out, b.snap)
		}
	}
	return out
}

// covered reports whether snapshot o already decides rel: an entry at rel
// (a directory entry covers only the directory itself, unless subtree is
// false), or a non-directory or opaque entry at one of rel's ancestors.
func (s *Store) covered(o *layer, rel string, subtree bool) bool {
	if e, ok := s.get(o, rel); ok && (e.kind != kDir || e.opaque || !subtree) {
		return true
	}
	for p := rel; p != ""; {
		p, _ = splitRel(p)
		if e, ok := s.get(o, p); ok && (e.kind != kDir || e.opaque) {
			return true
		}
		if p == "" {
			break
		}
	}
	return false
}

// preserve keeps main's current state of rel in every live snapshot that
// does not already decide it, before main changes rel. With subtree, a
// directory is preserved with everything under it (main is about to move it).
func (s *Store) preserve(rel string, subtree bool) error {
	return s.preserveInto(s.liveSnaps(), rel, subtree)
}

// preserveInto is preserve into the snapshots snaps.
func (s *Store) preserveInto(snaps []*layer, rel string, subtree bool) error {
	return s.preserveWith(snaps, rel, subtree, nil, false)
}

// preserveWith is preserveInto that uses pre, a copy of main's file made
// outside the lock by prepareCopyUp, if it is still a copy of what main has.
// trunc: main is about to truncate its file (an open with O_TRUNC), so the
// copy main keeps when the inode moves into a snapshot holds no data.
func (s *Store) preserveWith(snaps []*layer, rel string, subtree bool, pre *prepared, trunc bool) error {
	if len(snaps) == 0 {
		return nil
	}
	real := s.base + "/" + rel
	var st unix.Stat_t
	exists := s.Lstat(real, &st) == nil
	first := "" // the first preserved copy of a file, linked into the others
	for _, o := range snaps {
		if s.covered(o, rel, subtree) {
			continue
		}
		if err := s.ensureParentIn(o, rel); err != nil {
			return err
		}
		if exists && first == "" && !(st.Mode&unix.S_IFMT == unix.S_IFDIR && subtree) {
			if err := s.fits(copyCost(&st)); err != nil {
				return err
			}
		}
		dst := o.real(rel)
		switch {
		case !exists:
			if err := s.whiteout(o, rel); err != nil {
				return err
			}
		case st.Mode&unix.S_IFMT == unix.S_IFDIR && subtree:
			if err := s.preserveTree(o, rel, &st); err != nil {
				return err
			}
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			if err := s.copyNode(real, dst, &st); err != nil {
				return err
			}
			s.setIno(dst, st.Ino)
			s.put(o, rel, kDir, false, st.Ino)
		case first != "":
			if err := s.link(first, dst); err != nil {
				return err
			}
			s.put(o, rel, kFile, false, st.Ino)
		default:
			made := ""
			if pre != nil && !pre.used && !pre.dataOnly && pre.src == real && pre.sig == sigOfStat(&st) {
				made, pre.used = pre.tmp, true
			}
			if len(s.writers[real]) > 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
				// Main holds it open for writing: its descriptors must keep
				// writing the base's inode, so the snapshot gets a copy.
				if made == "" || s.rename(made, dst, unix.RENAME_NOREPLACE) != nil {
					if made != "" {
						s.removeAll(made)
					}
					if err := s.copyNode(real, dst, &st); err != nil {
						return err
					}
				}
			} else {
				// Move the inode into the snapshot, so that the forks' open
				// descriptors keep their bytes, and give main a fresh copy.
				if made == "" && trunc && st.Nlink == 1 {
					var err error
					if made, err = s.emptyAside(real, &st); err != nil {
						return err
					}
				}
				if err := s.moveOut(real, dst, &st, made); err != nil {
					return err
				}
			}
			s.setIno(dst, st.Ino)
			s.put(o, rel, kFile, false, st.Ino)
			first = dst
		}
	}
	return nil
}

// preserveTree copies main's directory rel with everything under it into
// snapshot o, except what o already decides (a file preserved earlier, a
// whiteout for a name main made after the fork, an opaque directory): those
// hold the fork-time state and must win. The directory becomes opaque, so
// that the snapshot needs nothing from the base below it.
func (s *Store) preserveTree(o *layer, rel string, st *unix.Stat_t) error {
	real, dst := s.base+"/"+rel, o.real(rel)
	if _, ok := s.get(o, rel); !ok {
		if err := s.fits(dirBlock); err != nil {
			return err
		}
		if err := s.copyNode(real, dst, st); err != nil {
			return err
		}
		s.setIno(dst, st.Ino)
		s.put(o, rel, kDir, false, st.Ino)
	}
	ents, err := s.readDirents(real)
	if err != nil {
		return err
	}
	for _, d := range ents {
		c := joinRel(rel, d.name)
		var cst unix.Stat_t
		if err := s.Lstat(real+"/"+d.name, &cst); err != nil {
			return err
		}
		e, ok := s.get(o, c)
		switch {
		case ok && (e.kind != kDir || e.opaque):
			continue // o holds the fork-time state of c
		case cst.Mode&unix.S_IFMT == unix.S_IFDIR:
			if err := s.preserveTree(o, c, &cst); err != nil {
				return err
			}
		case ok:
			// o has a directory where main now has a file: o's directory,
			// with what o preserved in it, is all of c.
			if err := s.touch(o.real(c) + "/" + opqMarker); err != nil {
				return err
			}
			s.put(o, c, kDir, true, 0)
		default:
			if err := s.fits(copyCost(&cst)); err != nil {
				return err
			}
			if err := s.copyNode(real+"/"+d.name, o.real(c), &cst); err != nil {
				return err
			}
			s.setIno(o.real(c), cst.Ino)
			s.put(o, c, kFile, false, cst.Ino)
		}
	}
	if err := s.touch(dst + "/" + opqMarker); err != nil {
		return err
	}
	s.put(o, rel, kDir, true, 0)
	return nil
}

// ensureParentIn makes rel's parent directories in layer l, with the
// metadata of the base's directories (used for snapshots of main).
func (s *Store) ensureParentIn(l *layer, rel string) error {
	if err := s.ensureDir(l); err != nil {
		return err
	}
	dir, _ := splitRel(rel)
	if dir == "" {
		return nil
	}
	var missing []string
	for p := dir; p != ""; p, _ = splitRel(p) {
		if _, ok := s.get(l, p); ok {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		var st unix.Stat_t
		if err := s.Lstat(s.base+"/"+p, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return notType(s.base+"/"+p, "a directory", &st)
		}
		if err := s.fits(dirBlock); err != nil {
			return err
		}
		if err := s.copyNode(s.base+"/"+p, l.real(p), &st); err != nil {
			return err
		}
		s.setIno(l.real(p), st.Ino)
		s.put(l, p, kDir, false, st.Ino)
	}
	return nil
}

// whiteout records in layer l that rel is deleted.
func (s *Store) whiteout(l *layer, rel string) error {
	if err := s.inParent(l.real(rel), func(dir int, name string) error {
		return unix.Mknodat(dir, name, unix.S_IFCHR, 0)
	}); err != nil {
		return err
	}
	s.put(l, rel, kWhiteout, false, 0)
	dir, _ := splitRel(rel)
	s.remeasureDir(l, dir)
	return nil
}

// writableBranch checks that b may be written.
func writableBranch(b *Branch) error {
	if b.stale || b.gone || b.committing {
		return syscall.ESTALE
	}
	if b.readOnly {
		return syscall.EROFS
	}
	return nil
}

// SetWritable makes branch name refuse every change with EROFS (writable
// false) or take them again. Descriptors opened for writing before keep
// writing; every later open for writing, create, remove, rename, link and
// attribute change is refused. The flag is not persisted.
func (s *Store) SetWritable(name string, writable bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.branch(name)
	if err != nil {
		return err
	}
	b.readOnly = !writable
	return nil
}

// copyUp makes rel present in b's head and returns its real path there. For
// main it preserves rel for the snapshots and returns the base path.
func (s *Store) copyUp(b *Branch, rel string) (string, error) {
	return s.copyUpFor(b, rel, false)
}

// copyUpFor is copyUp; with trunc (an open with O_TRUNC) a regular file
// with one name is copied up without its data, which the open discards: it
// costs no disk and no time in its size.
func (s *Store) copyUpFor(b *Branch, rel string, trunc bool) (string, error) {
	return s.copyUpWith(b, rel, trunc, nil)
}

// copyUpWith is copyUpFor that publishes the copy pre made outside the
// lock (prepareCopyUp) if it is still the copy the branch needs: same
// source, unchanged since (inode, size, mtime, ctime), same head.
func (s *Store) copyUpWith(b *Branch, rel string, trunc bool, pre *prepared) (string, error) {
	if err := writableBranch(b); err != nil {
		return "", err
	}
	if b.Name == Main {
		if err := s.preserveWith(s.liveSnaps(), rel, false, pre, trunc); err != nil {
			return "", err
		}
		if rel == "" {
			return s.base, nil
		}
		return s.base + "/" + rel, nil
	}
	h := b.head()
	res, err := s.resolve(b, rel, len(b.chain))
	if err != nil {
		return "", err
	}
	if res.Depth == h.depth {
		if res.Data != "" {
			return res.Real, s.materialize(b, rel, res, trunc, pre)
		}
		return res.Real, nil
	}
	if err := s.ensureParent(b, rel); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := s.Lstat(res.Real, &st); err != nil {
		return "", err
	}
	if err := s.dataStat(res, &st); err != nil {
		return "", err
	}
	if (st.Mode&unix.S_IFMT == unix.S_IFDIR) != res.IsDir() {
		// Swapped since it was resolved (a directory for a file, or back).
		return "", notType(res.Real, map[bool]string{true: "a directory", false: "a non-directory"}[res.IsDir()], &st)
	}
	empty := trunc && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1
	if !empty && b.Quota > 0 && st.Mode&unix.S_IFMT == unix.S_IFREG && s.usage(b)+st.Size > b.Quota {
		return "", syscall.ENOSPC
	}
	if !empty {
		cost := copyCost(&st)
		if pre != nil {
			cost -= pre.reserved // reserved already, and released after
		}
		if err := s.fits(cost); err != nil {
			return "", err
		}
	}
	dst := h.real(rel)
	kept := s.dirTimes(h, rel)
	k, ino := kFile, res.Ino
	if ino == 0 {
		ino = st.Ino
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
		// A hard-linked lower file: its names share one copy in the head.
		if lc, ok := s.linkCopyIn(h, ino); ok {
			if err := s.link(h.real(lc.rel), dst); err != nil {
				return "", err
			}
			s.put(h, rel, kFile, false, ino)
			s.copiedInto(b, rel, kept)
			return dst, nil
		}
		if err := s.copyNode(res.Real, dst, &st); err != nil {
			return "", err
		}
		s.setIno(dst, ino)
		s.Setxattr(dst, nlinkXattr, []byte(strconv.FormatUint(uint64(st.Nlink), 10)), 0)
		s.addLink(h, ino, rel, uint32(st.Nlink))
		h.bytes += st.Size
		s.put(h, rel, kFile, false, ino)
		s.copiedInto(b, rel, kept)
		return dst, nil
	}
	copy := s.copyNode
	switch {
	case empty:
		copy = s.copyEmpty
	case res.Data != "":
		// A lower metadata-only copy-up: its data from below (made aside
		// outside the lock, if it was), its metadata from it.
		copy = func(src, dst string, st *unix.Stat_t) error {
			if pre.fits(res.Data, h) && s.sigOf(res.Data) == pre.sig {
				if err := s.rename(pre.tmp, dst, unix.RENAME_NOREPLACE); err != nil {
					return err
				}
				pre.used = true
			} else if err := s.copyData(res.Data, dst); err != nil {
				return err
			}
			if err := s.copyMeta(src, dst, st); err != nil {
				s.unlinkPath(dst)
				return err
			}
			return nil
		}
	}
	if pre != nil && !pre.dataOnly && pre.src == res.Real && pre.head == h && pre.sig == sigOfStat(&st) && !empty {
		// Made outside the lock: publish it (a rename in the store's
		// filesystem). Its bytes were reserved while it was made.
		copy = func(_, dst string, _ *unix.Stat_t) error {
			if err := s.rename(pre.tmp, dst, unix.RENAME_NOREPLACE); err != nil {
				return err
			}
			pre.used = true
			return nil
		}
	}
	if err := copy(res.Real, dst, &st); err != nil {
		return "", err
	}
	// A directory keeps its inode number as a file does (find, tar, du
	// and git compare directories' st_ino).
	s.setIno(dst, ino)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		k = kDir
	} else {
		if st.Mode&unix.S_IFMT == unix.S_IFREG && !empty {
			h.bytes += st.Size
		}
	}
	s.put(h, rel, k, false, ino)
	s.copiedInto(b, rel, kept)
	return dst, nil
}

// dirTimes is the lstat of the directory of rel in head h (nil if it
// cannot be had), taken before a copy-up makes rel there.
func (s *Store) dirTimes(h *layer, rel string) *unix.Stat_t {
	dir, _ := splitRel(rel)
	var st unix.Stat_t
	if s.Lstat(h.real(dir), &st) != nil {
		return nil
	}
	return &st
}

// copiedInto follows a copy-up of rel into b's head, which made an entry in
// the head's copy of rel's directory: as in overlayfs, the directory keeps
// its times (a copy-up changes nothing in it: a file written two levels
// down leaves its mtime alone, as on Linux), from kept, its lstat before.
// Its ctime changes all the same, unasked: the mounts are told
// (Event.Attr), or a stat answered from the kernel's cache and one after a
// listing would disagree (GNU tar: "file changed as we read it").
func (s *Store) copiedInto(b *Branch, rel string, kept *unix.Stat_t) {
	dir, _ := splitRel(rel)
	if kept != nil {
		s.Utimes(b.head().real(dir), []unix.Timespec{kept.Atim, kept.Mtim})
	}
	s.Publish(Event{Branch: b.Name, Path: dir, Attr: true})
}

// materialize gives the metadata-only copy-up of rel in b's head (res) its
// data: at the first write of data (or, with trunc, none: the open
// discards it). Its times are kept: an open is not a write.
func (s *Store) materialize(b *Branch, rel string, res Res, trunc bool, pre *prepared) error {
	h := b.head()
	var st, dst unix.Stat_t
	if err := s.Lstat(res.Real, &st); err != nil {
		return err
	}
	e, _ := s.get(h, rel)
	if !trunc && pre.fits(res.Data, h) && s.sigOf(res.Data) == pre.sig {
		// The data was copied aside outside the lock: it takes the copy-up's
		// metadata, and its place (its bytes reserved already).
		if err := s.copyMeta(res.Real, pre.tmp, &st); err != nil {
			return err
		}
		s.setIno(pre.tmp, e.ino)
		kept := s.dirTimes(h, rel)
		if err := s.rename(pre.tmp, res.Real, 0); err != nil {
			return err
		}
		pre.used = true
		h.bytes += pre.sig.size
		s.put(h, rel, kFile, false, e.ino)
		s.copiedInto(b, rel, kept)
		return nil
	}
	if !trunc {
		if err := s.Lstat(res.Data, &dst); err != nil {
			return err
		}
		if b.Quota > 0 && s.usage(b)+dst.Size > b.Quota {
			return syscall.ENOSPC
		}
		if err := s.fits(copyCost(&dst)); err != nil {
			return err
		}
		in, err := s.openFile(res.Data, unix.O_RDONLY)
		if err != nil {
			return err
		}
		defer unix.Close(in)
		out, err := s.openFile(res.Real, unix.O_WRONLY)
		if err != nil {
			return err
		}
		err = copyExtents(in, out)
		if cerr := unix.Close(out); err == nil {
			err = cerr
		}
		if err != nil {
			s.Truncate(res.Real, 0) // still a metadata-only copy: no data
			return err
		}
		h.bytes += dst.Size
		if err := s.Utimes(res.Real, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
			return err
		}
	}
	if err := s.Removexattr(res.Real, metaXattr); err != nil {
		return err
	}
	s.put(h, rel, kFile, false, e.ino)
	return nil
}

// fits reports whether p is the data of src copied aside for head h.
func (p *prepared) fits(src string, h *layer) bool {
	return p != nil && p.dataOnly && p.src == src && p.head == h
}

// CopyUpMeta makes rel's metadata changeable in b (chmod, chown, times,
// xattrs) without copying its data, as overlayfs's metacopy: a regular
// file with one name below b's head gets an empty file in the head that
// holds its metadata and is marked metadata-only; reads take the data
// from below; the first write of data copies it (materialize). Anything
// else is copied up whole (CopyUp). It returns the real path to change.
func (s *Store) CopyUpMeta(b *Branch, rel string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := writableBranch(b); err != nil {
		return "", err
	}
	if b.Name == Main {
		return s.copyUpWith(b, rel, false, nil)
	}
	h := b.head()
	res, err := s.resolve(b, rel, len(b.chain))
	if err != nil {
		return "", err
	}
	if res.Depth == h.depth {
		return res.Real, nil // in the head already, whole or metadata only
	}
	var st unix.Stat_t
	if res.IsDir() || res.Nlink > 1 || s.Lstat(res.Real, &st) != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink > 1 {
		return s.copyUpWith(b, rel, false, nil)
	}
	if err := s.ensureParent(b, rel); err != nil {
		return "", err
	}
	if err := s.fits(0); err != nil {
		return "", err
	}
	dst := h.real(rel)
	kept := s.dirTimes(h, rel)
	if err := s.copyEmpty(res.Real, dst, &st); err != nil {
		return "", err
	}
	ino := res.Ino
	if ino == 0 {
		ino = st.Ino
	}
	s.setIno(dst, ino)
	if err := s.Setxattr(dst, metaXattr, []byte("1"), 0); err != nil {
		s.unlinkPath(dst)
		return "", err
	}
	s.put(h, rel, kFile, false, ino)
	s.setMeta(h, rel)
	s.copiedInto(b, rel, kept)
	return dst, nil
}

// realIn is the real path of rel in b's own layer (the base for main).
func (s *Store) realIn(b *Branch, rel string) string {
	if b.Name == Main {
		if rel == "" {
			return s.base
		}
		return s.base + "/" + rel
	}
	return b.head().real(rel)
}

// copyCost is what a copy of the object st describes allocates: a
// directory is made empty, a file keeps its holes (copyNode).
func copyCost(st *unix.Stat_t) int64 {
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return dirBlock
	}
	return st.Blocks * 512
}

// CopyUp makes rel writable in b (see copyUp).
func (s *Store) CopyUp(b *Branch, rel string) (string, error) {
	pre := s.prepareCopyUp(b, rel, false)
	defer s.dropPrepared(pre)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.copyUpWith(b, rel, false, pre)
}

// ensureParent copies rel's parent directories up into b's head.
func (s *Store) ensureParent(b *Branch, rel string) error {
	if err := s.ensureDir(b.head()); err != nil {
		return err
	}
	dir, _ := splitRel(rel)
	if dir == "" {
		return nil
	}
	if e, ok := s.get(b.head(), dir); ok && e.kind == kDir {
		return nil
	}
	if err := s.ensureParent(b, dir); err != nil {
		return err
	}
	if _, err := s.copyUp(b, dir); err != nil {
		return err
	}
	if e, ok := s.get(b.head(), dir); !ok || e.kind != kDir {
		return fmt.Errorf("store: %s: not a directory in the branch: %w", dir, syscall.ENOTDIR)
	}
	return nil
}

// usage is the bytes of regular files in b's own layers (above its fork).
func (s *Store) usage(b *Branch) int64 {
	var n int64
	for _, l := range b.chain[b.forkDepth:] {
		n += l.bytes
	}
	return n
}

// Grow accounts n more bytes to b's head for its quota, or fails with
// ENOSPC if that would pass it.
func (s *Store) Grow(b *Branch, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Name == Main || n <= 0 {
		return nil
	}
	if b.Quota > 0 && s.usage(b)+n > b.Quota {
		return syscall.ENOSPC
	}
	b.head().bytes += n
	return nil
}

// Create makes a new object at rel in b: mk makes it as name in the
// directory descriptor dir it is given (openat with O_CREAT|O_EXCL,
// mkdirat, symlinkat, mknodat, linkat), which the store opened beneath the
// base or the layer with no symlink followed: mk must not follow one
// either. isDir says whether it is a directory.
func (s *Store) Create(b *Branch, rel string, isDir bool, mk func(dir int, name string) error) error {
	if err := checkName(rel); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if isDir {
		s.dirsChanged()
	}
	return s.create(b, rel, isDir, mk)
}

func (s *Store) create(b *Branch, rel string, dir bool, mk func(dir int, name string) error) error {
	if err := writableBranch(b); err != nil {
		return err
	}
	parent, _ := splitRel(rel)
	pres, err := s.resolve(b, parent, len(b.chain))
	if err != nil {
		return err
	}
	if !pres.IsDir() {
		return syscall.ENOTDIR
	}
	if _, err := s.resolve(b, rel, len(b.chain)); err == nil {
		return syscall.EEXIST
	}
	if b.Name == Main {
		if err := s.preserve(rel, false); err != nil {
			return err
		}
		return s.inParent(s.base+"/"+rel, mk)
	}
	if err := s.ensureParent(b, rel); err != nil {
		return err
	}
	cost := int64(0)
	if dir {
		cost = dirBlock
	}
	if err := s.fits(cost); err != nil {
		return err
	}
	h := b.head()
	hadWhiteout := false
	if e, ok := s.get(h, rel); ok && e.kind == kWhiteout {
		hadWhiteout = true
	}
	real := h.real(rel)
	if hadWhiteout {
		// The whiteout holds the name: it goes first, and comes back if
		// the new object cannot be made.
		if err := s.removeWhiteout(h, rel); err != nil {
			return err
		}
	}
	if err := s.inParent(real, mk); err != nil {
		if hadWhiteout {
			if werr := s.whiteout(h, rel); werr != nil {
				return fmt.Errorf("%w (and the deleted name shows again: %w)", err, werr)
			}
		}
		return err
	}
	opaque := false
	if dir && hadWhiteout {
		// A directory made over a deleted name must hide what was below.
		if err := s.touch(real + "/" + opqMarker); err != nil {
			return err
		}
		opaque = true
	}
	k := kFile
	if dir {
		k = kDir
	}
	s.put(h, rel, k, opaque, 0)
	s.remeasureDir(h, parent)
	return nil
}

// Link makes new a hard link to old in b.
func (s *Store) Link(b *Branch, old, new string) error {
	if err := checkName(new); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.resolve(b, old, len(b.chain))
	if err != nil {
		return err
	}
	if res.IsDir() {
		return syscall.EPERM
	}
	src, err := s.copyUp(b, old)
	if err != nil {
		return err
	}
	ino := res.Ino
	if e, ok := s.get(b.head(), old); ok && b.Name != Main {
		ino = e.ino
	}
	err = s.create(b, new, false, func(dir int, name string) error {
		return s.inParent(src, func(odir int, oname string) error { return unix.Linkat(odir, oname, dir, name, 0) })
	})
	if err == nil && b.Name != Main && ino != 0 {
		s.put(b.head(), new, kFile, false, ino)
	}
	return err
}

// Remove unlinks (dir false) or removes the empty directory (dir true) rel.
func (s *Store) Remove(b *Branch, rel string, dir bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dir {
		s.dirsChanged()
	}
	return s.remove(b, rel, dir)
}

func (s *Store) remove(b *Branch, rel string, dir bool) error {
	if err := writableBranch(b); err != nil {
		return err
	}
	res, err := s.resolve(b, rel, len(b.chain))
	if err != nil {
		return err
	}
	if dir && !res.IsDir() {
		return syscall.ENOTDIR
	}
	if !dir && res.IsDir() {
		return syscall.EISDIR
	}
	if dir {
		ents, err := s.readDir(b, rel, len(b.chain))
		if err != nil {
			return err
		}
		if len(ents) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	if b.Name == Main {
		if err := s.preserve(rel, false); err != nil {
			return err
		}
		if dir {
			return s.rmdir(res.Real)
		}
		return s.unlinkPath(res.Real)
	}
	h := b.head()
	if res.Depth == h.depth {
		if dir {
			if err := s.removeAll(res.Real); err != nil { // only whiteouts are left in it
				return err
			}
		} else if err := s.unlinkPath(res.Real); err != nil {
			return err
		}
		if dir {
			s.dropTree(h, rel)
		} else {
			s.drop(h, rel) // a file has nothing under it: no walk of the layer's paths
		}
	}
	if _, err := s.resolve(b, rel, len(b.chain)-1); err == nil {
		if err := s.ensureParent(b, rel); err != nil {
			return err
		}
		return s.whiteout(h, rel)
	}
	return nil
}

// QuotaOf is the branch's storage limit (0: none).
func (s *Store) QuotaOf(b *Branch) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return b.Quota
}

// OpenFile opens rel in b with open(2)'s flags, copying it up first when
// the flags write, and counts a writing descriptor (see OpenWrite) in the
// same critical section, so that no fork can come between the copy-up and
// the count. With create, rel must not exist and is made with mode. It
// returns the descriptor and what rel resolved to, Real being the real path
// the descriptor is open on (after a copy-up, the branch's own copy) and
// Writer its count, for CloseWrite.
func (s *Store) OpenFile(b *Branch, rel string, flags int, mode uint32, create bool) (int, Res, error) {
	write := flags&(unix.O_WRONLY|unix.O_RDWR|unix.O_TRUNC) != 0
	if !write && !create {
		var st unix.Stat_t
		return s.OpenRead(b, rel, flags, &st)
	}
	var pre *prepared
	if !create {
		pre = s.prepareCopyUp(b, rel, flags&unix.O_TRUNC != 0)
		defer s.dropPrepared(pre)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fd := -1
	var res Res
	if create {
		if err := checkName(rel); err != nil {
			return -1, Res{}, err
		}
		err := s.create(b, rel, false, func(dir int, name string) error {
			var err error
			fd, err = unix.Openat(dir, name, flags&openFlags|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
			return err
		})
		if err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, Res{}, err
		}
		res = Res{Real: s.realIn(b, rel), Kind: kFile, Depth: len(b.chain)}
	} else {
		var err error
		if res, err = s.resolve(b, rel, len(b.chain)); err != nil {
			return -1, Res{}, err
		}
		if res.Real, err = s.copyUpWith(b, rel, flags&unix.O_TRUNC != 0, pre); err != nil {
			return -1, Res{}, err
		}
		res.Lower, res.Depth = false, len(b.chain)
		if fd, err = s.openFile(res.Real, flags&^(unix.O_CREAT|unix.O_EXCL)); err != nil {
			return -1, Res{}, err
		}
	}
	res.Writer = s.addWriter(res.Real)
	return fd, res, nil
}

// OpenRead opens rel in b for reading (flags without O_WRONLY, O_RDWR,
// O_TRUNC or O_CREAT) and leaves the descriptor's fstat in st. It changes
// nothing, so it shares the lock with lookups. A file of the base, which
// resolve would lstat component by component, is opened with openat2 and
// no symlink followed: the same checks in one syscall (a symlink in the
// base is refused with ELOOP rather than followed). Every open is walked
// beneath the base or the layer (see beneath.go).
func (s *Store) OpenRead(b *Branch, rel string, flags int, st *unix.Stat_t) (int, Res, error) {
	flags &^= unix.O_CREAT | unix.O_EXCL | unix.O_TRUNC
	lazy := rel != ""
	s.mu.RLock()
	defer s.mu.RUnlock()
	res, _, err := s.resolveStat(b, rel, len(b.chain), nil, lazy)
	if errors.Is(err, errLazyBase) {
		lazy = false
		res, err = s.resolve(b, rel, len(b.chain))
	}
	if err != nil {
		return -1, Res{}, err
	}
	lazy = lazy && res.Depth == 0
	fd, err := s.openChecked(res.DataReal(), flags, st, true)
	if err != nil {
		return -1, Res{}, err
	}
	if !lazy {
		return fd, res, nil
	}
	// What resolve's lstat would have told.
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		res.Kind = kDir
	}
	if s.nlinks > 0 && st.Nlink > 1 && st.Mode&unix.S_IFMT == unix.S_IFREG {
		if r := s.linkRedirect(b, res, st); r.Real != res.Real {
			// Another name of this hard-linked file was copied up: open that copy.
			unix.Close(fd)
			if fd, err = s.openChecked(r.Real, flags, st, false); err != nil {
				return -1, Res{}, err
			}
			res = r
		}
	}
	res.Lower = len(b.chain) > 0 && res.Depth < len(b.chain)
	return fd, res, nil
}

// prepared is a copy-up made outside the store's lock, for copyUpWith to
// publish under it.
type prepared struct {
	tmp, src string
	sig      fileSig // of src when the copy was made
	head     *layer  // the head it was made for
	reserved int64   // its bytes, reserved under the limit while it is aside
	used     bool    // published
	// dataOnly: the data of a metadata-only copy-up (src is its data file);
	// the metadata comes from the copy-up's own file when it is published.
	dataOnly bool
}

// copyAside is the allocation from which a copy-up copies outside the
// lock: every file that holds data. Even a 4 KiB copy-up (a create, a copy
// and the xattrs, 0.4-1.5 ms on the loaded build machine) held lookups in
// other branches for its whole length: their p99 was 400-700 µs during many
// small copy-ups under the lock, 22-48 µs (about idle) with the copy aside
// (BenchmarkLookupDuringSmallCopyUps, which sets it higher to compare).
var copyAside int64 = 1

// prepareCopyUp copies rel's data for b's head aside, without the store's
// lock, when that is what a copy-up of it will need (a regular file of one
// name below b's head, big enough to be worth it): lookups, opens and the
// other branches' changes go on meanwhile (STYLE.md rule 18). For main it
// is the copy that main keeps when its file moves into a live snapshot
// (preserveWith). Nil if not.
func (s *Store) prepareCopyUp(b *Branch, rel string, trunc bool) *prepared {
	if trunc {
		return nil
	}
	if b.Name == Main {
		return s.prepareMain(b, rel)
	}
	s.mu.RLock()
	if writableBranch(b) != nil {
		s.mu.RUnlock()
		return nil
	}
	h := b.head()
	res, err := s.resolve(b, rel, len(b.chain))
	s.mu.RUnlock()
	src := res.DataReal() // a metadata-only copy-up's data is copied; its metadata at publication
	if err != nil || (res.Depth == h.depth && res.Data == "") || res.IsDir() || res.Nlink > 1 {
		return nil
	}
	return s.prepareCopy(b, src, h, res.Data != "")
}

// prepareMain is prepareCopyUp for main: a copy of the base's file, if a
// live snapshot still shows it from the base.
func (s *Store) prepareMain(b *Branch, rel string) *prepared {
	if rel == "" {
		return nil
	}
	s.mu.RLock()
	need := false
	for _, o := range s.liveSnaps() {
		if !s.covered(o, rel, false) {
			need = true
			break
		}
	}
	s.mu.RUnlock()
	if !need {
		return nil
	}
	return s.prepareCopy(b, s.base+"/"+rel, nil, false)
}

// prepareCopy copies the regular file src aside for b's head h (nil for
// main) if it is big enough to be worth it; dataOnly: its data only.
func (s *Store) prepareCopy(b *Branch, src string, h *layer, dataOnly bool) *prepared {
	var st unix.Stat_t
	if s.Lstat(src, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink > 1 || st.Blocks*512 < copyAside {
		return nil
	}
	reserved, err := s.Reserve(b, 0, copyCost(&st))
	if err != nil {
		return nil // the copy-up under the lock says why
	}
	if err := os.MkdirAll(s.tmpDir(), 0o700); err != nil {
		s.Settle("", reserved, -1)
		return nil
	}
	p := &prepared{tmp: filepath.Join(s.tmpDir(), fmt.Sprintf("up-%d-%d", os.Getpid(), tmpSeq.Add(1))),
		src: src, sig: sigOfStat(&st), head: h, reserved: reserved, dataOnly: dataOnly}
	copy := s.copyNode
	if p.dataOnly {
		copy = func(src, dst string, _ *unix.Stat_t) error { return s.copyData(src, dst) }
	}
	if err := copy(src, p.tmp, &st); err != nil {
		s.dropPrepared(p)
		return nil
	}
	// The source changed while it was copied: the copy under the lock
	// will be made again.
	if s.sigOf(src) != p.sig {
		s.dropPrepared(p)
		return nil
	}
	return p
}

// dropPrepared releases a prepared copy's reservation and removes it if it
// was not published.
func (s *Store) dropPrepared(p *prepared) {
	if p == nil {
		return
	}
	if !p.used {
		s.removeAll(p.tmp)
	}
	s.Settle("", p.reserved, -1)
	p.reserved = 0
}
