package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// Config configures a Manager. Its zero value is not usable: StateDir is
// required.
type Config struct {
	// StateDir holds the manager's state on the host: an empty directory
	// each sandbox mounts its root's tmpfs on, in its own mount namespace
	// (so the host sees no mount there).
	StateDir string
	// Label names this manager's sandboxes in the cgroup tree:
	// <the caller's cgroup>/arbor-jail/<Label>/<sandbox name>, in cgroup2
	// and in each v1 controller used. A manager started again with the
	// same label finds what a crashed one left there (Reap). Default
	// "default".
	Label string
	// Binary is the executable re-exec'd as a sandbox's init; it must
	// call Main first. Default /proc/self/exe.
	Binary string
	// HostDirs are the host's top-level paths the "host" root binds
	// read-only (or, for symlinks such as a merged /usr's /bin, copies as
	// symlinks); missing ones are skipped. Default: /usr, /bin, /sbin,
	// /lib, /lib32, /lib64, /libx32, /etc.
	HostDirs []string
	// Root, if set, is an image's root filesystem (a host directory): the
	// sandbox's root binds its top-level entries read-only (symlinks
	// copied as symlinks) instead of the host's HostDirs, which must then
	// be unset. /workspace, /tmp, /proc, /dev and /sys are the sandbox's
	// own whatever the image holds there.
	Root string
	// Outbound gives every sandbox outbound network through pasta (see
	// network.go); otherwise they have loopback only. A spare gets its
	// pasta ahead of need too, so that Start does not wait for it.
	Outbound bool
	// Pasta is the program that gives outbound network; default "pasta"
	// on PATH.
	Pasta string
	// Spares is how many inits are kept started ahead of need, so that
	// Start skips the runtime's start and the cgroups' creation (see
	// spare). Default 1; negative means none.
	Spares int
	// StopTimeout bounds how long Stop waits for the kernel to empty a
	// killed sandbox's cgroup. Default 5s.
	StopTimeout time.Duration
}

var labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// nameRE is what a sandbox name may be: it is a cgroup directory name.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Manager starts sandboxes and holds them until they stop.
type Manager struct {
	cfg  Config
	h    *hierarchy
	root string // the label's cgroup path, relative to the caller's
	mnt  string // the root tmpfs mountpoint (in each sandbox's namespace)
	null *os.File

	// forks runs every clone of an init on one locked OS thread: the
	// kernel sends an init its Pdeathsig when the thread that forked it
	// ends, and Go ends threads (those a goroutine exits locked to) at
	// will. This one ends only with Close.
	forks    chan func()
	forkDone chan struct{}

	spares   chan *spare   // ready spares (capacity cfg.Spares)
	refill   chan struct{} // asks fill for another spare
	closing  chan struct{} // closed by Close: fill returns
	fillDone chan struct{} // closed when fill has returned

	mu         sync.Mutex          // guards sandboxes and closed
	sandboxes  map[string]*Sandbox // live sandboxes by name
	spareNames map[string]bool     // cgroup paths (rel) of the spares, which Reap leaves alone
	fillErr    error               // why the last spare could not be made, if it could not
	closed     bool
}

// New checks cfg and the host (cgroups, namespaces are probed by the
// first Start) and returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("jail: %w: StateDir %q must be an absolute path", api.ErrBadRequest, cfg.StateDir)
	}
	if cfg.Label == "" {
		cfg.Label = "default"
	}
	if !labelRE.MatchString(cfg.Label) {
		return nil, fmt.Errorf("jail: %w: label %q", api.ErrBadRequest, cfg.Label)
	}
	if cfg.Binary == "" {
		cfg.Binary = "/proc/self/exe"
	}
	if cfg.Root != "" {
		dirs, err := imageDirs(cfg.Root, cfg.HostDirs)
		if err != nil {
			return nil, err
		}
		cfg.HostDirs = dirs
	}
	if cfg.HostDirs == nil {
		cfg.HostDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
	}
	for _, d := range cfg.HostDirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || filepath.Dir(d) != "/" {
			return nil, fmt.Errorf("jail: %w: host dir %q must be a top-level absolute path", api.ErrBadRequest, d)
		}
		switch d {
		case "/workspace", "/tmp", "/proc", "/dev":
			return nil, fmt.Errorf("jail: %w: host dir %q is the sandbox's own", api.ErrBadRequest, d)
		}
	}
	if cfg.Spares == 0 {
		cfg.Spares = 1
	}
	if cfg.Spares < 0 {
		cfg.Spares = 0
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("jail: %w: sandboxes need root (namespaces, cgroups, pivot_root)", api.ErrUnavailable)
	}
	if cfg.Outbound {
		if err := PastaAvailable(cfg.Pasta); err != nil {
			return nil, fmt.Errorf("jail: %w", err)
		}
	}
	h, err := probeHierarchy()
	if err != nil {
		return nil, fmt.Errorf("jail: %w: %w", api.ErrUnavailable, err)
	}
	mnt := filepath.Join(cfg.StateDir, "root")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, fmt.Errorf("jail: state dir: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg: cfg, h: h, root: filepath.Join("arbor-jail", cfg.Label), mnt: mnt, null: null,
		forks: make(chan func()), forkDone: make(chan struct{}),
		sandboxes: map[string]*Sandbox{}, spareNames: map[string]bool{},
		spares: make(chan *spare, cfg.Spares), refill: make(chan struct{}, 1),
		closing: make(chan struct{}), fillDone: make(chan struct{}),
	}
	go func() {
		defer close(m.forkDone)
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine, after every init is gone
		for f := range m.forks {
			f()
		}
	}()
	go m.fill()
	return m, nil
}

// Spec describes a sandbox.
type Spec struct {
	// Name names the sandbox (a node's id): its cgroup directory.
	Name string
	// Workspace is the host directory seen at /workspace (the node's
	// files), Tmp the one at /tmp (the node's /tmp). Both read-write.
	Workspace, Tmp string
	// Hostname inside; default the name.
	Hostname string
	// MemoryMax and PidsMax limit the sandbox (0: no limit) through the
	// controllers the host has. PidsMax counts tasks (threads), init's
	// included: init is a Go program with a handful of threads.
	MemoryMax, PidsMax int64
}

// Start starts a sandbox: its init runs in new PID, mount, UTS, IPC and
// network namespaces, in the sandbox's cgroups (cgroup2 by
// CLONE_INTO_CGROUP, v1 before init leaves its gate), pivoted into the
// host root with Workspace and Tmp bound in. It returns when init is
// ready for Exec.
func (m *Manager) Start(ctx context.Context, spec Spec) (_ *Sandbox, err error) {
	if err := m.check(spec); err != nil {
		return nil, err
	}
	if spec.Hostname == "" {
		spec.Hostname = spec.Name
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("jail: start %s: %w: manager closed", spec.Name, api.ErrState)
	}
	if _, ok := m.sandboxes[spec.Name]; ok {
		m.mu.Unlock()
		return nil, fmt.Errorf("jail: start %s: %w", spec.Name, api.ErrExists)
	}
	s := &Sandbox{m: m, name: spec.Name, procs: map[uint64]*Process{}, stopped: make(chan struct{})}
	m.sandboxes[spec.Name] = s // reserved: a second Start of the name fails while this one runs
	m.mu.Unlock()
	defer func() {
		if err != nil {
			m.mu.Lock()
			delete(m.sandboxes, spec.Name)
			m.mu.Unlock()
		}
	}()
	if err := s.start(ctx, spec); err != nil {
		m.askRefill()
		return nil, fmt.Errorf("jail: start %s: %w", spec.Name, err)
	}
	// The refill waits for the sandbox's first process to end, or
	// refillAfter, or its Stop, whichever comes first (askRefill says why).
	s.mu.Lock()
	s.refillTimer = time.AfterFunc(refillAfter, s.refillSpare)
	s.mu.Unlock()
	return s, nil
}

// CheckName says whether name may name a sandbox (it is a cgroup
// directory name): nil, or an error wrapping api.ErrBadRequest.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("jail: %w: sandbox name %q", api.ErrBadRequest, name)
	}
	return nil
}

func (m *Manager) check(spec Spec) error {
	if err := CheckName(spec.Name); err != nil {
		return err
	}
	for _, d := range []struct{ what, path string }{{"workspace", spec.Workspace}, {"tmp", spec.Tmp}} {
		if !filepath.IsAbs(d.path) {
			return fmt.Errorf("jail: %w: %s %q must be an absolute path", api.ErrBadRequest, d.what, d.path)
		}
		fi, err := os.Stat(d.path)
		if err != nil {
			return fmt.Errorf("jail: %w: %s: %w", api.ErrBadRequest, d.what, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("jail: %w: %s %q is not a directory", api.ErrBadRequest, d.what, d.path)
		}
	}
	if spec.MemoryMax < 0 || spec.PidsMax < 0 {
		return fmt.Errorf("jail: %w: negative limit", api.ErrBadRequest)
	}
	if len(spec.Hostname) > 64 {
		return fmt.Errorf("jail: %w: hostname over 64 bytes", api.ErrBadRequest)
	}
	return nil
}

// Sandboxes names the live sandboxes, sorted.
func (m *Manager) Sandboxes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.sandboxes))
	for n := range m.sandboxes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Get returns the live sandbox of that name.
func (m *Manager) Get(name string) (*Sandbox, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sandboxes[name]
	return s, ok
}

// Reap kills and removes every sandbox under this manager's label that
// it does not hold: what a crashed predecessor left behind (its inits
// die with it by Pdeathsig; their cgroups, and any process that outlived
// them, do not). It returns the names it reaped.
func (m *Manager) Reap(ctx context.Context) ([]string, error) {
	names, err := m.h.list(m.root)
	if err != nil {
		return nil, fmt.Errorf("jail: reap: %w", err)
	}
	var reaped []string
	var errs []error
	for _, n := range names {
		m.mu.Lock()
		_, held := m.sandboxes[n]
		held = held || m.spareNames[filepath.Join(m.root, n)]
		m.mu.Unlock()
		if held {
			continue
		}
		if err := ctx.Err(); err != nil {
			return reaped, err
		}
		g, err := m.h.loadGroup(filepath.Join(m.root, n))
		if err == nil {
			err = g.kill()
		}
		if err == nil {
			err = g.waitEmpty(m.cfg.StopTimeout)
		}
		if err == nil {
			err = g.remove()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reap %s: %w", n, err))
			continue
		}
		if !strings.HasPrefix(n, ".") { // a spare has no name to report
			reaped = append(reaped, n)
		}
	}
	return reaped, errors.Join(errs...)
}

// Close stops every sandbox and the manager; it is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var all []*Sandbox
	for _, s := range m.sandboxes {
		all = append(all, s)
	}
	m.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() { errs[i] = s.Stop(context.Background()) })
	}
	wg.Wait()
	close(m.closing)
	<-m.fillDone
	close(m.spares)
	for sp := range m.spares {
		errs = append(errs, sp.discard(m.cfg.StopTimeout))
	}
	close(m.forks)
	<-m.forkDone
	errs = append(errs, m.null.Close())
	// The label's directories, if no other manager holds them.
	m.h.removeEmpty(m.root)
	return errors.Join(errs...)
}

// fork runs cmd.Start on the manager's fork thread.
func (m *Manager) fork(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	m.forks <- func() { done <- cmd.Start() }
	return <-done
}

// prepareTimeout bounds the wait for a new init's first answer.
const prepareTimeout = 30 * time.Second

// initCloneFlags are the namespaces every sandbox gets.
const initCloneFlags = unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET

// A spare is an init started ahead of need: in its namespaces and in
// cgroups of a placeholder name, its root built but for the node's
// directories, waiting for a setup. Start
// takes one when there is one, so the Go runtime's start (the package
// inits of a big binary are most of an init's 5 ms) and the cgroups'
// creation are off the path; it renames the cgroups, sets the limits
// and sends the setup.
type spare struct {
	g        *group
	cmd      *exec.Cmd
	sock     int
	initDone chan struct{}
	net      *netHelper // its pasta (Config.Outbound), or nil
}

// spawn starts an init in cgroups named rel and leaves it at its gate.
func (m *Manager) spawn(rel string) (_ *spare, err error) {
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	for _, d := range m.h.dirs(rel) {
		if _, err := os.Stat(d); err == nil {
			return nil, fmt.Errorf("%w: cgroup %s is left from an earlier run (Reap removes it)", api.ErrExists, d)
		}
	}
	g, err := m.h.newGroup(rel)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { g.kill(); g.waitEmpty(m.cfg.StopTimeout); g.remove() })
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "jail-init")
	defer child.Close()
	undo = append(undo, func() { unix.Close(pair[0]) })
	cmd := &exec.Cmd{
		Path:       m.cfg.Binary,
		Args:       []string{initArg0},
		Env:        []string{"GOMAXPROCS=1", "GOTRACEBACK=none"},
		ExtraFiles: []*os.File{child},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: initCloneFlags,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if g.v2 != nil {
		dir, err := g.v2Dir("")
		if err != nil {
			return nil, fmt.Errorf("open cgroup: %w", err)
		}
		defer dir.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
	}
	if err := m.fork(cmd); err != nil {
		return nil, fmt.Errorf("start init: %w", err)
	}
	// The init has its own copy of its end: ours goes now, so that an
	// init that dies while it prepares ends the wait below with EOF.
	child.Close()
	sp := &spare{g: g, cmd: cmd, sock: pair[0], initDone: make(chan struct{})}
	go func() { cmd.Wait(); close(sp.initDone) }()
	undo = append(undo, func() { cmd.Process.Kill(); <-sp.initDone })
	if err := g.attachV1(cmd.Process.Pid); err != nil {
		return nil, fmt.Errorf("attach init to v1 cgroups: %w", err)
	}
	if err := send(sp.sock, &msg{Op: opPrepare, Setup: &setup{Mountpoint: m.mnt, RootDir: m.cfg.Root, HostDirs: m.cfg.HostDirs}}); err != nil {
		return nil, fmt.Errorf("send prepare: %w", err)
	}
	// A spare is ready when its runtime has started and its skeleton is
	// built: most of an init's start.
	// Bounded: an init that neither answers nor dies (stuck in the kernel)
	// must not hold up a Manager's Close, which waits for this fill.
	tv := unix.NsecToTimeval(prepareTimeout.Nanoseconds())
	unix.SetsockoptTimeval(sp.sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	reply, fds, err := recv(sp.sock, make([]byte, 64<<10), make([]byte, 256))
	closeAll(fds)
	unix.SetsockoptTimeval(sp.sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{})
	switch {
	case err != nil:
		return nil, fmt.Errorf("init: %w", err)
	case reply == nil:
		return nil, errors.New("init exited while preparing")
	case reply.Err != "":
		return nil, fmt.Errorf("init: %s", reply.Err)
	case reply.Op != opPrepared:
		return nil, fmt.Errorf("init sent %q before prepared", reply.Op)
	}
	if m.cfg.Outbound {
		if sp.net, err = m.startNetwork(g, cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("outbound network: %w", err)
		}
	}
	return sp, nil
}

// discard ends a spare that was never set up.
func (sp *spare) discard(timeout time.Duration) error {
	err := sp.g.kill()
	sp.cmd.Process.Kill()
	<-sp.initDone
	sp.net.stop()
	unix.Close(sp.sock)
	return errors.Join(err, sp.g.waitEmpty(timeout), sp.g.remove())
}

// takeSpare returns a spare if one is ready; Start asks for another
// once it is done (askRefill).
func (m *Manager) takeSpare() *spare {
	select {
	case sp := <-m.spares:
		select {
		case <-sp.initDone: // killed meanwhile (a Reap by another manager)
			sp.discard(m.cfg.StopTimeout)
			return nil
		default:
		}
		return sp
	default:
		return nil
	}
}

// askRefill asks fill for a spare in place of one taken. A new init's
// start (a Go runtime's, and its skeleton's: several ms of CPU) would
// compete for the CPU with the start it is meant to speed up, and that
// start is the sandbox's and its first command's (on 2 busy cores it
// doubled the time to the first byte of an echo). So a failed Start asks
// at once, and a started sandbox when its first process has ended, after
// refillAfter, or at its Stop, whichever comes first (refillSpare).
// refillAfter is the time to the first output the start aims at.
const refillAfter = 20 * time.Millisecond

// refillSpare asks for the spare the sandbox's start took, once.
func (s *Sandbox) refillSpare() {
	s.refillOnce.Do(func() {
		s.mu.Lock()
		if s.refillTimer != nil {
			s.refillTimer.Stop()
		}
		s.mu.Unlock()
		s.m.askRefill()
	})
}
func (m *Manager) askRefill() {
	select {
	case m.refill <- struct{}{}:
	default:
	}
}

// fill keeps cfg.Spares spares ready until Close.
func (m *Manager) fill() {
	defer close(m.fillDone)
	for n := 0; ; n++ {
		if len(m.spares) < cap(m.spares) {
			sp, err := m.spawn(filepath.Join(m.root, spareName(n)))
			m.mu.Lock()
			m.fillErr = err
			m.mu.Unlock()
			if err == nil {
				m.mu.Lock()
				closed := m.closed
				if !closed {
					m.spareNames[sp.g.rel] = true
				}
				m.mu.Unlock()
				if closed {
					sp.discard(m.cfg.StopTimeout)
					return
				}
				m.spares <- sp // never blocks: only fill sends, and there is room
				continue
			}
			// A failing spawn (cgroups gone, out of memory) is retried at
			// the next Start's request; Start then spawns cold and
			// reports the error itself.
		}
		select {
		case <-m.refill:
		case <-m.closing:
			return
		}
	}
}

func spareName(n int) string { return fmt.Sprintf(".spare-%d-%d", os.Getpid(), n) }

// Warm waits until the spares are ready (for a caller that wants its
// first Start fast).
func (m *Manager) Warm(ctx context.Context) error {
	for len(m.spares) < cap(m.spares) {
		m.mu.Lock()
		err := m.fillErr
		m.mu.Unlock()
		if err != nil {
			return fmt.Errorf("jail: spare: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.closing:
			return fmt.Errorf("jail: %w: manager closed", api.ErrState)
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

func (s *Sandbox) start(ctx context.Context, spec Spec) (err error) {
	m := s.m
	rel := filepath.Join(m.root, spec.Name)
	lim := limits{MemoryMax: spec.MemoryMax, PidsMax: spec.PidsMax}
	s.tr = newTracer()
	s.tr.mark("take-spare")
	sp := m.takeSpare()
	warm := sp != nil
	if warm {
		m.mu.Lock()
		delete(m.spareNames, sp.g.rel)
		m.mu.Unlock()
	} else if sp, err = m.spawn(rel); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			sp.discard(m.cfg.StopTimeout)
		}
	}()
	s.cmd, s.sock, s.initDone, s.net = sp.cmd, sp.sock, sp.initDone, sp.net
	st := &setup{Workspace: spec.Workspace, Tmp: spec.Tmp, Hostname: spec.Hostname}
	s.tr.mark("setup-send")
	if err := send(s.sock, &msg{Op: opSetup, Setup: st, Trace: s.tr != nil}); err != nil {
		return fmt.Errorf("send setup: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		m, fds, err := recv(s.sock, make([]byte, 64<<10), make([]byte, 256))
		closeAll(fds)
		switch {
		case err != nil:
		case m == nil:
			err = errors.New("init exited during setup")
		case m.Op != opReady:
			err = fmt.Errorf("init sent %q before ready", m.Op)
		case m.Err != "":
			err = fmt.Errorf("init: %s", m.Err)
		default:
			s.tr.merge(m.TraceSteps, m.TraceNS)
		}
		ready <- err
	}()
	// While init builds the root (it runs no user code before an exec,
	// and none comes before Start returns), a spare's init moves into
	// the named cgroups and the limits are set.
	cgErr := func() error {
		if warm {
			// cgroup2 renames no cgroup: make the named one and move
			// init, still the only process, into it.
			g, err := m.h.newGroup(rel)
			if err != nil {
				return err
			}
			if err := g.adopt(sp.cmd.Process.Pid); err != nil {
				g.remove()
				return err
			}
			if sp.net != nil {
				if err := g.adopt(sp.net.cmd.Process.Pid); err != nil {
					// init dies with the new group; pasta, in the old
					// one, with the spare's discard.
					g.kill()
					g.waitEmpty(m.cfg.StopTimeout)
					g.remove()
					return err
				}
			}
			old := sp.g
			sp.g = g
			if err := old.remove(); err != nil {
				return err
			}
		}
		return sp.g.setLimits(lim)
	}()
	s.tr.mark("cgroups")
	s.g = sp.g
	if cgErr != nil {
		sp.cmd.Process.Kill()
		<-ready
		return cgErr
	}
	select {
	case err = <-ready:
	case <-ctx.Done():
		s.cmd.Process.Kill() // the reader then sees the socket close
		<-ready
		err = ctx.Err()
	}
	if err != nil {
		return err
	}
	s.tr.mark("ready")
	s.readerDone = make(chan struct{})
	go s.read()
	return nil
}

// removeEmpty removes the label's own cgroup directories (and
// arbor-jail's) where they are empty; a busy one stays.
func (h *hierarchy) removeEmpty(rel string) {
	var dirs []string
	if h.v2 != "" {
		dirs = append(dirs, h.v2Path(rel), h.v2Path(filepath.Dir(rel)))
	}
	for _, n := range h.v1 {
		dirs = append(dirs, h.v1Path(n, rel), h.v1Path(n, filepath.Dir(rel)))
	}
	for _, d := range dirs {
		unix.Rmdir(d)
	}
}

// ownDirs are the sandbox's own top-level directories: never bound from
// an image.
var ownDirs = []string{"workspace", "tmp", "proc", "dev", "sys"}

// imageDirs lists the top-level entries of an image's root that a
// sandbox binds: every directory and symlink but the sandbox's own.
func imageDirs(root string, hostDirs []string) ([]string, error) {
	if hostDirs != nil {
		return nil, fmt.Errorf("jail: %w: Root and HostDirs are exclusive", api.ErrBadRequest)
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("jail: %w: Root %q must be an absolute path", api.ErrBadRequest, root)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("jail: %w: image root: %w", api.ErrBadRequest, err)
	}
	dirs := []string{}
	for _, e := range ents {
		if slices.Contains(ownDirs, e.Name()) {
			continue
		}
		if e.IsDir() || e.Type()&os.ModeSymlink != 0 {
			dirs = append(dirs, "/"+e.Name())
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("jail: %w: image root %s is empty", api.ErrBadRequest, root)
	}
	return dirs, nil
}

// Label is the manager's label.
func (m *Manager) Label() string { return m.cfg.Label }
