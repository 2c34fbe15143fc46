// Package fusemount is the lifecycle of a FUSE mount seen from outside its
// server: finding it in mountinfo, aborting its connection, detaching it.
//
// Aborting a connection ends every request waiting on it at once (they fail
// with ECONNABORTED) and ends the server's reads, so a server can stop even
// while a process holds a file or a cwd in its mount, and a killed server
// stuck in the kernel on its own mount can exit. There are two ways, and an
// Aborter tries them in order:
//
//  1. write "1" to /sys/fs/fuse/connections/N/abort (fusectl; N is the
//     mount's device number). It needs fusectl mounted there, which the
//     Aborter does itself when it is root and the filesystem is absent, and
//     it works on a mount already detached from every namespace;
//  2. umount2(MNT_FORCE), which makes the kernel call FUSE's umount_begin,
//     which aborts the connection whether or not the mount is busy. It
//     needs CAP_SYS_ADMIN and the mount still reachable at its point.
//
// Where neither is possible (not root, no fusectl) Abort fails with
// ErrCannotAbort and the caller uses the next best way: detach the mount
// and stop waiting for the server's loops, which end when the process
// exits and the kernel closes its /dev/fuse descriptor.
//
// EnableURing turns on the FUSE module's switch for FUSE over io_uring
// (root only), which arbord does at start so that its mounts can use it.
package fusemount

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// CtlDir is where fusectl is mounted.
const CtlDir = "/sys/fs/fuse/connections"

// ErrCannotAbort: neither fusectl nor a forced unmount is available.
var ErrCannotAbort = errors.New("cannot abort a FUSE connection here")

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	ID, Parent int
	Major      uint32
	Minor      uint32
	Root       string // the mount's root within its filesystem
	Point      string // the mountpoint, unescaped
	FSType     string // e.g. "fuse.branchfs", "fusectl"
	Source     string
	Options    string // per-mount options, then the superblock's
	// SuperOptions are the superblock's options alone (a cgroup v1
	// hierarchy's controllers are there).
	SuperOptions string
}

// Conn is the mount's fusectl connection number (its device number).
func (m Mount) Conn() uint64 { return uint64(m.Major)<<20 | uint64(m.Minor) }

// IsFUSE reports whether the mount is a FUSE filesystem.
func (m Mount) IsFUSE() bool {
	return m.FSType == "fuse" || m.FSType == "fuseblk" || strings.HasPrefix(m.FSType, "fuse.") || strings.HasPrefix(m.FSType, "fuseblk.")
}

// Parse reads mountinfo lines ("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 -
// ext3 /dev/root rw,errors=continue"), undoing the kernel's octal escapes
// (\040 for a space) in the paths.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 6 || len(b) < 2 {
			return nil, fmt.Errorf("mountinfo: malformed line %q", line)
		}
		var m Mount
		var err1, err2 error
		m.ID, err1 = strconv.Atoi(a[0])
		m.Parent, err2 = strconv.Atoi(a[1])
		major, minor, okDev := strings.Cut(a[2], ":")
		maj, err3 := strconv.ParseUint(major, 10, 32)
		mnr, err4 := strconv.ParseUint(minor, 10, 32)
		if err := errors.Join(err1, err2, err3, err4); err != nil || !okDev {
			return nil, fmt.Errorf("mountinfo: malformed line %q", line)
		}
		m.Major, m.Minor = uint32(maj), uint32(mnr)
		m.Root, m.Point, m.Options = Unescape(a[3]), Unescape(a[4]), a[5]
		m.FSType, m.Source = b[0], Unescape(b[1])
		if len(b) > 2 {
			m.Options += "," + b[2]
			m.SuperOptions = b[2]
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// List reads this process's mount table.
func List() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return Parse(bytes.NewReader(data))
}

// Find is the topmost mount at point (the last one listed there).
func Find(point string) (Mount, bool) {
	ms, err := List()
	if err != nil {
		return Mount{}, false
	}
	var found Mount
	ok := false
	for _, m := range ms {
		if m.Point == point {
			found, ok = m, true
		}
	}
	return found, ok
}

// Of is the mount that holds path: the one at the longest mountpoint that
// path is within (the topmost there).
func Of(path string) (Mount, bool) {
	ms, err := List()
	if err != nil {
		return Mount{}, false
	}
	var best Mount
	found := false
	for _, m := range ms {
		if Within(path, m.Point) && len(m.Point) >= len(best.Point) {
			best, found = m, true
		}
	}
	return best, found
}

// Wait polls until point is a mountpoint, exited (if not nil) is closed
// (the filesystem's server ended: an early failure), ctx ends or timeout
// passes. On failure the caller unwinds what it started: the mount, if
// it came after all, and the server.
func Wait(ctx context.Context, point string, timeout time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if _, ok := Find(point); ok {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("mount %s: the filesystem's server exited", point)
		case <-ctx.Done():
			return fmt.Errorf("mount %s: %w", point, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Under lists the mounts at or below dir, in mount order (a mount stacked
// on another comes after it).
func Under(dir string) []Mount {
	ms, err := List()
	if err != nil {
		return nil
	}
	var out []Mount
	for _, m := range ms {
		if Within(m.Point, dir) {
			out = append(out, m)
		}
	}
	return out
}

// Within reports whether path is dir or below it (both absolute).
func Within(path, dir string) bool {
	path, dir = filepath.Clean(path), filepath.Clean(dir)
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// IsBusy reports whether err says the mount is in use.
func IsBusy(err error) bool { return errors.Is(err, unix.EBUSY) }

// Detach lazily unmounts point: it disappears from the namespace at once
// and lives on while something holds a file or a cwd in it. Without
// CAP_SYS_ADMIN it asks fusermount3 (a user's own FUSE mounts only).
func Detach(point string) error {
	err := unix.Unmount(point, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EPERM) && os.Geteuid() != 0 {
		err = fusermount("-u", "-z", point)
	}
	if err != nil {
		return fmt.Errorf("detach %s: %w", point, err)
	}
	return nil
}

// DetachStale lazily unmounts the dead FUSE mounts a killed server left at
// point (stacked, if several crashes left one each). It probes with
// statfs, which always asks the FUSE server: a stat of the root can be
// answered from the kernel's attribute cache after the server died, and a
// new mount would then stack on the dead one.
func DetachStale(point string) {
	for range 8 {
		var st unix.Statfs_t
		err := unix.Statfs(point, &st)
		if !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) {
			return
		}
		if Detach(point) != nil {
			return
		}
	}
}

// fusermount runs fusermount3 (or fusermount) with args; its own words
// are the error.
func fusermount(args ...string) error {
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		if bin, err = exec.LookPath("fusermount"); err != nil {
			return fmt.Errorf("%w: no fusermount3 on PATH", unix.EPERM)
		}
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(bin), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Aborter aborts FUSE connections, by fusectl where it can and by a forced
// unmount otherwise. Its zero value uses CtlDir and logs nothing. It is
// safe for concurrent use.
type Aborter struct {
	Dir    string       // fusectl's mountpoint; "" is CtlDir
	Logger *slog.Logger // told once why fusectl cannot be used

	mu     sync.Mutex
	ready  bool // fusectl was mounted at dir when last looked
	logged bool // the reason it is not was logged
}

func (a *Aborter) dir() string {
	if a.Dir == "" {
		return CtlDir
	}
	return a.Dir
}

// EnsureCtl makes fusectl available: it is mounted already, or this
// process is root and mounts it. It tries again at every call until it
// succeeds (the fuse module, loaded by the first open of /dev/fuse, may
// make the directory appear later); the first failure is logged, once.
func (a *Aborter) EnsureCtl() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready && CtlMounted(a.dir()) {
		return nil
	}
	a.ready = false
	err := a.mountCtl()
	if err == nil {
		a.ready = true
		return nil
	}
	if a.Logger != nil && !a.logged {
		a.logged = true
		how := "aborting a FUSE connection falls back to a forced unmount"
		if os.Geteuid() != 0 {
			how = "FUSE connections cannot be aborted: a busy mount is detached and its server ends when the daemon exits"
		}
		a.Logger.Warn("fusectl unavailable; "+how, "err", err)
	}
	return err
}

// CtlMounted reports whether fusectl is mounted at dir.
func CtlMounted(dir string) bool {
	ms, err := List()
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.Point == dir && m.FSType == "fusectl" {
			return true
		}
	}
	return false
}

func (a *Aborter) mountCtl() error {
	dir := a.dir()
	if CtlMounted(dir) {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("fusectl is not mounted at %s and mounting it needs root", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("fusectl: %w (is the fuse module loaded?)", err)
	}
	if err := unix.Mount("fusectl", dir, "fusectl", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount fusectl at %s: %w", dir, err)
	}
	return nil
}

// Abort aborts the connection of m. It writes fusectl's abort file when
// fusectl is (or can be made) available; otherwise, as root, it forces an
// unmount of m.Point, which aborts the connection and, if nothing holds
// the mount, unmounts it too (a caller that still wants the mountpoint
// must mount again). Without either it returns ErrCannotAbort.
func (a *Aborter) Abort(m Mount) error {
	ctlErr := a.EnsureCtl()
	if ctlErr == nil {
		err := os.WriteFile(filepath.Join(a.dir(), strconv.FormatUint(m.Conn(), 10), "abort"), []byte("1"), 0)
		if err == nil {
			return nil
		}
		if errors.Is(err, os.ErrNotExist) && CtlMounted(a.dir()) && !listed(m) {
			return nil // the connection has ended, and the mount with it
		}
		ctlErr = fmt.Errorf("abort FUSE connection %d of %s: %w", m.Conn(), m.Point, err)
		if os.Geteuid() != 0 {
			return ctlErr
		}
		// Root, and fusectl did not do it: try the forced unmount.
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("abort the FUSE connection of %s: %w (not root, and %w)", m.Point, ErrCannotAbort, ctlErr)
	}
	// A forced unmount acts on the topmost mount at the path: only when
	// that is m does it abort m's connection (umount_begin runs before the
	// busy check, so EBUSY means aborted but still held).
	if top, ok := Find(m.Point); !ok || top.ID != m.ID {
		return fmt.Errorf("abort the FUSE connection of %s: %w (fusectl: %w; and another mount is on top of it, so a forced unmount would hit that one)", m.Point, ErrCannotAbort, ctlErr)
	}
	err := unix.Unmount(m.Point, unix.MNT_FORCE|unix.UMOUNT_NOFOLLOW)
	if err == nil || IsBusy(err) {
		return nil
	}
	return fmt.Errorf("abort the FUSE connection of %s by a forced unmount: %w", m.Point, err)
}

// listed reports whether mount m (by its ID) is still in the mount table.
func listed(m Mount) bool {
	ms, err := List()
	if err != nil {
		return true
	}
	for _, o := range ms {
		if o.ID == m.ID {
			return true
		}
	}
	return false
}

// AbortAt aborts the connection of the topmost mount at point, if that is a
// FUSE mount; a point with no FUSE mount on top is no error.
func (a *Aborter) AbortAt(point string) error {
	m, ok := Find(point)
	if !ok || !m.IsFUSE() {
		return nil
	}
	return a.Abort(m)
}
