// Package guest is the agent inside a microVM: the guest's init (PID 1),
// which mounts the guest's filesystems, loads the virtio modules, and
// serves the host's requests (internal/vm/wire) on the virtio-serial port
// named "arbor": ping, exec (argv, env, cwd, timeout, streamed output,
// stdin, exit code or signal), and file reads and writes.
//
// As PID 1 it reaps every orphan: one reaper waits for every child and
// hands an exec's status to the exec that started it.
//
// A hello starts a session: a fork's child and a restored VM hold the
// agent as it was in the source, with execs the source's host asked for.
// Their output belongs to the old session and is dropped (the processes
// keep running), and the hello's seed is mixed into the kernel's random
// pool, which is reseeded, so that two children of one fork draw
// different random bytes; the hostname is set.
package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/arbor-dev/arbor/internal/vm/wire"
	"golang.org/x/sys/unix"
)

// PortName is the virtio-serial port's name (-device virtserialport,name=).
const PortName = "arbor"

// ModulesFile lists, one a line, the kernel modules init loads in order
// (paths inside the guest).
const ModulesFile = "/etc/arbor/modules"

// Main is the guest's init: it never returns.
func Main() {
	logf("arbor-guest: init")
	if err := setup(); err != nil {
		logf("arbor-guest: setup: %v", err)
	}
	a := &agent{execs: map[uint64]*execution{}, pids: map[int]*execution{}}
	a.fs = &remote{a: a, pending: map[uint64]*fsCall{}}
	go a.reap()
	if err := mountWorkspace(a.fs); err != nil {
		logf("arbor-guest: mount %s: %v", WorkspaceDir, err)
	}
	for {
		port, err := openPort()
		if err != nil {
			logf("arbor-guest: %v", err)
			time.Sleep(500 * time.Millisecond)
			continue
		}
		logf("arbor-guest: serving on %s", port.Name())
		a.serve(port)
		port.Close()
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// setup mounts what the guest needs and loads the modules.
func setup() error {
	for _, m := range []struct{ src, dst, fs, opt string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=755"},
		{"devpts", "/dev/pts", "devpts", ""},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, 0, m.opt); err != nil && !errors.Is(err, unix.EBUSY) {
			logf("arbor-guest: mount %s: %v", m.dst, err)
		}
	}
	os.MkdirAll(WorkspaceDir, 0o755)
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		unix.Dup2(int(f.Fd()), 1)
		unix.Dup2(int(f.Fd()), 2)
		f.Close()
	}
	b, err := os.ReadFile(ModulesFile)
	if err != nil {
		return nil // no modules: everything is built in
	}
	for _, p := range strings.Fields(string(b)) {
		f, err := os.Open(p)
		if err != nil {
			logf("arbor-guest: module %s: %v", p, err)
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
			logf("arbor-guest: load %s: %v", p, err)
		}
		f.Close()
	}
	return nil
}

// openPort opens the virtio-serial port named PortName, waiting for the
// driver to show it.
func openPort() (*os.File, error) {
	for i := 0; ; i++ {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err == nil && strings.TrimSpace(string(b)) == PortName {
				return os.OpenFile("/dev/"+e.Name(), os.O_RDWR, 0)
			}
		}
		if i == 100 {
			return nil, fmt.Errorf("no virtio-serial port named %q", PortName)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type agent struct {
	wmu sync.Mutex // one frame at a time on the port
	w   io.Writer
	fs  *remote // the node's files at /workspace

	pmu  sync.Mutex         // the reaper's and process starts': guards pids
	pids map[int]*execution // by pid, every session's running execs

	mu      sync.Mutex
	session string
	execs   map[uint64]*execution // by request id, this session's
}

type execution struct {
	id      uint64
	session string
	pid     int                     // guarded by agent.mu
	in      chan *wire.Msg          // stdin frames
	ended   chan struct{}           // closed when the process ended
	status  chan syscall.WaitStatus // from the reaper
}

// send writes m if it belongs to the current session (session "" always).
func (a *agent) send(session string, m *wire.Msg) {
	a.mu.Lock()
	cur := a.session
	a.mu.Unlock()
	if session != "" && session != cur {
		return
	}
	f, err := wire.Encode(m)
	if err != nil {
		f, _ = wire.Encode(&wire.Msg{Op: m.Op, ID: m.ID, Err: err.Error()})
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.w != nil {
		a.w.Write(f)
	}
}

func (a *agent) serve(port *os.File) {
	a.wmu.Lock()
	a.w = port
	a.wmu.Unlock()
	r := wire.NewReader(port)
	synced := false
	for {
		var m *wire.Msg
		var err error
		if synced {
			m, err = r.Read()
		} else {
			// Until a hello, anything else is the rest of an old stream.
			m, err = r.Scan(1<<62, func(m *wire.Msg) bool { return m.Op == wire.OpHello })
		}
		if errors.Is(err, wire.ErrMalformed) {
			logf("arbor-guest: %v: waiting for a hello", err)
			synced = false
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				// The host is not connected: virtio-serial reads EOF. A
				// new host starts with a hello.
				synced = false
				time.Sleep(10 * time.Millisecond)
				continue
			}
			logf("arbor-guest: read: %v", err)
			return
		}
		synced = true
		a.handle(m)
	}
}

func (a *agent) handle(m *wire.Msg) {
	a.mu.Lock()
	session := a.session
	a.mu.Unlock()
	switch m.Op {
	case wire.OpHello:
		a.hello(m)
	case wire.OpPing:
		a.send(session, &wire.Msg{Op: wire.OpPong, ID: m.ID})
	case wire.OpExec:
		a.exec(session, m) // started here, so that its stdin frames find it
	case wire.OpStdin:
		a.stdin(m)
	case wire.OpKill:
		a.mu.Lock()
		e := a.execs[m.ID]
		a.mu.Unlock()
		if e != nil && e.pid > 0 {
			unix.Kill(-e.pid, unix.SIGKILL)
		}
	case wire.OpFSR:
		a.fs.reply(m)
	case wire.OpRead:
		go a.read(session, m)
	case wire.OpWrite:
		go a.write(session, m)
	default:
		a.send(session, &wire.Msg{Op: wire.OpDone, ID: m.ID, Err: "unknown op " + m.Op})
	}
}

func (a *agent) hello(m *wire.Msg) {
	a.mu.Lock()
	a.session = m.Session
	for id := range a.execs {
		delete(a.execs, id)
	}
	a.mu.Unlock()
	if m.Hostname != "" {
		unix.Sethostname([]byte(m.Hostname))
	}
	if len(m.Seed) > 0 {
		reseed(m.Seed)
	}
	a.send(m.Session, &wire.Msg{Op: wire.OpReady, Session: m.Session})
	// File calls the last host never answered go to this one.
	a.fs.resend()
}

// reseed mixes seed into the kernel's pool, credited, and reseeds the
// CRNG (RNDADDENTROPY, RNDRESEEDCRNG).
func reseed(seed []byte) {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		logf("arbor-guest: reseed: %v", err)
		return
	}
	defer f.Close()
	buf := make([]byte, 8+len(seed))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(len(seed) * 8)
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(seed))
	copy(buf[8:], seed)
	const rndAddEntropy, rndReseedCRNG = 0x40085203, 0x5207
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		logf("arbor-guest: RNDADDENTROPY: %v", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		logf("arbor-guest: RNDRESEEDCRNG: %v", e)
	}
}

// reap waits for every child: an exec's status goes to it, an orphan's
// nowhere.
func (a *agent) reap() {
	sig := make(chan os.Signal, 64)
	signalNotify(sig)
	for {
		for {
			var ws syscall.WaitStatus
			a.pmu.Lock()
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid > 0 {
				if e := a.pids[pid]; e != nil {
					delete(a.pids, pid)
					e.status <- ws
				}
			}
			a.pmu.Unlock()
			if pid <= 0 || err != nil {
				break
			}
		}
		select {
		case <-sig:
		case <-time.After(time.Second):
		}
	}
}

var defaultEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "TERM=dumb"}

func mergeEnv(env []string) []string {
	out := append([]string{}, defaultEnv...)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		for i, o := range out {
			if strings.HasPrefix(o, k+"=") {
				out = append(out[:i], out[i+1:]...)
				break
			}
		}
		out = append(out, kv)
	}
	return out
}

func (a *agent) exec(session string, m *wire.Msg) {
	// Registered here, in the reader, so that its stdin frames find it;
	// started in a goroutine: the start may wait on /workspace, whose
	// file calls' replies this reader must read.
	e := &execution{id: m.ID, session: session, in: make(chan *wire.Msg, 1024), ended: make(chan struct{}), status: make(chan syscall.WaitStatus, 1)}
	a.mu.Lock()
	a.execs[m.ID] = e
	a.mu.Unlock()
	go func() {
		outs, err := a.start(m, e)
		if err != nil {
			a.mu.Lock()
			delete(a.execs, m.ID)
			a.mu.Unlock()
			a.send(session, &wire.Msg{Op: wire.OpExit, ID: m.ID, Err: err.Error(), Code: 127})
			return
		}
		a.run(session, m, e, outs)
	}()
}

// start starts e's process, its stdin fed from e.in.
func (a *agent) start(m *wire.Msg, e *execution) ([]*os.File, error) {
	if len(m.Argv) == 0 {
		return nil, errors.New("empty argv")
	}
	prog := m.Argv[0]
	if !strings.Contains(prog, "/") {
		p, err := lookPath(prog, mergeEnv(m.Env))
		if err != nil {
			return nil, err
		}
		prog = p
	}
	var fds [6]*os.File // in r/w, out r/w, err r/w
	for i := 0; i < 6; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			for _, f := range fds[:i] {
				f.Close()
			}
			return nil, err
		}
		fds[i], fds[i+1] = r, w
	}
	argv := m.Argv
	if m.Cwd != "" && m.Cwd != "/" {
		// The shell changes directory, not the fork: the fork holds Go's
		// ForkLock until the exec, and a chdir into /workspace waits on
		// this process's FUSE server, which may need that lock (a pipe).
		argv = append([]string{"/bin/sh", "-c", `cd "$0" && exec "$@"`, m.Cwd, prog}, m.Argv[1:]...)
		prog = "/bin/sh"
	}
	a.pmu.Lock()
	p, err := os.StartProcess(prog, argv, &os.ProcAttr{Dir: "/", Env: mergeEnv(m.Env), Files: []*os.File{fds[0], fds[3], fds[5]},
		Sys: &syscall.SysProcAttr{Setpgid: true}})
	if err == nil {
		a.mu.Lock()
		e.pid = p.Pid
		a.mu.Unlock()
		a.pids[p.Pid] = e
		p.Release()
	}
	a.pmu.Unlock()
	fds[0].Close()
	fds[3].Close()
	fds[5].Close()
	if err != nil {
		fds[1].Close()
		fds[2].Close()
		fds[4].Close()
		return nil, err
	}
	go func() {
		defer fds[1].Close()
		for {
			select {
			case in := <-e.in:
				if len(in.Data) > 0 {
					if _, err := fds[1].Write(in.Data); err != nil {
						return
					}
				}
				if in.EOF {
					return
				}
			case <-e.ended:
				return
			}
		}
	}()
	return []*os.File{fds[2], fds[4]}, nil
}

// run streams e's output and reports its end.
func (a *agent) run(session string, m *wire.Msg, e *execution, outs []*os.File) {
	var wg sync.WaitGroup
	for i, f := range outs {
		stream := []string{"stdout", "stderr"}[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.Close()
			buf := make([]byte, wire.ChunkSize)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					a.send(session, &wire.Msg{Op: wire.OpOut, ID: m.ID, Stream: stream, Data: bytes.Clone(buf[:n])})
				}
				if err != nil {
					return
				}
			}
		}()
	}
	ctx := context.Background()
	var cancel context.CancelFunc = func() {}
	if m.TimeoutMS > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(m.TimeoutMS)*time.Millisecond)
	}
	defer cancel()
	var ws syscall.WaitStatus
	timedOut := false
	select {
	case ws = <-e.status:
	case <-ctx.Done():
		timedOut = true
		unix.Kill(-e.pid, unix.SIGKILL)
		ws = <-e.status
	}
	// The process ended; what it left running in its group ends too, so
	// that its pipes close.
	unix.Kill(-e.pid, unix.SIGKILL)
	wg.Wait()
	close(e.ended)
	a.mu.Lock()
	delete(a.execs, m.ID)
	a.mu.Unlock()
	x := &wire.Msg{Op: wire.OpExit, ID: m.ID}
	switch {
	case timedOut:
		x.Signal = "KILL"
	case ws.Signaled():
		x.Signal = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
	default:
		x.Code = ws.ExitStatus()
	}
	a.send(session, x)
}

func (a *agent) stdin(m *wire.Msg) {
	a.mu.Lock()
	e := a.execs[m.ID]
	a.mu.Unlock()
	if e != nil {
		select {
		case e.in <- m:
		case <-e.ended:
		}
	}
}

func (a *agent) read(session string, m *wire.Msg) {
	r := &wire.Msg{Op: wire.OpFile, ID: m.ID, Path: m.Path}
	st, err := os.Stat(m.Path)
	switch {
	case err != nil:
		r.Err = err.Error()
	case st.Size() > wire.MaxFile:
		r.Err = fmt.Sprintf("%s: %d bytes is over %d", m.Path, st.Size(), wire.MaxFile)
	default:
		r.Mode = uint32(st.Mode().Perm())
		if r.Data, err = os.ReadFile(m.Path); err != nil {
			r.Err = err.Error()
		}
	}
	a.send(session, r)
}

func (a *agent) write(session string, m *wire.Msg) {
	r := &wire.Msg{Op: wire.OpDone, ID: m.ID}
	mode := os.FileMode(m.Mode)
	if mode == 0 {
		mode = 0o644
	}
	if err := os.WriteFile(m.Path, m.Data, mode); err != nil {
		r.Err = err.Error()
	}
	a.send(session, r)
}

func lookPath(prog string, env []string) (string, error) {
	path := "/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, prog)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", prog)
}
