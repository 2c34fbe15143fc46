package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestCopyUpKeepsXattrsOrFails: a copy-up carries the file's xattrs, and
// where the layer's filesystem refuses one (ramfs takes no user.* xattrs)
// the copy-up fails, instead of handing out a copy without it.
func TestCopyUpKeepsXattrsOrFails(t *testing.T) {
	testenv.NeedRoot(t, "to mount a ramfs")
	base := t.TempDir()
	f := filepath.Join(base, "f")
	if err := os.WriteFile(f, []byte("base"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(f, "user.tag", []byte("kept"), 0); err != nil {
		t.Skipf("the base's filesystem takes no user xattrs: %v", err)
	}

	// On a filesystem that takes them, the copy has the xattr.
	s, err := Open(Config{Dir: t.TempDir(), Base: base})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Fork(Main, "a"); err != nil {
		t.Fatal(err)
	}
	b, _ := s.Branch("a")
	p, err := s.CopyUp(b, "f")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.getXattr(p, "user.tag"); err != nil || string(v) != "kept" {
		t.Fatalf("copied-up xattr: %q, %v", v, err)
	}
	s.Close() // one store per base

	// On ramfs the copy-up fails, and the branch still shows the base file.
	dir := t.TempDir()
	if err := unix.Mount("ramfs", dir, "ramfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	s2, err := Open(Config{Dir: dir, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Fork(Main, "a"); err != nil {
		t.Fatal(err)
	}
	b2, _ := s2.Branch("a")
	if _, err := s2.CopyUp(b2, "f"); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("copy-up onto ramfs of a file with user.tag: %v, want EOPNOTSUPP", err)
	}
	res, err := s2.Resolve(b2, "f")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(res.Real); err != nil || string(data) != "base" {
		t.Fatalf("after the failed copy-up a reads %q, %v", data, err)
	}
	if v, err := s2.getXattr(res.Real, "user.tag"); err != nil || string(v) != "kept" {
		t.Fatalf("after the failed copy-up a's f has xattr %q, %v", v, err)
	}
}
