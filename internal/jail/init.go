package jail

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// initArg0 is the argv[0] a Sandbox gives the re-exec of its own binary:
// Main recognises it and becomes the sandbox's init.
const initArg0 = "arbor-jail-init"

// initFD is the socket to the host in init (ExtraFiles[0]).
const initFD = 3

// Main runs the sandbox init and exits when this process was started as
// one; otherwise it returns at once. Call it first in main (and in the
// TestMain of any package whose tests start sandboxes): a sandbox's init
// is a re-exec of the binary that started it.
func Main() {
	if len(os.Args) == 0 || os.Args[0] != initArg0 {
		mainRan.Store(true)
		return
	}
	os.Exit(runInit())
}

// mainRan is set once Main has returned in this process.
var mainRan atomic.Bool

// MainRan reports whether Main has run (and returned) in this process: a
// caller that starts sandboxes only when the binary can serve as their
// init checks it, since a re-exec of a binary that never calls Main would
// run that binary again instead of an init.
func MainRan() bool { return mainRan.Load() }

// Inside the sandbox, init's root is a tmpfs holding the user's root at
// /r; the user's processes are chrooted there. Their root is then not
// their mount namespace's root, and the kernel refuses them a new user
// namespace whatever the syscall (clone3's flags are out of seccomp's
// reach); with CAP_SYS_CHROOT gone they cannot leave the chroot.
const userRoot = "/r"

func runInit() int {
	if err := initMain(); err != nil {
		// The host reads this from the socket if it can; stderr is
		// /dev/null otherwise.
		send(initFD, &msg{Op: opReady, Err: err.Error()})
		return 1
	}
	return 0
}

func initMain() error {
	buf, oob := make([]byte, maxPacket), make([]byte, unix.CmsgSpace(4*8))
	m, fds, err := recv(initFD, buf, oob) // the gate: the host has placed us in every cgroup
	closeAll(fds)
	if err != nil || m == nil || m.Op != opPrepare || m.Setup == nil {
		return fmt.Errorf("no prepare message: %v", err)
	}
	// Nothing the host left open without O_CLOEXEC, nor the socket
	// itself (an ExtraFile, so inheritable), may reach a user process:
	// mark every fd from the socket up close-on-exec.
	if err := unix.CloseRange(initFD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	// Not dumpable: /proc/1 is root's and ptrace-protected from the
	// user's processes, which lack CAP_SYS_PTRACE (init's fd 3 is the
	// host socket).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	signal.Ignore(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGPIPE, unix.SIGUSR1, unix.SIGUSR2, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
	// Phase 1, ahead of need (a spare stops here): everything but the
	// node's own directories.
	top := m.Setup.Mountpoint
	if err := buildSkeleton(top, m.Setup.RootDir, m.Setup.HostDirs); err != nil {
		return err
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	sp, err := newSpawner()
	if err != nil {
		return err
	}
	if err := send(initFD, &msg{Op: opPrepared}); err != nil {
		return err
	}
	// Phase 2: the node's directories, the pivot, the Landlock domain.
	m, fds, err = recv(initFD, buf, oob)
	closeAll(fds)
	if err != nil || m == nil || m.Op != opSetup || m.Setup == nil {
		return fmt.Errorf("no setup message: %v", err)
	}
	var tr *initTrace
	if m.Trace {
		tr = &initTrace{}
	}
	tr.mark("setup-recv")
	if err := finishRoot(top, m.Setup); err != nil {
		return err
	}
	tr.mark("root")
	if err := unix.Sethostname([]byte(m.Setup.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := sp.restrict(); err != nil {
		return err
	}
	tr.mark("landlock")
	srv := &initServer{spawner: sp, procs: map[int]uint64{}, early: map[int]uint32{}}
	sigc := make(chan os.Signal, 64)
	signal.Notify(sigc, unix.SIGCHLD)
	go srv.reap(sigc)
	tr.mark("ready-send")
	if err := srv.write(tr.into(&msg{Op: opReady})); err != nil {
		return err
	}
	srv.serve(buf, oob)
	return nil
}

// buildSkeleton makes the sandbox's root filesystem but for /workspace
// and /tmp in a tmpfs on the mountpoint top, binding hostDirs from
// rootDir (an image's root; "" is the host's). Everything here happens in
// the sandbox's own mount namespace, made private first, so the host sees
// no mount and a crash leaves none behind.
func buildSkeleton(top, rootDir string, hostDirs []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", top, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("tmpfs root: %w", err)
	}
	r := filepath.Join(top, userRoot)
	for _, d := range []string{r, r + "/workspace", r + "/tmp", r + "/proc", r + "/dev"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	for _, d := range hostDirs {
		src := filepath.Join("/", rootDir, d)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		dst := filepath.Join(r, d)
		if fi.Mode()&os.ModeSymlink != 0 { // /bin -> usr/bin on a merged-/usr host
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			continue
		}
		if !fi.IsDir() {
			continue
		}
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		if err := bindReadOnly(src, dst); err != nil {
			return err
		}
	}
	if rootDir == "" {
		if err := maskSecrets(top, r); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", r+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("proc: %w", err)
	}
	if err := buildDev(r + "/dev"); err != nil {
		return err
	}
	// The skeleton itself is read-only: writes go to /workspace and /tmp.
	if err := unix.Mount("", r+"/dev", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("read-only /dev: %w", err)
	}
	return nil
}

// finishRoot binds the node's directories into the skeleton at top and
// pivots into it.
func finishRoot(top string, s *setup) error {
	r := filepath.Join(top, userRoot)
	for _, b := range []struct{ src, dst string }{{s.Workspace, r + "/workspace"}, {s.Tmp, r + "/tmp"}} {
		if err := unix.Mount(b.src, b.dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b.src, err)
		}
		if err := unix.Mount("", b.dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("nosuid,nodev %s: %w", b.dst, err)
		}
	}
	if err := os.Chdir(top); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("read-only root: %w", err)
	}
	return nil
}

// bindReadOnly binds src (with its submounts) at dst and makes every
// mount of it read-only, nosuid, nodev.
// hostSecrets are the host's files and directories (patterns) that a
// sandbox on the host's root sees empty: its /etc is the host's, and root
// inside (uid 0, the files' owner) reads what root reads there. An image's
// /etc is its own.
var hostSecrets = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/ssh/ssh_host_*_key", "/etc/ssl/private", "/etc/security/opasswd"}

// maskSecrets binds an empty file or directory, read-only, over each of
// hostSecrets present in the skeleton at r (top holds the empty ones, out
// of the user's chroot).
func maskSecrets(top, r string) error {
	empty, emptyDir := filepath.Join(top, "empty"), filepath.Join(top, "emptydir")
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		return err
	}
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		return err
	}
	for _, pat := range hostSecrets {
		matches, _ := filepath.Glob(pat)
		for _, m := range matches {
			dst := filepath.Join(r, m)
			fi, err := os.Lstat(dst)
			if err != nil {
				continue // not under a bound directory
			}
			src := empty
			switch {
			case fi.IsDir():
				src = emptyDir
			case !fi.Mode().IsRegular():
				continue // a symlink (resolved inside the sandbox) or a device
			}
			if err := bindReadOnly(src, dst); err != nil {
				return fmt.Errorf("mask %s: %w", m, err)
			}
		}
	}
	return nil
}

func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("read-only %s: %w", dst, err)
	}
	return nil
}

// devNodes are the host devices a sandbox gets, bound one by one onto a
// fresh tmpfs.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

func buildDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("tmpfs /dev: %w", err)
	}
	for _, n := range devNodes {
		p := filepath.Join(dev, n)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
	}
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	for _, l := range []struct{ target, name string }{
		{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"},
		{"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dev, l.name)); err != nil {
			return err
		}
	}
	return nil
}

// loopbackUp sets lo up in the sandbox's empty network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// spawner is the one locked OS thread that carries the sandbox policy
// and forks every user process (policy.go says why).
type spawner struct {
	reqs     chan spawnReq
	landlock chan landlockReq // the Landlock domain, once (restrict)
}

type spawnReq struct {
	attr *syscall.ProcAttr
	argv []string
	done chan spawnRes
}

type spawnRes struct {
	pid int
	err error
}

// newSpawner starts the spawner thread with the part of the policy that
// does not depend on the node (capabilities, no_new_privs, the seccomp
// filter): in phase 1, ahead of need. Its Landlock domain, whose rules
// name the node's directories, comes with restrict; spawns wait for it.
func newSpawner() (*spawner, error) {
	s := &spawner{reqs: make(chan spawnReq), landlock: make(chan landlockReq)}
	ready := make(chan error)
	go s.lockAndRun(seccompFilter(), ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// restrict puts the spawner thread in the sandbox's Landlock domain: in
// phase 2, once the node's directories are bound at /workspace and /tmp.
func (s *spawner) restrict() error {
	ruleset, flags, err := landlockRuleset(
		[]string{userRoot + "/workspace", userRoot + "/tmp", userRoot + "/dev/pts"},
		[]string{userRoot + "/dev/null", userRoot + "/dev/zero", userRoot + "/dev/full",
			userRoot + "/dev/random", userRoot + "/dev/urandom", userRoot + "/dev/tty"})
	if err != nil {
		return fmt.Errorf("landlock ruleset: %w", err)
	}
	defer unix.Close(ruleset)
	done := make(chan error)
	s.landlock <- landlockReq{ruleset: ruleset, flags: flags, done: done}
	return <-done
}

type landlockReq struct {
	ruleset int
	flags   uint32
	done    chan error
}

// lockAndRun locks the calling goroutine to its thread for good (the
// policy lives on that thread only, and it ends with init), restricts
// the thread (seccomp and capabilities now, Landlock at restrict) and
// then serves spawns on it. The main thread is not fit: it is
// the process's face to the kernel (a signal to init is checked against
// it), so it must stay out of the user's Landlock domain. If this
// goroutine got it, it parks there and tries again on another thread.
func (s *spawner) lockAndRun(filter seccomp.Filter, ready chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		go s.lockAndRun(filter, ready) // cannot land here: this thread is locked
		select {}
	}
	err := restrictThread(filter)
	ready <- err
	if err != nil {
		return
	}
	r := <-s.landlock
	if err := ll.LandlockRestrictSelf(r.ruleset, r.flags); err != nil {
		r.done <- fmt.Errorf("landlock: %w", err)
		return
	}
	r.done <- nil
	for r := range s.reqs {
		pid, err := syscall.ForkExec(r.argv[0], r.argv, r.attr)
		r.done <- spawnRes{pid, err}
	}
}

// restrictThread applies the node-independent part of the policy to the
// calling thread; Landlock follows (lockAndRun). The seccomp filter
// denies none of Landlock's syscalls.
func restrictThread(filter seccomp.Filter) error {
	if err := dropCaps(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := seccomp.LoadFilter(filter); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

func (s *spawner) spawn(argv []string, attr *syscall.ProcAttr) (int, error) {
	done := make(chan spawnRes, 1)
	s.reqs <- spawnReq{attr: attr, argv: argv, done: done}
	r := <-done
	return r.pid, r.err
}

// initServer serves the host's requests and reports exits.
type initServer struct {
	spawner *spawner

	wmu sync.Mutex // guards writes to the socket: one packet at a time

	mu    sync.Mutex     // guards procs and early
	procs map[int]uint64 // pid -> exec id, for processes the host started
	early map[int]uint32 // exits reaped before their pid was recorded
}

func (s *initServer) write(m *msg, fds ...int) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return send(initFD, m, fds...)
}

// serve handles requests until the host goes away; then init returns
// and, as PID 1 of the namespace, takes every process with it.
func (s *initServer) serve(buf, oob []byte) {
	for {
		m, fds, err := recv(initFD, buf, oob)
		if err != nil || m == nil {
			closeAll(fds)
			return
		}
		switch m.Op {
		case opExec:
			s.exec(m, fds)
		case opSignal:
			closeAll(fds)
			s.mu.Lock()
			for pid, id := range s.procs {
				if id == m.ID {
					unix.Kill(-pid, unix.Signal(m.Signal)) // its process group
					unix.Kill(pid, unix.Signal(m.Signal))
				}
			}
			s.mu.Unlock()
		default:
			closeAll(fds)
		}
	}
}

func (s *initServer) exec(m *msg, fds []int) {
	defer closeAll(fds)
	var tr *initTrace
	if m.Trace {
		tr = &initTrace{}
	}
	tr.mark("exec-recv")
	pid, master, err := s.start(m, fds)
	tr.mark("spawned")
	if err != nil {
		s.write(&msg{Op: opStarted, ID: m.ID, Err: err.Error()})
		return
	}
	var out []int
	if master >= 0 {
		out = append(out, master)
		defer unix.Close(master)
	}
	// "started" goes out before the reaper can know the pid: under mu,
	// which the reaper needs to find it, so the host never sees the
	// exit of a process it has not seen start.
	s.mu.Lock()
	status, exited := s.early[pid]
	if exited {
		delete(s.early, pid)
	} else {
		s.procs[pid] = m.ID
	}
	s.write(tr.into(&msg{Op: opStarted, ID: m.ID, Pid: pid}), out...)
	s.mu.Unlock()
	if exited {
		s.write(&msg{Op: opExit, ID: m.ID, Status: status})
	}
}

func (s *initServer) start(m *msg, fds []int) (pid, master int, err error) {
	master = -1
	if len(m.Argv) == 0 {
		return 0, -1, errors.New("empty argv")
	}
	sys := &syscall.SysProcAttr{Chroot: userRoot, Setsid: true}
	n := len(fds)
	if m.Cgroup {
		if n == 0 {
			return 0, -1, errors.New("no cgroup fd")
		}
		sys.UseCgroupFD, sys.CgroupFD = true, fds[n-1]
		n--
	}
	var stdio []uintptr
	if m.TTY {
		mfd, slave, err := openPTY(m.Rows, m.Cols)
		if err != nil {
			return 0, -1, err
		}
		defer unix.Close(slave)
		master = mfd
		stdio = []uintptr{uintptr(slave), uintptr(slave), uintptr(slave)}
		sys.Setctty, sys.Ctty = true, 0
	} else {
		if n != 3 {
			return 0, -1, fmt.Errorf("want 3 stdio fds, got %d", n)
		}
		stdio = []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
	}
	argv0, err := lookPath(m.Argv[0], m.Env)
	if err != nil {
		if master >= 0 {
			unix.Close(master)
		}
		return 0, -1, err
	}
	cwd := m.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	argv := append([]string{argv0}, m.Argv[1:]...)
	attr := &syscall.ProcAttr{Dir: cwd, Env: m.Env, Files: stdio, Sys: sys}
	pid, err = s.spawner.spawn(argv, attr)
	if err != nil {
		if master >= 0 {
			unix.Close(master)
		}
		return 0, -1, err
	}
	// argv[0] as the user wrote it is lost to ForkExec's path argument:
	// it gets the resolved path, which is what a shell passes too.
	return pid, master, nil
}

// lookPath resolves a command name against PATH inside the user's root
// (init's view of it is under /r).
func lookPath(name string, env []string) (string, error) {
	if filepath.IsAbs(name) || containsSlash(name) {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
	for _, e := range env {
		if len(e) > 5 && e[:5] == "PATH=" {
			path = e[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(userRoot + p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, errNotFound)
}

var errNotFound = errors.New("executable file not found in $PATH")

func containsSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}

// openPTY opens a pty pair in the sandbox's own devpts instance.
func openPTY(rows, cols uint16) (master, slave int, err error) {
	master, err = unix.Open(userRoot+"/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("ptmx: %w", err)
	}
	var unlock int32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		unix.Close(master)
		return -1, -1, fmt.Errorf("unlockpt: %w", e)
	}
	n, err := unix.IoctlGetUint32(master, unix.TIOCGPTN)
	if err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("ptsname: %w", err)
	}
	if rows > 0 || cols > 0 {
		if err := unix.IoctlSetWinsize(master, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
			unix.Close(master)
			return -1, -1, err
		}
	}
	slave, err = unix.Open(userRoot+"/dev/pts/"+strconv.Itoa(int(n)), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("pty slave: %w", err)
	}
	return master, slave, nil
}

// reap waits for every child (as PID 1 it inherits every orphan of the
// sandbox) and reports the exits of the processes the host started.
func (s *initServer) reap(sigc chan os.Signal) {
	for range sigc {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			s.mu.Lock()
			id, ok := s.procs[pid]
			if ok {
				delete(s.procs, pid)
			} else {
				s.early[pid] = uint32(ws)
			}
			s.mu.Unlock()
			if ok {
				s.write(&msg{Op: opExit, ID: id, Status: uint32(ws)})
			}
		}
	}
}
