package posixtest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func utimens(path string, atime, mtime unix.Timespec, flags int) error {
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{atime, mtime}, flags)
}

func wantTimes(t *testing.T, what string, st unix.Stat_t, atime, mtime unix.Timespec) {
	t.Helper()
	if st.Atim != atime || st.Mtim != mtime {
		t.Fatalf("%s: atime %v mtime %v, want %v and %v", what, ts(st.Atim).UTC(), ts(st.Mtim).UTC(), ts(atime).UTC(), ts(mtime).UTC())
	}
}

// recent reports whether tm is within a few seconds of now. Filesystem
// timestamps come from the kernel's coarse clock, which can trail
// time.Now by a tick.
func recent(tm time.Time) bool {
	d := time.Since(tm)
	return d > -2*time.Second && d < 30*time.Second
}

var (
	// Past times with nanoseconds that no coarse granularity would keep.
	past1 = unix.Timespec{Sec: 1000000000, Nsec: 123456789} // 2001-09-09
	past2 = unix.Timespec{Sec: 1100000000, Nsec: 987654321} // 2004-11-09
)

// attrCases: chmod, chown, utimensat, and the times that writes update.
func (s *suite) attrCases() []Case {
	return []Case{
		{Name: "chmod", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "x", 0o644)
			for _, m := range []uint32{0o751, 0o000, 0o4755, 0o2710, 0o1777, 0o600} {
				ok(t, unix.Chmod(p, m), "chmod %#o", m)
				st := lstat(t, p)
				wantType(t, p, st, unix.S_IFREG)
				wantPerm(t, p, st, m)
			}
			fd := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd)
			ok(t, unix.Fchmod(fd, 0o640), "fchmod")
			wantPerm(t, p, fstat(t, fd), 0o640)
			d := join(dir, "d")
			mkdir(t, d, 0o755)
			ok(t, unix.Chmod(d, 0o3750), "chmod dir")
			st := lstat(t, d)
			wantType(t, d, st, unix.S_IFDIR)
			wantPerm(t, d, st, 0o3750)
			// chmod follows symlinks; the link's own mode does not change.
			symlink(t, "f", join(dir, "l"))
			ok(t, unix.Chmod(join(dir, "l"), 0o604), "chmod through a symlink")
			wantPerm(t, p, lstat(t, p), 0o604)
			wantPerm(t, "l", lstat(t, join(dir, "l")), 0o777)
			wantErrno(t, unix.Chmod(join(dir, "missing"), 0o644), "chmod of a missing name", unix.ENOENT)
		}},
		{Name: "chmod_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), "lower data", 0o644)
				mkdir(t, join(dir, "d"), 0o755)
				writeFile(t, join(dir, "d", "in"), "in", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				// A metadata-only change: copy-up keeps the data.
				ok(t, unix.Chmod(join(dir, "f"), 0o600), "chmod of a lower file")
				wantPerm(t, "f", lstat(t, join(dir, "f")), 0o600)
				wantContent(t, join(dir, "f"), "lower data")
				ok(t, unix.Chmod(join(dir, "d"), 0o700), "chmod of a lower dir")
				wantPerm(t, "d", lstat(t, join(dir, "d")), 0o700)
				wantNames(t, join(dir, "d"), "in")
				wantContent(t, join(dir, "d", "in"), "in")
			}},
		{Name: "chown", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "x", 0o644)
			uid, gid := unix.Geteuid(), unix.Getegid()
			// To one's own ids, and -1 (no change): allowed to anyone.
			ok(t, unix.Chown(p, uid, gid), "chown to own ids")
			ok(t, unix.Chown(p, -1, -1), "chown -1 -1")
			if st := lstat(t, p); st.Uid != uint32(uid) || st.Gid != uint32(gid) {
				t.Fatalf("owner %d:%d, want %d:%d", st.Uid, st.Gid, uid, gid)
			}
			if !isRoot() {
				other := 1000
				if uid == other {
					other++
				}
				wantErrno(t, unix.Chown(p, other, -1), "chown to another user as non-root", unix.EPERM)
				return
			}
			ok(t, unix.Chown(p, nobodyID, nobodyID), "chown to %d:%d", nobodyID, nobodyID)
			if st := lstat(t, p); st.Uid != nobodyID || st.Gid != nobodyID {
				t.Fatalf("after chown: owner %d:%d", st.Uid, st.Gid)
			}
			ok(t, unix.Chown(p, -1, 0), "chown group only")
			if st := lstat(t, p); st.Uid != nobodyID || st.Gid != 0 {
				t.Fatalf("after chown -1:0: owner %d:%d", st.Uid, st.Gid)
			}
			fd := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd)
			ok(t, unix.Fchown(fd, 0, nobodyID), "fchown")
			if st := fstat(t, fd); st.Uid != 0 || st.Gid != nobodyID {
				t.Fatalf("after fchown: owner %d:%d", st.Uid, st.Gid)
			}
			// lchown changes the symlink, chown its target.
			symlink(t, "f", join(dir, "l"))
			ok(t, unix.Lchown(join(dir, "l"), nobodyID, nobodyID), "lchown")
			if st, ft := lstat(t, join(dir, "l")), lstat(t, p); st.Uid != nobodyID || ft.Uid != 0 {
				t.Fatalf("after lchown: link owner %d, target owner %d", st.Uid, ft.Uid)
			}
			ok(t, unix.Chown(join(dir, "l"), 123, 456), "chown through a symlink")
			if st, ft := lstat(t, join(dir, "l")), lstat(t, p); st.Uid != nobodyID || ft.Uid != 123 || ft.Gid != 456 {
				t.Fatalf("after chown through a link: link owner %d, target %d:%d", st.Uid, ft.Uid, ft.Gid)
			}
			d := join(dir, "d")
			mkdir(t, d, 0o755)
			ok(t, unix.Chown(d, nobodyID, nobodyID), "chown dir")
			if st := lstat(t, d); st.Uid != nobodyID || st.Gid != nobodyID {
				t.Fatalf("dir after chown: owner %d:%d", st.Uid, st.Gid)
			}
		}},
		{Name: "chown_clears_setuid", Run: func(t *testing.T, dir string) {
			requireRoot(t)
			// Linux clears S_ISUID, and S_ISGID on a group-executable file,
			// on chown of a regular file, even by root.
			p := join(dir, "f")
			writeFile(t, p, "#!/bin/true\n", 0o755)
			ok(t, unix.Chmod(p, 0o6755), "chmod setuid+setgid")
			ok(t, unix.Chown(p, nobodyID, nobodyID), "chown")
			wantPerm(t, p, lstat(t, p), 0o755)
		}},
		{Name: "chown_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), "lower", 0o644)
				if isRoot() {
					ok(t, unix.Chown(join(dir, "f"), nobodyID, nobodyID), "chown in the lower layer")
				}
			},
			Run: func(t *testing.T, dir string) {
				requireRoot(t)
				p := join(dir, "f")
				if st := lstat(t, p); st.Uid != nobodyID || st.Gid != nobodyID {
					t.Fatalf("lower file's owner: %d:%d, want %d:%d", st.Uid, st.Gid, nobodyID, nobodyID)
				}
				// A data copy-up keeps the owner.
				fd := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+w")
				closeFd(t, &fd)
				if st := lstat(t, p); st.Uid != nobodyID || st.Gid != nobodyID {
					t.Fatalf("owner after copy-up: %d:%d, want %d:%d", st.Uid, st.Gid, nobodyID, nobodyID)
				}
				ok(t, unix.Chown(p, 0, 0), "chown of a copied-up file")
				if st := lstat(t, p); st.Uid != 0 || st.Gid != 0 {
					t.Fatalf("owner after chown: %d:%d", st.Uid, st.Gid)
				}
				wantContent(t, p, "lower+w")
			}},
		{Name: "utimensat", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "x", 0o644)
			// Nanosecond precision.
			ok(t, utimens(p, past1, past2, 0), "utimensat")
			wantTimes(t, "explicit times", lstat(t, p), past1, past2)
			// UTIME_OMIT leaves one alone; UTIME_NOW sets it to now.
			ok(t, utimens(p, unix.Timespec{Nsec: unix.UTIME_OMIT}, past1, 0), "utimensat UTIME_OMIT atime")
			wantTimes(t, "UTIME_OMIT atime", lstat(t, p), past1, past1)
			ok(t, utimens(p, unix.Timespec{Nsec: unix.UTIME_NOW}, unix.Timespec{Nsec: unix.UTIME_OMIT}, 0), "utimensat UTIME_NOW atime")
			st := lstat(t, p)
			if !recent(ts(st.Atim)) || st.Mtim != past1 {
				t.Fatalf("UTIME_NOW atime, UTIME_OMIT mtime: atime %v mtime %v", ts(st.Atim), ts(st.Mtim))
			}
			ok(t, utimens(p, past2, unix.Timespec{Nsec: unix.UTIME_NOW}, 0), "utimensat UTIME_NOW mtime")
			if st := lstat(t, p); st.Atim != past2 || !recent(ts(st.Mtim)) {
				t.Fatalf("UTIME_NOW mtime: atime %v mtime %v", ts(st.Atim), ts(st.Mtim))
			}
			// A nil times (both now), via utimes(2) semantics.
			ok(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, nil, 0), "utimensat NULL")
			if st := lstat(t, p); !recent(ts(st.Atim)) || !recent(ts(st.Mtim)) {
				t.Fatalf("utimensat NULL: atime %v mtime %v", ts(st.Atim), ts(st.Mtim))
			}
			// On a directory.
			d := join(dir, "d")
			mkdir(t, d, 0o755)
			ok(t, utimens(d, past1, past2, 0), "utimensat dir")
			wantTimes(t, "dir", lstat(t, d), past1, past2)
			// futimens on an fd.
			fd := open(t, p, unix.O_RDWR, 0)
			defer closeIfOpen(&fd)
			ok(t, unix.Futimes(fd, []unix.Timeval{{Sec: past2.Sec, Usec: 5}, {Sec: past1.Sec, Usec: 7}}), "futimes")
			if st := fstat(t, fd); st.Atim.Sec != past2.Sec || st.Atim.Nsec != 5000 || st.Mtim.Sec != past1.Sec || st.Mtim.Nsec != 7000 {
				t.Fatalf("futimes: atime %v mtime %v", ts(st.Atim), ts(st.Mtim))
			}
			wantErrno(t, utimens(p, unix.Timespec{Sec: 1, Nsec: 1e9}, past1, 0), "utimensat with tv_nsec 1e9", unix.EINVAL)
		}},
		{Name: "utimensat_nofollow", Run: func(t *testing.T, dir string) {
			p, l := join(dir, "f"), join(dir, "l")
			writeFile(t, p, "x", 0o644)
			symlink(t, "f", l)
			ok(t, utimens(p, past1, past1, 0), "utimensat target")
			err := utimens(l, past2, past2, unix.AT_SYMLINK_NOFOLLOW)
			s.unsupported(t, err, "utimensat AT_SYMLINK_NOFOLLOW on a symlink")
			ok(t, err, "utimensat AT_SYMLINK_NOFOLLOW")
			wantTimes(t, "symlink", lstat(t, l), past2, past2)
			wantTimes(t, "target of the symlink", lstat(t, p), past1, past1)
			// Without the flag it follows the link.
			ok(t, utimens(l, past2, past1, 0), "utimensat through a symlink")
			wantTimes(t, "target after utimensat through the link", lstat(t, p), past2, past1)
			// (Following the link may update its atime: only mtime is checked.)
			if st := lstat(t, l); st.Mtim != past2 {
				t.Fatalf("symlink after utimensat through it: mtime %v, want %v", ts(st.Mtim), ts(past2))
			}
		}},
		{Name: "times_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), "lower", 0o644)
				writeFile(t, join(dir, "g"), "lower", 0o644)
				ok(t, utimens(join(dir, "f"), past1, past2, 0), "utimensat")
				ok(t, utimens(join(dir, "g"), past1, past2, 0), "utimensat")
			},
			Run: func(t *testing.T, dir string) {
				f, g := join(dir, "f"), join(dir, "g")
				st := lstat(t, f)
				if st.Mtim != past2 {
					t.Fatalf("lower file mtime %v, want %v", ts(st.Mtim), ts(past2))
				}
				// A metadata copy-up (chmod) keeps mtime.
				ok(t, unix.Chmod(f, 0o600), "chmod of a lower file")
				if st := lstat(t, f); st.Mtim != past2 {
					t.Fatalf("mtime after chmod (metadata copy-up): %v, want %v", ts(st.Mtim), ts(past2))
				}
				// utimensat on a lower file.
				ok(t, utimens(g, past2, past1, 0), "utimensat of a lower file")
				wantTimes(t, "lower file after utimensat", lstat(t, g), past2, past1)
				wantContent(t, g, "lower")
				// A write updates mtime.
				fd := open(t, f, unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "!")
				closeFd(t, &fd)
				if st := lstat(t, f); !recent(ts(st.Mtim)) {
					t.Fatalf("mtime after writing a lower file: %v", ts(st.Mtim))
				}
			}},
		{Name: "times_update_on_write", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "x", 0o644)
			ok(t, utimens(p, past1, past1, 0), "utimensat")
			ctime0 := lstat(t, p).Ctim
			// Some coarse clocks tick every few ms; wait a tick so ctime moves.
			time.Sleep(20 * time.Millisecond)
			fd := open(t, p, unix.O_WRONLY, 0)
			defer closeIfOpen(&fd)
			pwrite(t, fd, "y", 1)
			st := fstat(t, fd)
			if !recent(ts(st.Mtim)) || !recent(ts(st.Ctim)) {
				t.Fatalf("after write: mtime %v ctime %v, want now", ts(st.Mtim), ts(st.Ctim))
			}
			if !ts(st.Ctim).After(ts(ctime0)) {
				t.Fatalf("write did not advance ctime: %v then %v", ts(ctime0), ts(st.Ctim))
			}
			if st.Atim != past1 {
				t.Fatalf("write changed atime: %v", ts(st.Atim))
			}
			// ftruncate updates them too (even to the same size, on Linux only
			// when the size changes: so change it).
			ok(t, utimens(p, past1, past1, 0), "utimensat")
			ok(t, unix.Ftruncate(fd, 1), "ftruncate")
			if st := fstat(t, fd); !recent(ts(st.Mtim)) {
				t.Fatalf("after ftruncate: mtime %v, want now", ts(st.Mtim))
			}
			// chmod updates ctime, not mtime.
			ok(t, utimens(p, past1, past1, 0), "utimensat")
			c1 := lstat(t, p).Ctim
			time.Sleep(20 * time.Millisecond)
			ok(t, unix.Chmod(p, 0o600), "chmod")
			if st := lstat(t, p); st.Mtim != past1 || !ts(st.Ctim).After(ts(c1)) {
				t.Fatalf("after chmod: mtime %v (want unchanged), ctime %v (want after %v)", ts(st.Mtim), ts(st.Ctim), ts(c1))
			}
			// Creating and removing entries updates the directory's mtime.
			d := join(dir, "d")
			mkdir(t, d, 0o755)
			for _, step := range []struct {
				what string
				do   func() error
			}{
				{"create", func() error { return unix.Mknod(join(d, "new"), unix.S_IFREG|0o644, 0) }},
				{"rename", func() error { return unix.Rename(join(d, "new"), join(d, "renamed")) }},
				{"unlink", func() error { return unix.Unlink(join(d, "renamed")) }},
				{"mkdir", func() error { return unix.Mkdir(join(d, "sub"), 0o755) }},
			} {
				ok(t, utimens(d, past1, past1, 0), "utimensat dir")
				ok(t, step.do(), "%s in dir", step.what)
				if st := lstat(t, d); !recent(ts(st.Mtim)) || !recent(ts(st.Ctim)) {
					t.Fatalf("dir after %s in it: mtime %v ctime %v, want now", step.what, ts(st.Mtim), ts(st.Ctim))
				}
			}
		}},
	}
}
