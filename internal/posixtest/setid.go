package posixtest

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// modeOf is path's permission bits, or the failure in c.
func (c *checks) modeOf(path string) uint32 {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		c.ok(err, "lstat "+path)
	}
	return st.Mode & 07777
}

// wantMode adds a failure unless path's permission bits are want after op.
func (c *checks) wantMode(path string, want uint32, op string) {
	if m := c.modeOf(path); m != want {
		*c = append(*c, fmt.Errorf("%s: mode %#o after %s, want %#o", path, m, op, want))
	}
}

// setidFiles makes, as root, files of the given names in group gid with
// mode (setuid and setgid among its bits) for uid 65534 to write.
func setidFiles(t *testing.T, dir string, gid int, mode uint32, names ...string) {
	for _, n := range names {
		p := join(dir, n)
		writeFile(t, p, "data", 0o777)
		chownT(t, p, 0, gid)
		ok(t, unix.Chmod(p, mode), "chmod %#o", mode)
	}
}

// writeAsIs opens path for writing and checks that the open alone leaves
// the mode as it was; then it writes, closes, and checks want.
func (c *checks) openThenWrite(path string, before, after uint32) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
	if err != nil {
		c.ok(err, "open for writing "+path)
		return
	}
	defer unix.Close(fd)
	c.wantMode(path, before, "an open for writing (Linux clears at the write, not the open)")
	var st unix.Stat_t
	if c.ok(unix.Fstat(fd, &st), "fstat"); st.Mode&07777 != before {
		*c = append(*c, fmt.Errorf("%s: fstat mode %#o after the open, want %#o", path, st.Mode&07777, before))
	}
	_, err = unix.Write(fd, []byte("+"))
	c.ok(err, "write "+path)
	c.wantMode(path, after, "a write by a process without CAP_FSETID")
}

// setidCases: setuid and setgid are cleared exactly when Linux clears
// them: at a write, truncate or O_TRUNC by a process without CAP_FSETID
// (setgid only on a group-executable file), never at an open alone, never
// for a process with CAP_FSETID; on a file made with them, at its first
// write; on lower files as on upper ones.
func (s *suite) setidCases() []Case {
	nobodyChecks := func(dir string) *checks {
		c := &checks{}
		if err := reach(dir); err != nil {
			*c = append(*c, err)
		}
		return c
	}
	upper := func(gid int, mode uint32, names ...string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			requireRoot(t)
			openForNobody(t, dir)
			setidFiles(t, dir, gid, mode, names...)
		}
	}
	lower := func(gid int, mode uint32, names ...string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if isRoot() {
				setidFiles(t, dir, gid, mode, names...)
			}
		}
	}
	// The write, truncate and O_TRUNC checks, on files made by Run or
	// Lower with mode before, which they leave with mode after.
	kill := func(before, after uint32) func(dir string) error {
		return func(dir string) error {
			c := nobodyChecks(dir)
			c.openThenWrite(join(dir, "write"), before, after)
			fd, err := unix.Open(join(dir, "ftruncate"), unix.O_RDWR|unix.O_CLOEXEC, 0)
			if c.ok(err, "open ftruncate"); err == nil {
				c.wantMode(join(dir, "ftruncate"), before, "an open for reading and writing")
				c.ok(unix.Ftruncate(fd, 1), "ftruncate")
				unix.Close(fd)
				c.wantMode(join(dir, "ftruncate"), after, "ftruncate")
			}
			c.ok(unix.Truncate(join(dir, "truncate"), 1), "truncate")
			c.wantMode(join(dir, "truncate"), after, "truncate")
			fd, err = unix.Open(join(dir, "otrunc"), unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
			if c.ok(err, "open O_TRUNC"); err == nil {
				unix.Close(fd)
			}
			c.wantMode(join(dir, "otrunc"), after, "an O_TRUNC open")
			// Opened for writing and closed without a write: nothing clears.
			fd, err = unix.Open(join(dir, "openonly"), unix.O_RDWR|unix.O_CLOEXEC, 0)
			if c.ok(err, "open openonly for writing"); err == nil {
				unix.Close(fd)
			}
			c.wantMode(join(dir, "openonly"), before, "an open for writing and a close, no write")
			fd, err = unix.Open(join(dir, "read"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if c.ok(err, "open for reading"); err == nil {
				unix.Close(fd)
			}
			c.wantMode(join(dir, "read"), before, "an open for reading")
			return c.err()
		}
	}
	files := []string{"write", "ftruncate", "truncate", "otrunc", "openonly", "read"}
	lowerRun := func(t *testing.T, dir string) { requireRoot(t); openForNobody(t, dir) }
	return []Case{
		{Name: "setid_cleared_at_write_not_open", Run: upper(0, 0o6777, files...), Nobody: kill(0o6777, 0o777)},
		// Setgid on a file that is not group-executable goes only for a
		// writer outside the file's group.
		{Name: "setid_setgid_not_groupexec_in_group", Run: upper(nobodyID, 0o6767, files...), Nobody: kill(0o6767, 0o2767)},
		{Name: "setid_setgid_not_groupexec_other_group", Run: upper(0, 0o6767, files...), Nobody: kill(0o6767, 0o767)},
		{Name: "setid_lower", Lower: lower(0, 0o6777, files...), Run: lowerRun, Nobody: kill(0o6777, 0o777)},
		{Name: "setid_lower_not_groupexec_in_group", Lower: lower(nobodyID, 0o6767, files...), Run: lowerRun, Nobody: kill(0o6767, 0o2767)},
		{Name: "setid_kept_with_cap_fsetid",
			Run: func(t *testing.T, dir string) {
				requireRoot(t)
				setidFiles(t, dir, 0, 0o6755, "f")
				p := join(dir, "f")
				fd := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+")
				ok(t, unix.Ftruncate(fd, 2), "ftruncate")
				closeFd(t, &fd)
				ok(t, unix.Truncate(p, 1), "truncate")
				wantPerm(t, p, lstat(t, p), 0o6755)
			}},
		{Name: "setid_created_then_written",
			Run: func(t *testing.T, dir string) {
				requireRoot(t)
				ok(t, unix.Chmod(dir, 0o777), "chmod the case dir 0777")
			},
			Nobody: func(dir string) error {
				c := nobodyChecks(dir)
				p := join(dir, "mine")
				var fd int
				var err error
				withThreadUmask(0, func() { fd, err = unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o4775) })
				if c.ok(err, "create a setuid file"); err != nil {
					return c.err()
				}
				defer unix.Close(fd)
				c.wantMode(p, 0o4775, "its creation")
				_, err = unix.Write(fd, []byte("x"))
				c.ok(err, "write")
				c.wantMode(p, 0o775, "its first write")
				return c.err()
			}},
		{Name: "setid_chown",
			Lower: func(t *testing.T, dir string) {
				if isRoot() {
					setidFiles(t, dir, 0, 0o6755, "lower")
					setidFiles(t, dir, 0, 0o2745, "lower-sgid")
				}
			},
			Run: func(t *testing.T, dir string) {
				requireRoot(t)
				setidFiles(t, dir, 0, 0o6755, "upper")
				setidFiles(t, dir, 0, 0o2745, "upper-sgid")
				for _, n := range []string{"upper", "lower"} {
					p := join(dir, n)
					ok(t, unix.Chown(p, nobodyID, -1), "chown %s", n)
					wantPerm(t, p, lstat(t, p), 0o755)
				}
				// Root keeps a setgid bit that marks no group execution.
				for _, n := range []string{"upper-sgid", "lower-sgid"} {
					p := join(dir, n)
					ok(t, unix.Chown(p, nobodyID, nobodyID), "chown %s", n)
					wantPerm(t, p, lstat(t, p), 0o2745)
				}
			}},
	}
}

// withThreadUmask runs fn on a thread with its own umask (see withUmask),
// for a step that has no testing.T.
func withThreadUmask(mask int, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		lockThread()
		if unix.Unshare(unix.CLONE_FS) == nil {
			unix.Umask(mask)
		}
		fn()
	}()
	<-done
}
