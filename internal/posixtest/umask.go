package posixtest

import (
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// withUmask runs fn with the umask mask, on a thread of its own: the umask
// is the process's (shared with every thread, and with the FUSE server when
// it runs in this process) unless a thread unshares its fs_struct. The
// thread is never unlocked, so it ends with the goroutine and its umask
// with it. fn reports by its error (it does not run on t's goroutine).
func withUmask(t *testing.T, mask int, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		lockThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- fmt.Errorf("unshare(CLONE_FS) for a umask of this thread's own: %w", err)
			return
		}
		unix.Umask(mask)
		done <- fn()
	}()
	ok(t, <-done, "with umask %#o", mask)
}

// lockThread locks the goroutine to its thread for good: the thread,
// changed, ends with the goroutine.
func lockThread() { runtime.LockOSThread() }

// modeIs checks path's permission bits.
func modeIs(path string, want uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Errorf("lstat %s: %w", path, err)
	}
	if got := st.Mode & 07777; got != want {
		return fmt.Errorf("%s: mode %#o, want %#o", path, got, want)
	}
	return nil
}

// umaskCases: the modes of new objects are the asked mode without the
// caller's umask bits, exactly (not the filesystem server's umask), and a
// directory made in a setgid directory inherits its setgid bit and group.
func (s *suite) umaskCases() []Case {
	var cases []Case
	for _, mask := range []int{0, 0o002, 0o022, 0o077} {
		m := uint32(mask)
		cases = append(cases, Case{Name: fmt.Sprintf("umask_%03o", mask),
			Run: func(t *testing.T, dir string) {
				withUmask(t, mask, func() error {
					var c checks
					c.ok(unix.Mkdir(join(dir, "d"), 0o777), "mkdir d 0777")
					c.ok(unix.Mkdir(join(dir, "sticky"), 0o1777), "mkdir sticky 01777")
					fd, err := unix.Open(join(dir, "f"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
					c.ok(err, "create f 0666")
					if err == nil {
						var st unix.Stat_t
						c.ok(unix.Fstat(fd, &st), "fstat f")
						if got := st.Mode & 07777; got != 0o666&^m {
							c = append(c, fmt.Errorf("fstat of the created descriptor: mode %#o, want %#o", got, 0o666&^m))
						}
						unix.Close(fd)
					}
					c.ok(unix.Mkfifo(join(dir, "p"), 0o666), "mkfifo p 0666")
					c.ok(unix.Mknod(join(dir, "n"), unix.S_IFIFO|0o640, 0), "mknod n fifo 0640")
					c.ok(unix.Mkdir(join(dir, "x"), 0o751), "mkdir x 0751")
					for _, w := range []struct {
						name string
						want uint32
					}{{"d", 0o777 &^ m}, {"sticky", 0o1777 &^ m}, {"f", 0o666 &^ m}, {"p", 0o666 &^ m}, {"n", 0o640 &^ m}, {"x", 0o751 &^ m}} {
						if err := modeIs(join(dir, w.name), w.want); err != nil {
							c = append(c, err)
						}
					}
					return c.err()
				})
			}})
	}
	cases = append(cases, Case{Name: "umask_setgid_dir",
		Run: func(t *testing.T, dir string) {
			requireRoot(t)
			g := join(dir, "g")
			mkdir(t, g, 0o755)
			chownT(t, g, 0, nobodyID)
			ok(t, unix.Chmod(g, 0o2775), "chmod g 02775")
			withUmask(t, 0o022, func() error {
				var c checks
				c.ok(unix.Mkdir(join(g, "sub"), 0o777), "mkdir g/sub")
				fd, err := unix.Open(join(g, "f"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
				c.ok(err, "create g/f")
				if err == nil {
					unix.Close(fd)
				}
				for _, w := range []struct {
					name string
					want uint32
				}{{"sub", 0o2755}, {"f", 0o644}} {
					p := join(g, w.name)
					if err := modeIs(p, w.want); err != nil {
						c = append(c, err)
					}
					var st unix.Stat_t
					if err := unix.Lstat(p, &st); err == nil && st.Gid != nobodyID {
						c = append(c, fmt.Errorf("%s: gid %d, want the setgid directory's %d", p, st.Gid, nobodyID))
					}
				}
				return c.err()
			})
		}})
	return cases
}
