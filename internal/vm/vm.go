package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The files of a VM's state directory.
const (
	MemFile = "mem" // guest RAM: a link to an immutable memory image
	DevFile = "dev" // device state (QEMU's migration stream without RAM)
	pidFile = "pid"
	logFile = "serial.log"
)

// VM is one running QEMU process: a guest cloned from a memory image and a
// device state, mapping the image MAP_PRIVATE.
type VM struct {
	img     *Image
	dir     string
	sock    string // short directory of the sockets
	ino     uint64 // the memory image's inode
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	mon     monitor
	agent   *agentConn

	mu     sync.Mutex
	paused bool
}

// ErrExists is a state directory that holds a VM's state already.
var ErrExists = errors.New("state directory holds a VM")

// Seed links memory image mem and device state dev into dir as the state a
// VM starts from. Links, not copies: the image is immutable, and a link
// shares its page cache with every VM mapping it.
func Seed(dir, mem, dev string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct{ from, to string }{{mem, MemFile}, {dev, DevFile}} {
		to := filepath.Join(dir, f.to)
		tmp := to + ".new"
		os.Remove(tmp)
		if err := os.Link(f.from, tmp); errors.Is(err, syscall.EXDEV) {
			// Another filesystem: a copy (reflinked where it can be),
			// which shares no page cache with the image.
			if err := copyFile(f.from, tmp); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if err := os.Rename(tmp, to); err != nil {
			return err
		}
	}
	return nil
}

// HasState says whether dir holds a VM's state (Seed, Suspend).
func HasState(dir string) bool {
	_, err1 := os.Stat(filepath.Join(dir, MemFile))
	_, err2 := os.Stat(filepath.Join(dir, DevFile))
	return err1 == nil && err2 == nil
}

// Start starts a VM of img from the state in dir (Seed), named hostname,
// with files (a host directory; "" none) served at the guest's
// /workspace, and returns it running with its agent answering. ctx bounds
// the start, not the VM.
func Start(ctx context.Context, img *Image, dir, hostname, files string) (*VM, error) {
	return start(ctx, img, dir, hostname, files, nil)
}

// start is Start; running (if not nil) gets the time the CPUs ran.
func start(ctx context.Context, img *Image, dir, hostname, files string, running *time.Time) (_ *VM, err error) {
	mem := filepath.Join(dir, MemFile)
	st, err := os.Stat(mem)
	if err != nil {
		return nil, fmt.Errorf("vm start: %w", err)
	}
	v := &VM{img: img, dir: dir, ino: st.Sys().(*syscall.Stat_t).Ino, exited: make(chan struct{})}
	if v.sock, err = sockDir(dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			v.Kill()
		}
	}()
	m := img.machine(mem, false, v.sock, filepath.Join(dir, logFile))
	m.incomin = true
	if err := v.spawn(m); err != nil {
		return nil, err
	}
	if v.mon, err = dialQMP(ctx, filepath.Join(v.sock, "qmp"), v.exited); err != nil {
		return nil, v.why(err)
	}
	if _, err := v.mon.run(ctx, "migrate-incoming", map[string]any{"uri": "exec:cat " + shellQuote(filepath.Join(dir, DevFile))}); err != nil {
		return nil, v.why(err)
	}
	if err := v.waitStatus(ctx, "paused"); err != nil {
		return nil, v.why(err)
	}
	if _, err := v.mon.run(ctx, "cont", nil); err != nil {
		return nil, v.why(err)
	}
	if running != nil {
		*running = time.Now()
	}
	if v.agent, err = dialAgent(ctx, filepath.Join(v.sock, "agent"), hostname, files); err != nil {
		return nil, v.why(err)
	}
	return v, nil
}

// sockDir makes a directory for the VM's sockets with a path short enough
// for a unix socket (108 bytes): dir itself, or a symlink to it in /tmp.
func sockDir(dir string) (string, error) {
	if len(dir) < 80 {
		return dir, nil
	}
	d, err := os.MkdirTemp("/tmp", "avm")
	if err != nil {
		return "", err
	}
	os.Remove(d)
	if err := os.Symlink(dir, d); err != nil {
		return "", err
	}
	return d, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// spawn starts QEMU for m, in its own process group, dying with this
// process (Pdeathsig), its pid in the state directory for a reap after a
// crash.
func (v *VM) spawn(m machine) error {
	for _, s := range []string{m.qmp, m.agent} {
		os.Remove(s)
	}
	v.cmd = exec.Command(m.qemu, m.args()...)
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errf, err := os.Create(filepath.Join(v.dir, "qemu.err"))
	if err != nil {
		return err
	}
	defer errf.Close()
	v.cmd.Stdout, v.cmd.Stderr = errf, errf
	if err := v.cmd.Start(); err != nil {
		close(v.exited)
		return fmt.Errorf("vm: start qemu: %w", err)
	}
	go func() {
		v.waitErr = v.cmd.Wait()
		close(v.exited)
	}()
	return os.WriteFile(filepath.Join(v.dir, pidFile), []byte(strconv.Itoa(v.cmd.Process.Pid)), 0o600)
}

// why adds QEMU's own words to err when QEMU has exited (or exits within
// a moment: a broken socket comes before the process's end is reaped).
func (v *VM) why(err error) error {
	select {
	case <-v.exited:
	case <-time.After(300 * time.Millisecond):
	}
	select {
	case <-v.exited:
		b, _ := os.ReadFile(filepath.Join(v.dir, "qemu.err"))
		return fmt.Errorf("%w: %w (%v): %s", ErrQEMUExited, err, v.waitErr, strings.TrimSpace(string(b)))
	default:
		return err
	}
}

func (v *VM) waitStatus(ctx context.Context, want string) error {
	for {
		r, err := v.mon.run(ctx, "query-status", nil)
		if err != nil {
			return err
		}
		var st struct{ Status string }
		json.Unmarshal(r, &st)
		if st.Status == want {
			return nil
		}
		if st.Status == "internal-error" || st.Status == "shutdown" || st.Status == "guest-panicked" {
			return fmt.Errorf("vm status %s, want %s", st.Status, want)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vm status %s, want %s: %w", st.Status, want, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// Pid is the QEMU process's id.
func (v *VM) Pid() int { return v.cmd.Process.Pid }

// Dir is the VM's state directory.
func (v *VM) Dir() string { return v.dir }

// Exited is closed when the QEMU process has ended.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// Pause stops the guest's CPUs.
func (v *VM) Pause(ctx context.Context) error {
	if _, err := v.mon.run(ctx, "stop", nil); err != nil {
		return v.why(err)
	}
	v.mu.Lock()
	v.paused = true
	v.mu.Unlock()
	return nil
}

// Cont runs the guest's CPUs again.
func (v *VM) Cont(ctx context.Context) error {
	if _, err := v.mon.run(ctx, "cont", nil); err != nil {
		return v.why(err)
	}
	v.mu.Lock()
	v.paused = false
	v.mu.Unlock()
	return nil
}

// Snapshot is a paused VM's state as saved by Save: its device state and
// the pages it wrote, complete once Complete has filled the rest of its
// memory image from the VM's own (which may run again meanwhile: that
// image is immutable).
type Snapshot struct {
	Mem, Dev string
	Dirty    int64 // bytes of guest RAM written inside the pause
	base     string
	dirty    []bool
	// Reflinked: Complete shared the base's blocks rather than copy them.
	Reflinked bool
}

// Save writes paused v's state into dir: the device state (QMP
// xen-save-devices-state: every device, no RAM) and the guest's pages that
// differ from its memory image. The cost is the device state and the
// pages written since the image, not the guest's size.
func (v *VM) Save(ctx context.Context, dir string) (*Snapshot, error) {
	v.mu.Lock()
	paused := v.paused
	v.mu.Unlock()
	if !paused {
		return nil, errors.New("vm save: not paused")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Snapshot{Mem: filepath.Join(dir, MemFile), Dev: filepath.Join(dir, DevFile), base: filepath.Join(v.dir, MemFile)}
	os.Remove(s.Dev)
	if _, err := v.mon.run(ctx, "xen-save-devices-state", map[string]any{"filename": s.Dev, "live": false}); err != nil {
		return nil, v.why(err)
	}
	out, err := os.OpenFile(s.Mem, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	s.dirty, s.Dirty, err = captureDirty(v.Pid(), v.ino, int64(v.img.MemMiB)<<20, out)
	if err != nil {
		return nil, v.why(fmt.Errorf("vm save: %w", err))
	}
	return s, nil
}

// Complete fills the snapshot's memory image from the base it was saved
// over, and makes it read-only.
func (s *Snapshot) Complete() error {
	base, err := os.Open(s.base)
	if err != nil {
		return err
	}
	defer base.Close()
	out, err := os.OpenFile(s.Mem, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer out.Close()
	if s.Reflinked, err = fillFrom(out, base, s.dirty); err != nil {
		return fmt.Errorf("vm snapshot: %w", err)
	}
	s.dirty = nil
	return os.Chmod(s.Mem, 0o400)
}

// Kill ends the QEMU process and waits for it. Idempotent.
func (v *VM) Kill() error {
	if v.agent != nil {
		v.agent.close()
	}
	if v.mon != nil {
		v.mon.close()
	}
	if v.cmd != nil && v.cmd.Process != nil {
		syscall.Kill(-v.cmd.Process.Pid, syscall.SIGKILL)
		<-v.exited
	}
	os.Remove(filepath.Join(v.dir, pidFile))
	if v.sock != v.dir && v.sock != "" {
		os.Remove(v.sock)
	}
	return nil
}

// Agent errors and calls.

// Ping asks the guest's agent for a reply.
func (v *VM) Ping(ctx context.Context) error { return v.agent.Ping(ctx) }

// Exec runs cmd in the guest.
func (v *VM) Exec(ctx context.Context, cmd Cmd, out func(stream string, data []byte) error) (Exit, error) {
	return v.agent.Exec(ctx, cmd, out)
}

// ReadFile reads a guest file.
func (v *VM) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return v.agent.ReadFile(ctx, path)
}

// WriteFile writes a guest file.
func (v *VM) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	return v.agent.WriteFile(ctx, path, data, mode)
}

// PSS is the QEMU process's proportional set size in bytes: its own pages,
// and its share of the memory image's pages mapped by other VMs too.
func (v *VM) PSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", v.Pid()))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no Pss in smaps_rollup")
}

// ReapDir kills a QEMU process a crashed predecessor left with its state
// in dir (by the pid file, if that process still runs QEMU over dir).
func ReapDir(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err == nil && pid > 1 {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmd), filepath.Join(dir, MemFile)) {
			syscall.Kill(pid, syscall.SIGKILL)
			for i := 0; i < 500; i++ {
				if syscall.Kill(pid, 0) != nil {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
	}
	os.Remove(filepath.Join(dir, pidFile))
}

// copyFile copies from to a new file to: a reflink (FICLONE) where the
// filesystem shares blocks, copy_file_range otherwise.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
	if err != nil {
		return err
	}
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) != nil {
		_, err = io.Copy(out, in)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
