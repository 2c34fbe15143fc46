package fsbench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"golang.org/x/sys/unix"
)

// isMounted reports whether path is a mount point.
func isMounted(path string) bool {
	_, ok := fusemount.Find(path)
	return ok
}

// detachUnder lazily unmounts every mount under dir, deepest first, and
// returns their mount points.
func detachUnder(dir string) []string {
	var left []string
	for _, m := range fusemount.Under(dir) {
		if m.Point != dir {
			left = append(left, m.Point)
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
				return fmt.Errorf("unmount %s: %w (detach: %w)", mnt, err, derr)
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
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
