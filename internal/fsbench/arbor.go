package fsbench

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/store"
)

// ArborSystems returns Arbor's systems: a branch at depth 1 and at depth 64
// (each level of the chain holds a change, so the layers are real), and
// "arbor-main", a mount that shows main, whose branches commit into the base
// directory.
func ArborSystems() []System {
	return []System{NewArbor(0), NewArbor(1), NewArbor(64)}
}

// NewArbor returns an Arbor mount showing a branch at the given depth (0:
// main, the base itself).
//
// The mount is served by a child process (this program re-executed with
// ServeEnv set), as arbord serves its mounts: a process must not use a FUSE
// mount it serves itself (a page fault or a git run inside it can wait on
// the kernel for a request that the same process would have to answer,
// go-fuse's "Deadlocks" note). Forks, commits and aborts go to the child
// over a pipe, one JSON line each way, and are timed by the child's own
// clock (ServiceTimer): the pipe's round trip is not in the figures, as it
// was not when the store was served in-process.
func NewArbor(depth int) System { return &arborSys{depth: depth} }

// ServeEnv, set in a process's environment, makes it serve one Arbor mount
// for the benchmark (Serve) instead of doing what it would: cmd/arbor and
// this package's tests check it first.
const ServeEnv = "ARBOR_FSBENCH_SERVE"

// callTimeout bounds one request to the server (a commit of 100 MB into
// the base, durable, takes well under a second here).
const callTimeout = 2 * time.Minute

type arborSys struct {
	depth   int
	profile string // the server's CPU profile, if set
	// transport is the mount's FUSE transport (cowfs.Config.Transport).
	transport string

	mu    sync.Mutex // one request at a time on the pipe
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	outR  *os.File // out's pipe: ours, so that Wait does not close it (see Setup)
	done  chan struct{}
	mnt   string
	seq   atomic.Int64
	setUp bool
	last  atomic.Int64 // the last request's service time in the server, ns
}

// LastService is the server's own time for the last fork, commit or abort.
func (a *arborSys) LastService() time.Duration { return time.Duration(a.last.Load()) }

func (a *arborSys) Name() string {
	if a.depth == 0 {
		return "arbor-main"
	}
	return fmt.Sprintf("arbor-d%d", a.depth)
}

// SetCPUProfile makes the server write its CPU profile to path.
func (a *arborSys) SetCPUProfile(path string) { a.profile = path }

// SetTransport sets the mount's FUSE transport (cowfs.Transport*).
func (a *arborSys) SetTransport(t string) { a.transport = t }

// serveReq and serveResp are the pipe's lines.
type serveReq struct {
	Op      string `json:"op"` // setup, fork, commit, abort, close
	Base    string `json:"base,omitempty"`
	Scratch string `json:"scratch,omitempty"`
	Depth   int    `json:"depth,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Transport is the mount's FUSE transport (setup).
	Transport string `json:"transport,omitempty"`
	Name      string `json:"name,omitempty"`
	Durable   bool   `json:"durable,omitempty"`
}

type serveResp struct {
	Mnt string `json:"mnt,omitempty"`
	Err string `json:"err,omitempty"`
	NS  int64  `json:"ns"` // the request's service time in the server
}

func (a *arborSys) Setup(ctx context.Context, base, scratch string) (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s: needs root for a direct FUSE mount: %w", a.Name(), errors.ErrUnsupported)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ServeEnv+"=1")
	cmd.Stderr = os.Stderr
	// No Pdeathsig: it fires when the OS thread that started the child
	// ends, not the process. The server ends when its stdin does (this
	// process exited, or Teardown closed it).
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	// Not cmd.StdoutPipe: Wait, which runs beside the reads here, closes
	// that pipe as soon as the server exits, and the server exits right
	// after it answers "close": the answer was lost now and then, and
	// Teardown failed with "the mount's server is gone: read |0: file
	// already closed". A pipe of our own is read to its end.
	outR, outW, err := os.Pipe()
	if err != nil {
		in.Close()
		return "", err
	}
	cmd.Stdout = outW
	err = cmd.Start()
	outW.Close()
	if err != nil {
		in.Close()
		outR.Close()
		return "", fmt.Errorf("%s: start the mount's server: %w", a.Name(), err)
	}
	a.cmd, a.in, a.out, a.outR, a.done = cmd, in, bufio.NewReader(outR), outR, make(chan struct{})
	go func() { cmd.Wait(); close(a.done) }()
	r, err := a.call(serveReq{Op: "setup", Base: base, Scratch: scratch, Depth: a.depth, Profile: a.profile, Transport: a.transport})
	if err != nil {
		a.kill(filepath.Join(scratch, "mnt"))
		a.outR.Close()
		return "", fmt.Errorf("%s: %w", a.Name(), err)
	}
	a.mnt, a.setUp = r.Mnt, true
	return r.Mnt, nil
}

// call sends one request and reads its answer.
func (a *arborSys) call(req serveReq) (serveResp, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last.Store(0)
	// A server that hangs is killed (and its mount's connection aborted),
	// which ends the read below.
	hung := time.AfterFunc(callTimeout, func() {
		a.cmd.Process.Kill()
		(&fusemount.Aborter{}).AbortAt(a.mnt)
	})
	defer hung.Stop()
	line, err := json.Marshal(req)
	if err != nil {
		return serveResp{}, err
	}
	if _, err := a.in.Write(append(line, '\n')); err != nil {
		return serveResp{}, fmt.Errorf("%s: the mount's server is gone: %w", req.Op, err)
	}
	if beforeRead != nil {
		beforeRead(a)
	}
	b, err := a.out.ReadBytes('\n')
	if err != nil {
		return serveResp{}, fmt.Errorf("%s: the mount's server is gone: %w", req.Op, err)
	}
	var r serveResp
	if err := json.Unmarshal(b, &r); err != nil {
		return serveResp{}, fmt.Errorf("%s: the mount's server said %q: %w", req.Op, b, err)
	}
	a.last.Store(r.NS)
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

// beforeRead, set by tests only, runs in call between the request and the
// read of its answer.
var beforeRead func(a *arborSys)

// kill ends a server that did not close, and frees its mount.
func (a *arborSys) kill(mnt string) {
	a.cmd.Process.Kill()
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		// Stuck in the kernel on its own mount: abort the connection.
		(&fusemount.Aborter{}).AbortAt(mnt)
		<-a.done
	}
	fusemount.DetachStale(mnt)
}

func (a *arborSys) Teardown(ctx context.Context) error {
	if !a.setUp {
		return nil
	}
	a.setUp = false
	_, err := a.call(serveReq{Op: "close"})
	a.in.Close()
	select {
	case <-a.done:
		fusemount.DetachStale(a.mnt) // a server that died leaves its mount dead
	case <-time.After(30 * time.Second):
		err = errors.Join(err, fmt.Errorf("%s: the mount's server did not exit; killed", a.Name()))
		a.kill(a.mnt)
	}
	a.outR.Close()
	return err
}

// Branch forks the branch the mount shows; the harness times it.
func (a *arborSys) Branch(ctx context.Context) (Branch, error) {
	name := fmt.Sprintf("bench-%d", a.seq.Add(1))
	if _, err := a.call(serveReq{Op: "fork", Name: name}); err != nil {
		return nil, err
	}
	return &arborBranch{a: a, name: name}, nil
}

type arborBranch struct {
	a    *arborSys
	name string
}

func (b *arborBranch) Root() string { return filepath.Join(b.a.mnt, "@"+b.name) }

func (b *arborBranch) Commit(ctx context.Context, opts CommitOptions) error {
	if opts.IntoBase != (b.a.depth == 0) {
		return fmt.Errorf("%s commits into %s only: %w", b.a.Name(), map[bool]string{true: "the base", false: "a branch"}[b.a.depth == 0], errors.ErrUnsupported)
	}
	_, err := b.a.call(serveReq{Op: "commit", Name: b.name, Durable: opts.Durable})
	return err
}

func (b *arborBranch) Abort(ctx context.Context) error {
	_, err := b.a.call(serveReq{Op: "abort", Name: b.name})
	return err
}

// Serve is the mount's server (ServeEnv): it answers the requests on in
// until "close" or the end of in, and returns the process's exit code.
func Serve(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	var sv server
	defer sv.close()
	for sc.Scan() {
		var req serveReq
		var resp serveResp
		err := json.Unmarshal(sc.Bytes(), &req)
		if err == nil {
			start := time.Now()
			resp, err = sv.do(req)
			resp.NS = int64(time.Since(start))
		}
		if err != nil {
			resp.Err = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			return 1
		}
		if req.Op == "close" {
			return 0
		}
	}
	return 0
}

// server is the child's side: one store and its mount.
type server struct {
	st          *store.Store
	fs          *cowfs.FS
	leaf        string
	stopProfile func()
}

func (sv *server) do(req serveReq) (serveResp, error) {
	if req.Op != "setup" && sv.fs == nil {
		return serveResp{}, fmt.Errorf("%s before setup", req.Op)
	}
	switch req.Op {
	case "setup":
		if sv.fs != nil {
			return serveResp{}, errors.New("setup twice")
		}
		mnt, err := sv.setup(req)
		return serveResp{Mnt: mnt}, err
	case "fork":
		return serveResp{}, sv.st.Fork(sv.leaf, req.Name)
	case "commit":
		_, err := sv.fs.Commit(req.Name, req.Durable)
		return serveResp{}, err
	case "abort":
		return serveResp{}, sv.st.Abort(req.Name)
	case "close":
		return serveResp{}, sv.close()
	}
	return serveResp{}, fmt.Errorf("unknown op %q", req.Op)
}

func (sv *server) setup(req serveReq) (string, error) {
	if req.Profile != "" {
		stop, err := startCPUProfile(req.Profile)
		if err != nil {
			return "", err
		}
		sv.stopProfile = stop
	}
	st, err := store.Open(store.Config{Dir: filepath.Join(req.Scratch, "store"), Base: req.Base})
	if err != nil {
		return "", err
	}
	leaf := store.Main
	for i := 1; i <= req.Depth; i++ {
		name := fmt.Sprintf("level-%d", i)
		if err := st.Fork(leaf, name); err != nil {
			st.Close()
			return "", err
		}
		b, _ := st.Branch(name)
		rel := fmt.Sprintf(".arbor-level-%d", i)
		if err := st.Create(b, rel, false, func(dir int, name string) error {
			return os.WriteFile(fmt.Sprintf("/proc/self/fd/%d/%s", dir, name), []byte("level"), 0o644)
		}); err != nil {
			st.Close()
			return "", err
		}
		leaf = name
	}
	mnt := filepath.Join(req.Scratch, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		st.Close()
		return "", err
	}
	f, err := cowfs.Mount(cowfs.Config{Store: st, Mountpoint: mnt, Branch: leaf, Transport: req.Transport})
	if err != nil {
		st.Close()
		return "", err
	}
	sv.st, sv.fs, sv.leaf = st, f, leaf
	return mnt, nil
}

func (sv *server) close() error {
	var err error
	if sv.fs != nil {
		err = sv.fs.Unmount(true)
		if err2 := sv.st.Close(); err == nil {
			err = err2
		}
		sv.fs, sv.st = nil, nil
	}
	if sv.stopProfile != nil {
		sv.stopProfile()
		sv.stopProfile = nil
	}
	return err
}
