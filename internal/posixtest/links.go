package posixtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

func readlink(t *testing.T, path string) string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Readlink(path, buf)
	ok(t, err, "readlink %s", path)
	return string(buf[:n])
}

func wantReadlink(t *testing.T, path, want string) {
	t.Helper()
	if got := readlink(t, path); got != want {
		t.Fatalf("readlink %s: %q, want %q", path, got, want)
	}
}

// symlinkCases: readlink, lstat against stat, dangling links, ELOOP.
func (s *suite) symlinkCases() []Case {
	return []Case{
		{Name: "symlink_readlink", Run: func(t *testing.T, dir string) {
			target := join(dir, "target")
			writeFile(t, target, "content", 0o644)
			symlink(t, "target", join(dir, "rel"))
			symlink(t, target, join(dir, "abs"))
			long := "a/b/../../target"
			symlink(t, long, join(dir, "dots"))
			wantReadlink(t, join(dir, "rel"), "target")
			wantReadlink(t, join(dir, "abs"), target)
			wantReadlink(t, join(dir, "dots"), long)
			tst := stat(t, target)
			for _, l := range []string{"rel", "abs"} {
				p := join(dir, l)
				lst := lstat(t, p)
				wantType(t, p, lst, unix.S_IFLNK)
				if want := int64(len(readlink(t, p))); lst.Size != want {
					t.Errorf("lstat %s: size %d, want the target's length %d", l, lst.Size, want)
				}
				if lst.Ino == tst.Ino {
					t.Errorf("lstat %s: the link has its target's inode number", l)
				}
				st := stat(t, p)
				if fileType(st.Mode) != unix.S_IFREG || st.Ino != tst.Ino || st.Size != 7 {
					t.Errorf("stat %s: mode %#o ino %d size %d, want the target's (ino %d size 7)", l, st.Mode, st.Ino, st.Size, tst.Ino)
				}
				wantContent(t, p, "content")
			}
			// readlink of something that is not a symlink.
			_, err := unix.Readlink(target, make([]byte, 64))
			wantErrno(t, err, "readlink of a file", unix.EINVAL)
			// A symlink to a directory: path walks follow it.
			ok(t, unix.Mkdir(join(dir, "d"), 0o755), "mkdir")
			writeFile(t, join(dir, "d", "in"), "inside", 0o644)
			symlink(t, "d", join(dir, "dl"))
			wantContent(t, join(dir, "dl", "in"), "inside")
			wantErrno(t, unix.Symlink("x", join(dir, "rel")), "symlink over an existing name", unix.EEXIST)
		}},
		{Name: "symlink_dangling", Run: func(t *testing.T, dir string) {
			l := join(dir, "l")
			symlink(t, "missing", l)
			wantType(t, l, lstat(t, l), unix.S_IFLNK)
			wantReadlink(t, l, "missing")
			wantErrno(t, unix.Stat(l, new(unix.Stat_t)), "stat of a dangling symlink", unix.ENOENT)
			_, err := unix.Open(l, unix.O_RDONLY, 0)
			wantErrno(t, err, "open of a dangling symlink", unix.ENOENT)
			// O_CREAT without O_EXCL follows the link and creates its target.
			fd := open(t, l, unix.O_CREAT|unix.O_WRONLY, 0o644)
			defer closeIfOpen(&fd)
			write(t, fd, "made")
			closeFd(t, &fd)
			wantContent(t, join(dir, "missing"), "made")
			wantType(t, l, lstat(t, l), unix.S_IFLNK)
			// Unlinking a symlink removes the link, not its target.
			ok(t, unix.Unlink(l), "unlink symlink")
			wantContent(t, join(dir, "missing"), "made")
		}},
		{Name: "symlink_eloop", Run: func(t *testing.T, dir string) {
			symlink(t, "b", join(dir, "a"))
			symlink(t, "a", join(dir, "b"))
			symlink(t, "self", join(dir, "self"))
			for _, l := range []string{"a", "self"} {
				wantErrno(t, unix.Stat(join(dir, l), new(unix.Stat_t)), "stat of a symlink loop", unix.ELOOP)
				_, err := unix.Open(join(dir, l), unix.O_RDONLY, 0)
				wantErrno(t, err, "open of a symlink loop", unix.ELOOP)
				wantErrno(t, unix.Lstat(join(dir, l, "x"), new(unix.Stat_t)), "lookup through a symlink loop", unix.ELOOP)
			}
			wantType(t, "a", lstat(t, join(dir, "a")), unix.S_IFLNK)
			// O_NOFOLLOW on a symlink, even a good one.
			writeFile(t, join(dir, "f"), "", 0o644)
			symlink(t, "f", join(dir, "good"))
			_, err := unix.Open(join(dir, "good"), unix.O_RDONLY|unix.O_NOFOLLOW, 0)
			wantErrno(t, err, "O_NOFOLLOW on a symlink", unix.ELOOP)
			// A chain longer than the kernel's limit of 40.
			prev := "f"
			for i := range 41 {
				name := "chain" + string(rune('A'+i/26)) + string(rune('a'+i%26))
				symlink(t, prev, join(dir, name))
				prev = name
			}
			wantErrno(t, unix.Stat(join(dir, prev), new(unix.Stat_t)), "stat through 41 symlinks", unix.ELOOP)
		}},
		{Name: "symlink_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "target"), "lower", 0o644)
				symlink(t, "target", join(dir, "l"))
				symlink(t, "gone", join(dir, "dangling"))
			},
			Run: func(t *testing.T, dir string) {
				wantReadlink(t, join(dir, "l"), "target")
				wantType(t, "l", lstat(t, join(dir, "l")), unix.S_IFLNK)
				// Writing through a lower symlink copies up its target, not the link.
				fd := open(t, join(dir, "l"), unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+upper")
				closeFd(t, &fd)
				wantContent(t, join(dir, "target"), "lower+upper")
				wantType(t, "l", lstat(t, join(dir, "l")), unix.S_IFLNK)
				wantReadlink(t, join(dir, "l"), "target")
				wantErrno(t, unix.Stat(join(dir, "dangling"), new(unix.Stat_t)), "stat of a lower dangling symlink", unix.ENOENT)
				// Replacing a lower symlink with a new one.
				ok(t, unix.Unlink(join(dir, "l")), "unlink lower symlink")
				symlink(t, "other", join(dir, "l"))
				wantReadlink(t, join(dir, "l"), "other")
			}},
	}
}

// linkCases: hard links, link counts, one inode under several names, and
// the same across copy-up.
func (s *suite) linkCases() []Case {
	return []Case{
		{Name: "link_basic", Run: func(t *testing.T, dir string) {
			a, b := join(dir, "a"), join(dir, "b")
			writeFile(t, a, "one", 0o644)
			ok(t, unix.Link(a, b), "link")
			sa, sb := lstat(t, a), lstat(t, b)
			if sa.Ino != sb.Ino || sa.Dev != sb.Dev {
				t.Fatalf("two names, two inodes: %d and %d", sa.Ino, sb.Ino)
			}
			if sa.Nlink != 2 || sb.Nlink != 2 {
				t.Fatalf("st_nlink %d and %d, want 2", sa.Nlink, sb.Nlink)
			}
			fd := open(t, a, unix.O_WRONLY|unix.O_APPEND, 0)
			defer closeIfOpen(&fd)
			write(t, fd, "+two")
			closeFd(t, &fd)
			wantContent(t, b, "one+two")
			ok(t, unix.Chmod(b, 0o600), "chmod")
			wantPerm(t, a, lstat(t, a), 0o600)
			ok(t, unix.Link(a, join(dir, "c")), "third link")
			wantNlink(t, b, 3)
			ok(t, unix.Unlink(a), "unlink")
			wantNlink(t, b, 2)
			wantContent(t, join(dir, "c"), "one+two")
			wantErrno(t, unix.Link(b, join(dir, "c")), "link over an existing name", unix.EEXIST)
			ok(t, unix.Mkdir(join(dir, "d"), 0o755), "mkdir")
			wantErrno(t, unix.Link(join(dir, "d"), join(dir, "dl")), "link of a directory", unix.EPERM)
			wantErrno(t, unix.Link(join(dir, "missing"), join(dir, "ml")), "link of a missing file", unix.ENOENT)
			// link(2) does not follow a symlink source.
			symlink(t, "b", join(dir, "sl"))
			ok(t, unix.Link(join(dir, "sl"), join(dir, "sl2")), "link of a symlink")
			wantType(t, "sl2", lstat(t, join(dir, "sl2")), unix.S_IFLNK)
			wantNlink(t, b, 2)
		}},
		{Name: "link_across_copyup",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "a"), "lower data", 0o644)
				ok(t, unix.Link(join(dir, "a"), join(dir, "b")), "link in the lower layer")
				ok(t, unix.Mkdir(join(dir, "d"), 0o755), "mkdir")
				ok(t, unix.Link(join(dir, "a"), join(dir, "d", "c")), "link into a subdir")
			},
			Run: func(t *testing.T, dir string) {
				a, b, c := join(dir, "a"), join(dir, "b"), join(dir, "d", "c")
				before := lstat(t, a)
				if sb := lstat(t, b); sb.Ino != before.Ino || before.Nlink != 3 || sb.Nlink != 3 {
					t.Fatalf("lower hard links before copy-up: ino %d/%d nlink %d/%d, want one inode, nlink 3",
						before.Ino, sb.Ino, before.Nlink, sb.Nlink)
				}
				// Write through one name: every name sees it, one inode still.
				fd := open(t, b, unix.O_WRONLY, 0)
				defer closeIfOpen(&fd)
				pwrite(t, fd, "UPPER", 0)
				closeFd(t, &fd)
				for _, p := range []string{a, b, c} {
					wantContent(t, p, "UPPER data")
					st := lstat(t, p)
					if st.Ino != before.Ino || st.Nlink != 3 {
						t.Fatalf("%s after copy-up: ino %d nlink %d, want ino %d nlink 3", p, st.Ino, st.Nlink, before.Ino)
					}
				}
				// Metadata too is one inode's.
				ok(t, unix.Chmod(c, 0o640), "chmod")
				wantPerm(t, a, lstat(t, a), 0o640)
				// Unlinking one name leaves the others, still one inode.
				ok(t, unix.Unlink(a), "unlink")
				wantNlink(t, b, 2)
				wantNlink(t, c, 2)
				fd = open(t, c, unix.O_WRONLY|unix.O_APPEND, 0)
				write(t, fd, "!")
				closeFd(t, &fd)
				wantContent(t, b, "UPPER data!")
			}},
		{Name: "link_lower_new_name",
			Lower: func(t *testing.T, dir string) { writeFile(t, join(dir, "a"), "lower", 0o644) },
			Run: func(t *testing.T, dir string) {
				// A new hard link to a lower file, made in the layer under test.
				a, n := join(dir, "a"), join(dir, "n")
				ino := lstat(t, a).Ino
				ok(t, unix.Link(a, n), "link to a lower file")
				sa, sn := lstat(t, a), lstat(t, n)
				if sa.Ino != ino || sn.Ino != ino || sa.Nlink != 2 || sn.Nlink != 2 {
					t.Fatalf("after link: ino %d/%d (was %d), nlink %d/%d, want 2", sa.Ino, sn.Ino, ino, sa.Nlink, sn.Nlink)
				}
				fd := open(t, n, unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+new")
				closeFd(t, &fd)
				wantContent(t, a, "lower+new")
			}},
	}
}
