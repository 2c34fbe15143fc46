package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestForkFailsWhenAWriterCannotBeKept: a fork of main while a file is open
// for writing must preserve the file's content into the snapshot; when it
// cannot (the store's disk is full), the fork fails and leaves no child,
// now or after a reopen, instead of succeeding with children that see the
// writer's later writes.
func TestForkFailsWhenAWriterCannotBeKept(t *testing.T) {
	testenv.NeedRoot(t, "to mount a small tmpfs")
	base, dir := t.TempDir(), t.TempDir()
	big := make([]byte, 2<<20)
	if err := os.WriteFile(filepath.Join(base, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	s, err := Open(Config{Dir: dir, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	main, _ := s.Branch(Main)
	fd, res, err := s.OpenFile(main, "big", unix.O_WRONLY, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	closeWriter := func() {
		if fd >= 0 {
			unix.Close(fd)
			s.CloseWrite(res.Writer)
			fd = -1
		}
	}
	defer closeWriter()

	err = s.Fork(Main, "c")
	if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, api.ErrNoSpace) {
		t.Fatalf("fork while big is open for writing on a full store: %v, want ENOSPC", err)
	}
	if _, err := s.Branch("c"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("after the failed fork, branch c: %v, want not found", err)
	}
	closeWriter()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Config{Dir: dir, Base: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Branch("c"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("after a reopen, branch c: %v, want not found", err)
	}
}
