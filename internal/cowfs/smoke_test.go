package cowfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// mount makes a store over a fresh base and mounts it.
func mount(t *testing.T, setup func(base string)) (*FS, string, string) {
	t.Helper()
	testenv.NeedFUSE(t)
	base := t.TempDir()
	if setup != nil {
		setup(base)
	}
	st, err := store.Open(store.Config{Dir: t.TempDir(), Base: base})
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	f, err := Mount(Config{Store: st, Mountpoint: mnt})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(true); err != nil {
			t.Error(err)
		}
		st.Close()
	})
	return f, base, mnt
}

func TestSmokeMount(t *testing.T) {
	f, base, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "a"), []byte("base"), 0o644) })
	if d, err := os.ReadFile(filepath.Join(mnt, "a")); err != nil || string(d) != "base" {
		t.Fatalf("read a: %q %v", d, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, ctlName), []byte("create:x"), 0); err != nil {
		t.Fatal(err)
	}
	if f.Current() != "x" {
		t.Fatalf("current %s", f.Current())
	}
	if err := os.WriteFile(filepath.Join(mnt, "a"), []byte("in x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, _ := os.ReadFile(filepath.Join(base, "a")); string(d) != "base" {
		t.Fatalf("base changed: %q", d)
	}
	if d, _ := os.ReadFile(filepath.Join(mnt, "@main", "a")); string(d) != "base" {
		t.Fatalf("@main: %q", d)
	}
	if d, _ := os.ReadFile(filepath.Join(mnt, "a")); string(d) != "in x" {
		t.Fatalf("x: %q", d)
	}
	fd, err := unix.Open(filepath.Join(mnt, ctlName), unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlCommit, 0); e != 0 {
		t.Fatal(e)
	}
	if d, _ := os.ReadFile(filepath.Join(base, "a")); string(d) != "in x" {
		t.Fatalf("base after commit: %q", d)
	}
	if f.Current() != "main" {
		t.Fatalf("current after commit %s", f.Current())
	}
}
