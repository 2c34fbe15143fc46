package fusemount

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

func mountFUSE(t *testing.T) (string, Mount) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	srv, err := fs.Mount(dir, &fs.Inode{}, &fs.Options{MountOptions: fuse.MountOptions{Name: "reviewfs", DirectMount: true}})
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() {
		unix.Unmount(dir, unix.MNT_DETACH)
		srv.Unmount()
	})
	m, ok := Find(dir)
	if !ok || !m.IsFUSE() {
		t.Fatal("not in mountinfo")
	}
	return dir, m
}

func alive(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil
}

// TestForceSparesMountOnTop: without fusectl, Abort(m) must not force an
// unmount of another mount stacked on m (it would unmount that one and
// leave m's connection alive), and must not say it aborted m.
func TestForceSparesMountOnTop(t *testing.T) {
	dir, m := mountFUSE(t)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	a := &Aborter{Dir: filepath.Join(t.TempDir(), "nofusectl")}
	err := a.Abort(m)
	top, _ := Find(dir)
	t.Logf("Abort: %v; top now %s (id %d), fuse id %d", err, top.FSType, top.ID, m.ID)
	if top.FSType != "tmpfs" {
		t.Errorf("Abort of the FUSE mount unmounted the tmpfs stacked on it")
	}
	if err == nil && top.ID == m.ID && alive(dir) {
		t.Errorf("Abort returned nil but the FUSE connection is alive")
	}
}

// TestCtlGoneAfterEnsure: fusectl unmounted after EnsureCtl saw it: a
// write to N/abort then fails with ENOENT, which must not be read as "the
// connection ended".
func TestCtlGoneAfterEnsure(t *testing.T) {
	dir, m := mountFUSE(t)
	ctl := t.TempDir()
	if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { unix.Unmount(ctl, unix.MNT_DETACH) }) // Abort may mount it again
	a := &Aborter{Dir: ctl}
	if err := a.EnsureCtl(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(ctl, 0); err != nil {
		t.Fatal(err)
	}
	err := a.Abort(m)
	if err == nil && alive(dir) {
		t.Errorf("Abort returned nil but the connection is alive (fusectl went away after EnsureCtl)")
	}
}

// TestCtlLater: a failure of EnsureCtl is not remembered for good:
// fusectl that becomes available later (the fuse module loaded after
// arbord started, an admin mounting it) is used.
func TestCtlLater(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctl := filepath.Join(t.TempDir(), "conn")
	a := &Aborter{Dir: ctl}
	if err := a.EnsureCtl(); err == nil {
		t.Fatal("EnsureCtl of a missing dir succeeded")
	}
	if err := os.Mkdir(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
		t.Skip(err)
	}
	defer unix.Unmount(ctl, unix.MNT_DETACH)
	if err := a.EnsureCtl(); err != nil {
		t.Errorf("fusectl is mounted at %s now, but EnsureCtl still says: %v", ctl, err)
	}
}
