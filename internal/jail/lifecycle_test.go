package jail_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/jail"
)

// hostProc is a host process with its start time, so that a reused pid
// is not taken for a survivor.
type hostProc struct {
	pid   int
	start string
}

func procStart(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if f[0] == "Z" {
		return "", false // a zombie has died
	}
	return f[19], true
}

// sandboxProcs lists the host processes in a sandbox's cgroups (every
// hierarchy, every exec's cgroup below).
func sandboxProcs(t testing.TB, s *jail.Sandbox) []hostProc {
	t.Helper()
	seen := map[int]bool{}
	var out []hostProc
	for _, dir := range s.CgroupPaths() {
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				if st, ok := procStart(pid); ok && !seen[pid] {
					seen[pid] = true
					out = append(out, hostProc{pid, st})
				}
			}
			return nil
		})
	}
	return out
}

func alive(p hostProc) bool {
	st, ok := procStart(p.pid)
	return ok && st == p.start
}

// escapes is a script whose processes try every usual way out of their
// process group, session and cgroup, and ignore what they can.
const escapes = `
setsid sleep 1001 &
(sleep 1002 &)
sh -c 'sleep 1003 & exit'
nohup sleep 1004 >/dev/null 2>&1 &
sh -c 'trap "" TERM HUP INT QUIT; while :; do sleep 1; done' &
sh -c 'set -m; sleep 1005 & wait' &
setsid -f sh -c 'setsid -f sleep 1006; sleep 1007'
sh -c 'for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /proc/1/cgroup; do echo $$ > $f; done; mount -t cgroup2 none /tmp 2>/dev/null; sleep 1008' 2>/dev/null &
sleep 0.2
echo ready
wait
`

func TestStopKillsEscapes(t *testing.T) {
	m := newManager(t)
	s, _, _ := start(t, m, "esc")
	var out0 lockedBuffer
	if _, err := s.Start(jail.ExecSpec{Argv: []string{"sh", "-c", escapes}, Stdout: &out0}); err != nil {
		t.Fatal(err)
	}
	for i := 0; out0.String() != "ready\n"; i++ {
		if i == 500 {
			t.Fatalf("script: %q", out0.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	procs := sandboxProcs(t, s)
	if len(procs) < 12 {
		t.Fatalf("only %d processes in the sandbox", len(procs))
	}
	// Every escaper is still in the cgroups (the cgroup move failed).
	out, _, _ := sh(t, s, `cat /proc/[0-9]*/cmdline | tr '\0' '\n' | grep -c '^100[1-8]$'`)
	if strings.TrimSpace(out) != "8" {
		t.Fatalf("sleepers inside: %q", out)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if alive(p) {
			t.Errorf("pid %d survived Stop", p.pid)
		}
	}
	for _, d := range s.CgroupPaths() {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left", d)
		}
	}
	// Idempotent, concurrent, and the end of exec.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Go(func() {
			if err := s.Stop(context.Background()); err != nil {
				t.Errorf("second stop: %v", err)
			}
		})
	}
	wg.Wait()
	if _, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, api.ErrState) {
		t.Errorf("exec after stop: %v", err)
	}
	if _, ok := m.Get("esc"); ok {
		t.Error("manager still holds the stopped sandbox")
	}
}

// TestStopWhileExec: a process waited on when the sandbox stops ends
// with an error, not a hang.
func TestStopWhileExec(t *testing.T) {
	m := newManager(t)
	s, _, _ := start(t, m, "busy")
	done := make(chan error, 1)
	go func() {
		_, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"sleep", "1000"}})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("exec still waits after stop")
	}
}

func TestStartErrors(t *testing.T) {
	m := newManager(t)
	ws := t.TempDir()
	for _, spec := range []jail.Spec{
		{Name: "", Workspace: ws, Tmp: ws},
		{Name: "../x", Workspace: ws, Tmp: ws},
		{Name: "a/b", Workspace: ws, Tmp: ws},
		{Name: "ok", Workspace: "rel", Tmp: ws},
		{Name: "ok", Workspace: ws, Tmp: "/no/such/dir"},
		{Name: "ok", Workspace: ws, Tmp: ws, MemoryMax: -1},
	} {
		if _, err := m.Start(context.Background(), spec); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("%+v: %v", spec, err)
		}
	}
	start(t, m, "dup")
	if _, err := m.Start(context.Background(), jail.Spec{Name: "dup", Workspace: ws, Tmp: ws}); !errors.Is(err, api.ErrExists) {
		t.Errorf("duplicate: %v", err)
	}
	if got := m.Sandboxes(); len(got) != 1 || got[0] != "dup" {
		t.Errorf("sandboxes %v", got)
	}
	if _, err := jail.New(jail.Config{StateDir: "rel"}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("relative state dir: %v", err)
	}
	if _, err := jail.New(jail.Config{StateDir: ws, Label: "a/b"}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("bad label: %v", err)
	}
}

// TestReap: a second manager of the label kills and removes what the
// first holds (as after a crash of the first).
func TestReap(t *testing.T) {
	a := newManager(t)
	s, _, _ := start(t, a, "orphan")
	if _, err := s.Start(jail.ExecSpec{Argv: []string{"sh", "-c", "setsid sleep 1000 & sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	waitPids(t, s, 4)
	procs := sandboxProcs(t, s)
	label := fmt.Sprintf("t%d-%s", os.Getpid(), nonName.ReplaceAllString(t.Name(), "_"))
	b, err := jail.New(jail.Config{StateDir: t.TempDir(), Label: label})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := b.Reap(context.Background())
	if err != nil || len(got) != 1 || got[0] != "orphan" {
		t.Fatalf("reap: %v %v", got, err)
	}
	for _, p := range procs {
		if alive(p) {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
			t.Errorf("pid %d survived Reap: %s", p.pid, st)
		}
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("stop after reap: %v", err)
	}
}

// The helper process of TestCallerKilled: it starts sandboxes with
// escaping processes, says so, and waits to be SIGKILLed.
func helperMain() bool {
	if os.Getenv("JAIL_TEST_HELPER") != "crash" {
		return false
	}
	base := os.Getenv("JAIL_TEST_BASE")
	m, err := jail.New(jail.Config{StateDir: filepath.Join(base, "state"), Label: os.Getenv("JAIL_TEST_LABEL")})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("s%d", i)
		dir := filepath.Join(base, name)
		os.MkdirAll(dir, 0o755)
		s, err := m.Start(context.Background(), jail.Spec{Name: name, Workspace: dir, Tmp: dir})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if _, err := s.Start(jail.ExecSpec{Argv: []string{"sh", "-c", escapes}}); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
	time.Sleep(400 * time.Millisecond)
	fmt.Println("ready")
	select {}
}

// TestCallerKilled: when the process that started sandboxes is
// SIGKILLed, every process of them dies with it (Pdeathsig on each init
// takes its PID namespace along); a new manager's Reap removes the
// cgroups left.
func TestCallerKilled(t *testing.T) {
	newManagerSpares(t, -1) // the checks, and the label's cleanup; no spare of its own in the label
	label := fmt.Sprintf("t%d-%s", os.Getpid(), nonName.ReplaceAllString(t.Name(), "_"))
	base := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "JAIL_TEST_HELPER=crash", "JAIL_TEST_BASE="+base, "JAIL_TEST_LABEL="+label)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q", line)
	}
	var procs []hostProc
	for _, d := range cgroupDirs(label) {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					pid, _ := strconv.Atoi(f)
					if st, ok := procStart(pid); ok {
						procs = append(procs, hostProc{pid, st})
					}
				}
			}
			return nil
		})
	}
	if len(procs) < 3*12 {
		t.Fatalf("%d processes in the helper's sandboxes", len(procs))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range procs {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if alive(p) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
			status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.pid))
			t.Errorf("pid %d outlived the SIGKILLed caller: %q\n%s\n%s", p.pid, cmdline, status, cg)
			break
		}
	}
	m, err := jail.New(jail.Config{StateDir: t.TempDir(), Label: label})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Reap(context.Background())
	sort.Strings(got)
	if err != nil || strings.Join(got, ",") != "s0,s1,s2" {
		t.Errorf("reap: %v %v", got, err)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}

// TestNoLeaks: create/exec/stop cycles leave no zombie, mount, cgroup,
// namespace, fd or goroutine behind.
func TestNoLeaks(t *testing.T) {
	cycles := 1000
	if testing.Short() {
		cycles = 50
	}
	m := newManager(t)
	ws, tmp := t.TempDir(), t.TempDir()
	// Warm up: the first sandbox opens what the manager keeps.
	s, err := m.Start(context.Background(), jail.Spec{Name: "warm", Workspace: ws, Tmp: tmp})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop(context.Background())
	m.Warm(context.Background())
	fds0, mounts0, gor0 := countFDs(t), ourMounts(t, ws, tmp), runtime.NumGoroutine()
	nsSeen := map[string]bool{}
	for i := 0; i < cycles; i++ {
		name := "c" + strconv.Itoa(i)
		s, err := m.Start(context.Background(), jail.Spec{Name: name, Workspace: ws, Tmp: tmp})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		for _, ns := range []string{"pid", "mnt", "net", "uts", "ipc"} {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", s.InitPid(), ns))
			if err != nil {
				t.Fatal(err)
			}
			nsSeen[l] = true
		}
		var out strings.Builder
		st, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"sh", "-c", "echo hi; sleep 1000 & exit 0"}, Stdout: &out})
		if err != nil || st.Code != 0 || out.String() != "hi\n" {
			t.Fatalf("cycle %d: %v %v %q", i, st, err, out.String())
		}
		if err := s.Stop(context.Background()); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // goroutines that were ending
	if fds := countFDs(t); fds != fds0 {
		t.Errorf("fds: %d before, %d after", fds0, fds)
	}
	if mounts := ourMounts(t, ws, tmp); mounts != mounts0 {
		t.Errorf("mounts: %q before, %q after", mounts0, mounts)
	}
	if g := runtime.NumGoroutine(); g > gor0+2 {
		t.Errorf("goroutines: %d before, %d after", gor0, g)
	}
	if z := zombies(t); len(z) > 0 {
		t.Errorf("zombie children: %v", z)
	}
	for _, d := range cgroupDirs(m.Label()) {
		if ents, err := os.ReadDir(d); err == nil {
			for _, e := range ents {
				if e.IsDir() && !strings.HasPrefix(e.Name(), ".spare-") { // the manager's live spare
					t.Errorf("cgroup %s/%s left", d, e.Name())
				}
			}
		}
	}
	// No process on the host is in any of the namespaces the cycles made.
	// (The kernel reuses a freed namespace's inode number, so a match
	// counts only if the process is one of this label's.)
	all, _ := filepath.Glob("/proc/[0-9]*/ns/*")
	for _, p := range all {
		if l, err := os.Readlink(p); err == nil && nsSeen[l] {
			cg, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(p)), "cgroup"))
			if strings.Contains(string(cg), "arbor-jail/"+m.Label()+"/") && !strings.Contains(string(cg), "/.spare-") {
				t.Errorf("%s is %s, a sandbox's namespace", p, l)
			}
		}
	}
}

func countFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// ourMounts are the host's mounts that involve the test's directories or
// sandbox cgroups (other tests on the machine mount too).
func ourMounts(t testing.TB, dirs ...string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, d := range append(dirs, "arbor-jail", "nsfs") {
			if strings.Contains(l, d) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

func zombies(t testing.TB) []int {
	var out []int
	all, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range all {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			out = append(out, pid)
		}
	}
	return out
}
