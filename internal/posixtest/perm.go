package posixtest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// checks collects the failures of a Nobody step (which has no testing.T).
type checks []error

func (c *checks) errno(err error, op string, want ...unix.Errno) {
	if e := checkErrno(err, op, want...); e != nil {
		*c = append(*c, e)
	}
}

func (c *checks) ok(err error, op string) {
	if e := checkOK(err, op); e != nil {
		*c = append(*c, e)
	}
}

func (c *checks) content(path, want string) {
	b, err := os.ReadFile(path)
	switch {
	case err != nil:
		*c = append(*c, fmt.Errorf("read %s: want success, got %w", path, err))
	case string(b) != want:
		*c = append(*c, fmt.Errorf("read %s: %q, want %q", path, b, want))
	}
}

func (c checks) err() error { return errors.Join(c...) }

// reach is the positive control every Nobody step starts with: without it
// a filesystem that refuses uid 65534 everything would pass every check.
func reach(dir string) error {
	if err := unix.Access(dir, unix.X_OK|unix.R_OK); err != nil {
		return fmt.Errorf("uid %d cannot search and read the case directory %s: %w (every component of its path must be searchable by others; a FUSE mount needs allow_other)", nobodyID, dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("uid %d cannot open the case directory: %w", nobodyID, err)
	}
	defer f.Close()
	if _, err := f.Readdirnames(-1); err != nil {
		return fmt.Errorf("uid %d cannot list the case directory: %w", nobodyID, err)
	}
	return nil
}

func chownT(t *testing.T, path string, uid, gid int) {
	t.Helper()
	ok(t, unix.Lchown(path, uid, gid), "chown %s %d:%d", path, uid, gid)
}

// openForNobody makes the case directory itself reachable (Env.Dir promises
// its parents are).
func openForNobody(t *testing.T, dir string) {
	t.Helper()
	ok(t, unix.Chmod(dir, 0o755), "chmod the case dir 0755")
}

// permCases: permission checks as the kernel makes them, run as uid 65534
// against files of root's.
func (s *suite) permCases() []Case {
	return []Case{
		{Name: "perm_read",
			Run: func(t *testing.T, dir string) {
				openForNobody(t, dir)
				writeFile(t, join(dir, "f600"), "secret", 0o600)
				writeFile(t, join(dir, "f644"), "public", 0o644)
				writeFile(t, join(dir, "g640"), "group", 0o640)
				chownT(t, join(dir, "g640"), 0, nobodyID)
				// Group bits apply to a member even when others' would allow.
				writeFile(t, join(dir, "g604"), "not for the group", 0o604)
				chownT(t, join(dir, "g604"), 0, nobodyID)
				// Owner bits apply to the owner even when others' would allow.
				writeFile(t, join(dir, "own066"), "not for the owner", 0o066)
				chownT(t, join(dir, "own066"), nobodyID, 0)
			},
			Nobody: func(dir string) error {
				if err := reach(dir); err != nil {
					return err
				}
				var c checks
				_, err := unix.Open(join(dir, "f600"), unix.O_RDONLY, 0)
				c.errno(err, "open a root 0600 file for reading", unix.EACCES)
				_, err = unix.Open(join(dir, "f600"), unix.O_WRONLY, 0)
				c.errno(err, "open a root 0600 file for writing", unix.EACCES)
				c.errno(unix.Access(join(dir, "f600"), unix.R_OK), "access R_OK of a root 0600 file", unix.EACCES)
				c.content(join(dir, "f644"), "public")
				_, err = unix.Open(join(dir, "f644"), unix.O_WRONLY, 0)
				c.errno(err, "open a root 0644 file for writing", unix.EACCES)
				c.errno(unix.Truncate(join(dir, "f644"), 0), "truncate a root 0644 file", unix.EACCES)
				c.content(join(dir, "g640"), "group")
				_, err = unix.Open(join(dir, "g604"), unix.O_RDONLY, 0)
				c.errno(err, "open a 0604 file of one's group", unix.EACCES)
				_, err = unix.Open(join(dir, "own066"), unix.O_RDONLY, 0)
				c.errno(err, "open one's own 0066 file", unix.EACCES)
				return c.err()
			}},
		{Name: "perm_create",
			Run: func(t *testing.T, dir string) {
				openForNobody(t, dir)
				mkdir(t, join(dir, "d755"), 0o755)
				writeFile(t, join(dir, "d755", "existing"), "root's", 0o666)
				mkdir(t, join(dir, "d777"), 0o777)
				mkdir(t, join(dir, "g775"), 0o775)
				chownT(t, join(dir, "g775"), 0, nobodyID)
			},
			Nobody: func(dir string) error {
				if err := reach(dir); err != nil {
					return err
				}
				var c checks
				d := join(dir, "d755")
				_, err := unix.Open(join(d, "new"), unix.O_CREAT|unix.O_WRONLY, 0o644)
				c.errno(err, "create in a root 0755 dir", unix.EACCES)
				c.errno(unix.Mkdir(join(d, "sub"), 0o755), "mkdir in a root 0755 dir", unix.EACCES)
				c.errno(unix.Symlink("x", join(d, "l")), "symlink in a root 0755 dir", unix.EACCES)
				c.errno(unix.Mkfifo(join(d, "fifo"), 0o644), "mkfifo in a root 0755 dir", unix.EACCES)
				c.errno(unix.Unlink(join(d, "existing")), "unlink in a root 0755 dir", unix.EACCES)
				c.errno(unix.Rename(join(d, "existing"), join(dir, "d777", "moved")), "rename out of a root 0755 dir", unix.EACCES)
				c.errno(unix.Link(join(d, "existing"), join(d, "link")), "link in a root 0755 dir", unix.EACCES)
				// The file's own mode lets anyone write it.
				fd, err := unix.Open(join(d, "existing"), unix.O_WRONLY|unix.O_APPEND, 0)
				c.ok(err, "open a root 0666 file for writing")
				if err == nil {
					_, err = unix.Write(fd, []byte("+nobody's"))
					c.ok(err, "write a root 0666 file")
					unix.Close(fd)
				}
				// A 0777 dir, and a group-writable one of one's group.
				for _, sub := range []string{"d777", "g775"} {
					p := join(dir, sub, "mine")
					fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
					c.ok(err, "create in "+sub)
					if err != nil {
						continue
					}
					unix.Close(fd)
					var st unix.Stat_t
					if err := unix.Lstat(p, &st); err != nil || st.Uid != nobodyID || st.Gid != nobodyID {
						c = append(c, fmt.Errorf("file created by uid %d in %s: owner %d:%d (%v), want %d:%d", nobodyID, sub, st.Uid, st.Gid, err, nobodyID, nobodyID))
					}
					c.ok(unix.Mkdir(join(dir, sub, "mydir"), 0o755), "mkdir in "+sub)
				}
				return c.err()
			}},
		{Name: "perm_chmod_other",
			Run: func(t *testing.T, dir string) {
				openForNobody(t, dir)
				writeFile(t, join(dir, "f644"), "root's", 0o644)
				writeFile(t, join(dir, "f666"), "root's", 0o666)
				mkdir(t, join(dir, "d777"), 0o777)
			},
			Nobody: func(dir string) error {
				if err := reach(dir); err != nil {
					return err
				}
				var c checks
				f644, f666 := join(dir, "f644"), join(dir, "f666")
				c.errno(unix.Chmod(f644, 0o666), "chmod of another's file", unix.EPERM)
				c.errno(unix.Chmod(f666, 0o600), "chmod of another's 0666 file", unix.EPERM)
				c.errno(unix.Chown(f644, nobodyID, nobodyID), "chown of another's file to oneself", unix.EPERM)
				c.errno(utimens(f644, past1, past1, 0), "utimensat explicit times on another's file", unix.EPERM)
				c.errno(utimens(f666, past1, past1, 0), "utimensat explicit times on another's writable file", unix.EPERM)
				c.errno(unix.UtimesNanoAt(unix.AT_FDCWD, f644, nil, 0), "utimensat now on another's unwritable file", unix.EACCES)
				c.ok(unix.UtimesNanoAt(unix.AT_FDCWD, f666, nil, 0), "utimensat now on another's writable file")
				// One's own file: chmod and chown to one's own group are allowed,
				// giving it away is not.
				mine := join(dir, "d777", "mine")
				fd, err := unix.Open(mine, unix.O_CREAT|unix.O_WRONLY, 0o644)
				c.ok(err, "create one's own file")
				if err == nil {
					unix.Close(fd)
					c.ok(unix.Chmod(mine, 0o600), "chmod of one's own file")
					c.ok(utimens(mine, past1, past1, 0), "utimensat explicit times on one's own file")
					c.ok(unix.Chown(mine, -1, nobodyID), "chown of one's own file to one's own group")
					c.errno(unix.Chown(mine, 0, -1), "chown of one's own file to root", unix.EPERM)
					c.errno(unix.Chown(mine, -1, 0), "chown of one's own file to a group one is not in", unix.EPERM)
				}
				return c.err()
			}},
		{Name: "perm_write_clears_setuid",
			Run: func(t *testing.T, dir string) {
				openForNobody(t, dir)
				for _, n := range []string{"write", "writes", "truncate", "otrunc"} {
					p := join(dir, n)
					writeFile(t, p, "root's", 0o777)
					ok(t, unix.Chmod(p, 0o6777), "chmod setuid+setgid") // group-executable: both go
				}
			},
			Nobody: func(dir string) error {
				if err := reach(dir); err != nil {
					return err
				}
				// Without CAP_FSETID, writing or truncating a file clears its
				// S_ISUID, and its S_ISGID when it is group-executable.
				var c checks
				mode := func(n string) uint32 {
					var st unix.Stat_t
					if err := unix.Lstat(join(dir, n), &st); err != nil {
						c.ok(err, "lstat "+n)
					}
					return st.Mode & 0o7777
				}
				want := func(n, op string) {
					if m := mode(n); m != 0o777 {
						c.ok(fmt.Errorf("mode %#o after %s, want 0777", m, op), op)
					}
				}
				if fd, err := unix.Open(join(dir, "write"), unix.O_WRONLY|unix.O_APPEND, 0); err != nil {
					c.ok(err, "open for writing")
				} else {
					_, err := unix.Write(fd, []byte("+"))
					c.ok(err, "write")
					unix.Close(fd)
					want("write", "a write")
				}
				// Several writes through one descriptor: the first clears
				// them, the rest find nothing to clear.
				if fd, err := unix.Open(join(dir, "writes"), unix.O_WRONLY|unix.O_APPEND, 0); err != nil {
					c.ok(err, "open for writing")
				} else {
					for i := range 3 {
						_, err := unix.Write(fd, []byte("+"))
						c.ok(err, fmt.Sprintf("write %d", i))
					}
					unix.Close(fd)
					want("writes", "three writes")
				}
				c.ok(unix.Truncate(join(dir, "truncate"), 1), "truncate")
				want("truncate", "truncate")
				if fd, err := unix.Open(join(dir, "otrunc"), unix.O_WRONLY|unix.O_TRUNC, 0); err != nil {
					c.ok(err, "open O_TRUNC")
				} else {
					unix.Close(fd)
					want("otrunc", "open with O_TRUNC")
				}
				return c.err()
			}},
		{Name: "perm_sticky",
			Run: func(t *testing.T, dir string) {
				openForNobody(t, dir)
				sd := join(dir, "sticky")
				mkdir(t, sd, 0o1777)
				writeFile(t, join(sd, "roots"), "root's", 0o666)
				writeFile(t, join(sd, "others"), "uid 1000's", 0o666)
				chownT(t, join(sd, "others"), 1000, 1000)
			},
			Nobody: func(dir string) error {
				if err := reach(dir); err != nil {
					return err
				}
				var c checks
				sd := join(dir, "sticky")
				c.errno(unix.Unlink(join(sd, "roots")), "unlink of root's file in a sticky dir", unix.EPERM)
				c.errno(unix.Unlink(join(sd, "others")), "unlink of another user's file in a sticky dir", unix.EPERM)
				c.errno(unix.Rename(join(sd, "roots"), join(sd, "renamed")), "rename of root's file in a sticky dir", unix.EPERM)
				// Writing the 0666 file is allowed (no O_CREAT: fs.protected_regular
				// may refuse O_CREAT of another's file in a sticky dir).
				fd, err := unix.Open(join(sd, "roots"), unix.O_WRONLY|unix.O_APPEND, 0)
				c.ok(err, "open a 0666 file in a sticky dir for writing")
				if err == nil {
					unix.Close(fd)
				}
				// One's own files come and go.
				mine := join(sd, "mine")
				fd, err = unix.Open(mine, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
				c.ok(err, "create in a sticky 1777 dir")
				if err == nil {
					unix.Close(fd)
					c.errno(unix.Rename(mine, join(sd, "roots")), "rename over root's file in a sticky dir", unix.EPERM)
					c.ok(unix.Rename(mine, join(sd, "mine2")), "rename of one's own file in a sticky dir")
					c.ok(unix.Unlink(join(sd, "mine2")), "unlink of one's own file in a sticky dir")
				}
				c.ok(unix.Mkdir(join(sd, "mydir"), 0o755), "mkdir in a sticky dir")
				c.ok(unix.Rmdir(join(sd, "mydir")), "rmdir of one's own dir in a sticky dir")
				return c.err()
			}},
		{Name: "perm_search",
			Run: func(t *testing.T, dir string) {
				openForNobody(t, dir)
				for _, m := range []uint32{0o700, 0o711, 0o744} {
					d := join(dir, fmt.Sprintf("d%o", m))
					mkdir(t, d, 0o755)
					writeFile(t, join(d, "f"), "inside", 0o644)
					ok(t, unix.Chmod(d, m), "chmod")
				}
			},
			Nobody: func(dir string) error {
				if err := reach(dir); err != nil {
					return err
				}
				var c checks
				d700, d711, d744 := join(dir, "d700"), join(dir, "d711"), join(dir, "d744")
				// stat of the directory itself needs search on its parent only.
				c.ok(unix.Lstat(d700, new(unix.Stat_t)), "lstat of a root 0700 dir")
				c.errno(unix.Lstat(join(d700, "f"), new(unix.Stat_t)), "lstat inside a root 0700 dir", unix.EACCES)
				_, err := unix.Open(join(d700, "f"), unix.O_RDONLY, 0)
				c.errno(err, "open inside a root 0700 dir", unix.EACCES)
				_, err = unix.Open(d700, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				c.errno(err, "open a root 0700 dir for listing", unix.EACCES)
				c.errno(unix.Access(d700, unix.X_OK), "access X_OK of a root 0700 dir", unix.EACCES)
				// 0711: search without read.
				c.content(join(d711, "f"), "inside")
				_, err = unix.Open(d711, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				c.errno(err, "open a root 0711 dir for listing", unix.EACCES)
				// 0744: read without search: the names, but no lookup.
				if f, err := os.Open(d744); err != nil {
					c.ok(err, "open a root 0744 dir for listing")
				} else {
					names, err := f.Readdirnames(-1)
					f.Close()
					c.ok(err, "list a root 0744 dir")
					if err == nil && !slices.Equal(names, []string{"f"}) {
						c = append(c, fmt.Errorf("listing of a root 0744 dir: %q, want [f]", names))
					}
				}
				c.errno(unix.Lstat(join(d744, "f"), new(unix.Stat_t)), "lstat inside a root 0744 dir", unix.EACCES)
				return c.err()
			}},
		{Name: "perm_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f600"), "secret", 0o600)
				writeFile(t, join(dir, "f644"), "public", 0o644)
				mkdir(t, join(dir, "d700"), 0o755)
				writeFile(t, join(dir, "d700", "f"), "inside", 0o644)
				ok(t, unix.Chmod(join(dir, "d700"), 0o700), "chmod")
				mkdir(t, join(dir, "d755"), 0o755)
				writeFile(t, join(dir, "d755", "f"), "inside", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				openForNobody(t, dir)
				// Copy-ups (data and directory) must keep owner and mode.
				fd := open(t, join(dir, "f600"), unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+more")
				writeFile(t, join(dir, "d700", "new"), "new", 0o644)
				writeFile(t, join(dir, "d755", "new"), "new", 0o644)
			},
			Nobody: func(dir string) error {
				if err := reach(dir); err != nil {
					return err
				}
				var c checks
				_, err := unix.Open(join(dir, "f600"), unix.O_RDONLY, 0)
				c.errno(err, "open a copied-up root 0600 file", unix.EACCES)
				c.content(join(dir, "f644"), "public")
				c.errno(unix.Lstat(join(dir, "d700", "f"), new(unix.Stat_t)), "lstat inside a lower root 0700 dir", unix.EACCES)
				c.errno(unix.Lstat(join(dir, "d700", "new"), new(unix.Stat_t)), "lstat inside a copied-up root 0700 dir", unix.EACCES)
				c.content(join(dir, "d755", "f"), "inside")
				c.content(join(dir, "d755", "new"), "new")
				_, err = unix.Open(join(dir, "d755", "mine"), unix.O_CREAT|unix.O_WRONLY, 0o644)
				c.errno(err, "create in a copied-up root 0755 dir", unix.EACCES)
				c.errno(unix.Unlink(join(dir, "d755", "f")), "unlink in a copied-up root 0755 dir", unix.EACCES)
				_, err = unix.Open(join(dir, "f644"), unix.O_WRONLY, 0)
				c.errno(err, "open a lower root 0644 file for writing", unix.EACCES)
				return c.err()
			}},
	}
}
