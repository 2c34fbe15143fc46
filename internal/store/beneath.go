package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// Paths beneath a root. The daemon runs as root and serves bases that other
// users own and change while it works: between the store's look at a path
// and its operation on it, a directory component or the file itself may be
// swapped for a symlink to anywhere (/etc/shadow), or renamed with
// RENAME_EXCHANGE. So no path under the base or the store's directory is
// ever handed to a syscall whole. Every path the store makes (Res.Real, a
// layer's file) lies beneath one of two roots, each a descriptor opened
// once at Open: the base (resolved once: a base renamed or replaced by a
// symlink afterwards changes nothing) and the store's own directory. A path
// is walked from its root with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
// to the object itself or to its parent directory, and the operation goes
// through that descriptor: an *at syscall on the parent with the last name
// and AT_SYMLINK_NOFOLLOW, or, where no such flag exists (chmod, xattrs), on
// /proc/self/fd/N of an O_PATH descriptor of the object, which reaches that
// inode and never a symlink's target. A symlink met on the way is refused
// with ELOOP, never followed; an object of another type than expected (a
// FIFO or a symlink where a file was) is refused too.

// beneath is how every path under a root is resolved.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS

// openFlags are the open(2) flags openat2 takes. Opens from the kernel carry
// internal bits besides (FMODE_EXEC when a program is run), which open(2)
// ignores and openat2 refuses with EINVAL.
const openFlags = unix.O_ACCMODE | unix.O_APPEND | unix.O_NONBLOCK | unix.O_DSYNC | unix.O_SYNC | unix.O_DIRECT |
	unix.O_LARGEFILE | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NOATIME | unix.O_CLOEXEC | unix.O_ASYNC | unix.O_NOCTTY |
	unix.O_TRUNC | unix.O_CREAT | unix.O_EXCL | unix.O_PATH

// openBeneath opens rel ("" for the root itself) beneath the directory
// descriptor root, following no symlink: one at the end is ELOOP, unless
// flags hold O_PATH|O_NOFOLLOW (then the descriptor is the symlink's).
func openBeneath(root int, rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	if len(rel) >= pathChunk {
		// Longer than one syscall takes (PATH_MAX): walk to a directory
		// part of the way down, and on from there. The walk stays beneath
		// root: rel is clean (no ".."), and no symlink is followed.
		i := strings.LastIndexByte(rel[:pathChunk], '/')
		if i <= 0 {
			return -1, unix.ENAMETOOLONG // a component longer than any name
		}
		dir, err := openBeneath(root, rel[:i], unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, err
		}
		defer unix.Close(dir)
		return openBeneath(dir, rel[i+1:], flags, mode)
	}
	how := unix.OpenHow{Flags: uint64(flags&openFlags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: beneath}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		// EAGAIN: a rename elsewhere on the filesystem raced the walk
		// (RESOLVE_BENEATH refuses to guess); walk again.
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// pathChunk bounds the paths given to one openat2: PATH_MAX with its NUL.
const pathChunk = unix.PathMax - 1

// at maps a real path the store made to the root it lies beneath and the
// path below that root ("" for the root itself). A path beneath neither is
// refused.
func (s *Store) at(real string) (int, string, error) {
	// The longer prefix first: the store's directory may lie in the base.
	roots := [2]struct {
		path string
		fd   int
	}{{s.base, s.baseFd}, {s.dir, s.dirFd}}
	if len(s.dir) > len(s.base) {
		roots[0], roots[1] = roots[1], roots[0]
	}
	for _, r := range roots {
		if real == r.path {
			return r.fd, "", nil
		}
		if strings.HasPrefix(real, r.path) && len(real) > len(r.path) && real[len(r.path)] == '/' {
			return r.fd, real[len(r.path)+1:], nil
		}
	}
	return -1, "", fmt.Errorf("store: %s lies outside the base and the store: %w", real, unix.EXDEV)
}

// open opens real (see openBeneath).
func (s *Store) open(real string, flags int, mode uint32) (int, error) {
	root, rel, err := s.at(real)
	if err != nil {
		return -1, err
	}
	return openBeneath(root, rel, flags, mode)
}

// parent opens the directory that holds real's last component and returns
// it with that name; done releases it. The roots themselves have no parent
// here (EINVAL).
func (s *Store) parent(real string) (dir int, name string, done func(), err error) {
	root, rel, err := s.at(real)
	if err != nil {
		return -1, "", nil, err
	}
	if rel == "" {
		return -1, "", nil, fmt.Errorf("store: %s: the root itself: %w", real, unix.EINVAL)
	}
	d, name := splitRel(rel)
	if d == "" {
		return root, name, func() {}, nil
	}
	fd, err := openBeneath(root, d, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", nil, err
	}
	return fd, name, func() { unix.Close(fd) }, nil
}

// inParent runs op on real's parent directory and last name.
func (s *Store) inParent(real string, op func(dir int, name string) error) error {
	dir, name, done, err := s.parent(real)
	if err != nil {
		return err
	}
	defer done()
	return op(dir, name)
}

// Lstat is lstat(2) of a real path the store made, with no symlink
// followed on the way.
func (s *Store) Lstat(real string, st *unix.Stat_t) error {
	root, rel, err := s.at(real)
	if err != nil {
		return err
	}
	if rel == "" {
		return unix.Fstat(root, st)
	}
	if !strings.Contains(rel, "/") {
		return unix.Fstatat(root, rel, st, unix.AT_SYMLINK_NOFOLLOW)
	}
	return s.inParent(real, func(dir int, name string) error {
		return unix.Fstatat(dir, name, st, unix.AT_SYMLINK_NOFOLLOW)
	})
}

func (s *Store) exists(real string) bool {
	var st unix.Stat_t
	return s.Lstat(real, &st) == nil
}

func (s *Store) unlinkPath(real string) error {
	return s.inParent(real, func(dir int, name string) error { return unix.Unlinkat(dir, name, 0) })
}

func (s *Store) rmdir(real string) error {
	return s.inParent(real, func(dir int, name string) error { return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR) })
}

func (s *Store) mkdir(real string, mode uint32) error {
	return s.inParent(real, func(dir int, name string) error { return unix.Mkdirat(dir, name, mode) })
}

// rename is renameat2(2) of two real paths, each walked beneath its root.
func (s *Store) rename(old, new string, flags uint) error {
	return s.inParent(old, func(odir int, oname string) error {
		return s.inParent(new, func(ndir int, nname string) error {
			return unix.Renameat2(odir, oname, ndir, nname, flags)
		})
	})
}

// link makes new a hard link to old (never to what a symlink at old names).
func (s *Store) link(old, new string) error {
	return s.inParent(old, func(odir int, oname string) error {
		return s.inParent(new, func(ndir int, nname string) error {
			return unix.Linkat(odir, oname, ndir, nname, 0)
		})
	})
}

// Readlink reads the symlink at real into buf.
func (s *Store) Readlink(real string, buf []byte) (int, error) {
	var n int
	err := s.inParent(real, func(dir int, name string) error {
		var err error
		n, err = unix.Readlinkat(dir, name, buf)
		return err
	})
	return n, err
}

func (s *Store) readlink(real string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := s.Readlink(real, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// Chown sets real's owner (-1 leaves one as it is); a symlink's own.
func (s *Store) Chown(real string, uid, gid int) error {
	return s.inParent(real, func(dir int, name string) error {
		return unix.Fchownat(dir, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// Utimes sets real's times (a symlink's own).
func (s *Store) Utimes(real string, ts []unix.Timespec) error {
	if _, rel, err := s.at(real); err != nil {
		return err
	} else if rel == "" {
		return s.viaProc(real, func(p string) error { return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0) })
	}
	return s.inParent(real, func(dir int, name string) error {
		return unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// viaProc runs op on /proc/self/fd/N of an O_PATH descriptor of real: a
// path that reaches real's inode itself, a symlink's included (chmod of a
// symlink is then EOPNOTSUPP, its xattrs its own), whatever real's name
// names by the time op runs.
func (s *Store) viaProc(real string, op func(p string) error) error {
	fd, err := s.open(real, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return op(procPath(fd))
}

// Chmod sets real's permission bits; a symlink is refused (EOPNOTSUPP),
// never followed.
func (s *Store) Chmod(real string, mode uint32) error {
	return s.viaProc(real, func(p string) error { return unix.Chmod(p, mode) })
}

// Getxattr, Setxattr, Removexattr and Listxattr are the l*xattr calls on
// a real path the store made.
func (s *Store) Getxattr(real, attr string, dest []byte) (int, error) {
	var n int
	err := s.viaProc(real, func(p string) error {
		var err error
		n, err = unix.Getxattr(p, attr, dest)
		return err
	})
	return n, err
}

func (s *Store) Setxattr(real, attr string, data []byte, flags int) error {
	return s.viaProc(real, func(p string) error { return unix.Setxattr(p, attr, data, flags) })
}

func (s *Store) Removexattr(real, attr string) error {
	return s.viaProc(real, func(p string) error { return unix.Removexattr(p, attr) })
}

func (s *Store) Listxattr(real string, dest []byte) (int, error) {
	var n int
	err := s.viaProc(real, func(p string) error {
		var err error
		n, err = unix.Listxattr(p, dest)
		return err
	})
	return n, err
}

// openFile opens real, which must be a regular file, with flags.
func (s *Store) openFile(real string, flags int) (int, error) {
	var st unix.Stat_t
	return s.openChecked(real, flags, &st, false)
}

// openChecked opens real with flags and leaves its fstat in st. What it
// opens must be a regular file (or, with dirOK, a directory): the open
// never blocks on a FIFO swapped in, and anything else is refused.
func (s *Store) openChecked(real string, flags int, st *unix.Stat_t, dirOK bool) (int, error) {
	fd, err := s.open(real, flags|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	switch m := st.Mode & unix.S_IFMT; {
	case m == unix.S_IFDIR && dirOK:
	case m != unix.S_IFREG:
		unix.Close(fd)
		want := "a regular file"
		if dirOK {
			want += " or a directory"
		}
		return -1, notType(real, want, st)
	case flags&unix.O_NONBLOCK == 0:
		// The status flags as asked, without the O_NONBLOCK of the open.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags&(unix.O_APPEND|unix.O_ASYNC|unix.O_DIRECT|unix.O_NOATIME)); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// Truncate sets the size of the regular file at real.
func (s *Store) Truncate(real string, size int64) error {
	fd, err := s.openFile(real, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Ftruncate(fd, size)
}

// Fsync flushes the file or directory at real to disk.
func (s *Store) Fsync(real string) error {
	fd, err := s.open(real, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if m := st.Mode & unix.S_IFMT; m != unix.S_IFREG && m != unix.S_IFDIR {
		return notType(real, "a regular file or a directory", &st)
	}
	return unix.Fsync(fd)
}

// Statfs is statfs(2) of the base's filesystem.
func (s *Store) Statfs(st *unix.Statfs_t) error { return unix.Fstatfs(s.baseFd, st) }

// touch makes an empty file at real (or leaves the one there).
func (s *Store) touch(real string) error {
	fd, err := s.open(real, unix.O_CREAT|unix.O_WRONLY|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// notType is the error for an object found where another type was
// expected (a symlink or a FIFO swapped in for a file): ELOOP for a
// symlink, as a walk refuses one, EINVAL otherwise.
func notType(real, want string, st *unix.Stat_t) error {
	var e unix.Errno = unix.EINVAL
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		e = unix.ELOOP
	}
	return fmt.Errorf("store: %s: want %s, found mode %o (refused, not followed): %w", real, want, st.Mode&unix.S_IFMT, e)
}

// removeAll removes real and everything under it, walking by descriptors:
// a symlink inside is unlinked, never followed, and a directory swapped
// for a symlink mid-walk is not entered.
func (s *Store) removeAll(real string) error {
	err := s.inParent(real, removeAt)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// removeAt removes name in dir with what is under it.
func removeAt(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, oerr := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if oerr != nil {
		if oerr == unix.ENOTDIR || oerr == unix.ELOOP {
			return err // not a directory: the unlink's error stands
		}
		if oerr == unix.EACCES {
			// A directory left without permissions (by a test or a user).
			unix.Fchmodat(dir, name, 0o700, 0)
			fd, oerr = unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		if oerr != nil {
			return oerr
		}
	}
	defer unix.Close(fd)
	for {
		ents, err := direntsOf(fd, "")
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := removeAt(fd, e.name); err != nil {
				if err == unix.EACCES {
					var st unix.Stat_t
					if unix.Fstat(fd, &st) == nil {
						unix.Fchmod(fd, st.Mode&07777|0o700)
					}
					err = removeAt(fd, e.name)
				}
				if err != nil {
					return err
				}
			}
		}
		switch err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err {
		case nil, unix.ENOENT:
			return nil
		case unix.ENOTEMPTY, unix.EEXIST:
			// Made in it meanwhile: list it again.
			if _, err := unix.Seek(fd, 0, 0); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// openRoot opens dir once, resolved now and never again, and checks that
// it is a directory.
func openRoot(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, api.Errorf(api.ErrBadRequest, "store: %s is not a directory: %v", dir, err)
	}
	return fd, nil
}

// lockBase takes the host-wide lock of a base: an exclusive flock on the
// store's descriptor of the base directory. It is the directory's own (its
// inode): every path to it, through symlinks or bind mounts, meets the same
// lock, from any process of any user, and the kernel drops it when the
// holder exits, SIGKILL included, so no lock file is ever left stale. A
// second store over the base, in this process or another daemon, is
// refused with api.ErrBusy naming the holder when /proc/locks tells it.
func lockBase(fd int, base string) error {
	err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return nil
	}
	if err != unix.EWOULDBLOCK {
		return fmt.Errorf("store: lock base %s: %w", base, err)
	}
	who := "another store"
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil {
		if pid := flockHolder(&st); pid > 0 {
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			who = fmt.Sprintf("a store of process %d (%s)", pid, strings.TrimSpace(string(comm)))
			if pid == os.Getpid() {
				who = fmt.Sprintf("another store of this process (%d)", pid)
			}
		}
	}
	return api.Errorf(api.ErrBusy, "store: base %s is held by %s (one store per base)", base, who)
}

// flockHolder finds in /proc/locks the process holding a flock on the inode
// st describes (0 if none is listed).
func flockHolder(st *unix.Stat_t) int {
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		// "1: FLOCK  ADVISORY  WRITE 31896 fe:00:9986592 0 EOF"; a waiter's
		// line has "->" after the number.
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
			continue
		}
		if f[5] == id {
			pid, _ := strconv.Atoi(f[4])
			return pid
		}
	}
	return 0
}
