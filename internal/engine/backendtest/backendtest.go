// Package backendtest is the behaviour every engine.Backend must show: run
// Run from the backend's tests (the engine runs it against the dir backend
// and against its test double; jail and vm run it too). The exec tests run
// only on a backend whose Caps say Exec, and the others check that one
// without it refuses exec with api.ErrNotSupported; nothing else is skipped.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// Slow bounds what must end promptly (a killed command, a timeout): far
// above what any backend needs, so that a loaded machine does not fail the
// suite, and far below the 30 s the test commands would run otherwise.
const Slow = 10 * time.Second

// env is one subtest's backend with a files directory per node.
type env struct {
	t     *testing.T
	ctx   context.Context
	dir   string // the backend's directory
	base  string
	files string // <files>/<node>: each node's files
	open  engine.OpenBackend
	b     engine.Backend
}

// Run checks open against the engine's expectations. Each subtest gets a
// fresh backend directory and base, and a files directory per node (holding
// "a.txt" = "base" and a directory "sub").
func Run(t *testing.T, open engine.OpenBackend) {
	for _, tc := range []struct {
		name string
		exec bool // needs Caps.Exec
		fn   func(*env)
	}{
		{"StartStop", false, testStartStop},
		{"Fork", false, testFork},
		{"ForkFilesFail", false, testForkFilesFail},
		{"ForkSuspended", false, testForkSuspended},
		{"SuspendResume", false, testSuspendResume},
		{"RAM", false, testRAM},
		{"Commit", false, testCommit},
		{"CommitStaleSiblings", false, testCommitSiblings},
		{"CommitAfterReopen", false, testCommitReopen},
		{"CloseStopsAll", false, testClose},
		{"NoExec", false, testNoExec},
		{"ExecOutput", true, testExecOutput},
		{"ExecEnvCwdFiles", true, testExecEnv},
		{"ExecTimeout", true, testExecTimeout},
		{"ExecContext", true, testExecContext},
		{"ExecOutError", true, testExecOutError},
		{"StopKillsExec", true, testStopKills},
		{"SuspendKillsExec", true, testSuspendKills},
		{"ExecState", true, testExecState},
		{"ForkPausesSource", true, testForkPauses},
		{"NodeFiles", false, testNodeFiles},
		{"Processes", true, testProcesses},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{t: t, ctx: t.Context(), dir: t.TempDir(), base: t.TempDir(), files: t.TempDir(), open: open}
			e.b = e.reopen(nil)
			t.Cleanup(func() { e.b.Close() })
			// The one capability the suite reads: exec.
			switch caps := e.b.Caps(); {
			case tc.exec && !caps.Exec:
				t.Skip("the backend runs no commands (Caps.Exec false)")
			case tc.name == "NoExec" && caps.Exec:
				t.Skip("the backend runs commands (Caps.Exec true)")
			}
			tc.fn(e)
		})
	}
}

// reopen closes old (if not nil) and opens the backend again.
func (e *env) reopen(old engine.Backend) engine.Backend {
	e.t.Helper()
	if old != nil {
		if err := old.Close(); err != nil {
			e.t.Fatalf("close: %v", err)
		}
	}
	b, err := e.open(e.ctx, engine.BackendConfig{Tree: "t", Dir: e.dir, Base: e.base})
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	e.b = b
	return b
}

// path makes (if need be) and returns node's files directory.
func (e *env) path(node string) string {
	e.t.Helper()
	p := filepath.Join(e.files, node)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "a.txt"), []byte("base"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) start(node string) {
	e.t.Helper()
	if err := e.b.Start(e.ctx, node, e.path(node)); err != nil {
		e.t.Fatalf("start %s: %v", node, err)
	}
}

// filesFor is a Fork's files step making children's directories; it counts
// its calls.
func (e *env) filesFor(children []string, calls *int) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) {
		*calls++
		var out []string
		for _, c := range children {
			out = append(out, e.path(c))
		}
		return out, nil
	}
}

// held is what Nodes reports, as "id:state" in id order.
func (e *env) held() []string {
	e.t.Helper()
	ns, err := e.b.Nodes(e.ctx)
	if err != nil {
		e.t.Fatalf("nodes: %v", err)
	}
	var out []string
	for _, n := range ns {
		out = append(out, n.ID+":"+string(n.State))
	}
	slices.Sort(out)
	return out
}

func (e *env) wantHeld(want ...string) {
	e.t.Helper()
	slices.Sort(want)
	if got := e.held(); !slices.Equal(got, want) {
		e.t.Fatalf("backend holds %v, want %v", got, want)
	}
}

func wantIs(t *testing.T, err, sentinel error, what string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: got %v, want an error wrapping %v", what, err, sentinel)
	}
}

func testStartStop(e *env) {
	e.wantHeld()
	e.start("n1")
	e.wantHeld("n1:live")
	wantIs(e.t, e.b.Start(e.ctx, "n1", e.path("n1")), api.ErrExists, "start a held node")
	if err := e.b.Stop(e.ctx, "n1"); err != nil {
		e.t.Fatalf("stop: %v", err)
	}
	e.wantHeld()
	for _, n := range []string{"n1", "n9"} {
		if err := e.b.Stop(e.ctx, n); err != nil {
			e.t.Fatalf("stop %s again (idempotent): %v", n, err)
		}
	}
	e.start("n1") // a stopped node can start again
	e.wantHeld("n1:live")
}

func testFork(e *env) {
	e.start("n1")
	calls := 0
	if err := e.b.Fork(e.ctx, "n1", []string{"n2", "n3"}, e.filesFor([]string{"n2", "n3"}, &calls)); err != nil {
		e.t.Fatalf("fork: %v", err)
	}
	if calls != 1 {
		e.t.Fatalf("fork called its files step %d times, want 1", calls)
	}
	e.wantHeld("n1:live", "n2:live", "n3:live")
	calls = 0
	err := e.b.Fork(e.ctx, "n7", []string{"n8"}, e.filesFor([]string{"n8"}, &calls))
	wantIs(e.t, err, api.ErrNotFound, "fork of a node the backend does not hold")
	if calls != 0 {
		e.t.Fatal("a refused fork forked the files")
	}
	err = e.b.Fork(e.ctx, "n1", []string{"n2"}, e.filesFor([]string{"n2"}, &calls))
	wantIs(e.t, err, api.ErrExists, "fork into a held node")
	e.wantHeld("n1:live", "n2:live", "n3:live")
}

func testForkFilesFail(e *env) {
	e.start("n1")
	boom := errors.New("files failed")
	err := e.b.Fork(e.ctx, "n1", []string{"n2"}, func(context.Context) ([]string, error) { return nil, boom })
	if !errors.Is(err, boom) {
		e.t.Fatalf("fork whose files step failed: got %v, want it wrapped", err)
	}
	e.wantHeld("n1:live") // the source runs again, no child is held
}

func testForkSuspended(e *env) {
	e.start("n1")
	if err := e.b.Suspend(e.ctx, "n1"); err != nil {
		e.t.Fatalf("suspend: %v", err)
	}
	calls := 0
	if err := e.b.Fork(e.ctx, "n1", []string{"n2"}, e.filesFor([]string{"n2"}, &calls)); err != nil {
		e.t.Fatalf("fork of a suspended node: %v", err)
	}
	e.wantHeld("n1:suspended", "n2:live")
}

func testSuspendResume(e *env) {
	e.start("n1")
	if err := e.b.Suspend(e.ctx, "n1"); err != nil {
		e.t.Fatalf("suspend: %v", err)
	}
	e.wantHeld("n1:suspended")
	if err := e.b.Suspend(e.ctx, "n1"); err == nil {
		e.t.Fatal("suspend of a suspended node succeeded")
	}
	wantIs(e.t, e.b.Suspend(e.ctx, "n9"), api.ErrNotFound, "suspend of a node the backend does not hold")
	ram, err := e.b.RAM(e.ctx)
	if err != nil {
		e.t.Fatalf("ram: %v", err)
	}
	if ram["n1"] != 0 {
		e.t.Fatalf("a suspended node holds %d bytes of RAM, want 0", ram["n1"])
	}
	if err := e.b.Resume(e.ctx, "n1", e.path("n1")); err != nil {
		e.t.Fatalf("resume: %v", err)
	}
	e.wantHeld("n1:live")
	wantIs(e.t, e.b.Resume(e.ctx, "n1", e.path("n1")), api.ErrState, "resume of a live node")
	if err := e.b.Resume(e.ctx, "n5", e.path("n5")); err != nil {
		e.t.Fatalf("resume of a node the backend holds nothing for (starts it): %v", err)
	}
	e.wantHeld("n1:live", "n5:live")
}

func testRAM(e *env) {
	e.start("n1")
	e.start("n2")
	ram, err := e.b.RAM(e.ctx)
	if err != nil {
		e.t.Fatalf("ram: %v", err)
	}
	for id, n := range ram {
		if n < 0 || (id != "n1" && id != "n2") {
			e.t.Fatalf("RAM reports %s: %d (holding n1, n2)", id, n)
		}
	}
	if err := e.b.Stop(e.ctx, "n2"); err != nil {
		e.t.Fatal(err)
	}
	if ram, err = e.b.RAM(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	if _, ok := ram["n2"]; ok {
		e.t.Fatal("RAM reports a stopped node")
	}
}

func testClose(e *env) {
	e.start("n1")
	e.start("n2")
	if err := e.b.Suspend(e.ctx, "n2"); err != nil {
		e.t.Fatal(err)
	}
	b := e.reopen(e.b)
	ns, err := b.Nodes(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range ns {
		if n.State == engine.HeldLive {
			e.t.Fatalf("node %s still runs after Close", n.ID)
		}
	}
	// Whatever it kept, the engine can stop it and start the nodes afresh.
	for _, n := range ns {
		if err := b.Stop(e.ctx, n.ID); err != nil {
			e.t.Fatal(err)
		}
	}
	e.start("n1")
	e.wantHeld("n1:live")
}

func testNoExec(e *env) {
	e.start("n1")
	_, err := e.b.Exec(e.ctx, "n1", engine.Command{Argv: []string{"true"}}, func(api.ExecOutput) error { return nil })
	wantIs(e.t, err, api.ErrNotSupported, "exec on a backend without Caps.Exec")
}

// output collects an exec's output by stream; safe for the backend's
// goroutine and the test's.
type output struct {
	mu   sync.Mutex
	out  map[string]*bytes.Buffer
	seen chan struct{} // closed at the first chunk
	once sync.Once
}

func newOutput() *output {
	return &output{out: map[string]*bytes.Buffer{"stdout": {}, "stderr": {}}, seen: make(chan struct{})}
}

func (o *output) write(c api.ExecOutput) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.out[c.Stream]
	if !ok {
		return errors.New("unknown stream " + c.Stream)
	}
	b.Write(c.Data)
	o.once.Do(func() { close(o.seen) })
	return nil
}

func (o *output) get(stream string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out[stream].String()
}

func (e *env) exec(node string, cmd engine.Command) (api.ExecExit, *output, error) {
	o := newOutput()
	x, err := e.b.Exec(e.ctx, node, cmd, o.write)
	return x, o, err
}

func testExecOutput(e *env) {
	e.start("n1")
	x, o, err := e.exec("n1", engine.Command{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil {
		e.t.Fatalf("exec: %v", err)
	}
	if x.ExitCode != 3 || x.Signal != "" {
		e.t.Fatalf("exit %+v, want code 3", x)
	}
	if o.get("stdout") != "out\n" || o.get("stderr") != "err\n" {
		e.t.Fatalf("stdout %q stderr %q", o.get("stdout"), o.get("stderr"))
	}
	if x.DurationNS <= 0 {
		e.t.Fatalf("duration %d", x.DurationNS)
	}
	if x, _, err := e.exec("n1", engine.Command{Argv: []string{"true"}}); err != nil || x.ExitCode != 0 {
		e.t.Fatalf("true: %+v, %v", x, err)
	}
	// A command that does not exist is an exit code (the shell's 127) or
	// an error naming it, never a hang.
	if x, _, err := e.exec("n1", engine.Command{Argv: []string{"/nonexistent-arbor-command"}}); err == nil && x.ExitCode == 0 {
		e.t.Fatalf("a missing command exited 0")
	}
}

func testExecEnv(e *env) {
	e.start("n1")
	if err := os.WriteFile(filepath.Join(e.path("n1"), "sub", "f.txt"), []byte("mine\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	x, o, err := e.exec("n1", engine.Command{Argv: []string{"sh", "-c", `echo "$ARBOR_X"; cat f.txt; basename "$(pwd)"; cat ../a.txt; echo new > ../made.txt`},
		Env: []string{"ARBOR_X=x1"}, Cwd: "sub"})
	if err != nil || x.ExitCode != 0 {
		e.t.Fatalf("exec: %+v %v (stderr %q)", x, err, o.get("stderr"))
	}
	if got, want := o.get("stdout"), "x1\nmine\nsub\nbase"; got != want {
		e.t.Fatalf("stdout %q, want %q", got, want)
	}
	// Stdin reaches the command; none is an empty one.
	x, o, err = e.exec("n1", engine.Command{Argv: []string{"sh", "-c", "cat; echo done"}, Stdin: strings.NewReader("in\n")})
	if err != nil || x.ExitCode != 0 || o.get("stdout") != "in\ndone\n" {
		e.t.Fatalf("exec with stdin: %+v %v, stdout %q", x, err, o.get("stdout"))
	}
	if _, o, err = e.exec("n1", engine.Command{Argv: []string{"cat"}}); err != nil || o.get("stdout") != "" {
		e.t.Fatalf("exec without stdin: %v, stdout %q", err, o.get("stdout"))
	}
	// What the command writes is in the node's files.
	b, err := os.ReadFile(filepath.Join(e.path("n1"), "made.txt"))
	if err != nil || string(b) != "new\n" {
		e.t.Fatalf("a file the command wrote: %q, %v", b, err)
	}
}

func testExecTimeout(e *env) {
	e.start("n1")
	start := time.Now()
	x, _, err := e.exec("n1", engine.Command{Argv: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		e.t.Fatalf("exec past its timeout: %v, want an exit", err)
	}
	if x.Signal != "KILL" || time.Since(start) > Slow {
		e.t.Fatalf("exec past its timeout: %+v after %v, want signal KILL soon", x, time.Since(start))
	}
}

func testExecContext(e *env) {
	e.start("n1")
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	x, err := e.b.Exec(ctx, "n1", engine.Command{Argv: []string{"sleep", "30"}}, func(api.ExecOutput) error { return nil })
	if time.Since(start) > Slow {
		e.t.Fatalf("exec outlived its context by %v", time.Since(start))
	}
	if err == nil && x.Signal == "" {
		e.t.Fatalf("exec whose context ended: %+v, want an error or a signal", x)
	}
}

func testExecOutError(e *env) {
	e.start("n1")
	start := time.Now()
	stop := errors.New("reader gone")
	_, err := e.b.Exec(e.ctx, "n1", engine.Command{Argv: []string{"sh", "-c", "echo a; sleep 30"}}, func(api.ExecOutput) error { return stop })
	if err == nil || time.Since(start) > Slow {
		e.t.Fatalf("exec whose output failed: %v after %v, want an error soon", err, time.Since(start))
	}
}

// running starts a 30 s command on node and waits for its first output.
func (e *env) running(node string) chan error {
	e.t.Helper()
	o := newOutput()
	done := make(chan error, 1)
	go func() {
		_, err := e.b.Exec(e.ctx, node, engine.Command{Argv: []string{"sh", "-c", "echo up; sleep 30; echo late"}}, o.write)
		if strings.Contains(o.get("stdout"), "late") {
			err = errors.New("the command ran to its end")
		}
		done <- err
	}()
	select {
	case <-o.seen:
	case err := <-done:
		e.t.Fatalf("the command ended before its output: %v", err)
	case <-time.After(Slow):
		e.t.Fatal("the command never started")
	}
	return done
}

func waitEnded(t *testing.T, done chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil && strings.Contains(err.Error(), "ran to its end") {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(Slow):
		t.Fatalf("%s: the command still runs", what)
	}
}

func testStopKills(e *env) {
	e.start("n1")
	done := e.running("n1")
	if err := e.b.Stop(e.ctx, "n1"); err != nil {
		e.t.Fatalf("stop: %v", err)
	}
	waitEnded(e.t, done, "stop")
	_, _, err := e.exec("n1", engine.Command{Argv: []string{"true"}})
	wantIs(e.t, err, api.ErrNotFound, "exec on a stopped node")
}

func testSuspendKills(e *env) {
	e.start("n1")
	done := e.running("n1")
	if err := e.b.Suspend(e.ctx, "n1"); err != nil {
		e.t.Fatalf("suspend: %v", err)
	}
	waitEnded(e.t, done, "suspend")
}

func testExecState(e *env) {
	e.start("n1")
	if err := e.b.Suspend(e.ctx, "n1"); err != nil {
		e.t.Fatal(err)
	}
	_, _, err := e.exec("n1", engine.Command{Argv: []string{"true"}})
	wantIs(e.t, err, api.ErrState, "exec on a suspended node")
	_, _, err = e.exec("n9", engine.Command{Argv: []string{"true"}})
	wantIs(e.t, err, api.ErrNotFound, "exec on a node the backend does not hold")
}

// testForkPauses: the source's processes are paused while the files fork
// (nothing they write can slip between the files' fork and the children's
// start) and run again after the fork.
func testForkPauses(e *env) {
	e.start("n1")
	tick := filepath.Join(e.path("n1"), "tick")
	size := func() int64 {
		st, err := os.Stat(tick)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.b.Exec(ctx, "n1", engine.Command{Argv: []string{"sh", "-c", "while :; do echo x >> tick; sleep 0.005; done"}},
			func(api.ExecOutput) error { return nil })
		done <- err
	}()
	defer func() { cancel(); <-done }()
	grows := func(what string) {
		e.t.Helper()
		from := size()
		for deadline := time.Now().Add(Slow); size() == from; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				e.t.Fatalf("%s: the source's command does not run", what)
			}
		}
	}
	grows("before the fork")
	var during [2]int64
	files := func(context.Context) ([]string, error) {
		time.Sleep(50 * time.Millisecond) // what was in flight when the pause began lands
		during[0] = size()
		time.Sleep(200 * time.Millisecond)
		during[1] = size()
		return []string{e.path("n2")}, nil
	}
	if err := e.b.Fork(e.ctx, "n1", []string{"n2"}, files); err != nil {
		e.t.Fatalf("fork: %v", err)
	}
	if during[0] != during[1] {
		e.t.Fatalf("the source wrote while its files forked (%d bytes, then %d): it was not paused", during[0], during[1])
	}
	grows("after the fork")
}

// testCommit: Commit of a suspended child into its parent succeeds, twice
// (idempotent), and the child can be stopped after it.
func testCommit(e *env) {
	e.start("n1")
	calls := 0
	if err := e.b.Fork(e.ctx, "n1", []string{"n2"}, e.filesFor([]string{"n2"}, &calls)); err != nil {
		e.t.Fatal(err)
	}
	if err := e.b.Suspend(e.ctx, "n2"); err != nil {
		e.t.Fatal(err)
	}
	for i := range 2 {
		if err := e.b.Commit(e.ctx, "n2", "n1"); err != nil {
			e.t.Fatalf("commit #%d: %v", i+1, err)
		}
	}
	if err := e.b.Stop(e.ctx, "n2"); err != nil {
		e.t.Fatal(err)
	}
	e.wantHeld("n1:live")
}

// testCommitSiblings: the engine's commit, with siblings: the child
// suspended, committed, then it and the nodes the commit made stale (a
// sibling and the sibling's child, the parent stopped before its child)
// stopped; the parent goes on, live, and forks again; a backend that runs
// commands runs them in it and in its new child.
func testCommitSiblings(e *env) {
	e.start("n1")
	calls := 0
	if err := e.b.Fork(e.ctx, "n1", []string{"n2", "n3"}, e.filesFor([]string{"n2", "n3"}, &calls)); err != nil {
		e.t.Fatal(err)
	}
	if err := e.b.Fork(e.ctx, "n3", []string{"n4"}, e.filesFor([]string{"n4"}, &calls)); err != nil {
		e.t.Fatal(err)
	}
	if err := e.b.Suspend(e.ctx, "n2"); err != nil {
		e.t.Fatal(err)
	}
	if err := e.b.Commit(e.ctx, "n2", "n1"); err != nil {
		e.t.Fatalf("commit: %v", err)
	}
	for _, n := range []string{"n2", "n3", "n4"} {
		if err := e.b.Stop(e.ctx, n); err != nil {
			e.t.Fatalf("stop %s after the commit: %v", n, err)
		}
	}
	e.wantHeld("n1:live")
	if err := e.b.Fork(e.ctx, "n1", []string{"n5"}, e.filesFor([]string{"n5"}, &calls)); err != nil {
		e.t.Fatalf("fork of the parent after a commit: %v", err)
	}
	e.wantHeld("n1:live", "n5:live")
	if !e.b.Caps().Exec {
		return
	}
	for _, n := range []string{"n1", "n5"} {
		if x, _, err := e.exec(n, engine.Command{Argv: []string{"true"}}); err != nil || x.ExitCode != 0 {
			e.t.Fatalf("exec in %s after the commit: %+v %v", n, x, err)
		}
	}
}

// testCommitAfterReopen: the engine calls Commit again at the next open
// when a crash came after the files' commit and before its metadata: with
// the backend reopened, Commit succeeds (twice), the child stops, and the
// parent runs again (resumed if held suspended, else started afresh: the
// Lost rule) and forks.
func testCommitReopen(e *env) {
	e.start("n1")
	calls := 0
	if err := e.b.Fork(e.ctx, "n1", []string{"n2"}, e.filesFor([]string{"n2"}, &calls)); err != nil {
		e.t.Fatal(err)
	}
	if err := e.b.Suspend(e.ctx, "n2"); err != nil {
		e.t.Fatal(err)
	}
	b := e.reopen(e.b)
	for i := range 2 {
		if err := b.Commit(e.ctx, "n2", "n1"); err != nil {
			e.t.Fatalf("commit #%d after a reopen: %v", i+1, err)
		}
	}
	if err := b.Stop(e.ctx, "n2"); err != nil {
		e.t.Fatal(err)
	}
	held := e.held()
	switch {
	case slices.Equal(held, []string{"n1:suspended"}):
		if err := b.Resume(e.ctx, "n1", e.path("n1")); err != nil {
			e.t.Fatalf("resume the parent: %v", err)
		}
	case len(held) == 0:
		e.start("n1")
	default:
		e.t.Fatalf("after a reopen, a commit and a stop the backend holds %v, want n1 suspended or nothing", held)
	}
	if err := b.Fork(e.ctx, "n1", []string{"n3"}, e.filesFor([]string{"n3"}, &calls)); err != nil {
		e.t.Fatalf("fork of the parent: %v", err)
	}
	e.wantHeld("n1:live", "n3:live")
}
