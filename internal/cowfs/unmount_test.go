package cowfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// Someone else detached the mount (umount -l by a script, fusermount -uz):
// the forced unmount should still end cleanly (the loops end, the
// notifier stops), not fail with "is not mounted".
func TestUnmountAfterExternalDetach(t *testing.T) {
	testenv.NeedFUSE(t)
	st := newStore(t, nil)
	mnt := t.TempDir()
	f, err := Mount(Config{Store: st, Mountpoint: mnt})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Unmount(true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Unmount(true) of a mount detached by someone else: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Unmount(true) hung")
	}
}

// A busy mount with a tmpfs stacked on it by someone else: Unmount(true)
// must neither unmount the other filesystem nor hang.
func TestForceUnmountWithMountOnTop(t *testing.T) {
	testenv.NeedFUSE(t)
	st := newStore(t, func(b string) { os.MkdirAll(filepath.Join(b, "d"), 0o755) })
	mnt := t.TempDir()
	f, err := Mount(Config{Store: st, Mountpoint: mnt})
	if err != nil {
		t.Fatal(err)
	}
	// busy: a process with its cwd in the FUSE mount
	sl := exec.Command("sleep", "60")
	sl.Dir = filepath.Join(mnt, "d")
	if err := sl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sl.Process.Kill(); sl.Wait() }()
	defer unix.Unmount(mnt, unix.MNT_DETACH) // our dead mount, once theirs is gone
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	os.WriteFile(filepath.Join(mnt, "theirs"), []byte("x"), 0o644)
	done := make(chan error, 1)
	go func() { done <- f.Unmount(true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Unmount(true) with a tmpfs on top: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("Unmount(true) hung with a tmpfs on top")
		sl.Process.Kill()
		unix.Unmount(mnt, unix.MNT_DETACH)
		unix.Unmount(mnt, unix.MNT_DETACH)
		<-done
	}
	if _, err := os.Stat(filepath.Join(mnt, "theirs")); err != nil {
		t.Errorf("the tmpfs stacked on the mount is gone: %v", err)
	}
}
