package fsbench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestMain serves an Arbor mount when re-executed as its server (NewArbor).
func TestMain(m *testing.M) {
	if os.Getenv(ServeEnv) != "" {
		os.Exit(Serve(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// TestArborServedByChild: an Arbor mount under benchmark is served by
// another process (this one holds no /dev/fuse), and works from here.
func TestArborServedByChild(t *testing.T) {
	testenv.NeedFUSE(t)
	base, scratch := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := NewArbor(1)
	root, err := sys.Setup(t.Context(), base, scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Teardown(t.Context())
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); l == "/dev/fuse" {
			t.Fatalf("the benchmark process holds /dev/fuse (fd %s): it serves a mount itself", fd.Name())
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "a")); err != nil || string(b) != "a" {
		t.Fatalf("read through the mount: %q, %v", b, err)
	}
	br, err := sys.(Brancher).Branch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(br.Root(), "b"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := br.Commit(t.Context(), CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "b")); err != nil || string(b) != "b" {
		t.Fatalf("after the commit the mount reads b as %q, %v", b, err)
	}
	if d := sys.(ServiceTimer).LastService(); d <= 0 {
		t.Errorf("the server's own time for the commit: %v", d)
	}
	if err := sys.Teardown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
