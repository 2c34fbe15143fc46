package posixtest

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nameMax and pathMax are Linux's NAME_MAX and PATH_MAX.
const (
	nameMax = 255
	pathMax = 4096
)

// long is a name of n bytes made of c.
func long(c byte, n int) string { return strings.Repeat(string(c), n) }

// nameOps runs every operation that takes a name on names of length n in
// dir, as root: each must give want (0: success), and the objects made
// must show. With n = 255 every one works; with 256 every one is
// ENAMETOOLONG.
func nameOps(t *testing.T, dir string, n int, want unix.Errno) {
	t.Helper()
	check := func(err error, op string) {
		t.Helper()
		if want == 0 {
			ok(t, err, "%s (a name of %d bytes)", op, n)
		} else {
			wantErrno(t, err, fmt.Sprintf("%s (a name of %d bytes)", op, n), want)
		}
	}
	short := join(dir, "short")
	writeFile(t, short, "data", 0o644)
	f, d, p, nd, s, l, r := join(dir, long('f', n)), join(dir, long('d', n)), join(dir, long('p', n)),
		join(dir, long('n', n)), join(dir, long('s', n)), join(dir, long('l', n)), join(dir, long('r', n))
	fd, err := unix.Open(f, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
	check(err, "create")
	if err == nil {
		_, err = unix.Write(fd, []byte("long"))
		unix.Close(fd)
		ok(t, err, "write")
	}
	check(unix.Mkdir(d, 0o755), "mkdir")
	check(unix.Mkfifo(p, 0o644), "mkfifo")
	check(unix.Mknod(nd, unix.S_IFREG|0o600, 0), "mknod")
	check(unix.Symlink(long('f', n), s), "symlink")
	check(unix.Link(short, l), "link")
	check(unix.Truncate(f, 2), "truncate")
	check(unix.Chmod(f, 0o600), "chmod")
	if isRoot() {
		check(unix.Lchown(f, nobodyID, nobodyID), "chown")
	}
	check(unix.UtimesNano(f, []unix.Timespec{{Sec: 1}, {Sec: 2}}), "utimensat")
	var st unix.Stat_t
	check(unix.Lstat(f, &st), "lstat")
	check(unix.Rename(f, r), "rename from")
	check(unix.Rename(short, f), "rename to")
	if want == 0 {
		wantContent(t, r, "lo")
		wantContent(t, f, "data")
		wantContent(t, s, "data")
		if got := names(t, dir); len(got) != 7 {
			t.Fatalf("entries of %s: %d, want the 7 long names made", dir, len(got))
		}
		if st.Mode&07777 != 0o600 || st.Mtim.Sec != 2 || (isRoot() && st.Uid != nobodyID) {
			t.Fatalf("the long-named file: mode %#o mtime %d uid %d", st.Mode&07777, st.Mtim.Sec, st.Uid)
		}
	} else {
		check(unix.Link(short, f), "link over a new name") // the name alone decides
	}
	check(unix.Unlink(r), "unlink")
	check(unix.Unlink(l), "unlink a link")
	check(unix.Rmdir(d), "rmdir")
}

// lowerLongNames is the Lower of the long-name cases: a file, a directory
// with a file in it, and a symlink, each named with 255 bytes.
func lowerLongNames(t *testing.T, dir string) {
	writeFile(t, join(dir, long('f', nameMax)), "lower", 0o644)
	mkdir(t, join(dir, long('d', nameMax)), 0o755)
	writeFile(t, join(dir, long('d', nameMax), long('g', nameMax)), "inner", 0o644)
	symlink(t, long('f', nameMax), join(dir, long('s', nameMax)))
}

// deepPath makes directories under dir so that a name of the remaining
// length under the last makes a path of exactly total bytes; it returns
// that directory and the name length left (at least 1, at most 255).
func deepPath(t *testing.T, dir string, total int) (string, int) {
	t.Helper()
	p := dir
	for i := 0; total-len(p)-1 > nameMax; i++ {
		n := min(200, total-len(p)-1-nameMax+1)
		// A component of n bytes, then "/", must leave room for a name.
		if n < 1 {
			n = 1
		}
		p = join(p, long(byte('a'+i%26), n))
		if err := unix.Mkdir(p, 0o755); err != nil {
			t.Fatalf("mkdir a component of a long path (%d bytes so far): %v", len(p), err)
		}
	}
	left := total - len(p) - 1
	if left < 1 || left > nameMax {
		t.Fatalf("deepPath: %d bytes left for the name under %d", left, len(p))
	}
	return p, left
}

// pathOps runs the operations on path (exactly PATH_MAX - 1 bytes): each
// works, a path one byte longer is ENAMETOOLONG.
func pathOps(t *testing.T, parent string, n int) {
	t.Helper()
	f := join(parent, long('f', n))
	if len(f) != pathMax-1 {
		t.Fatalf("path of %d bytes, want %d", len(f), pathMax-1)
	}
	fd, err := unix.Open(f, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
	ok(t, err, "create a file at a path of %d bytes", len(f))
	_, err = unix.Write(fd, []byte("deep"))
	unix.Close(fd)
	ok(t, err, "write")
	wantContent(t, f, "deep")
	ok(t, unix.Chmod(f, 0o600), "chmod")
	ok(t, unix.Truncate(f, 2), "truncate")
	ok(t, unix.Setxattr(f, "user.k", []byte("v"), 0), "setxattr")
	g := join(parent, long('g', n))
	ok(t, unix.Rename(f, g), "rename")
	ok(t, unix.Link(g, f), "link")
	ok(t, unix.Unlink(g), "unlink")
	s := join(parent, long('s', n))
	ok(t, unix.Symlink(long('f', n), s), "symlink")
	wantContent(t, s, "de")
	ok(t, unix.Unlink(s), "unlink the symlink")
	d := join(parent, long('d', n))
	ok(t, unix.Mkdir(d, 0o755), "mkdir")
	ok(t, unix.Rmdir(d), "rmdir")
	var st unix.Stat_t
	wantErrno(t, unix.Lstat(f+"x", &st), "lstat of a path of PATH_MAX bytes", unix.ENAMETOOLONG)
	_, err = unix.Open(f+"x", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	wantErrno(t, err, "create at a path of PATH_MAX bytes", unix.ENAMETOOLONG)
	wantErrno(t, unix.Mkdir(d+"x", 0o755), "mkdir at a path of PATH_MAX bytes", unix.ENAMETOOLONG)
	ok(t, unix.Unlink(f), "unlink")
}

// beyondPathMax works relative to a directory descriptor deep enough that
// the whole path from dir is over twice PATH_MAX: nothing may depend on a
// path that long being passed whole.
func beyondPathMax(t *testing.T, dir string) {
	t.Helper()
	fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer closeIfOpen(&fd)
	depth := 0
	for total := 0; total <= 2*pathMax; total += 201 {
		name := long(byte('a'+depth%26), 200)
		ok(t, unix.Mkdirat(fd, name, 0o755), "mkdirat at %d bytes below the case dir", total)
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		ok(t, err, "open a dir %d bytes below the case dir", total)
		closeFd(t, &fd)
		fd = nfd
		depth++
	}
	ffd, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
	ok(t, err, "create a file over 8 KiB below the case dir")
	_, err = unix.Write(ffd, []byte("far"))
	unix.Close(ffd)
	ok(t, err, "write it")
	var st unix.Stat_t
	ok(t, unix.Fstatat(fd, "f", &st, unix.AT_SYMLINK_NOFOLLOW), "fstatat it")
	if st.Size != 3 {
		t.Fatalf("size %d, want 3", st.Size)
	}
	ok(t, unix.Renameat(fd, "f", fd, "g"), "renameat")
	ok(t, unix.Fchmodat(fd, "g", 0o600, 0), "fchmodat")
	ok(t, unix.Mkdirat(fd, "sub", 0o755), "mkdirat")
	ok(t, unix.Unlinkat(fd, "sub", unix.AT_REMOVEDIR), "rmdir")
	ok(t, unix.Unlinkat(fd, "g", 0), "unlinkat")
	if got := depth; got < 20 {
		t.Fatalf("only %d levels", got)
	}
}

// fdNames lists the open directory fd from its start, without "." and "..".
// (Not through os.NewFile: its finalizer would close fd when collected,
// perhaps after the number went to another file.)
func fdNames(t *testing.T, fd int) []string {
	t.Helper()
	_, err := unix.Seek(fd, 0, 0)
	ok(t, err, "rewind a directory")
	var out []string
	buf := make([]byte, 8<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		ok(t, err, "getdents")
		if n <= 0 {
			return out
		}
		_, _, out = unix.ParseDirent(buf[:n], -1, out)
	}
}

// nameCases: names of NAME_MAX bytes work for every operation and one
// byte more is ENAMETOOLONG, also for names of a lower layer that are
// deleted (whited out), renamed or copied up; paths of PATH_MAX - 1 bytes
// work, PATH_MAX is ENAMETOOLONG; work relative to a directory descriptor
// has no limit of depth.
func (s *suite) nameCases() []Case {
	return []Case{
		{Name: "name_max_ops", Run: func(t *testing.T, dir string) { nameOps(t, dir, nameMax, 0) }},
		{Name: "name_too_long_ops", Run: func(t *testing.T, dir string) { nameOps(t, dir, nameMax+1, unix.ENAMETOOLONG) }},
		{Name: "name_max_lower",
			Lower: lowerLongNames,
			Run: func(t *testing.T, dir string) {
				f, d, sl := join(dir, long('f', nameMax)), join(dir, long('d', nameMax)), join(dir, long('s', nameMax))
				g := join(d, long('g', nameMax))
				wantContent(t, f, "lower")
				wantContent(t, sl, "lower")
				ok(t, unix.Chmod(f, 0o600), "chmod a lower file of a 255-byte name")
				fd := open(t, f, unix.O_WRONLY|unix.O_APPEND, 0)
				write(t, fd, "+up")
				closeFd(t, &fd)
				wantContent(t, f, "lower+up")
				ok(t, unix.Rename(f, join(dir, long('r', nameMax))), "rename a lower file of a 255-byte name")
				wantContent(t, join(dir, long('r', nameMax)), "lower+up")
				var st unix.Stat_t
				wantErrno(t, unix.Lstat(f, &st), "lstat of the renamed name", unix.ENOENT)
				ok(t, unix.Unlink(g), "unlink a lower file of a 255-byte name")
				ok(t, unix.Rmdir(d), "rmdir a lower dir of a 255-byte name")
				ok(t, unix.Unlink(sl), "unlink a lower symlink of a 255-byte name")
				wantNames(t, dir, long('r', nameMax))
				// The deleted names come back new, over their whiteouts.
				writeFile(t, f, "new", 0o644)
				mkdir(t, d, 0o755)
				wantNames(t, d)
				wantContent(t, f, "new")
				wantNames(t, dir, long('d', nameMax), long('f', nameMax), long('r', nameMax))
				wantErrno(t, unix.Lstat(join(dir, long('f', nameMax+1)), &st), "lstat of a 256-byte name", unix.ENAMETOOLONG)
				wantErrno(t, unix.Mkdir(join(dir, long('x', nameMax+1)), 0o755), "mkdir of a 256-byte name", unix.ENAMETOOLONG)
			}},
		{Name: "path_max_ops", Run: func(t *testing.T, dir string) {
			p, n := deepPath(t, dir, pathMax-1)
			pathOps(t, p, n)
		}},
		{Name: "path_max_lower",
			Lower: func(t *testing.T, dir string) {
				p, n := deepPath(t, dir, pathMax-1)
				writeFile(t, join(p, long('f', n)), "lower", 0o644)
			},
			// Walked by descriptors: the same path seen from the layer
			// under test may be longer than PATH_MAX as a whole.
			Run: func(t *testing.T, dir string) {
				fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				defer closeIfOpen(&fd)
				var parent int = -1
				defer closeIfOpen(&parent)
				name, total := "", len(dir)
				for {
					ents := fdNames(t, fd)
					if len(ents) != 1 {
						t.Fatalf("%d bytes down: %d entries, want the one of the lower path", total, len(ents))
					}
					var st unix.Stat_t
					ok(t, unix.Fstatat(fd, ents[0], &st, unix.AT_SYMLINK_NOFOLLOW), "lstat %d bytes down", total)
					total += 1 + len(ents[0])
					if fileType(st.Mode) != unix.S_IFDIR {
						name = ents[0]
						break
					}
					nfd, err := unix.Openat(fd, ents[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
					ok(t, err, "open a dir %d bytes down", total)
					closeIfOpen(&parent)
					parent, fd = fd, nfd
				}
				if total < pathMax-1 {
					t.Fatalf("the lower path is %d bytes, want at least %d", total, pathMax-1)
				}
				ffd, err := unix.Openat(fd, name, unix.O_RDWR|unix.O_APPEND|unix.O_CLOEXEC, 0)
				ok(t, err, "open the lower file for writing")
				wantPread(t, ffd, 0, "lower")
				write(t, ffd, "+up")
				closeFd(t, &ffd)
				ffd, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				ok(t, err, "open the copied-up file")
				wantPread(t, ffd, 0, "lower+up")
				closeFd(t, &ffd)
				ok(t, unix.Fchmodat(fd, name, 0o600, 0), "chmod")
				ok(t, unix.Unlinkat(fd, name, 0), "unlink a lower file at PATH_MAX - 1 bytes")
				var st unix.Stat_t
				wantErrno(t, unix.Fstatat(fd, name, &st, 0), "lstat the unlinked name", unix.ENOENT)
				if dents := fdNames(t, fd); len(dents) != 0 {
					t.Fatalf("after the unlink: %q", dents)
				}
			}},
		{Name: "path_beyond_max_relative", Run: func(t *testing.T, dir string) { beyondPathMax(t, dir) }},
	}
}
