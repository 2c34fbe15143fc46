package cowfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// A mount on a checked directory (Config.MountDir, as root): the mount(2)
// targets /proc/self/fd/N, the descriptor the caller checked, so a rename
// or a symlink put in place of a component of the mountpoint after the
// check cannot move the mount elsewhere (runc mounts the same way). go-fuse
// then serves the /dev/fuse descriptor given as its "/dev/fd/N" mountpoint,
// and this file does what go-fuse does for a path: the poll hack after the
// mount, the unmount.

// mountAt mounts a FUSE filesystem with o's options on dir and returns the
// /dev/fuse descriptor that serves it. It mirrors go-fuse's mountDirect.
func mountAt(dir *os.File, o *fuse.MountOptions) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return -1, fmt.Errorf("stat mountpoint: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return -1, fmt.Errorf("mountpoint is not a directory")
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/fuse: %w", err)
	}
	opts := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", st.Mode&unix.S_IFMT),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", o.MaxWrite),
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	for _, opt := range o.Options {
		switch opt {
		case "nodev":
			flags |= unix.MS_NODEV
		case "dev":
			flags &^= unix.MS_NODEV
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "suid":
			flags &^= unix.MS_NOSUID
		case "noexec":
			flags |= unix.MS_NOEXEC
		case "exec":
			flags &^= unix.MS_NOEXEC
		default:
			opts = append(opts, opt)
		}
	}
	if o.AllowOther {
		opts = append(opts, "allow_other")
	}
	source := o.FsName
	if source == "" {
		source = o.Name
	}
	target := fmt.Sprintf("/proc/self/fd/%d", dir.Fd())
	if err := unix.Mount(source, target, "fuse."+o.Name, flags, strings.Join(opts, ",")); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount: %w", err)
	}
	return fd, nil
}

// pollHack does what go-fuse's WaitMount does for a path mountpoint: an
// open and poll of its hidden file, so the kernel learns at once that
// polling is not supported. No symlink is followed and the open does not
// block, whatever now stands at the path.
func pollHack(mp string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, mp+"/.go-fuse-epoll-hack", &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("poll hack: %w", err)
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
	return nil
}

// mountDev is the device number of the FUSE mount root at mp, reached with
// no symlink followed.
func mountDev(mp string) (uint64, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, mp, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return 0, fmt.Errorf("the mount at %s: %w", mp, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	var sfs unix.Statfs_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return 0, err
	}
	if sfs.Type != unix.FUSE_SUPER_MAGIC {
		return 0, fmt.Errorf("%s is not the FUSE mount just made", mp)
	}
	return uint64(st.Dev), nil
}

// ours reports whether the mount at the path mp is this mount: an entry of
// /proc/self/mountinfo at exactly mp (the kernel lists canonical paths, so
// a path whose ancestor became a symlink is not there) with the device
// number it had when mounted. It reads no file of the mount: a stat would
// be a request to our own server, which may be the one that is stuck.
func (f *FS) ours(mp string) bool {
	m, ok := fusemount.Find(mp)
	return ok && m.Major == unix.Major(f.dev) && m.Minor == unix.Minor(f.dev)
}

// unmountAt unmounts a mount made by mountAt: only if the path still leads
// to it (no symlink followed on the way; a renamed ancestor fails the check
// rather than unmounting what now stands there), retrying a busy mount a
// few times as go-fuse does (the kernel can take a moment to see the last
// file closed).
func (f *FS) unmountAt() error {
	mp := f.cfg.Mountpoint
	if !f.ours(mp) {
		return fmt.Errorf("unmount %s: the path no longer leads to this mount", mp)
	}
	var err error
	delay := time.Duration(0)
	for range 5 {
		if err = unix.Unmount(mp, unix.UMOUNT_NOFOLLOW); err == nil || !errors.Is(err, syscall.EBUSY) {
			break
		}
		delay = 2*delay + 5*time.Millisecond
		time.Sleep(delay)
	}
	return err
}
