package daemon

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestOneStorePerBase: two stores over one base break snapshot isolation
// (a commit into main through one changes what a fork held by the other
// reads), so a base is held by one tree, which its mounts show, and no held
// base lies inside another. Each refusal names the
// holder; a base with one of our mounts inside it, or a mountpoint inside a
// held base, is refused too (two mounts on each other's bases grew the
// daemon without bound).
func TestOneStorePerBase(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home := filepath.Join(dir, "home")
	r, p, q := filepath.Join(dir, "r"), filepath.Join(dir, "p"), filepath.Join(dir, "q")
	writeFile(t, filepath.Join(r, "f"), "base")
	writeFile(t, filepath.Join(r, "sub", "g"), "sub")
	writeFile(t, filepath.Join(p, "f"), "p")
	writeFile(t, filepath.Join(q, "f"), "q")
	os.MkdirAll(filepath.Join(q, "m"), 0o755)
	startDaemon(t, Config{Home: home})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	must := mustDo(t, ctx, cl)
	refused := func(req api.Request, sentinel error, names string) {
		t.Helper()
		_, err := cl.Do(ctx, req)
		if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), names) {
			t.Errorf("%s %s at %s: %v, want %v naming %s", req.Op, req.Base, req.Mountpoint, err, sentinel, names)
		}
	}
	ws := filepath.Join(dir, "ws")
	// A mount of r is a view of r's tree (made for it, named after it).
	rt := must(api.Request{Op: api.OpWsMount, Base: r, Mountpoint: ws}).TreeID
	// The workspace fork c of main, and a tree on the same base.
	must(api.Request{Op: api.OpWsCreate, Mountpoint: ws, Branch: "c"})
	refused(api.Request{Op: api.OpTreeCreate, Base: r, TreeID: "t1"}, api.ErrExists, "tree "+rt)
	refused(api.Request{Op: api.OpTreeCreate, Base: filepath.Join(r, "sub"), TreeID: "t1"}, api.ErrExists, "tree "+rt)
	// A second mount of the same base shows the same tree.
	if got := must(api.Request{Op: api.OpWsMount, Base: r, Mountpoint: filepath.Join(dir, "ws2")}).TreeID; got != rt {
		t.Errorf("a second mount of r shows tree %s, not r's tree %s", got, rt)
	}

	// A tree holds p: a mount of p shows that tree; another tree on p, or
	// on a base around p, is refused naming it.
	must(api.Request{Op: api.OpTreeCreate, Base: p, TreeID: "tp"})
	if got := must(api.Request{Op: api.OpWsMount, Base: p, Mountpoint: filepath.Join(dir, "wsp")}).TreeID; got != "tp" {
		t.Errorf("a mount of tree tp's base shows tree %s", got)
	}
	refused(api.Request{Op: api.OpTreeCreate, Base: p, TreeID: "tp2"}, api.ErrExists, "tree tp")
	// A mountpoint inside a held base.
	refused(api.Request{Op: api.OpWsMount, Base: q, Mountpoint: filepath.Join(p, "m")}, api.ErrBadRequest, p)
	// Two mounts on each other's bases: the second base holds the first
	// mount.
	p2, q2 := filepath.Join(dir, "p2"), filepath.Join(dir, "q2")
	os.MkdirAll(filepath.Join(p2, "m"), 0o755)
	os.MkdirAll(filepath.Join(q2, "m"), 0o755)
	must(api.Request{Op: api.OpWsMount, Base: p2, Mountpoint: filepath.Join(q2, "m")})
	refused(api.Request{Op: api.OpWsMount, Base: q2, Mountpoint: filepath.Join(p2, "m")}, api.ErrBadRequest, filepath.Join(q2, "m"))
	refused(api.Request{Op: api.OpTreeCreate, Base: q2, TreeID: "tq"}, api.ErrBadRequest, filepath.Join(q2, "m"))
}

// TestControlFileOwner: a mount's control file belongs to whoever mounted
// it: another local user can neither write it (the kernel refuses the
// open: 0644, the owner's) nor act through an ioctl on a read-only
// descriptor (EACCES from the daemon). Before, any user could commit,
// abort or switch root's branches.
func TestControlFileOwner(t *testing.T) {
	testenv.NeedFUSE(t)
	// The system's python3 (setup.sh installs it): one under root's home
	// (pyenv) is not for uid 65534.
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Missing(t, testenv.Python, "needs "+python+": "+err.Error())
	}
	dir := tempDir(t)
	os.Chmod(dir, 0o755)
	home, base, mp := filepath.Join(dir, "home"), filepath.Join(dir, "base"), filepath.Join(dir, "ws")
	writeFile(t, filepath.Join(base, "f"), "base")
	startDaemon(t, Config{Home: home})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, req := range []api.Request{{Op: api.OpWsMount, Base: base, Mountpoint: mp}, {Op: api.OpWsCreate, Mountpoint: mp, Branch: "wip"}} {
		if _, err := cl.Do(ctx, req); err != nil {
			t.Fatalf("%s: %v", req.Op, err)
		}
	}
	writeFile(t, filepath.Join(mp, "wipfile"), "root's work in progress")
	const script = `
import errno, fcntl, os, sys
ctl = sys.argv[1]
try:
    open(ctl, "w").write("commit")
    print("write: ok")
except OSError as e:
    print("write:", errno.errorcode[e.errno])
fd = os.open(ctl, os.O_RDONLY)
try:
    fcntl.ioctl(fd, 0x6201)  # COMMIT
    print("ioctl: ok")
except OSError as e:
    print("ioctl:", errno.errorcode[e.errno])
`
	for _, ctl := range []string{filepath.Join(mp, ".branchfs_ctl"), filepath.Join(mp, "@wip", ".branchfs_ctl")} {
		cmd := exec.Command(python, "-c", script, ctl)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("as uid 65534: %v\n%s", err, out)
		}
		if got := string(out); got != "write: EACCES\nioctl: EACCES\n" {
			t.Errorf("uid 65534 on root's %s:\n%s", ctl, got)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "wipfile")); err == nil {
		t.Error("uid 65534 committed root's branch into the base")
	}
	// The owner still can.
	if err := os.WriteFile(filepath.Join(mp, ".branchfs_ctl"), []byte("commit"), 0); err != nil {
		t.Fatalf("root's own commit through the control file: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(base, "wipfile")); err != nil || string(b) != "root's work in progress" {
		t.Fatalf("after root's commit the base has %q, %v", b, err)
	}
}
