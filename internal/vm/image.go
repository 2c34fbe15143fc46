package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Config is what an image is built from, and how its VMs run.
type Config struct {
	// Home is the image cache: <Home>/<key>/ per image.
	Home string
	// QEMU is qemu-system-x86_64's path ("" looks it up on PATH).
	QEMU string
	// Accel is KVM or TCG; "" detects (DetectAccel).
	Accel string
	// MemMiB is the guest's RAM (default 256); CPUs its vCPUs (default 1).
	MemMiB, CPUs int
	// Agent is the static guest agent binary (cmd/arbor-guest), the
	// guest's /init.
	Agent string
	// Kernel is the guest kernel ("" is the newest /boot/vmlinuz-*-cloud-amd64);
	// its modules are those of /usr/lib/modules/<its version>.
	Kernel string
	// Busybox is a static busybox ("" is /bin/busybox): the guest's shell
	// and tools.
	Busybox string
	// Include are host paths (files, directories) copied into the guest at
	// the same paths, with the shared libraries their executables need
	// (ldd): e.g. /usr/bin/python3 and /usr/lib/python3.11 for a python3
	// guest. A directory's test suites and GUI toolkits are left out
	// (includeSkip).
	Include []string
	// Progress, if set, is told each step of a build.
	Progress func(step string)
}

// Image is a built guest: kernel, initramfs, and the template, a snapshot
// of the booted guest with its agent answering, from which every VM of
// the image starts (Seed, Start).
type Image struct {
	Dir            string
	Key            string
	Kernel, Initrd string
	Mem, Dev       string // the template's memory image and device state
	MemMiB, CPUs   int
	Accel          string
	QEMU           string
	BootTime       time.Duration // the template's cold boot to its agent's reply (at build)
}

// modules are the guest kernel's modules init loads, in order (the
// virtio-serial port over virtio-mmio, microvm's transport).
var modules = []string{
	"kernel/drivers/virtio/virtio_ring.ko",
	"kernel/drivers/virtio/virtio.ko",
	"kernel/drivers/virtio/virtio_mmio.ko",
	"kernel/drivers/char/virtio_console.ko",
	"kernel/fs/fuse/fuse.ko", // the node's files at /workspace
}

func (c *Config) defaults() error {
	if c.MemMiB == 0 {
		c.MemMiB = 256
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	if c.Accel == "" {
		c.Accel, _ = DetectAccel()
	}
	var err error
	if c.QEMU, err = findQEMU(c.QEMU); err != nil {
		return fmt.Errorf("vm: %w", err)
	}
	if c.Kernel == "" {
		ks, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
		if len(ks) == 0 {
			return errors.New("vm: no /boot/vmlinuz-*-cloud-amd64 (apt-get install linux-image-cloud-amd64)")
		}
		sort.Strings(ks)
		c.Kernel = ks[len(ks)-1]
	}
	if c.Busybox == "" {
		c.Busybox = "/bin/busybox"
	}
	if c.Agent == "" {
		return errors.New("vm: no guest agent binary (Config.Agent)")
	}
	return nil
}

func kernelVersion(kernel string) string {
	return strings.TrimPrefix(filepath.Base(kernel), "vmlinuz-")
}

// Build returns the image for cfg: from the cache when its inputs (every
// input file's content, and the settings) are unchanged, else built: the
// initramfs packed, the guest booted once, its template saved.
func Build(ctx context.Context, cfg Config) (*Image, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	modDir := filepath.Join("/usr/lib/modules", kernelVersion(cfg.Kernel))
	h := sha256.New()
	fmt.Fprintf(h, "arbor-vm-image 1\nmem %d cpus %d accel %s qemu %s cmdline %s\n", cfg.MemMiB, cfg.CPUs, cfg.Accel, cfg.QEMU,
		(&Image{Accel: cfg.Accel}).cmdline())
	inputs := []string{cfg.Kernel, cfg.Busybox, cfg.Agent, cfg.QEMU}
	for _, m := range modules {
		inputs = append(inputs, filepath.Join(modDir, m))
	}
	inc, err := collectIncludes(cfg.Include)
	if err != nil {
		return nil, fmt.Errorf("vm image input: %w", err)
	}
	for _, f := range inc {
		fmt.Fprintf(h, "include %s %s %d %d\n", f.path, f.link, f.size, f.mtime)
	}
	for _, p := range inputs {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("vm image input: %w", err)
		}
		fmt.Fprintf(h, "%s\n", p)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(cfg.Home, key)
	img := &Image{Dir: dir, Key: key, Kernel: cfg.Kernel, Initrd: filepath.Join(dir, "initrd"),
		Mem: filepath.Join(dir, "template", MemFile), Dev: filepath.Join(dir, "template", DevFile),
		MemMiB: cfg.MemMiB, CPUs: cfg.CPUs, Accel: cfg.Accel, QEMU: cfg.QEMU}
	if b, err := os.ReadFile(filepath.Join(dir, "image.json")); err == nil {
		var cached Image
		if json.Unmarshal(b, &cached) == nil {
			img.BootTime = cached.BootTime
			progress("cached " + dir)
			return img, nil
		}
	}
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(cfg.Home, "build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	progress("initramfs")
	if err := packInitrd(filepath.Join(tmp, "initrd"), cfg, modDir, inc); err != nil {
		return nil, err
	}
	b := *img
	b.Dir, b.Initrd = tmp, filepath.Join(tmp, "initrd")
	progress("boot")
	if err := b.boot(ctx, filepath.Join(tmp, "template")); err != nil {
		return nil, err
	}
	img.BootTime = b.BootTime
	meta, _ := json.MarshalIndent(img, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), meta, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, e := os.Stat(filepath.Join(dir, "image.json")); e == nil {
			return img, nil // another build won
		}
		return nil, err
	}
	progress("built " + dir)
	return img, nil
}

func packInitrd(path string, cfg Config, modDir string, inc []included) error {
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf, dirs: map[string]bool{}}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "etc/arbor", "proc", "sys", "dev", "tmp", "run", "root", "lib", "lib/modules", "mnt"} {
		c.Dir(d)
	}
	c.CharDev("dev/console", 0o600, 5, 1)
	c.CharDev("dev/null", 0o666, 1, 3)
	agent, err := os.ReadFile(cfg.Agent)
	if err != nil {
		return err
	}
	c.File("init", 0o755, agent)
	bb, err := os.ReadFile(cfg.Busybox)
	if err != nil {
		return err
	}
	c.File("bin/busybox", 0o755, bb)
	out, err := exec.Command(cfg.Busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, name := range strings.Fields(string(out)) {
		if name != "busybox" && name != "init" {
			c.Symlink("bin/"+name, "busybox")
		}
	}
	var list []string
	for _, m := range modules {
		b, err := os.ReadFile(filepath.Join(modDir, m))
		if err != nil {
			return err
		}
		p := "lib/modules/" + filepath.Base(m)
		c.File(p, 0o644, b)
		list = append(list, "/"+p)
	}
	c.File("etc/arbor/modules", 0o644, []byte(strings.Join(list, "\n")+"\n"))
	c.File("etc/hostname", 0o644, []byte("arbor\n"))
	c.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	for _, f := range inc {
		name := strings.TrimPrefix(f.path, "/")
		c.Parents(name)
		switch {
		case f.dir:
			c.Dir(name)
		case f.link != "":
			c.Symlink(name, f.link)
		default:
			b, err := os.ReadFile(f.path)
			if err != nil {
				return err
			}
			c.File(name, f.mode, b)
		}
	}
	if err := c.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// machine is the QEMU command line of a VM of img over memory file mem.
func (img *Image) machine(mem string, share bool, sock, serial string) machine {
	return machine{qemu: img.QEMU, accel: img.Accel, memMiB: img.MemMiB, cpus: img.CPUs,
		kernel: img.Kernel, initrd: img.Initrd, append: img.cmdline(),
		mem: mem, share: share, qmp: filepath.Join(sock, "qmp"), agent: filepath.Join(sock, "agent"), serial: serial}
}

// boot cold-boots the guest with its RAM shared in dir's memory file,
// waits for the agent, and saves the template: the device state, and the
// RAM in the file (the QEMU process then exits).
func (img *Image) boot(ctx context.Context, dir string) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	v := &VM{img: img, dir: dir, exited: make(chan struct{})}
	if v.sock, err = sockDir(dir); err != nil {
		return err
	}
	defer v.Kill()
	start := time.Now()
	if err := v.spawn(img.machine(filepath.Join(dir, MemFile), true, v.sock, filepath.Join(dir, logFile))); err != nil {
		return err
	}
	bootCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if v.mon, err = dialQMP(bootCtx, filepath.Join(v.sock, "qmp"), v.exited); err != nil {
		return v.why(err)
	}
	if v.agent, err = dialAgent(bootCtx, filepath.Join(v.sock, "agent"), "arbor", ""); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, logFile))
		return fmt.Errorf("vm boot: %w (serial: %s)", v.why(err), tail(b, 2000))
	}
	if err := v.agent.Ping(bootCtx); err != nil {
		return v.why(err)
	}
	img.BootTime = time.Since(start)
	// The agent's session ends before the snapshot: every clone starts
	// one of its own.
	v.agent.close()
	v.agent = nil
	if err := v.Pause(ctx); err != nil {
		return err
	}
	if _, err := v.mon.run(ctx, "xen-save-devices-state", map[string]any{"filename": filepath.Join(dir, DevFile), "live": false}); err != nil {
		return v.why(err)
	}
	if _, err := v.mon.run(ctx, "quit", nil); err != nil && !errors.Is(err, ErrQEMUExited) {
		// quit's reply may be lost with the socket: the exit counts.
		select {
		case <-v.exited:
		case <-time.After(10 * time.Second):
			return v.why(err)
		}
	}
	<-v.exited
	return os.Chmod(filepath.Join(dir, MemFile), 0o400)
}

// cmdline is the guest kernel's command line. Under TCG the guest's TSC
// runs at the host's rate, and calibrating it against the PIT fails on a
// loaded host (the boot then hangs), so the host's rate is given.
func (img *Image) cmdline() string {
	c := "console=ttyS0 quiet panic=-1"
	if img.Accel == TCG {
		if khz := hostTSCkHz(); khz > 0 {
			c += fmt.Sprintf(" tsc_early_khz=%d tsc=reliable", khz)
		}
	}
	return c
}

// hostTSCkHz is the host CPU's rate as /proc/cpuinfo says, or 0.
func hostTSCkHz() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			var mhz float64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &mhz); err == nil {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
