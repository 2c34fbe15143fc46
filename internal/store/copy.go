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

// copyMeta gives dst (already made) src's mode, owner, times and xattrs.
func copyMeta(src, dst string, st *unix.Stat_t) error {
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	if !isLink {
		if err := unix.Chmod(dst, st.Mode&07777); err != nil {
			return err
		}
	}
	if err := copyXattrs(src, dst); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyXattrs copies src's extended attributes to dst (the store's own
// inode attribute aside). A failure is returned, never skipped: an xattr
// lost at copy-up is data lost.
func copyXattrs(src, dst string) error {
	var names []byte
	for size := 4096; ; {
		buf := make([]byte, size)
		n, err := unix.Llistxattr(src, buf)
		if errors.Is(err, unix.ERANGE) {
			if size, err = unix.Llistxattr(src, nil); err != nil {
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
		if name == "" || name == inoXattr {
			continue
		}
		val, err := getXattr(src, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return fmt.Errorf("read xattr %s of %s: %w", name, src, err)
		}
		if err := unix.Lsetxattr(dst, name, val, 0); err != nil {
			return fmt.Errorf("copy xattr %s to %s: %w", name, dst, err)
		}
	}
	return nil
}

// getXattr reads one extended attribute whole.
func getXattr(path, name string) ([]byte, error) {
	for {
		sz, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			return nil, err
		}
		val := make([]byte, sz+64)
		n, err := unix.Lgetxattr(path, name, val)
		if errors.Is(err, unix.ERANGE) {
			continue // it grew
		}
		if err != nil {
			return nil, err
		}
		return val[:n], nil
	}
}

// copyNode copies one file system object (not a directory's children) from
// src to dst, with its metadata. A regular file's data goes by
// copy_file_range, which reflinks where the filesystem can.
func copyNode(src, dst string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil && err != unix.EEXIST {
			return err
		}
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := unix.Symlink(target, dst); err != nil {
			return err
		}
	case unix.S_IFREG:
		if err := copyData(src, dst); err != nil {
			return err
		}
	default:
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return err
		}
	}
	return copyMeta(src, dst, st)
}

// copyEmpty makes dst an empty regular file with src's metadata.
func copyEmpty(src, dst string, st *unix.Stat_t) error {
	fd, err := unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	unix.Close(fd)
	if err := copyMeta(src, dst, st); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

func copyData(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = copyExtents(int(in.Fd()), int(out.Fd()))
	if err2 := out.Close(); err == nil {
		err = err2
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

func setIno(p string, ino uint64) {
	if ino != 0 {
		unix.Lsetxattr(p, inoXattr, []byte(strconv.FormatUint(ino, 10)), 0)
	}
}

var tmpSeq atomic.Uint64

// moveOut moves the file at src to dst and leaves a copy of it at src, so
// that descriptors open on src's inode follow it to dst. src is never
// missing, not even after a crash in the middle: the copy is made aside in
// tmpDir and swapped in with RENAME_EXCHANGE before the original moves. The
// caller holds Store.mu exclusively.
func moveOut(tmpDir, src, dst string, st *unix.Stat_t) error {
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(tmpDir, fmt.Sprintf("%d-%d", os.Getpid(), tmpSeq.Add(1)))
	if err := copyNode(src, tmp, st); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, src, unix.RENAME_EXCHANGE); err != nil {
		os.Remove(tmp)
		if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EINVAL) {
			return err
		}
		// Another filesystem, or no RENAME_EXCHANGE: move, then copy back.
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		if err := copyNode(dst, src, st); err != nil {
			os.Rename(dst, src)
			return err
		}
		return nil
	}
	crashPoint("swapped")
	// tmp now holds the original inode, src the copy.
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
