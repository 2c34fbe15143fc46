package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Every path here is a real path the store made, walked beneath its root
// (beneath.go): a copy never reads through, nor writes through, a symlink.

// copyMeta gives dst (already made) src's mode, owner, times and xattrs.
// Both are opened once (O_PATH, no symlink followed) and every call goes
// through those descriptors.
func (s *Store) copyMeta(src, dst string, st *unix.Stat_t) error {
	sfd, err := s.open(src, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd, err := s.open(dst, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	sp, dp := procPath(sfd), procPath(dfd)
	if err := unix.Fchownat(dfd, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Chmod(dp, st.Mode&07777); err != nil {
			return err
		}
	}
	if err := copyXattrs(sp, dp, src, dst); err != nil {
		return err
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dp, []unix.Timespec{st.Atim, st.Mtim}, 0)
}

// copyMetaExact is copyMeta that also removes the extended attributes dst
// has and src has not (the store's own aside): dst ends with src's
// metadata exactly. It is idempotent (a commit's journal replays it).
func (s *Store) copyMetaExact(src, dst string, st *unix.Stat_t) error {
	names := func(real string) (map[string]bool, error) {
		out := map[string]bool{}
		sz, err := s.Listxattr(real, nil)
		if errors.Is(err, unix.ENOTSUP) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		buf := make([]byte, sz+256)
		n, err := s.Listxattr(real, buf)
		if err != nil {
			return nil, err
		}
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" && !strings.HasPrefix(name, "user.arbor.") {
				out[name] = true
			}
		}
		return out, nil
	}
	have, err := names(dst)
	if err != nil {
		return err
	}
	want, err := names(src)
	if err != nil {
		return err
	}
	for name := range have {
		if !want[name] {
			if err := s.Removexattr(dst, name); err != nil && !errors.Is(err, unix.ENODATA) {
				return err
			}
		}
	}
	return s.copyMeta(src, dst, st)
}

// procPath is the path of descriptor fd: /proc/self/fd/N reaches its inode
// itself, a symlink's included, whatever its name names by then.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// copyXattrs copies the extended attributes of the object at the /proc
// path sp to the one at dp (the store's own inode attribute aside); src
// and dst name them in errors. A failure is returned, never skipped: an
// xattr lost at copy-up is data lost.
func copyXattrs(sp, dp, src, dst string) error {
	var names []byte
	for size := 4096; ; {
		buf := make([]byte, size)
		n, err := unix.Listxattr(sp, buf)
		if errors.Is(err, unix.ERANGE) {
			if size, err = unix.Listxattr(sp, nil); err != nil {
				return fmt.Errorf("list xattrs of %s: %w", src, err)
			}
			size += 256 // it may grow between the calls
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil // the source has none to give
		}
		if err != nil {
			return fmt.Errorf("list xattrs of %s: %w", src, err)
		}
		names = buf[:n]
		break
	}
	for _, name := range strings.Split(string(names), "\x00") {
		if name == "" || name == inoXattr || name == metaXattr {
			continue
		}
		val, err := getXattr(sp, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return fmt.Errorf("read xattr %s of %s: %w", name, src, err)
		}
		if err := unix.Setxattr(dp, name, val, 0); err != nil {
			return fmt.Errorf("copy xattr %s to %s: %w", name, dst, err)
		}
	}
	return nil
}

// getXattr reads one extended attribute whole from the /proc path p.
func getXattr(p, name string) ([]byte, error) {
	val := make([]byte, 256)
	for {
		n, err := unix.Getxattr(p, name, val)
		if errors.Is(err, unix.ERANGE) {
			sz, err := unix.Getxattr(p, name, nil)
			if err != nil {
				return nil, err
			}
			val = make([]byte, sz+64) // it may grow between the calls
			continue
		}
		if err != nil {
			return nil, err
		}
		return val[:n], nil
	}
}

// getXattr reads one extended attribute of a real path whole.
func (s *Store) getXattr(real, name string) ([]byte, error) {
	var val []byte
	err := s.viaProc(real, func(p string) error {
		var err error
		val, err = getXattr(p, name)
		return err
	})
	return val, err
}

// copyNode copies one file system object (not a directory's children) from
// src to dst, with its metadata. A regular file's data goes by
// copy_file_range, which reflinks where the filesystem can. st is src's
// lstat: an object of another type found at src now is refused.
func (s *Store) copyNode(src, dst string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := s.mkdir(dst, 0o700); err != nil && err != unix.EEXIST {
			return err
		}
	case unix.S_IFLNK:
		target, err := s.readlink(src)
		if err != nil {
			return err
		}
		if err := s.inParent(dst, func(dir int, name string) error { return unix.Symlinkat(target, dir, name) }); err != nil {
			return err
		}
	case unix.S_IFREG:
		if err := s.copyData(src, dst); err != nil {
			return err
		}
	default:
		if err := s.inParent(dst, func(dir int, name string) error { return unix.Mknodat(dir, name, st.Mode, int(st.Rdev)) }); err != nil {
			return err
		}
	}
	return s.copyMeta(src, dst, st)
}

// copyEmpty makes dst an empty regular file with src's metadata.
func (s *Store) copyEmpty(src, dst string, st *unix.Stat_t) error {
	fd, err := s.open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	unix.Close(fd)
	if err := s.copyMeta(src, dst, st); err != nil {
		s.unlinkPath(dst)
		return err
	}
	return nil
}

func (s *Store) copyData(src, dst string) error {
	in, err := s.openFile(src, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	out, err := s.open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = copyExtents(in, out)
	if err2 := unix.Close(out); err == nil {
		err = err2
	}
	if err != nil {
		s.unlinkPath(dst)
	}
	return err
}

func (s *Store) setIno(p string, ino uint64) {
	if ino != 0 {
		s.Setxattr(p, inoXattr, []byte(strconv.FormatUint(ino, 10)), 0)
	}
}

var tmpSeq atomic.Uint64

// emptyAside makes an empty copy of the regular file src (its metadata,
// no data) in tmpDir, for moveOut.
func (s *Store) emptyAside(src string, st *unix.Stat_t) (string, error) {
	if err := os.MkdirAll(s.tmpDir(), 0o700); err != nil {
		return "", err
	}
	tmp := filepath.Join(s.tmpDir(), fmt.Sprintf("%d-%d", os.Getpid(), tmpSeq.Add(1)))
	if err := s.copyEmpty(src, tmp, st); err != nil {
		return "", err
	}
	return tmp, nil
}

// moveOut moves the file at src to dst and leaves a copy of it at src, so
// that descriptors open on src's inode follow it to dst. src is never
// missing, not even after a crash in the middle: the copy is made aside in
// tmpDir and swapped in with RENAME_EXCHANGE before the original moves.
// made, if not "", is that copy made already (outside the lock, by
// prepareCopyUp): moveOut takes it over. The caller holds Store.mu
// exclusively.
func (s *Store) moveOut(src, dst string, st *unix.Stat_t, made string) error {
	tmp := made
	if tmp == "" {
		tmpDir := s.tmpDir()
		if err := os.MkdirAll(tmpDir, 0o700); err != nil {
			return err
		}
		tmp = filepath.Join(tmpDir, fmt.Sprintf("%d-%d", os.Getpid(), tmpSeq.Add(1)))
		if err := s.copyNode(src, tmp, st); err != nil {
			s.removeAll(tmp)
			return err
		}
	}
	if err := s.rename(tmp, src, unix.RENAME_EXCHANGE); err != nil {
		s.removeAll(tmp)
		if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EINVAL) {
			return err
		}
		// Another filesystem, or no RENAME_EXCHANGE: move, then copy back.
		if err := s.rename(src, dst, 0); err != nil {
			return err
		}
		if err := s.copyNode(dst, src, st); err != nil {
			s.rename(dst, src, 0)
			return err
		}
		return nil
	}
	crashPoint("swapped")
	// tmp now holds the original inode, src the copy.
	if err := s.rename(tmp, dst, 0); err != nil {
		s.removeAll(tmp)
		return err
	}
	return nil
}
