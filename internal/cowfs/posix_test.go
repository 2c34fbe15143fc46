package cowfs

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/posixtest"
	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestMain also serves mounts for the POSIX suite: the suite must not run in
// the process that serves the mount it tests, because a page fault on a
// mapped file of the mount blocks a thread that Go's garbage collector then
// waits for, while the FUSE server that would answer the fault waits for the
// collector.
func TestMain(m *testing.M) {
	if t := os.Getenv("ARBOR_FUSE_TRANSPORT"); t != "" {
		// Every mount of the tests (and of their child servers) on
		// one transport: scripts/test.sh runs the package on both.
		if err := CheckTransport(t); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defaultTransport = t
	}
	if cfg := os.Getenv(rtClientEnv); cfg != "" {
		os.Exit(rtClient(cfg))
	}
	if cfg := os.Getenv("ARBOR_COWFS_SERVE"); cfg != "" {
		os.Exit(serveForTest(cfg))
	}
	posixtest.Main(m)
}

type serveConfig struct {
	State, Base, Mnt string
	Depth            int
	Passthrough      bool
	// Room, if set, limits the store to what it holds plus Room bytes.
	Room int64
}

// serveForTest mounts a store as the config says, prints "ready", and serves
// until its standard input closes or it gets SIGTERM.
func serveForTest(raw string) int {
	var cfg serveConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	st, err := store.Open(store.Config{Dir: cfg.State, Base: cfg.Base})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	leaf := store.Main
	for i := 1; i <= cfg.Depth; i++ {
		name := fmt.Sprintf("d%d", i)
		if err := st.Fork(leaf, name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		b, _ := st.Branch(name)
		if err := st.Create(b, fmt.Sprintf("level-%d", i), false, func(dir int, name string) error {
			return os.WriteFile(fmt.Sprintf("/proc/self/fd/%d/%s", dir, name), []byte("x"), 0o644)
		}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		leaf = name
	}
	if cfg.Room > 0 {
		used, _ := st.Used()
		if err := st.SetLimit(used + cfg.Room); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	f, err := Mount(Config{Store: st, Mountpoint: cfg.Mnt, Branch: leaf, Passthrough: &cfg.Passthrough})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ready %s\n", leaf)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
	if err := f.Unmount(true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// branchEnv runs the POSIX suite in a branch of a store that a child process
// serves; forks go through the control files.
type branchEnv struct {
	mnt  string
	leaf string // the branch the mount root shows; the cases run in it
	seq  atomic.Int64
}

func (e *branchEnv) Strict() bool { return false }

func (e *branchEnv) mkdir(t *testing.T, d string) string {
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	return d
}

func (e *branchEnv) Dir(t *testing.T) string {
	return e.mkdir(t, filepath.Join(e.mnt, fmt.Sprintf("case-%d", e.seq.Add(1))))
}

// ctl writes a control command to a view's control file.
func (e *branchEnv) ctl(t *testing.T, view, cmd string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(view, ctlName), []byte(cmd), 0); err != nil {
		t.Fatalf("%s on %s: %v", cmd, view, err)
	}
}

// Lower runs setup in a new branch of the leaf, then forks it: the cases see
// setup's files in a frozen layer below their branch's head.
func (e *branchEnv) Lower(t *testing.T, setup func(dir string)) string {
	n := e.seq.Add(1)
	low, top := fmt.Sprintf("low-%d", n), fmt.Sprintf("top-%d", n)
	e.ctl(t, filepath.Join(e.mnt, "@"+e.leaf), "create:"+low)
	lowView := filepath.Join(e.mnt, "@"+low)
	setup(e.mkdir(t, filepath.Join(lowView, fmt.Sprintf("case-%d", n))))
	e.ctl(t, lowView, "create:"+top)
	return filepath.Join(lowView, "@"+top, fmt.Sprintf("case-%d", n))
}

// KnownLimit names the cases cowfs departs from, as its doc.go says.
func (e *branchEnv) KnownLimit(name string) string {
	switch name {
	case "file_lower_reader_sees_copyup", "mmap_shared_lower_live":
		return "a descriptor opened before a copy-up keeps reading the lower copy (overlayfs does the same)"
	case "link_across_copyup":
		return "the link count of a hard link copied up from a lower layer is approximate (names and data stay one inode)"
	}
	return ""
}

// newBranchEnv starts a child process serving a fresh store, with a chain of
// depth branches each holding a change (depth 0: main).
func newBranchEnv(t *testing.T, depth int, passthrough bool, room int64) *branchEnv {
	testenv.NeedFUSE(t)
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	cfg := serveConfig{State: filepath.Join(root, "state"), Base: filepath.Join(root, "base"),
		Mnt: filepath.Join(root, "mnt"), Depth: depth, Passthrough: passthrough, Room: room}
	os.Mkdir(cfg.Base, 0o755)
	os.Mkdir(cfg.Mnt, 0o755)
	raw, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ARBOR_COWFS_SERVE="+string(raw))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdout)
	}()
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("mount server: %v", err)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("mount server did not exit; killed")
		}
		unix.Unmount(cfg.Mnt, unix.MNT_DETACH)
	})
	select {
	case line := <-ready:
		leaf, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
		if !ok {
			t.Fatalf("mount server: %q", line)
		}
		return &branchEnv{mnt: cfg.Mnt, leaf: leaf}
	case err := <-exited:
		t.Fatalf("mount server exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("mount server not ready in 20 s")
	}
	return nil
}

func TestPOSIX(t *testing.T) {
	for _, c := range []struct {
		name        string
		depth       int
		passthrough bool
		room        int64
	}{
		{"main", 0, true, 0},
		{"depth1", 1, true, 0},
		{"depth32", 32, true, 0},
		{"depth1-nopassthrough", 1, false, 0},
		// Near a disk limit every writer is served by the daemon, with
		// FOPEN_DIRECT_IO beside passthrough readers (newHandle).
		{"depth1-near-limit", 1, true, 48 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			posixtest.Run(t, newBranchEnv(t, c.depth, c.passthrough, c.room))
		})
	}
}
