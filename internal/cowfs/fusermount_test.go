package cowfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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
// The mount is served from a child process (this test re-run), as the
// POSIX suite does: a process that serves a FUSE mount must not also use it
// and spawn programs (fusermount3 -u) at once (go-fuse's Deadlocks note).
func TestFusermountServes(t *testing.T) {
	if mnt := os.Getenv("COWFS_FUSERMOUNT_CHILD"); mnt != "" {
		fusermountChild(t, mnt)
		return
	}
	testenv.NeedFUSE(t)
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("no fusermount3 on PATH (Debian: apt-get install fuse3)")
	}
	mnt := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFusermountServes$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "COWFS_FUSERMOUNT_CHILD="+mnt)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	// next returns the child's next marker line ("child: ...").
	next := func() string {
		for lines.Scan() {
			if m, ok := strings.CutPrefix(lines.Text(), "child: "); ok {
				return m
			}
		}
		return "(the child ended)"
	}
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
		if m, ok := fusemount.Find(mnt); ok && m.FSType == "fuse.branchfs" {
			fusemount.Detach(mnt)
			t.Error("the child left its mount")
		}
	})
	if m := next(); m != "mounted" {
		t.Fatalf("child: %s", m)
	}
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
	io.WriteString(in, "unmount\n")
	if m := next(); m != "busy" {
		t.Errorf("unmount with a directory open: %s, want busy", m)
	}
	busy.Close()
	io.WriteString(in, "unmount\n")
	if m := next(); m != "unmounted" {
		t.Fatalf("unmount: %s", m)
	}
	if _, ok := fusemount.Find(mnt); ok {
		t.Fatal("still mounted after Unmount")
	}
}

// fusermountChild serves a mount through fusermount3 at mnt and unmounts it
// on each "unmount" line of stdin, answering with a marker line.
func fusermountChild(t *testing.T, mnt string) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "a.txt"), []byte("a"), 0o644)
	st, err := store.Open(store.Config{Dir: t.TempDir(), Base: base})
	if err != nil {
		fmt.Println("child: store:", err)
		return
	}
	defer st.Close()
	f, err := Mount(Config{Store: st, Mountpoint: mnt, viaFusermount: true})
	if err != nil {
		fmt.Println("child: mount:", err)
		return
	}
	if !f.fusermounted {
		fmt.Println("child: not mounted through fusermount3")
		f.Unmount(true)
		return
	}
	fmt.Println("child: mounted")
	cmds := bufio.NewScanner(os.Stdin)
	for cmds.Scan() {
		switch err := f.Unmount(false); {
		case err == nil:
			fmt.Println("child: unmounted")
			return
		case errors.Is(err, api.ErrBusy):
			fmt.Println("child: busy")
		default:
			fmt.Println("child: unmount:", err)
		}
	}
	f.Unmount(true) // the parent went away
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
	if got := ctlErrno(api.Errorf(api.ErrNotSupported, "exec needs backend jail or vm")); got != syscall.EOPNOTSUPP {
		t.Fatalf("ctlErrno(not_supported) = %v, want EOPNOTSUPP", got)
	}
}
