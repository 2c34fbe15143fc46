package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// hostBackends is the test double of engine.Backend, beside the real dir
// backend: a node's "sandbox" is the set of host processes Exec started in
// its files (each in its own process group, killed by Stop and Suspend),
// what it holds is persisted in state.json under the backend's directory
// (so that a process killed at any point leaves sandboxes the next open
// finds, as a jail's cgroups would be), and its RAM is what the test sets.
// It records every call, in order, for the tests of the engine's orders,
// and can SIGKILL its own process right after a chosen call took effect.
type hostBackends struct {
	mu   sync.Mutex
	caps engine.Caps
	ram  map[string]int64 // by node id, for every tree; StartRAM otherwise
	log  []string         // "suspend n3", "stop n4 files=yes", ...
	last *hostBackend     // the last opened
	// crashAt, if set, is "Method:node" (or "Method:*"): that call SIGKILLs
	// the process once its effect is saved.
	crashAt string
	// ctxs are the contexts the calls that start something got, for the
	// test that no request's context becomes a sandbox's lifetime.
	ctxs []context.Context
}

func newHostBackends() *hostBackends {
	return &hostBackends{caps: engine.Caps{Exec: true, StartRAM: 100, Lost: engine.LostRestart}, ram: map[string]int64{}}
}

func (h *hostBackends) setRAM(node string, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ram[node] = n
}

func (h *hostBackends) record(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, fmt.Sprintf(format, args...))
}

// calls returns the log and empties it.
func (h *hostBackends) calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.log
	h.log = nil
	return out
}

func (h *hostBackends) crash(method, node string) {
	h.mu.Lock()
	at := h.crashAt
	h.mu.Unlock()
	if at == method+":"+node || at == method+":*" {
		fmt.Println("crashing at", method, node)
		os.Stdout.Sync()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

func (h *hostBackends) open(ctx context.Context, cfg engine.BackendConfig) (engine.Backend, error) {
	b := &hostBackend{h: h, dir: cfg.Dir, budget: cfg.Budget, nodes: map[string]*hostNode{}}
	buf, err := os.ReadFile(filepath.Join(cfg.Dir, "state.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		var st map[string]engine.HeldState
		if err := json.Unmarshal(buf, &st); err != nil {
			return nil, err
		}
		for id, s := range st {
			b.nodes[id] = &hostNode{state: s, procs: map[*exec.Cmd]struct{}{}}
		}
	}
	h.mu.Lock()
	h.last = b
	h.mu.Unlock()
	return b, nil
}

type hostBackend struct {
	h      *hostBackends
	dir    string
	budget api.Budget // BackendConfig.Budget

	mu    sync.Mutex // guards nodes and their fields, and orders writes of state.json
	nodes map[string]*hostNode
}

type hostNode struct {
	state engine.HeldState
	path  string
	procs map[*exec.Cmd]struct{}
}

// save writes what the backend holds; b.mu is held.
func (b *hostBackend) save() error {
	st := map[string]engine.HeldState{}
	for id, n := range b.nodes {
		st[id] = n.state
	}
	buf, _ := json.Marshal(st)
	tmp := filepath.Join(b.dir, "state.json.tmp")
	if err := os.WriteFile(tmp, buf, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(b.dir, "state.json"))
}

// signal sends sig to every process of node (SIGSTOP, SIGCONT: its pause).
func (b *hostBackend) signal(node string, sig syscall.Signal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, ok := b.nodes[node]; ok {
		for c := range n.procs {
			syscall.Kill(-c.Process.Pid, sig)
		}
	}
}

// kill ends every process of n; b.mu is held.
func (n *hostNode) kill() {
	for c := range n.procs {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
}

func exists(path string) string {
	if _, err := os.Stat(path); err == nil {
		return "yes"
	}
	return "no"
}

func (b *hostBackend) Caps() engine.Caps { return b.h.caps }

func (b *hostBackend) Start(ctx context.Context, node, path string) error {
	b.mu.Lock()
	if _, ok := b.nodes[node]; ok {
		b.mu.Unlock()
		return api.Errorf(api.ErrExists, "host: start %s: held", node)
	}
	b.nodes[node] = &hostNode{state: engine.HeldLive, path: path, procs: map[*exec.Cmd]struct{}{}}
	err := b.save()
	b.mu.Unlock()
	b.h.mu.Lock()
	b.h.ctxs = append(b.h.ctxs, ctx)
	b.h.mu.Unlock()
	b.h.record("start %s", node)
	b.h.crash("Start", node)
	return err
}

func (b *hostBackend) Fork(ctx context.Context, source string, children []string, files func(context.Context) ([]string, error)) error {
	b.mu.Lock()
	_, ok := b.nodes[source]
	for _, c := range children {
		if _, dup := b.nodes[c]; dup {
			b.mu.Unlock()
			return api.Errorf(api.ErrExists, "host: fork: %s held", c)
		}
	}
	b.mu.Unlock()
	if !ok {
		return api.Errorf(api.ErrNotFound, "host: fork %s: not held", source)
	}
	b.h.mu.Lock()
	b.h.ctxs = append(b.h.ctxs, ctx)
	b.h.mu.Unlock()
	b.signal(source, syscall.SIGSTOP)
	b.h.record("pause %s", source)
	defer b.signal(source, syscall.SIGCONT)
	paths, err := files(ctx)
	if err != nil {
		b.h.record("resume-after-fork %s", source)
		return fmt.Errorf("host: fork %s: %w", source, err)
	}
	b.h.record("files-forked %s", source)
	b.mu.Lock()
	for i, c := range children {
		b.nodes[c] = &hostNode{state: engine.HeldLive, path: paths[i], procs: map[*exec.Cmd]struct{}{}}
		b.h.record("start-child %s", c)
	}
	err = b.save()
	b.mu.Unlock()
	b.h.record("resume-after-fork %s", source)
	b.h.crash("Fork", source)
	return err
}

func (b *hostBackend) Suspend(ctx context.Context, node string) error {
	b.mu.Lock()
	n, ok := b.nodes[node]
	switch {
	case !ok:
		b.mu.Unlock()
		return api.Errorf(api.ErrNotFound, "host: suspend %s: not held", node)
	case n.state == engine.HeldSuspended:
		b.mu.Unlock()
		return api.Errorf(api.ErrState, "host: suspend %s: suspended", node)
	}
	n.kill()
	n.state = engine.HeldSuspended
	err := b.save()
	b.mu.Unlock()
	b.h.record("suspend %s", node)
	b.h.crash("Suspend", node)
	return err
}

func (b *hostBackend) Resume(ctx context.Context, node, path string) error {
	b.mu.Lock()
	n, ok := b.nodes[node]
	if ok && n.state == engine.HeldLive {
		b.mu.Unlock()
		return api.Errorf(api.ErrState, "host: resume %s: live", node)
	}
	if !ok {
		n = &hostNode{procs: map[*exec.Cmd]struct{}{}}
		b.nodes[node] = n
	}
	n.state, n.path = engine.HeldLive, path
	err := b.save()
	b.mu.Unlock()
	b.h.record("resume %s", node)
	b.h.crash("Resume", node)
	return err
}

// Commit records the call: the double keeps nothing besides the files.
func (b *hostBackend) Commit(ctx context.Context, child, parent string) error {
	b.h.record("commit %s into %s", child, parent)
	b.h.crash("Commit", child)
	return nil
}

func (b *hostBackend) Stop(ctx context.Context, node string) error {
	b.mu.Lock()
	n, ok := b.nodes[node]
	files := "-"
	if ok {
		n.kill()
		if n.path != "" {
			files = exists(n.path)
		}
		delete(b.nodes, node)
	}
	err := b.save()
	b.mu.Unlock()
	if ok {
		b.h.record("stop %s files=%s", node, files)
		b.h.crash("Stop", node)
	}
	return err
}

func (b *hostBackend) Exec(ctx context.Context, node string, cmd engine.Command, out func(api.ExecOutput) error) (api.ExecExit, error) {
	start := time.Now()
	b.mu.Lock()
	n, ok := b.nodes[node]
	if !ok {
		b.mu.Unlock()
		return api.ExecExit{}, api.Errorf(api.ErrNotFound, "host: exec on %s: not held", node)
	}
	if n.state != engine.HeldLive {
		b.mu.Unlock()
		return api.ExecExit{}, api.Errorf(api.ErrState, "host: exec on %s: suspended", node)
	}
	c := exec.Command(cmd.Argv[0], cmd.Argv[1:]...)
	c.Dir = filepath.Join(n.path, cmd.Cwd)
	c.Env = append(os.Environ(), cmd.Env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Stdin = cmd.Stdin
	stdout, err := c.StdoutPipe()
	if err != nil {
		b.mu.Unlock()
		return api.ExecExit{}, err
	}
	stderr, err := c.StderrPipe()
	if err != nil {
		b.mu.Unlock()
		return api.ExecExit{}, err
	}
	if err := c.Start(); err != nil {
		b.mu.Unlock()
		return api.ExecExit{ExitCode: 127, DurationNS: max(time.Since(start).Nanoseconds(), 1)}, nil
	}
	n.procs[c] = struct{}{}
	b.mu.Unlock()
	kill := func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	var outMu sync.Mutex
	var outErr error
	var wg sync.WaitGroup
	for name, r := range map[string]io.Reader{"stdout": stdout, "stderr": stderr} {
		wg.Go(func() {
			br := bufio.NewReader(r)
			buf := make([]byte, 32<<10)
			for {
				k, err := br.Read(buf)
				if k > 0 {
					outMu.Lock()
					if outErr == nil {
						if outErr = out(api.ExecOutput{Stream: name, Data: slices.Clone(buf[:k])}); outErr != nil {
							kill()
						}
					}
					outMu.Unlock()
				}
				if err != nil {
					return
				}
			}
		})
	}
	var timedOut atomic.Bool
	var timer <-chan time.Time
	if cmd.Timeout > 0 {
		t := time.NewTimer(cmd.Timeout)
		defer t.Stop()
		timer = t.C
	}
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		select {
		case <-ctx.Done():
			kill()
		case <-timer:
			timedOut.Store(true)
			kill()
		case <-done:
		}
	})
	wg.Wait()
	werr := c.Wait()
	close(done)
	watch.Wait()
	b.mu.Lock()
	delete(n.procs, c)
	b.mu.Unlock()
	x := api.ExecExit{ExitCode: c.ProcessState.ExitCode(), DurationNS: max(time.Since(start).Nanoseconds(), 1)}
	if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		x.Signal = strings.TrimPrefix(strings.ToUpper(unixSignalName(ws.Signal())), "SIG")
	}
	if outErr != nil {
		return x, fmt.Errorf("host: exec output: %w", outErr)
	}
	if err := ctx.Err(); err != nil && !timedOut.Load() {
		return x, fmt.Errorf("host: exec: %w", err)
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return x, werr
	}
	return x, nil
}

func unixSignalName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "KILL"
	}
	return s.String()
}

func (b *hostBackend) RAM(ctx context.Context) (map[string]int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	out := map[string]int64{}
	for id, n := range b.nodes {
		if n.state != engine.HeldLive {
			continue
		}
		if r, ok := b.h.ram[id]; ok {
			out[id] = r
		} else {
			out[id] = b.h.caps.StartRAM
		}
	}
	return out, nil
}

func (b *hostBackend) Nodes(ctx context.Context) ([]engine.HeldNode, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []engine.HeldNode
	for id, n := range b.nodes {
		out = append(out, engine.HeldNode{ID: id, State: n.state})
	}
	return out, nil
}

// Close kills every process and forgets the live nodes (nothing runs past
// Close); suspended ones stay on disk.
func (b *hostBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, n := range b.nodes {
		n.kill()
		if n.state == engine.HeldLive {
			delete(b.nodes, id)
		}
	}
	return b.save()
}
