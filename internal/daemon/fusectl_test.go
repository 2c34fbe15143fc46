package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// A fresh host may have no fusectl mounted at /sys/fs/fuse/connections
// (the daemon then has no abort files). TestNoFuseCtl runs the tests that
// need an abort (a stop with a busy mount, the takeover from a dying
// daemon) again in a mount namespace of their own, where fusectl is
// unmounted ("absent": the daemon, as root, mounts it itself) or cannot be
// mounted ("blocked": a read-only tmpfs hides /sys/fs/fuse, and the daemon
// falls back to a forced unmount).
const fusectlEnv = "ARBOR_TEST_FUSECTL"

// prepareFuseCtl makes this process's mount namespace look like mode. It
// runs in TestMain of a child started with its own mount namespace.
func prepareFuseCtl(mode string) error {
	if fusemount.CtlMounted(fusemount.CtlDir) {
		if err := unix.Unmount(fusemount.CtlDir, 0); err != nil {
			return fmt.Errorf("unmount fusectl: %w", err)
		}
	}
	switch mode {
	case "absent":
	case "blocked":
		if err := unix.Mount("tmpfs", filepath.Dir(fusemount.CtlDir), "tmpfs", unix.MS_RDONLY, "size=4k"); err != nil {
			return fmt.Errorf("hide /sys/fs/fuse: %w", err)
		}
	default:
		return fmt.Errorf("%s=%q: want absent or blocked", fusectlEnv, mode)
	}
	if fusemount.CtlMounted(fusemount.CtlDir) {
		return errors.New("fusectl is still mounted")
	}
	return nil
}

// checkFuseCtlMode fails t unless fusectl is in the state a daemon leaves
// it in under this process's mode: mounted by the daemon where it could
// be, absent where it could not.
func checkFuseCtlMode(t *testing.T) {
	t.Helper()
	switch os.Getenv(fusectlEnv) {
	case "absent":
		if !fusemount.CtlMounted(fusemount.CtlDir) {
			t.Error("the daemon did not mount fusectl (absent, and the daemon is root)")
		}
	case "blocked":
		if fusemount.CtlMounted(fusemount.CtlDir) {
			t.Error("fusectl is mounted though /sys/fs/fuse is hidden")
		}
	}
}

func TestNoFuseCtl(t *testing.T) {
	testenv.NeedFUSE(t)
	if os.Getenv(fusectlEnv) != "" {
		t.Skip("already inside a namespace of TestNoFuseCtl")
	}
	for _, mode := range []string{"absent", "blocked"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^(TestStopWithBusyMount|TestTakeoverFromDyingDaemon)$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), fusectlEnv+"="+mode)
			cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("in a namespace with fusectl %s: %v\n%s", mode, err, out)
			}
			for _, name := range []string{"TestStopWithBusyMount", "TestTakeoverFromDyingDaemon"} {
				if !strings.Contains(string(out), "--- PASS: "+name) {
					t.Errorf("%s did not pass with fusectl %s:\n%s", name, mode, out)
				}
			}
			if mode == "blocked" && !strings.Contains(string(out), "fusectl unavailable") {
				t.Errorf("the daemon did not say why it cannot use fusectl:\n%s", out)
			}
		})
	}
}

// stuckEnv makes the test binary play a daemon that cannot die: it holds
// the home's lock and serves a FUSE mount under the home, on which one of
// its own threads waits for an answer the server is not giving. After a
// SIGKILL the server's threads are gone, and the waiting thread sleeps in
// the kernel uninterruptibly (the request had reached userspace), so the
// process never exits and never frees the lock or its /dev/fuse, until the
// connection is aborted. That is what a new daemon must do to take over.
const stuckEnv = "ARBOR_TEST_STUCK_HOME"

type hangRoot struct {
	fs.Inode
	entered chan struct{}
	once    sync.Once
}

var _ fs.NodeLookuper = (*hangRoot)(nil)

func (r *hangRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name != "hang" {
		return nil, syscall.ENOENT
	}
	r.once.Do(func() { close(r.entered) })
	select {} // never answer
}

func runStuck(home string) error {
	lock, err := os.OpenFile(filepath.Join(home, "arbord.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	mnt := filepath.Join(home, "stuck")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	root := &hangRoot{entered: make(chan struct{})}
	if _, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{Name: "branchfs", FsName: "stuck", DirectMount: true}}); err != nil {
		return err
	}
	go os.Stat(filepath.Join(mnt, "hang"))
	<-root.entered
	fmt.Println("stuck")
	select {}
}

// TestTakeoverFromDyingDaemon: a daemon that cannot die after a SIGKILL
// (stuckEnv) holds the home; a new daemon aborts the connections of the
// mounts under the home, the old process exits, and the new one takes the
// home within its lock wait.
func TestTakeoverFromDyingDaemon(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stuckEnv+"="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Not the test's own stderr: a process left stuck (the code under test
	// failed) would hold that open, and a parent reading it would wait for
	// ever.
	logf, err := os.Create(filepath.Join(dir, "stuck.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			abortUnder(dir) // free it if the daemon under test did not
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				t.Errorf("pid %d is still stuck in the kernel", cmd.Process.Pid)
			}
		}
	})
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "stuck" {
			t.Fatalf("the stuck daemon said %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stuck daemon did not get stuck within 20s")
	}
	// Its connection, while the mount is visible: if the code under test
	// fails to free it, the cleanup aborts it through the host's fusectl
	// (this namespace may have none), or the process stays stuck for good.
	if m, ok := fusemount.Find(filepath.Join(home, "stuck")); ok {
		conn := m.Conn()
		t.Cleanup(func() {
			select {
			case <-exited:
				return
			default:
			}
			for _, dir := range []string{fusemount.CtlDir, "/proc/1/root" + fusemount.CtlDir} {
				os.WriteFile(filepath.Join(dir, fmt.Sprint(conn), "abort"), []byte("1"), 0)
			}
		})
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatal("the stuck daemon exited on SIGKILL: the test's premise (a thread waiting in the kernel) does not hold")
	case <-time.After(300 * time.Millisecond):
	}
	if !dying(cmd.Process.Pid) {
		t.Fatalf("pid %d is alive without SIGKILL pending", cmd.Process.Pid)
	}
	start := time.Now()
	startDaemon(t, Config{Home: home, Logger: testLogger(t)})
	t.Logf("took over from a dying daemon in %s", time.Since(start))
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the dying daemon is still alive after the new one started")
	}
	checkFuseCtlMode(t)
}
