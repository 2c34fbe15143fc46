package cowfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestFusermountCause: when fusermount3 fails, its own words reach the
// error (they went only to the daemon's log before: "fusermount exited with
// code 256"), under api.ErrUnavailable.
func TestFusermountCause(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'fusermount3: failed to open /dev/fuse: Permission denied' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "fusermount3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	st := newStoreNoFUSE(t)
	_, err := Mount(Config{Store: st, Mountpoint: t.TempDir(), viaFusermount: true})
	if !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("Mount: %v, want an error wrapping ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "fusermount3: failed to open /dev/fuse: Permission denied") {
		t.Fatalf("Mount: %q does not carry fusermount3's stderr", err)
	}
	if api.Code(err) != api.CodeUnavailable {
		t.Fatalf("code %q, want %q", api.Code(err), api.CodeUnavailable)
	}
}

// TestFusermountServes: a mount made through fusermount3 (the path of every
// daemon that is not root) serves files and unmounts, busy refused first.
func TestFusermountServes(t *testing.T) {
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("no fusermount3 on PATH (Debian: apt-get install fuse3)")
	}
	st := newStore(t, func(base string) { os.WriteFile(filepath.Join(base, "a.txt"), []byte("a"), 0o644) })
	mnt := t.TempDir()
	f, err := Mount(Config{Store: st, Mountpoint: mnt, viaFusermount: true})
	if err != nil {
		t.Fatal(err)
	}
	if !f.fusermounted {
		t.Fatal("not mounted through fusermount3")
	}
	done := false
	t.Cleanup(func() {
		if !done {
			f.Unmount(true)
		}
	})
	if b, err := os.ReadFile(filepath.Join(mnt, "a.txt")); err != nil || string(b) != "a" {
		t.Fatalf("read through the mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	busy, err := os.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(false); !errors.Is(err, api.ErrBusy) {
		t.Errorf("Unmount with an open directory: %v, want ErrBusy", err)
	}
	busy.Close()
	if err := f.Unmount(false); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	done = true
	if _, ok := fusemount.Find(mnt); ok {
		t.Fatal("still mounted after Unmount")
	}
}

// newStoreNoFUSE is a store for a test that never mounts.
func newStoreNoFUSE(t *testing.T) *store.Store {
	st, err := store.Open(store.Config{Dir: t.TempDir(), Base: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestNoDevFuse: on a host without /dev/fuse (here: a mount namespace with
// an empty /dev) a mount fails as unavailable and names the device. The
// test re-runs itself under unshare(1); the child does the mount.
func TestNoDevFuse(t *testing.T) {
	if os.Getenv("COWFS_NO_DEV_FUSE_CHILD") == "1" {
		if _, err := os.Stat("/dev/fuse"); err == nil {
			t.Fatal("the child still sees /dev/fuse")
		}
		st := newStoreNoFUSE(t)
		_, err := Mount(Config{Store: st, Mountpoint: t.TempDir()})
		if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "/dev/fuse") {
			t.Fatalf("Mount without /dev/fuse: %v, want ErrUnavailable naming /dev/fuse", err)
		}
		return
	}
	testenv.NeedFUSE(t)
	bin, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	cmd := exec.Command(bin, "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs none /dev && exec "$0" -test.run '^TestNoDevFuse$' -test.count=1`, os.Args[0])
	cmd.Env = append(os.Environ(), "COWFS_NO_DEV_FUSE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PASS") {
		t.Fatalf("child did not pass:\n%s", out)
	}
}

// TestCtlErrnoUnavailable: the control file answers an unavailable error
// with EOPNOTSUPP (the api error table's errno column), not EIO.
func TestCtlErrnoUnavailable(t *testing.T) {
	if got := ctlErrno(fmt.Errorf("mount: %w", api.Errorf(api.ErrUnavailable, "no /dev/fuse"))); got != syscall.EOPNOTSUPP {
		t.Fatalf("ctlErrno(unavailable) = %v, want EOPNOTSUPP", got)
	}
}
