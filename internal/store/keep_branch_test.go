package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// A fork of a non-main branch whose head holds a file open for writing,
// on a store too full to copy it: the fork fails; the store must be
// consistent (refs, kids), now and after a reopen, and a still sees its
// writer's writes.
func TestForkOfBranchFailsKeep(t *testing.T) {
	testenv.NeedRoot(t, "tmpfs")
	base, dir := t.TempDir(), t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=3m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	s, err := Open(Config{Dir: dir, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	if err := s.Fork(Main, "a"); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Branch("a")
	big := make([]byte, 2<<20)
	if err := s.Create(a, "big", false, byPath(func(real string) error { return os.WriteFile(real, big, 0o644) })); err != nil {
		t.Fatal(err)
	}
	fd, res, err := s.OpenFile(a, "big", unix.O_WRONLY, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	ferr := s.Fork("a", "c")
	t.Logf("fork: %v", ferr)
	if ferr == nil {
		t.Skip("the fork kept the writer: no failure to unwind")
	}
	if _, err := s.Branch("c"); err == nil {
		t.Fatal("c exists after the failed fork")
	}
	if err := s.checkRefs(); err != nil {
		t.Fatalf("after the failed fork: %v", err)
	}
	if _, err := unix.Pwrite(fd, []byte("XY"), 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	s.CloseWrite(res.Writer)
	a, _ = s.Branch("a")
	r, err := s.Resolve(a, "big")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2)
	f, _ := os.Open(r.Real)
	f.Read(got)
	f.Close()
	if string(got) != "XY" {
		t.Errorf("a reads %q at big's start after its writer wrote XY", got)
	}
	s.Close()
	if s, err = Open(Config{Dir: dir, Base: base}); err != nil {
		t.Fatal(err)
	}
	if err := s.checkRefs(); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	_ = filepath.Join
}
