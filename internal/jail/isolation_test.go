package jail_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestNoPathOut: the sandbox's root holds the host's read-only system
// directories, its own /workspace, /tmp, /proc and /dev, and nothing
// else; no path reaches the host or a sibling.
func TestNoPathOut(t *testing.T) {
	m := newManager(t)
	a, wsA, tmpA := start(t, m, "a")
	_, wsB, _ := start(t, m, "b")
	if err := os.WriteFile(filepath.Join(wsB, "secret"), []byte("b's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(wsA, "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(wsB, filepath.Join(wsA, "sibling")); err != nil {
		t.Fatal(err)
	}
	hostOnly := t.TempDir() // a host directory no sandbox has
	if err := os.WriteFile(filepath.Join(hostOnly, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// Only 0, 1 and 2 are open in a fresh process.
	sleeper, err := a.Start(jail.ExecSpec{Argv: []string{"sleep", "1000"}, Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	out, _, _ := sh(t, a, fmt.Sprintf(`ls /proc/%d/fd | tr '\n' ' '`, sleeper.Pid()))
	if out != "0 1 2 " {
		t.Errorf("fds of a process inside: %q, want 0 1 2", out)
	}
	// The root's entries.
	out, _, _ = sh(t, a, `ls -A / | tr '\n' ' '`)
	for _, want := range []string{"dev ", "etc ", "proc ", "tmp ", "usr ", "workspace "} {
		if !strings.Contains(out, want) {
			t.Errorf("root %q lacks %s", out, want)
		}
	}
	for _, not := range []string{"sys ", "root ", "home ", "work ", "r "} {
		if strings.Contains(" "+out, " "+not) {
			t.Errorf("root %q has %s", out, not)
		}
	}
	for _, p := range []string{
		filepath.Join(wsB, "secret"),                        // the sibling's files by their host path
		"/workspace/sibling/secret",                         // through a symlink to that path
		"/workspace/up" + filepath.Join(hostOnly, "marker"), // through a symlink to /
		"/workspace/../../../.." + filepath.Join(hostOnly, "marker"),
		"/proc/self/root" + filepath.Join(hostOnly, "marker"),
		"/proc/1/root" + filepath.Join(hostOnly, "marker"),
		"/proc/1/cwd" + filepath.Join(hostOnly, "marker"),
		filepath.Join(tmpA, "..", filepath.Base(hostOnly), "marker"),
	} {
		if out, _, st := sh(t, a, "cat "+p+" && echo REACHED"); st.Code == 0 || strings.Contains(out, "REACHED") {
			t.Errorf("%s is reachable from the sandbox: %q %v", p, out, st)
		}
	}
	// init's /proc entries are closed to the user (it is not dumpable).
	for _, c := range []string{"readlink /proc/1/fd/3", "cat /proc/1/fd/3", "ls /proc/1/root/", "ls /proc/1/cwd/", "cat /proc/1/environ", "head -c1 /proc/1/mem", "cat /proc/1/maps"} {
		if out, _, st := sh(t, a, c); st.Code == 0 {
			t.Errorf("%s works: %q", c, out)
		}
	}
}

// TestWrites: writes land only in /workspace, /tmp and the device nodes.
func TestWrites(t *testing.T) {
	m := newManager(t)
	s, ws, tmp := start(t, m, "w")
	out, errs, st := sh(t, s, `echo w > /workspace/f && echo t > /tmp/f && echo n > /dev/null && mkdir -p /workspace/d/e && ln -s x /tmp/l && echo ok`)
	if out != "ok\n" || st.Code != 0 {
		t.Fatalf("allowed writes: %q %q %v", out, errs, st)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != "w\n" {
		t.Errorf("workspace write: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(tmp, "f")); string(b) != "t\n" {
		t.Errorf("tmp write: %q", b)
	}
	for _, p := range []string{"/usr/x", "/etc/x", "/x", "/dev/x", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches", "/etc/passwd"} {
		if _, _, st := sh(t, s, "echo 1 > "+p); st.Code == 0 {
			t.Errorf("write to %s succeeded", p)
		}
	}
	if _, _, st := sh(t, s, "mknod /tmp/sda b 8 0"); st.Code == 0 {
		t.Error("mknod of a block device succeeded")
	}
}

// TestDenied: mounts, namespaces, ptrace, the kernel's interfaces and
// the host's or a sibling's processes are out of reach.
func TestDenied(t *testing.T) {
	m := newManager(t)
	s, _, _ := start(t, m, "d")
	b, _, _ := start(t, m, "sib")
	bp, err := b.Start(jail.ExecSpec{Argv: []string{"sleep", "4242"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{
		"mount -t tmpfs none /tmp",
		"mount -t cgroup2 none /tmp",
		"mount -t proc none /tmp",
		"umount /proc",
		"unshare -U true",
		"unshare -m true",
		"unshare -n true",
		"unshare -p -f true",
		"chroot / true",
		"echo $$ > /sys/fs/cgroup/cgroup.procs",
		"kill -0 " + strconv.Itoa(os.Getpid()), // the host's test process: not in this PID namespace
		"kill -0 " + strconv.Itoa(b.InitPid()), // the sibling's init
		"kill -9 1",                            // init is out of the user's Landlock domain
		"kill -0 1",
		"hostname other && test $(hostname) = d && false", // may set its own; checked below
	} {
		if out, errs, st := sh(t, s, c); st.Code == 0 {
			t.Errorf("%q succeeded: %q %q", c, out, errs)
		}
	}
	if _, _, st := sh(t, s, "true"); st.Code != 0 {
		t.Fatal("the sandbox died")
	}
	// Neither sees the other's processes: the sibling's sleep is not in
	// this /proc, and the sibling's /proc holds init, its sleep and the
	// pipeline that looks.
	if out, _, _ := sh(t, s, `cat /proc/[0-9]*/cmdline | tr '\0' ' '`); strings.Contains(out, "4242") {
		t.Errorf("the sibling's process is visible: %q", out)
	}
	out, _, _ := sh(t, b, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`)
	if !strings.Contains(out, "sleep 4242") || strings.Count(out, "\n") > 4 {
		t.Errorf("the sibling's processes: %q", out)
	}
	if _, _, st := sh(t, b, "kill -0 "+strconv.Itoa(bp.Pid())); st.Code != 0 {
		t.Error("the sibling's sleep died")
	}
	out, _, _ = sh(t, s, `grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t' ' '`)
	for _, want := range []string{"CapEff: 00000000200025fb", "CapBnd: 00000000200025fb", "NoNewPrivs: 1", "Seccomp: 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("status %q lacks %q", out, want)
		}
	}
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, testenv.Python, "the raw syscall checks need python3")
	}
	// Raw syscalls: each must fail with EPERM (1). clone3 with
	// CLONE_NEWUSER is beyond seccomp (its flags are in memory): the
	// chroot the user runs in makes the kernel refuse it.
	const py = `
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    if r == 0 and name == "clone3":
        os._exit(0)
    print(name, r, ctypes.get_errno())
call("ptrace_attach_sibling", 101, 16, int(sys.argv[1]), 0, 0)
call("ptrace_traceme", 101, 0, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("keyctl", 250, 0, 0, 0, 0, 0)
call("add_key", 248, 0, 0, 0, 0, 0)
call("init_module", 175, 0, 0, 0)
call("finit_module", 313, -1, 0, 0)
call("kexec_load", 246, 0, 0, 0, 0)
call("unshare_user", 272, 0x10000000)
call("setns", 308, 0, 0)
call("open_by_handle_at", 304, 0, 0, 0)
call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
args = ctypes.create_string_buffer(struct.pack("QQQQQQQQ", 0x10000000, 0, 0, 0, 17, 0, 0, 0))
call("clone3", 435, args, 64)
call("fsopen", 430, ctypes.c_char_p(b"tmpfs"), 0)
call("pidfd_getfd", 438, 0, 0, 0)
`
	var o bytes.Buffer
	py1, err := s.Start(jail.ExecSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"python3", "-c", py, strconv.Itoa(py1.Pid())}, Stdout: &o, Stderr: &o})
	if err != nil || st.Code != 0 {
		t.Fatalf("python: %v %v %s", st, err, o.String())
	}
	lines := strings.Split(strings.TrimSpace(o.String()), "\n")
	if len(lines) != 16 {
		t.Fatalf("python output: %s", o.String())
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 3 || f[1] != "-1" || f[2] != "1" {
			t.Errorf("%s: want -1 EPERM (1)", l)
		}
	}
}

func TestTTY(t *testing.T) {
	m := newManager(t)
	s, _, _ := start(t, m, "tty")
	var out bytes.Buffer
	st, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"sh", "-c", "stty size; tty; test -t 0 && echo interactive"}, TTY: true, Rows: 33, Cols: 101, Stdout: &out})
	if err != nil || st.Code != 0 {
		t.Fatalf("%v %v %q", st, err, out.String())
	}
	if got := strings.ReplaceAll(out.String(), "\r\n", "\n"); got != "33 101\n/dev/pts/0\ninteractive\n" {
		t.Errorf("tty output %q", got)
	}
	// Input, and a resize seen by the running process.
	pr, pw, _ := os.Pipe()
	defer pw.Close()
	var o2 bytes.Buffer
	p, err := s.Start(jail.ExecSpec{Argv: []string{"sh", "-c", "read x; stty size; echo got $x"}, TTY: true, Rows: 10, Cols: 20, Stdin: pr, Stdout: &o2})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	pw.Write([]byte("hello\n"))
	st, err = p.Wait(context.Background())
	if err != nil || st.Code != 0 || !strings.Contains(o2.String(), "40 120\r\ngot hello") {
		t.Errorf("%v %v %q", st, err, o2.String())
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	m := newManager(t)
	s, _, _ := start(t, m, "to")
	var out bytes.Buffer
	t0 := time.Now()
	st, err := s.Exec(context.Background(), jail.ExecSpec{
		Argv:    []string{"sh", "-c", "setsid sleep 1000 & (sleep 1001 &) ; echo started; sleep 1002"},
		Timeout: 300 * time.Millisecond, Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != 9 || !st.TimedOut || out.String() != "started\n" {
		t.Fatalf("status %v, output %q", st, out.String())
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	waitPids(t, s, 1) // only init is left: the setsid'd and double-forked sleeps died too
	// A context's end kills as a timeout does.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st, err = s.Exec(ctx, jail.ExecSpec{Argv: []string{"sleep", "1000"}})
	if !errors.Is(err, context.DeadlineExceeded) || st.Signal != 9 {
		t.Errorf("ctx end: %v %v", st, err)
	}
}

// waitPids waits until the sandbox holds n processes.
func waitPids(t *testing.T, s *jail.Sandbox, n int) {
	t.Helper()
	var got int
	for i := 0; i < 200; i++ {
		var err error
		if got, err = s.PidCount(); err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("sandbox holds %d processes, want %d", got, n)
}

func TestDetachedAndLimits(t *testing.T) {
	m := newManager(t)
	s, _, _ := start(t, m, "bg")
	var out lockedBuffer
	p, err := s.Start(jail.ExecSpec{Argv: []string{"sh", "-c", "echo up; exec sleep 1000"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Start(jail.ExecSpec{Argv: []string{"sleep", "0.05"}})
	if err != nil {
		t.Fatal(err)
	}
	if ps := s.Processes(); len(ps) != 2 || ps[0].Argv[0] != "sh" || ps[1].Argv[0] != "sleep" {
		t.Errorf("processes: %+v", ps)
	}
	q.Wait(context.Background())
	if ps := s.Processes(); len(ps) != 1 || ps[0].Pid != p.Pid() {
		t.Errorf("processes after one ended: %+v", ps)
	}
	waitPids(t, s, 2)
	if mem, err := s.MemoryBytes(); err != nil || mem <= 0 {
		t.Errorf("memory %d %v", mem, err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if st, _ := p.Wait(context.Background()); st.Signal != 9 || out.String() != "up\n" {
		t.Errorf("killed: %v %q", st, out.String())
	}

	// Limits.
	l, err := m.Start(context.Background(), jail.Spec{Name: "limited", Workspace: t.TempDir(), Tmp: t.TempDir(), PidsMax: 24, MemoryMax: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	o, e, st := sh(t, l, `(for i in $(seq 40); do sleep 5 & done) 2>/dev/null; set -- /proc/[0-9]*; echo $#; kill -9 -1; wait`)
	if n, _ := strconv.Atoi(strings.TrimSpace(o)); n > 24 || n < 10 {
		t.Errorf("pids.max 24, held %d processes (%q %q %v)", n, o, e, st)
	}
	if _, err := exec.LookPath("python3"); err == nil {
		st, err := l.Exec(context.Background(), jail.ExecSpec{Argv: []string{"python3", "-c", "b = bytearray(256 << 20); print(len(b))"}})
		if err != nil || st.Signal != 9 {
			t.Errorf("256 MiB under a 64 MiB limit: %v %v", st, err)
		}
	}
	before, err := l.OOMKills()
	if err != nil {
		t.Fatal(err)
	}
	st, err = l.Exec(context.Background(), jail.ExecSpec{Argv: []string{"perl", "-e", `my $x = "a" x (256 << 20)`}})
	if after, kerr := l.OOMKills(); err != nil || st.Signal != 9 || kerr != nil || after <= before {
		t.Errorf("256 MiB under a 64 MiB limit: %v %v; OOM kills %d then %d (%v)", st, err, before, after, kerr)
	}
}

func TestFreezeThaw(t *testing.T) {
	m := newManager(t)
	s, _, tmp := start(t, m, "fz")
	if _, err := s.Start(jail.ExecSpec{Argv: []string{"sh", "-c", "while :; do echo x >> /tmp/f; sleep 0.01; done"}}); err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(tmp, "f"))
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	time.Sleep(100 * time.Millisecond)
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	a := size()
	time.Sleep(150 * time.Millisecond)
	if b := size(); b != a || a == 0 {
		t.Errorf("frozen sandbox wrote: %d -> %d", a, b)
	}
	if _, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, api.ErrState) {
		t.Errorf("exec while frozen: %v", err)
	}
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if b := size(); b <= a {
		t.Errorf("thawed sandbox did not write: %d -> %d", a, b)
	}
	// Stop of a frozen sandbox.
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
