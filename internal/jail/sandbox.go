package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// Sandbox is one live sandbox. Its methods are safe for concurrent use.
type Sandbox struct {
	m    *Manager
	name string
	g    *group
	cmd  *exec.Cmd
	sock int        // the host end of the socketpair; closed by Stop
	net  *netHelper // the sandbox's pasta (Config.Outbound), or nil
	tr   *tracer    // ARBOR_JAIL_TRACE: the start's steps, printed at its first exec's first output

	refillOnce sync.Once // the manager's refill asked (refillSpare)

	initDone   chan struct{} // closed when init has been reaped
	readerDone chan struct{} // closed when read has returned

	wmu sync.Mutex // guards writes to sock

	mu       sync.Mutex          // guards the fields below
	nextID   uint64              // the last exec id given
	procs    map[uint64]*Process // processes not yet reported ended
	frozen   bool
	stopping bool
	stopped  chan struct{} // closed when Stop has finished
	stopErr  error

	refillTimer *time.Timer // asks the refill refillAfter after the start
}

// Name is the sandbox's name.
func (s *Sandbox) Name() string { return s.name }

// InitPid is the host pid of the sandbox's init.
func (s *Sandbox) InitPid() int { return s.cmd.Process.Pid }

// CgroupPaths are the sandbox's cgroup directories on the host.
func (s *Sandbox) CgroupPaths() []string {
	var out []string
	if s.g.v2 != nil {
		out = append(out, s.g.h.v2Path(s.g.rel))
	}
	for _, n := range s.g.h.v1 {
		out = append(out, s.g.h.v1Path(n, s.g.rel))
	}
	return out
}

func (s *Sandbox) write(m *msg, fds ...int) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return send(s.sock, m, fds...)
}

// read dispatches init's messages until the socket closes (init died,
// or Stop closed it); every process still waiting then fails.
func (s *Sandbox) read() {
	defer close(s.readerDone)
	buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(4*4))
	for {
		m, fds, err := recv(s.sock, buf, oob)
		if err != nil || m == nil {
			closeAll(fds)
			break
		}
		s.mu.Lock()
		p := s.procs[m.ID]
		if m.Op == opExit || (m.Op == opStarted && m.Err != "") {
			delete(s.procs, m.ID)
		}
		s.mu.Unlock()
		if p == nil {
			closeAll(fds)
			continue
		}
		switch m.Op {
		case opStarted:
			p.onStarted(m, fds)
		case opExit:
			closeAll(fds)
			p.exited(unix.WaitStatus(m.Status), nil)
		default:
			closeAll(fds)
		}
	}
	s.mu.Lock()
	left := s.procs
	s.procs = map[uint64]*Process{}
	s.mu.Unlock()
	for _, p := range left {
		p.onStarted(&msg{Err: "sandbox stopped"}, nil)
		p.exited(0, fmt.Errorf("jail: %s: %w: sandbox stopped", s.name, api.ErrState))
	}
}

// ExecSpec describes a process to run in a sandbox.
type ExecSpec struct {
	Argv []string
	// Env is the whole environment; nil means PATH, HOME=/tmp and, with
	// TTY, TERM=xterm-256color.
	Env []string
	// Cwd inside the sandbox; default /workspace.
	Cwd string
	// Timeout, if positive, kills the process and every process it
	// started (the exec's cgroup, on a host with cgroup2; its process
	// group otherwise) when it has run that long.
	Timeout time.Duration
	// Stdin is copied to the process until it ends (nil: /dev/null).
	Stdin io.Reader
	// Stdout and Stderr receive output as it comes (nil: discarded).
	// With TTY both streams are the terminal's, written to Stdout.
	Stdout, Stderr io.Writer
	// TTY runs the process on a new pty of the sandbox, as session
	// leader with it as its controlling terminal, Rows x Cols in size.
	TTY        bool
	Rows, Cols uint16
}

// ExitStatus is how a process ended: Code, or the Signal that killed it.
type ExitStatus struct {
	Code     int
	Signal   syscall.Signal // 0 unless killed by a signal
	TimedOut bool           // killed because its Timeout passed
}

func (e ExitStatus) String() string {
	if e.Signal != 0 {
		s := "signal: " + unix.SignalName(e.Signal)
		if e.TimedOut {
			s += " (timeout)"
		}
		return s
	}
	return "exit " + strconv.Itoa(e.Code)
}

// outputGrace is how long a Wait waits, after the process itself has
// ended, for its output pipes to reach end of file: a background child
// that inherited them would hold them open for as long as it lives.
const outputGrace = 50 * time.Millisecond

// Process is a process started in a sandbox by Start.
type Process struct {
	s         *Sandbox
	id        uint64
	argv      []string
	startedAt time.Time
	timer     *time.Timer
	leaf      string // its cgroup2 directory ("" without cgroup2)
	tr        *tracer

	startc chan struct{} // closed once init has answered the start
	pid    int
	tty    *os.File // the pty master, with TTY
	err0   error    // why it did not start

	copies  sync.WaitGroup // the output copiers
	inDone  chan struct{}  // closed to stop the stdin copier
	readers []*os.File     // output pipe read ends, closed after the grace

	done     chan struct{} // closed when ended and output drained
	mu       sync.Mutex    // guards the fields below
	status   ExitStatus
	err      error
	timedOut bool
	ended    bool
	end      *onceChan
}

// ProcessInfo describes a running process, for listing.
type ProcessInfo struct {
	ID      uint64
	Pid     int // in the sandbox's PID namespace
	Argv    []string
	Started time.Time
}

// Start starts a process in the sandbox and returns once it runs; its
// output streams as it comes. A process nobody waits for runs until it
// ends or the sandbox stops (a background process); Processes lists it.
func (s *Sandbox) Start(spec ExecSpec) (_ *Process, err error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("jail: exec: %w: empty argv", api.ErrBadRequest)
	}
	if spec.Cwd != "" && !filepath.IsAbs(spec.Cwd) {
		return nil, fmt.Errorf("jail: exec: %w: cwd %q is not absolute", api.ErrBadRequest, spec.Cwd)
	}
	if spec.Env == nil {
		spec.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"}
		if spec.TTY {
			spec.Env = append(spec.Env, "TERM=xterm-256color")
		}
	}
	tr := s.takeTrace()
	tr.mark("exec")
	s.mu.Lock()
	switch {
	case s.stopping:
		s.mu.Unlock()
		return nil, fmt.Errorf("jail: exec in %s: %w: stopped", s.name, api.ErrState)
	case s.frozen:
		s.mu.Unlock()
		return nil, fmt.Errorf("jail: exec in %s: %w: suspended", s.name, api.ErrState)
	}
	s.nextID++
	p := &Process{s: s, id: s.nextID, argv: spec.Argv, startc: make(chan struct{}), done: make(chan struct{}), inDone: make(chan struct{}), tr: tr}
	s.procs[p.id] = p
	s.mu.Unlock()
	defer func() {
		if err != nil {
			s.mu.Lock()
			delete(s.procs, p.id)
			s.mu.Unlock()
		}
	}()

	var childFDs []int // what init gets; ours to close once sent
	defer func() {
		closeAll(childFDs)
	}()
	var undo []func()
	defer func() {
		if err != nil {
			for _, u := range undo {
				u()
			}
		}
	}()
	m := &msg{Op: opExec, ID: p.id, Argv: spec.Argv, Env: spec.Env, Cwd: spec.Cwd, TTY: spec.TTY, Rows: spec.Rows, Cols: spec.Cols, Trace: tr != nil}
	w := &lockedWriter{}
	if !spec.TTY {
		in, err := p.stdin(spec.Stdin)
		if err != nil {
			return nil, err
		}
		childFDs = append(childFDs, in)
		for _, out := range []io.Writer{spec.Stdout, spec.Stderr} {
			if out == nil {
				fd, err := unix.Dup(int(s.m.null.Fd()))
				if err != nil {
					return nil, err
				}
				childFDs = append(childFDs, fd)
				continue
			}
			r, wr, err := os.Pipe()
			if err != nil {
				return nil, err
			}
			fd, err := unix.Dup(int(wr.Fd()))
			wr.Close()
			if err != nil {
				r.Close()
				return nil, err
			}
			childFDs = append(childFDs, fd)
			p.readers = append(p.readers, r)
			undo = append(undo, func() { r.Close() })
			p.copy(tr.firstWrite(w.to(out), s.name), r)
		}
	}
	if s.g.v2 != nil {
		p.leaf = filepath.Join(s.g.h.v2Path(s.g.rel), "e"+strconv.FormatUint(p.id, 10))
		if err := unix.Mkdir(p.leaf, 0o755); err != nil {
			return nil, fmt.Errorf("jail: exec cgroup: %w", err)
		}
		undo = append(undo, func() { unix.Rmdir(p.leaf) })
		dir, err := unix.Open(p.leaf, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("jail: exec cgroup: %w", err)
		}
		childFDs = append(childFDs, dir)
		m.Cgroup = true
	}
	tr.mark("exec-send")
	if err := s.write(m, childFDs...); err != nil {
		return nil, fmt.Errorf("jail: exec in %s: %w: %w", s.name, api.ErrState, err)
	}
	closeAll(childFDs)
	childFDs = nil
	<-p.startc
	if p.err0 != nil {
		return nil, p.err0
	}
	tr.mark("started")
	p.startedAt = time.Now()
	if spec.TTY {
		if spec.Stdout != nil {
			p.copy(spec.Stdout, p.tty)
		}
		if spec.Stdin != nil {
			go func() { io.Copy(p.tty, spec.Stdin) }() // ends when the pty closes
		}
	}
	if spec.Timeout > 0 {
		p.timer = time.AfterFunc(spec.Timeout, func() {
			p.mu.Lock()
			p.timedOut = true
			p.mu.Unlock()
			p.Kill()
		})
	}
	go p.finish()
	return p, nil
}

// stdin returns the fd init gets as the process's stdin, and starts the
// copier that feeds it.
func (p *Process) stdin(in io.Reader) (int, error) {
	if in == nil {
		return unix.Dup(int(p.s.m.null.Fd()))
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	fd, err := unix.Dup(int(r.Fd()))
	r.Close()
	if err != nil {
		w.Close()
		return -1, err
	}
	go func() {
		defer w.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(w, in)
		}()
		select {
		case <-done:
		case <-p.inDone:
		}
	}()
	return fd, nil
}

func (p *Process) copy(w io.Writer, r *os.File) {
	p.copies.Add(1)
	go func() {
		defer p.copies.Done()
		io.Copy(w, r)
	}()
}

func (p *Process) onStarted(m *msg, fds []int) {
	select {
	case <-p.startc:
		closeAll(fds)
		return
	default:
	}
	if m.Err != "" {
		closeAll(fds)
		p.err0 = fmt.Errorf("jail: exec %q in %s: %s", p.argv[0], p.s.name, m.Err)
		p.exited(0, p.err0)
	} else {
		p.tr.merge(m.TraceSteps, m.TraceNS)
		p.pid = m.Pid
		if len(fds) > 0 {
			p.tty = os.NewFile(uintptr(fds[0]), "pty")
			closeAll(fds[1:])
		}
	}
	close(p.startc)
}

func (p *Process) exited(ws unix.WaitStatus, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	p.err = err
	switch {
	case err != nil:
	case ws.Signaled():
		p.status.Signal = ws.Signal()
	default:
		p.status.Code = ws.ExitStatus()
	}
	p.status.TimedOut = p.timedOut
	p.endc().close()
}

// endc is closed when init has reported the end.
func (p *Process) endc() *onceChan {
	if p.end == nil {
		p.end = &onceChan{c: make(chan struct{})}
	}
	return p.end
}

// finish waits for the end, then for the output (up to outputGrace
// more), and releases what the process held.
func (p *Process) finish() {
	p.mu.Lock()
	end := p.endc()
	p.mu.Unlock()
	<-end.c
	if p.timer != nil {
		p.timer.Stop()
	}
	close(p.inDone)
	drained := make(chan struct{})
	go func() { p.copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputGrace):
		for _, r := range p.readers {
			r.Close()
		}
		if p.tty != nil {
			p.tty.Close()
		}
		<-drained
	}
	for _, r := range p.readers {
		r.Close()
	}
	if p.tty != nil {
		p.tty.Close()
	}
	if p.leaf != "" {
		unix.Rmdir(p.leaf) // EBUSY while a background child lives on: Stop removes it
	}
	p.s.refillSpare()
	close(p.done)
}

// Pid is the process's pid in the sandbox's PID namespace.
func (p *Process) Pid() int { return p.pid }

// Done is closed when the process has ended and its output is drained.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and its output to drain. If ctx ends
// first, it kills the process and its children and still waits.
func (p *Process) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Kill()
		<-p.done
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.err != nil {
			return p.status, p.err
		}
		return p.status, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, p.err
}

// Kill SIGKILLs the process and every process it started: through its
// own cgroup where the host has cgroup2 (setsid and double forks do not
// leave it), else its process group.
func (p *Process) Kill() error {
	if p.leaf != "" {
		err := os.WriteFile(filepath.Join(p.leaf, "cgroup.kill"), []byte("1"), 0)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return p.s.write(&msg{Op: opSignal, ID: p.id, Signal: int(unix.SIGKILL)})
}

// Resize sets the pty's window size (TTY processes only).
func (p *Process) Resize(rows, cols uint16) error {
	if p.tty == nil {
		return fmt.Errorf("jail: resize: %w: not a tty process", api.ErrBadRequest)
	}
	// Through the descriptor's own reference (Control), never Fd(): the
	// pty is closed when the process ends, maybe while a resize comes.
	rc, err := p.tty.SyscallConn()
	if err != nil {
		return fmt.Errorf("jail: resize: %w", err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return fmt.Errorf("jail: resize: %w: %w", api.ErrState, err)
	}
	return ierr
}

// Exec runs a process to its end: Start, then Wait.
func (s *Sandbox) Exec(ctx context.Context, spec ExecSpec) (ExitStatus, error) {
	p, err := s.Start(spec)
	if err != nil {
		return ExitStatus{}, err
	}
	return p.Wait(ctx)
}

// Processes lists the processes started by Start that still run, by id.
func (s *Sandbox) Processes() []ProcessInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ProcessInfo, 0, len(s.procs))
	for _, p := range s.procs {
		select {
		case <-p.startc:
		default:
			continue // not started yet
		}
		if p.err0 != nil {
			continue
		}
		out = append(out, ProcessInfo{ID: p.id, Pid: p.pid, Argv: p.argv, Started: p.startedAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Freeze suspends every process of the sandbox (its cgroup's freezer);
// Exec fails until Thaw.
func (s *Sandbox) Freeze() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return fmt.Errorf("jail: freeze %s: %w: stopped", s.name, api.ErrState)
	}
	if err := s.g.freeze(); err != nil {
		return fmt.Errorf("jail: freeze %s: %w", s.name, err)
	}
	s.frozen = true
	return nil
}

// Thaw resumes a frozen sandbox.
func (s *Sandbox) Thaw() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return fmt.Errorf("jail: thaw %s: %w: stopped", s.name, api.ErrState)
	}
	if err := s.g.thaw(); err != nil {
		return fmt.Errorf("jail: thaw %s: %w", s.name, err)
	}
	s.frozen = false
	return nil
}

// Frozen reports whether the sandbox is suspended.
func (s *Sandbox) Frozen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen
}

// MemoryBytes is the memory charged to the sandbox's cgroup.
func (s *Sandbox) MemoryBytes() (int64, error) { return s.g.memory() }

// OOMKills is how many of the sandbox's processes the kernel has killed
// for its memory limit (Spec.MemoryMax).
func (s *Sandbox) OOMKills() (int64, error) { return s.g.oomKills() }

// PidCount is the number of processes in the sandbox, init included.
func (s *Sandbox) PidCount() (int, error) { return s.g.pids() }

// Stop kills every process of the sandbox, init last, waits until its
// cgroups are empty and removes them. It is idempotent: later calls wait
// for the first and return its result.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		select {
		case <-s.stopped:
			return s.stopErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.stopping = true
	s.mu.Unlock()
	s.refillSpare()
	err := s.stop()
	s.stopErr = err
	close(s.stopped)
	s.m.mu.Lock()
	delete(s.m.sandboxes, s.name)
	s.m.mu.Unlock()
	return err
}

func (s *Sandbox) stop() error {
	var errs []error
	// The cgroup first: a frozen cgroup's processes die on cgroup.kill,
	// and a v1 kill thaws after killing.
	if err := s.g.kill(); err != nil {
		errs = append(errs, err)
	}
	s.cmd.Process.Kill() // init's death takes its PID namespace with it, whatever the cgroup did
	<-s.initDone
	s.net.stop() // killed with the cgroup already; reaped here
	if err := s.g.waitEmpty(s.m.cfg.StopTimeout); err != nil {
		errs = append(errs, err)
	} else if s.frozen && s.g.v1 != nil {
		s.g.thaw() // an empty v1 freezer cgroup stays FROZEN; rmdir does not care, but be tidy
	}
	unix.Shutdown(s.sock, unix.SHUT_RDWR) // the reader returns
	<-s.readerDone
	unix.Close(s.sock)
	if err := s.g.remove(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("jail: stop %s: %w", s.name, errors.Join(errs...))
	}
	return nil
}

// lockedWriter serialises the copies of one process's two streams into
// writers that may be the same one.
type lockedWriter struct{ mu sync.Mutex }

func (l *lockedWriter) to(w io.Writer) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return w.Write(b)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

type onceChan struct {
	once sync.Once
	c    chan struct{}
}

func (o *onceChan) close() { o.once.Do(func() { close(o.c) }) }
