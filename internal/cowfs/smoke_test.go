package cowfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// mount makes a store over a fresh base and mounts it, showing main.
func mount(t *testing.T, setup func(base string)) (*FS, string, string) {
	t.Helper()
	st := newStore(t, setup)
	f, mnt := mountStore(t, st, "", 0)
	return f, st.Base(), mnt
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
