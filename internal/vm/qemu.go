package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// Accelerators.
const (
	KVM = "kvm"
	TCG = "tcg"
)

// DetectAccel says which accelerator this host runs guests with, and why:
// KVM where /dev/kvm opens and the CPU has VMX or SVM (a KVM that
// emulates, like PVM without them, cannot boot a stock kernel), TCG
// otherwise.
func DetectAccel() (accel, why string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return TCG, "no usable /dev/kvm (" + err.Error() + "): TCG, QEMU's software CPU"
	}
	f.Close()
	c, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return TCG, "cannot read /proc/cpuinfo: TCG"
	}
	defer c.Close()
	s := bufio.NewScanner(c)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				if f == "vmx" || f == "svm" {
					return KVM, "/dev/kvm and the CPU's " + f + ": KVM"
				}
			}
			break
		}
	}
	return TCG, "/dev/kvm opens but the CPU has neither vmx nor svm (a paravirtual KVM such as PVM boots no stock kernel): TCG, QEMU's software CPU"
}

// machine is one QEMU process's command line.
type machine struct {
	qemu    string
	accel   string
	memMiB  int
	cpus    int
	kernel  string
	initrd  string
	append  string
	mem     string // the guest RAM's file
	share   bool   // MAP_SHARED (the template's boot) or MAP_PRIVATE (every clone)
	qmp     string // sockets
	agent   string
	serial  string
	incomin bool
}

func (m machine) args() []string {
	share := "off"
	if m.share {
		share = "on"
	}
	a := []string{"-nodefaults", "-no-user-config", "-nographic",
		"-m", fmt.Sprintf("%dM", m.memMiB), "-smp", fmt.Sprint(m.cpus),
		"-object", fmt.Sprintf("memory-backend-file,id=ram0,size=%dM,mem-path=%s,share=%s", m.memMiB, m.mem, share),
		"-M", "microvm,memory-backend=ram0",
	}
	if m.accel == KVM {
		a = append(a, "-accel", "kvm", "-cpu", "host")
	} else {
		// Under TCG, -cpu max hangs the kernel unless rdrand and rdseed
		// are off.
		a = append(a, "-accel", "tcg,tb-size=64", "-cpu", "max,-rdrand,-rdseed")
	}
	a = append(a,
		"-kernel", m.kernel, "-initrd", m.initrd, "-append", m.append,
		"-qmp", "unix:"+m.qmp+",server=on,wait=off",
		"-chardev", "socket,id=agent,path="+m.agent+",server=on,wait=off",
		"-device", "virtio-serial-device", "-device", "virtserialport,chardev=agent,name=arbor",
		"-serial", "file:"+m.serial,
	)
	if m.incomin {
		// The device state is xen-save-devices-state's: no configuration
		// section. -S: the clone stays paused once loaded, until cont.
		a = append(a, "-incoming", "defer", "-S", "-global", "migration.send-configuration=off")
	}
	return a
}

// monitor is what this package asks of QMP.
type monitor interface {
	// run executes cmd with args (nil: none) and returns its "return".
	run(ctx context.Context, cmd string, args any) (json.RawMessage, error)
	close() error
}

// qmpMonitor is monitor over go-qemu's socket monitor.
type qmpMonitor struct{ m *qmp.SocketMonitor }

// dialQMP connects to the QMP socket at path, retrying until QEMU has made
// it or ctx ends (or the process, done, exits).
func dialQMP(ctx context.Context, path string, done <-chan struct{}) (monitor, error) {
	for {
		m, err := qmp.NewSocketMonitor("unix", path, 5*time.Second)
		if err == nil {
			if err = m.Connect(); err == nil {
				return &qmpMonitor{m}, nil
			}
			m.Disconnect()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp %s: %w: %w", path, ctx.Err(), err)
		case <-done:
			return nil, fmt.Errorf("qmp %s: %w: %w", path, ErrQEMUExited, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (q *qmpMonitor) run(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := q.m.Run(b)
		ch <- result{b, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		q.m.Disconnect() // ends the Run
		<-ch
		return nil, fmt.Errorf("qmp %s: %w", cmd, ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, r.err)
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(r.b, &resp); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	return resp.Return, nil
}

func (q *qmpMonitor) close() error { return q.m.Disconnect() }

// ErrQEMUExited is a QEMU process that ended before it was asked to.
var ErrQEMUExited = errors.New("qemu exited")

// findQEMU returns the path of qemu-system-x86_64.
func findQEMU(p string) (string, error) {
	if p == "" {
		p = "qemu-system-x86_64"
	}
	return exec.LookPath(p)
}
