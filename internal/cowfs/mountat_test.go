package cowfs

import (
	"github.com/arbor-dev/arbor/internal/fusemount"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func isMount(p string) bool {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == p {
			return true
		}
	}
	return false
}

func openPath(t *testing.T, p string) *os.File {
	t.Helper()
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), p)
	t.Cleanup(func() { f.Close() })
	return f
}

// TestMountDir: as root a mount given MountDir lands on that directory, and
// unmounts from there.
func TestMountDir(t *testing.T) {
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "a"), []byte("base"), 0o644) })
	mp := t.TempDir()
	before, err := fusemount.List()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Mount(Config{Store: st, Mountpoint: mp, MountDir: openPath(t, mp)})
	if err != nil {
		t.Fatal(err)
	}
	// The one new mount is at mp: nothing landed on /dev/fuse (go-fuse
	// mounting its "/dev/fd/N" once did).
	after, _ := fusemount.List()
	old := map[int]bool{}
	for _, m := range before {
		old[m.ID] = true
	}
	for _, m := range after {
		if !old[m.ID] && m.Point != mp {
			fusemount.Detach(m.Point)
			t.Fatalf("a mount given MountDir %s also mounted %s", mp, m.Point)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mp, "a")); err != nil || string(b) != "base" {
		t.Fatalf("read through the mount: %q %v", b, err)
	}
	if err := f.Unmount(false); err != nil {
		t.Fatal(err)
	}
	if isMount(mp) {
		t.Fatal("still mounted after Unmount")
	}
}

// TestMountDirSwap: the checked directory is moved and a symlink to another
// directory put at its name before the mount (the race a path mount loses:
// it follows the symlink). The mount never lands on the symlink's target;
// it fails, and leaves nothing mounted anywhere.
func TestMountDirSwap(t *testing.T) {
	st := newStore(t, nil)
	dir := t.TempDir()
	mp, moved, target := filepath.Join(dir, "mp"), filepath.Join(dir, "moved"), filepath.Join(dir, "target")
	for _, p := range []string{mp, target} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	checked := openPath(t, mp)
	if err := os.Rename(mp, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, mp); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(Config{Store: st, Mountpoint: mp, MountDir: checked})
	if err == nil {
		f.Unmount(true)
		t.Fatal("mounted although the checked directory had moved")
	}
	t.Logf("refused: %v", err)
	for _, p := range []string{target, moved, mp} {
		if isMount(p) {
			unix.Unmount(p, unix.MNT_DETACH)
			t.Errorf("%s is mounted", p)
		}
	}
}

// TestUnmountAfterAncestorSwap: an ancestor of the mountpoint is renamed and
// a symlink put in its place, so the recorded path leads elsewhere. Unmount
// must not unmount what the path now leads to.
func TestUnmountAfterAncestorSwap(t *testing.T) {
	st := newStore(t, nil)
	dir := t.TempDir()
	parent, other := filepath.Join(dir, "p"), filepath.Join(dir, "other")
	mp := filepath.Join(parent, "mp")
	for _, p := range []string{mp, filepath.Join(other, "mp")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Something else mounted at other/mp: what the swapped path will reach.
	if err := unix.Mount("tmpfs", filepath.Join(other, "mp"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(filepath.Join(other, "mp"), unix.MNT_DETACH)
	f, err := Mount(Config{Store: st, Mountpoint: mp, MountDir: openPath(t, mp)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(parent, filepath.Join(dir, "p2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, parent); err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(true); err == nil {
		t.Error("Unmount through a swapped ancestor succeeded")
	}
	if !isMount(filepath.Join(other, "mp")) {
		t.Error("the unrelated mount the swapped path leads to was unmounted")
	}
	// Clean up the real mount by its real name.
	real := filepath.Join(dir, "p2", "mp")
	if !isMount(real) {
		t.Fatal("our mount is gone")
	}
	if err := unix.Unmount(real, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
}
