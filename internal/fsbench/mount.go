package fsbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

type mountInfo struct {
	point, fstype, source, options string
}

// mounts reads /proc/self/mountinfo.
func mounts() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 6 || len(b) < 2 {
			continue
		}
		mi := mountInfo{point: unescapeMount(a[4]), options: a[5], fstype: b[0], source: b[1]}
		if len(b) > 2 {
			mi.options += "," + b[2]
		}
		out = append(out, mi)
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMounted reports whether path is a mount point.
func isMounted(path string) bool {
	ms, err := mounts()
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.point == path {
			return true
		}
	}
	return false
}

// mountOf returns the mount that holds path (the longest mount-point prefix).
func mountOf(path string) (mountInfo, bool) {
	ms, err := mounts()
	if err != nil {
		return mountInfo{}, false
	}
	best, found := mountInfo{}, false
	for _, m := range ms {
		if within(path, m.point) && len(m.point) >= len(best.point) {
			best, found = m, true
		}
	}
	return best, found
}

func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// detachUnder lazily unmounts every mount under dir, deepest first, and
// returns their mount points.
func detachUnder(dir string) []string {
	ms, err := mounts()
	if err != nil {
		return nil
	}
	var left []string
	for _, m := range ms {
		if m.point != dir && within(m.point, dir) {
			left = append(left, m.point)
		}
	}
	sort.Slice(left, func(i, j int) bool { return len(left[i]) > len(left[j]) })
	for _, p := range left {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !isRoot() {
			// A FUSE mount of ours as a user: fusermount3 can detach it.
			_ = runQuiet(context.Background(), 5*time.Second, "fusermount3", "-u", "-z", p)
		}
	}
	return left
}

// unmount unmounts mnt, retrying while it is busy for up to two seconds,
// then detaches it lazily. Without root, it uses fusermount3 (FUSE mounts).
func unmount(ctx context.Context, mnt string) error {
	if !isMounted(mnt) {
		return nil
	}
	if !isRoot() {
		if err := runQuiet(ctx, 10*time.Second, "fusermount3", "-u", mnt); err == nil {
			return nil
		}
		return runQuiet(ctx, 10*time.Second, "fusermount3", "-u", "-z", mnt)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Unmount(mnt, 0)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) || ctx.Err() != nil {
			if derr := unix.Unmount(mnt, unix.MNT_DETACH); derr != nil {
				return fmt.Errorf("unmount %s: %w (detach: %v)", mnt, err, derr)
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMounted polls until mnt is a mount point, exited reports an early
// failure, or the timeout passes.
func waitMounted(ctx context.Context, mnt string, timeout time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if isMounted(mnt) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("mount %s: the filesystem process exited", mnt)
		case <-ctx.Done():
			return fmt.Errorf("mount %s: %w", mnt, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// dropCaches writes back dirty data and drops the kernel's page, dentry and
// inode caches, then the system's own caches. With QuickCold it only evicts
// the big file's pages.
func (h *harness) dropCaches(ctx context.Context, s System, root string) error {
	if h.cfg.QuickCold {
		f, err := os.Open(filepath.Join(root, "big"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop caches: %w", err)
	}
	if d, ok := s.(CacheDropper); ok {
		if err := d.DropCaches(ctx); err != nil {
			return fmt.Errorf("drop %s caches: %w", s.Name(), err)
		}
	}
	return nil
}

// removeAll is os.RemoveAll that also removes directories without write or
// search permission (overlayfs leaves work/work at mode 000). Callers
// detach mounts under dir first.
func removeAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
