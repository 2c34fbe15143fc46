package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"golang.org/x/sys/unix"
)

func ok(detail string) Check { return Check{Status: OK, Detail: detail} }

func warn(detail, fix string) Check { return Check{Status: Warn, Detail: detail, Fix: fix} }

func missing(detail, fix string) Check { return Check{Status: Missing, Detail: detail, Fix: fix} }

// blocking marks c as one the default backend cannot run without.
func blocking(c Check) Check {
	c.blocks = true
	return c
}

// The kernel versions that features arrived in.
var (
	minKernel         = version{5, 6}  // openat2, which the store opens files with
	passthroughKernel = version{6, 9}  // FUSE passthrough
	cgroupKillKernel  = version{5, 14} // cgroup.kill
	cgroupFreezeKern  = version{5, 2}  // cgroup.freeze
)

func checkKernel(_ context.Context, h *host) Check {
	release, v, known := h.kernel()
	if !known {
		return warn(fmt.Sprintf("cannot read the kernel's version from /proc/sys/kernel/osrelease (%q): Arbor needs Linux %d.%d or later", release, minKernel.major, minKernel.minor), "mount /proc")
	}
	if !v.atLeast(minKernel.major, minKernel.minor) {
		return blocking(missing(fmt.Sprintf("Linux %s is too old. The store opens files with openat2 (Linux %d.%d), so no tree or mount works", release, minKernel.major, minKernel.minor),
			fmt.Sprintf("boot Linux %d.%d or later (%d.%d or later for FUSE passthrough)", minKernel.major, minKernel.minor, passthroughKernel.major, passthroughKernel.minor)))
	}
	return ok(fmt.Sprintf("Linux %s (Arbor needs %d.%d for openat2, %d.%d for FUSE passthrough)", release, minKernel.major, minKernel.minor, passthroughKernel.major, passthroughKernel.minor))
}

func checkRoot(_ context.Context, h *host) Check {
	admin, known := h.hasSysAdmin()
	if !h.root() {
		return warn(fmt.Sprintf("uid %d, not root. arbord mounts through fusermount3 (which needs /dev/fuse open to you), serves every read and write itself (no FUSE passthrough), and its mounts are visible to you only", h.UID),
			"run arbord as root for passthrough and mounts that every user sees")
	}
	if known && !admin {
		return warn("root without CAP_SYS_ADMIN (a container?). mount(2) fails, so arbord falls back to fusermount3, and FUSE passthrough cannot be set up",
			"give the container CAP_SYS_ADMIN and /dev/fuse (docker run --cap-add SYS_ADMIN --device /dev/fuse)")
	}
	return ok("root with CAP_SYS_ADMIN. arbord mounts with mount(2), serves opened files by FUSE passthrough, and its mounts are visible to every user")
}

// canMountDirect reports whether arbord can mount with mount(2) itself.
func (h *host) canMountDirect() bool {
	admin, known := h.hasSysAdmin()
	return h.root() && (admin || !known)
}

func checkDevFuse(_ context.Context, h *host) Check {
	const dev = "/dev/fuse"
	// Looked up before any stat: a stat of a FUSE mount whose server hangs
	// would hang too.
	for _, m := range h.mounts() {
		if m.Point == dev {
			return blocking(missing(fmt.Sprintf("a %s filesystem (source %s) is mounted over /dev/fuse and hides the device. No FUSE mount works", m.FSType, m.Source),
				"umount -l /dev/fuse (whatever mounted it there did so by mistake)"))
		}
	}
	fi, err := h.stat(dev)
	if errors.Is(err, fs.ErrNotExist) {
		fix := "modprobe fuse; in a container, pass the device (docker run --device /dev/fuse)"
		if !h.filesystem("fuse") && !h.exists("/sys/module/fuse") {
			fix = "a kernel with CONFIG_FUSE_FS, then " + fix
		}
		return blocking(missing("no /dev/fuse. No FUSE mount works, and the default backend (dir) serves files only over FUSE", fix))
	}
	mode, perm := deviceMode(fi, err) // a stat can fail where an open works (EIO for non-root users on this build machine)
	if err == nil && fi.Mode()&fs.ModeCharDevice == 0 {
		return blocking(missing(fmt.Sprintf("/dev/fuse is not a character device (%s). No FUSE mount works", fi.Mode()),
			"rm /dev/fuse && mknod -m 0666 /dev/fuse c 10 229"))
	}
	if err := h.Probe.OpenDevice(dev); err != nil {
		if h.root() {
			return blocking(missing(fmt.Sprintf("/dev/fuse (%s) cannot be opened: %v. No FUSE mount works", mode, err),
				"in a container, allow the device (docker run --device /dev/fuse)"))
		}
		return blocking(missing(fmt.Sprintf("/dev/fuse (%s) cannot be opened by uid %d: %v. fusermount3 opens it as you, so every mount fails (fusermount3: failed to open /dev/fuse: Permission denied)", mode, h.UID, err),
			"chmod 0666 /dev/fuse (the usual mode; a udev rule keeps it: KERNEL==\"fuse\", MODE=\"0666\"), or run arbord as root"))
	}
	if h.root() && perm&0o006 != 0o006 {
		return ok(fmt.Sprintf("/dev/fuse (%s) opens as root. Other users cannot open it, so only a root arbord can mount", mode))
	}
	return ok(fmt.Sprintf("/dev/fuse (%s) opens as uid %d", mode, h.UID))
}

// deviceMode describes a device from its stat, or the stat's error; perm
// is its permission bits when known, 0o777 when not.
func deviceMode(fi fs.FileInfo, statErr error) (string, fs.FileMode) {
	if statErr != nil {
		var pe *fs.PathError
		if errors.As(statErr, &pe) {
			statErr = pe.Err
		}
		return fmt.Sprintf("stat fails: %v", statErr), 0o777
	}
	return describeMode(fi), fi.Mode().Perm()
}

func checkFusermount(_ context.Context, h *host) Check {
	p, fi, found := h.lookPath("fusermount3", "/bin")
	legacy := ""
	if !found {
		if p, fi, found = h.lookPath("fusermount", "/bin"); found {
			legacy = " (FUSE 2's; go-fuse takes it when fusermount3 is absent)"
		}
	}
	direct := h.canMountDirect()
	if !found {
		if direct {
			return warn("fusermount3 is not installed. arbord as root mounts with mount(2), but go-fuse falls back to fusermount3 when an unmount fails, so the unmount of a busy mount then fails with \"exec: /bin/fusermount: no such file or directory\" instead of busy; and a non-root arbord cannot mount", "apt-get install fuse3")
		}
		return blocking(missing("fusermount3 is not installed. arbord is not root here, so it has no way to mount", "apt-get install fuse3"))
	}
	uid, _, known := owner(fi)
	setuid := fi.Mode()&fs.ModeSetuid != 0 && (!known || uid == 0)
	switch {
	case setuid && direct:
		return ok(fmt.Sprintf("%s%s, setuid root. arbord as root mounts with mount(2), and go-fuse uses it when a mount(2) or an unmount fails", p, legacy))
	case setuid:
		return ok(fmt.Sprintf("%s%s, setuid root. arbord mounts through it", p, legacy))
	case direct:
		return warn(fmt.Sprintf("%s%s is not setuid root (%s). arbord as root mounts with mount(2), but a non-root arbord cannot mount", p, legacy, describeMode(fi)), "chmod u+s "+p)
	default:
		return blocking(missing(fmt.Sprintf("%s%s is not setuid root (%s). arbord is not root here, so every mount fails", p, legacy, describeMode(fi)), "chmod u+s "+p))
	}
}

func checkPassthrough(_ context.Context, h *host) Check {
	release, v, known := h.kernel()
	slower := "every read and write of a mounted file becomes a request to arbord instead of going straight to the layer file"
	if known && !v.atLeast(passthroughKernel.major, passthroughKernel.minor) {
		return missing(fmt.Sprintf("Linux %s has no FUSE passthrough (%d.%d+), so %s", release, passthroughKernel.major, passthroughKernel.minor, slower),
			fmt.Sprintf("boot Linux %d.%d or later with CONFIG_FUSE_PASSTHROUGH=y", passthroughKernel.major, passthroughKernel.minor))
	}
	cfg, cfgKnown := h.kconfig("CONFIG_FUSE_PASSTHROUGH")
	if cfgKnown && cfg != "y" {
		return missing("the kernel is built without CONFIG_FUSE_PASSTHROUGH, so "+slower, "a kernel with CONFIG_FUSE_PASSTHROUGH=y")
	}
	how := "CONFIG_FUSE_PASSTHROUGH=y"
	if !cfgKnown {
		how = fmt.Sprintf("Linux %s (no /proc/config.gz to confirm CONFIG_FUSE_PASSTHROUGH)", release)
	}
	if !h.root() {
		return warn(fmt.Sprintf("the kernel has it (%s), but only root may hand it a backing file, so as uid %d %s", how, h.UID, slower), "run arbord as root")
	}
	if admin, known := h.hasSysAdmin(); known && !admin {
		return warn(fmt.Sprintf("the kernel has it (%s), but handing it a backing file needs CAP_SYS_ADMIN, so %s", how, slower), "give arbord CAP_SYS_ADMIN")
	}
	return ok(fmt.Sprintf("%s. The kernel serves opened files from the layer files at native speed (a branch with a quota is served without it, so that its writes are counted)", how))
}

const fusectlDir = "/sys/fs/fuse/connections"

func checkFusectl(_ context.Context, h *host) Check {
	for _, m := range h.mounts() {
		if m.FSType == "fusectl" && m.Point == fusectlDir {
			return ok("mounted at " + fusectlDir + ". arbord can abort a stuck FUSE connection (a forced unmount of a busy mount, the takeover after a SIGKILL)")
		}
	}
	fix := "mount -t fusectl none " + fusectlDir
	if !h.filesystem("fusectl") {
		return missing("the kernel has no fusectl filesystem (it comes with FUSE; is the module loaded?). arbord cannot abort a stuck FUSE connection, so a forced unmount of a busy mount is only detached", "modprobe fuse, then "+fix)
	}
	if h.root() {
		return warn("not mounted at "+fusectlDir+". arbord mounts it itself at start as root, to abort stuck FUSE connections", fix+" (or let arbord do it)")
	}
	return warn("not mounted at "+fusectlDir+", and only root can mount it. arbord cannot abort a stuck FUSE connection, so a forced unmount of a busy mount is only detached", "as root: "+fix)
}

func checkIOUring(_ context.Context, h *host) Check {
	const param = "/sys/module/fuse/parameters/enable_uring"
	dev := "Arbor's mounts read and write /dev/fuse (one read and one write per request)"
	v, err := h.read(param)
	if err != nil {
		return missing("the kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING; no "+param+"). "+dev, "")
	}
	switch strings.TrimSpace(v) {
	case "Y", "y", "1":
		return ok("enabled (" + param + " = Y): mounts with fuse_transport auto or uring serve FUSE requests over io_uring (the default, dev, reads and writes /dev/fuse; a mount's transport is in arbord's log)")
	}
	if h.root() {
		return warn("built in but disabled ("+param+" = "+strings.TrimSpace(v)+"). arbord as root turns it on at start when fuse_transport is auto or uring (the default is dev); until then "+dev, "echo Y > "+param+" (or fuse.enable_uring=1 on the kernel command line)")
	}
	return warn("built in but disabled ("+param+" = "+strings.TrimSpace(v)+"), and only root can turn it on: "+dev, "as root: echo Y > "+param+" (or fuse.enable_uring=1 on the kernel command line)")
}

func checkCgroup(_ context.Context, h *host) Check {
	var v1 []string // controllers of the v1 hierarchies
	var v2 []fusemount.Mount
	for _, m := range h.mounts() {
		switch m.FSType {
		case "cgroup":
			for _, o := range strings.Split(m.SuperOptions, ",") {
				switch {
				case o == "rw" || o == "ro" || strings.HasPrefix(o, "name=") || strings.HasPrefix(o, "release_agent=") ||
					o == "noprefix" || o == "clone_children" || o == "xattr" || o == "cpuset_v2_mode" || o == "":
				default:
					if !slices.Contains(v1, o) {
						v1 = append(v1, o)
					}
				}
			}
		case "cgroup2":
			v2 = append(v2, m)
		}
	}
	use := "The jail backend holds a node's processes in a cgroup (kill and freeze through cgroup2's cgroup.kill and cgroup.freeze where the host has them, memory and pids limits through the controllers it has); the dir backend does not need cgroups"
	if len(v1) == 0 && len(v2) == 0 {
		return missing("no cgroup filesystem is mounted. "+use, "mount -t cgroup2 none /sys/fs/cgroup")
	}
	if len(v2) == 0 {
		return warn(fmt.Sprintf("cgroup v1 only (controllers %s): no cgroup.kill or cgroup.freeze. %s", strings.Join(v1, ", "), use),
			"boot with systemd.unified_cgroup_hierarchy=1, or mount -t cgroup2 none /sys/fs/cgroup/unified")
	}
	mp := v2[0].Point
	ctrls := strings.Fields(h.readTrim(path.Join(mp, "cgroup.controllers")))
	kill, freeze, how := h.cgroup2Files(mp)
	ctrlText := "no controllers"
	if len(ctrls) > 0 {
		ctrlText = "controllers " + strings.Join(ctrls, " ")
	}
	desc := fmt.Sprintf("cgroup2 at %s with %s, and %s", mp, ctrlText, describeKillFreeze(kill, freeze, how))
	if len(v1) > 0 {
		desc = fmt.Sprintf("hybrid: v1 controllers %s; %s", strings.Join(v1, ", "), desc)
	}
	var lacks []string
	for _, c := range []string{"memory", "pids"} {
		if !slices.Contains(ctrls, c) {
			lacks = append(lacks, c)
		}
	}
	if !kill {
		lacks = append(lacks, "cgroup.kill")
	}
	if !freeze {
		lacks = append(lacks, "cgroup.freeze")
	}
	if len(lacks) == 0 {
		return ok(desc + ". " + use)
	}
	fix := fmt.Sprintf("enable the controllers in cgroup2: echo '+memory +pids' > %s", path.Join(mp, "cgroup.subtree_control"))
	switch {
	case !kill || !freeze:
		fix = fmt.Sprintf("boot Linux %d.%d or later (cgroup.kill)", cgroupKillKernel.major, cgroupKillKernel.minor)
	case len(v1) > 0:
		fix = "boot with systemd.unified_cgroup_hierarchy=1 (cgroup2 only, with every controller)"
	}
	return warn(fmt.Sprintf("%s. cgroup2 lacks %s here. %s", desc, strings.Join(lacks, " and "), use), fix)
}

// cgroup2Files says whether the cgroup2 hierarchy at mp has cgroup.kill
// and cgroup.freeze. The root cgroup has neither, so it looks in a child
// (this process's own cgroup first), and otherwise goes by the kernel's
// version (how says so).
func (h *host) cgroup2Files(mp string) (kill, freeze bool, how string) {
	var dirs []string
	if s, err := h.read("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(s, "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok && p != "/" && p != "" {
				dirs = append(dirs, path.Join(mp, p))
			}
		}
	}
	if ents, err := fs.ReadDir(h.Root, rel(mp)); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				dirs = append(dirs, path.Join(mp, e.Name()))
				break
			}
		}
	}
	for _, d := range dirs {
		if h.exists(path.Join(d, "cgroup.procs")) {
			return h.exists(path.Join(d, "cgroup.kill")), h.exists(path.Join(d, "cgroup.freeze")), ""
		}
	}
	_, v, known := h.kernel()
	if !known {
		return false, false, " (unknown: no child cgroup to look in, and no kernel version)"
	}
	return v.atLeast(cgroupKillKernel.major, cgroupKillKernel.minor), v.atLeast(cgroupFreezeKern.major, cgroupFreezeKern.minor),
		" (by the kernel's version: the root cgroup shows neither)"
}

func describeKillFreeze(kill, freeze bool, how string) string {
	switch {
	case kill && freeze:
		return "cgroup.kill and cgroup.freeze" + how
	case freeze:
		return "cgroup.freeze but no cgroup.kill" + how
	case kill:
		return "cgroup.kill but no cgroup.freeze" + how
	}
	return "neither cgroup.kill nor cgroup.freeze" + how
}

// nsKind is one kind of namespace.
type nsKind struct {
	name   string  // user, pid, net, mnt
	flag   uintptr // its CLONE_NEW* flag
	config string  // its kernel option
	use    string  // what Arbor does with it
}

var (
	nsUser  = nsKind{"user", unix.CLONE_NEWUSER, "CONFIG_USER_NS", "The jail backend does not use one yet (a sandbox's root is the host's root, which is why only root owns jail trees); a user namespace would let other uids own them"}
	nsPID   = nsKind{"pid", unix.CLONE_NEWPID, "CONFIG_PID_NS", "The jail backend gives a node's processes their own pid 1, so that they all end together"}
	nsNet   = nsKind{"net", unix.CLONE_NEWNET, "CONFIG_NET_NS", "The jail backend gives a node a network stack of its own"}
	nsMount = nsKind{"mnt", unix.CLONE_NEWNS, "CONFIG_NAMESPACES", "The jail backend gives a node a root filesystem of its own, with the node's files at /workspace"}
)

func checkNamespace(k nsKind) func(context.Context, *host) Check {
	return func(_ context.Context, h *host) Check {
		flags := k.flag
		how := "as root"
		if !h.root() && k.flag != unix.CLONE_NEWUSER {
			flags |= unix.CLONE_NEWUSER // an unprivileged jail makes it inside its own user namespace
			how = "inside a new user namespace"
		} else if !h.root() {
			how = "unprivileged"
		}
		err := h.Probe.Clone(flags)
		if err == nil {
			return ok(fmt.Sprintf("a %s namespace can be made (%s). %s; the dir backend does not need it", k.name, how, k.use))
		}
		detail := fmt.Sprintf("a %s namespace cannot be made (%s): %v. %s; the dir backend does not need it", k.name, how, err, k.use)
		return missing(detail, h.namespaceFix(k, err))
	}
}

func (h *host) namespaceFix(k nsKind, err error) string {
	name := k.name // as the sysctls spell it: user.max_mnt_namespaces
	for _, limit := range []string{"user", name} {
		if h.readTrim("/proc/sys/user/max_"+limit+"_namespaces") == "0" {
			return fmt.Sprintf("sysctl -w user.max_%s_namespaces=10000", limit)
		}
	}
	if !h.root() {
		if h.readTrim("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
			return "sysctl -w kernel.unprivileged_userns_clone=1"
		}
		if h.readTrim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
			return "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile that allows userns for arbord)"
		}
	}
	switch {
	case errors.Is(err, unix.EINVAL):
		return "a kernel with " + k.config + "=y"
	case errors.Is(err, unix.EPERM) && h.root():
		return "in a container, allow namespaces (docker run --privileged, or CAP_SYS_ADMIN and a seccomp profile that allows clone and unshare)"
	case errors.Is(err, unix.EPERM):
		return "run arbord as root, or allow unprivileged user namespaces"
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EUSERS):
		return fmt.Sprintf("raise user.max_%s_namespaces (sysctl)", name)
	}
	return ""
}

// landlockFeatures says what each Landlock ABI version adds.
var landlockFeatures = []string{
	1: "file access",
	2: "renames across directories",
	3: "truncate",
	4: "TCP bind and connect",
	5: "device ioctls",
	6: "signal and abstract-socket scoping",
	7: "audit logs",
}

func checkLandlock(_ context.Context, h *host) Check {
	use := "The jail backend confines a node's processes to their own files with it; the dir backend does not need it"
	abi, err := h.Probe.LandlockABI()
	switch {
	case err == nil && abi >= 1:
		n := min(abi, len(landlockFeatures)-1)
		feats := strings.Join(landlockFeatures[1:n+1], ", ")
		if abi > n {
			feats += ", and more"
		}
		return ok(fmt.Sprintf("ABI %d (%s). %s", abi, feats, use))
	case errors.Is(err, unix.EOPNOTSUPP):
		return missing("built into the kernel but not enabled at boot. "+use, "add landlock to the kernel's lsm= list (e.g. lsm=landlock,lockdown,yama,apparmor,bpf)")
	case errors.Is(err, unix.ENOSYS):
		return missing("the kernel has no Landlock (Linux 5.13+, CONFIG_SECURITY_LANDLOCK). "+use, "a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in lsm=")
	case err != nil:
		return missing(fmt.Sprintf("landlock_create_ruleset: %v. %s", err, use), "")
	}
	return missing(fmt.Sprintf("landlock_create_ruleset returned ABI %d. %s", abi, use), "")
}

func checkSeccomp(_ context.Context, h *host) Check {
	use := "The jail backend filters a node's system calls with it; the dir backend does not need it"
	actions := h.readTrim("/proc/sys/kernel/seccomp/actions_avail")
	mode := h.statusField("Seccomp")
	if actions == "" {
		if mode == "" {
			return missing("the kernel has no seccomp (CONFIG_SECCOMP). "+use, "a kernel with CONFIG_SECCOMP_FILTER=y")
		}
		return missing("the kernel has seccomp but no filters (CONFIG_SECCOMP_FILTER). "+use, "a kernel with CONFIG_SECCOMP_FILTER=y")
	}
	detail := "filters available (actions: " + actions + ")"
	if mode == "2" {
		detail += fmt.Sprintf("; this process already runs under %s filter(s), as in a container, whose profile may refuse some calls", orUnknown(h.statusField("Seccomp_filters")))
	}
	if !strings.Contains(" "+actions+" ", " user_notif ") {
		return warn(detail+", but no user_notif (Linux 5.0+). "+use, "")
	}
	return ok(detail + ". " + use)
}

func orUnknown(s string) string {
	if s == "" {
		return "some"
	}
	return s
}

// cpuFlags are the flags of the first CPU in /proc/cpuinfo.
func (h *host) cpuFlags() []string {
	s, err := h.read("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			return strings.Fields(v)
		}
	}
	return nil
}

func checkKVM(_ context.Context, h *host) Check {
	const dev = "/dev/kvm"
	use := "The vm backend runs microVMs with it; the dir backend does not need it"
	flags := h.cpuFlags()
	hw := ""
	switch {
	case slices.Contains(flags, "vmx"):
		hw = "VMX"
	case slices.Contains(flags, "svm"):
		hw = "SVM"
	}
	guest := ""
	if slices.Contains(flags, "hypervisor") {
		guest = "; this host is itself a virtual machine"
	}
	fi, err := h.stat(dev)
	if errors.Is(err, fs.ErrNotExist) {
		fix := "enable VT-x or AMD-V (on a cloud VM: nested virtualisation), then modprobe kvm_intel or kvm_amd"
		if hw != "" {
			fix = "modprobe kvm_intel or kvm_amd (the CPU has " + hw + ")"
		}
		return missing("no /dev/kvm"+guest+". QEMU could run guests only with TCG (a software CPU, many times slower). "+use, fix)
	}
	if oerr := h.Probe.OpenDevice(dev); oerr != nil {
		mode, _ := deviceMode(fi, err)
		return missing(fmt.Sprintf("/dev/kvm (%s) cannot be opened by uid %d: %v. %s", mode, h.UID, oerr, use),
			"add the user to the group that owns /dev/kvm (usually kvm)")
	}
	mod := ""
	for _, m := range []string{"kvm_intel", "kvm_amd", "kvm_pvm"} {
		if h.exists("/sys/module/" + m) {
			mod = m
			break
		}
	}
	noHW := "a host with VMX or SVM (bare metal, or a VM with nested virtualisation)"
	switch {
	case hw != "" && mod != "kvm_pvm":
		return ok(fmt.Sprintf("/dev/kvm with hardware virtualisation (%s%s%s): stock guest kernels run at native speed. %s", hw, prefixed(", ", mod), guest, use))
	case mod == "kvm_pvm":
		return warn(fmt.Sprintf("/dev/kvm is PVM (kvm_pvm), not hardware virtualisation (the CPU shows %s%s). Only a PVM guest kernel (CONFIG_PVM_GUEST) runs at speed; a stock kernel goes through KVM's instruction emulator and does not boot, so guests need TCG here. %s", orNone(hw), guest, use),
			noHW+", or a PVM guest kernel built for this host")
	}
	return warn(fmt.Sprintf("/dev/kvm without hardware virtualisation (the CPU shows no VMX or SVM flag%s, and no kvm_intel or kvm_amd module is loaded): some other KVM, whose guests may not boot stock kernels. %s", guest, use), noHW)
}

func prefixed(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

func orNone(hw string) string {
	if hw == "" {
		return "no VMX or SVM"
	}
	return hw
}

func checkQEMU(ctx context.Context, h *host) Check {
	use := "The vm backend runs microVMs with it; the dir backend does not need it"
	p, _, found := h.lookPath("qemu-system-x86_64", "")
	if !found {
		return missing("qemu-system-x86_64 is not installed. "+use, "apt-get install qemu-system-x86")
	}
	v, err := h.Probe.Version(ctx, p)
	if err != nil {
		return warn(fmt.Sprintf("%s does not run: %v. %s", p, err, use), "reinstall qemu-system-x86")
	}
	return ok(fmt.Sprintf("%s: %s. %s", p, v, use))
}

func checkMmdebstrap(_ context.Context, h *host) Check {
	use := "arbord builds root filesystem images for jail trees with it (arbor image build); trees on the host's root do not need it"
	p, _, found := h.lookPath("mmdebstrap", "")
	if !found {
		return warn("mmdebstrap is not installed: "+use, "apt-get install mmdebstrap")
	}
	return ok(fmt.Sprintf("%s: %s", p, use))
}

func checkPasta(_ context.Context, h *host) Check {
	use := "it gives jail sandboxes outbound network (arbor tree create --network outbound); the default, loopback only, does not need it"
	p, _, found := h.lookPath("pasta", "")
	if !found {
		return warn("pasta (passt) is not installed: "+use, "apt-get install passt")
	}
	return ok(fmt.Sprintf("%s: %s", p, use))
}

// fsNames names the filesystems by their statfs magic.
var fsNames = map[int64]string{
	unix.EXT4_SUPER_MAGIC: "ext4", unix.XFS_SUPER_MAGIC: "xfs", unix.BTRFS_SUPER_MAGIC: "btrfs",
	unix.TMPFS_MAGIC: "tmpfs", unix.OVERLAYFS_SUPER_MAGIC: "overlayfs", unix.FUSE_SUPER_MAGIC: "fuse",
	unix.NFS_SUPER_MAGIC: "nfs", unix.F2FS_SUPER_MAGIC: "f2fs", unix.BCACHEFS_SUPER_MAGIC: "bcachefs",
	0x2fc12fc1: "zfs",
}

func fsName(magic int64) string {
	if n, ok := fsNames[magic]; ok {
		return n
	}
	return fmt.Sprintf("filesystem 0x%x", magic)
}

func checkReflink(_ context.Context, h *host) Check {
	dir := h.Home
	for !h.exists(dir) && dir != "/" {
		dir = filepath.Dir(dir)
	}
	where := dir
	if magic, err := h.Probe.FSType(dir); err == nil {
		where = fsName(magic) + " at " + dir
	}
	if dir != h.Home {
		where += fmt.Sprintf(" (ARBOR_HOME %s does not exist yet)", h.Home)
	}
	err := h.Probe.Reflink(dir)
	switch {
	case err == nil:
		return ok(where + " clones files (FICLONE). A first write to a file of a base on the same filesystem copies it up in constant time, sharing its blocks")
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOSYS):
		return missing(fmt.Sprintf("%s cannot clone files (FICLONE: %v). A first write to a file copies it whole into the branch's layer, in time and disk proportional to its size", where, err),
			"put ARBOR_HOME (and the bases) on btrfs, or on xfs with reflink=1")
	}
	return warn(fmt.Sprintf("cannot test %s: %v", where, err), "run arbor doctor as the user that runs arbord, with its ARBOR_HOME")
}

// minOpenFiles is the hard limit below which the open-files check warns.
const minOpenFiles = 8192

func checkOpenFiles(_ context.Context, h *host) Check {
	soft, hard, err := h.openFilesLimit()
	if err != nil {
		return warn("cannot read the open-files limit from /proc/self/limits: "+err.Error(), "")
	}
	use := "arbord raises its soft limit to the hard one at start (as every Go program does), and holds a descriptor for every mount, every client connection and every file open in its mounts"
	lim := fmt.Sprintf("soft %s, hard %s", soft, hard)
	if hard == "unlimited" {
		return ok(lim + ". " + use)
	}
	n, err := strconv.ParseUint(hard, 10, 64)
	if err != nil {
		return warn(fmt.Sprintf("cannot read the open-files limit (%s)", lim), "")
	}
	if n < minOpenFiles {
		return warn(fmt.Sprintf("%s. %s: below %d, a busy tree can run out", lim, use, minOpenFiles),
			"raise the hard limit where arbord starts: ulimit -Hn 65536, LimitNOFILE=65536 in a systemd unit, or /etc/security/limits.conf")
	}
	return ok(lim + ". " + use)
}

// openFilesLimit reads "Max open files" from /proc/self/limits.
func (h *host) openFilesLimit() (soft, hard string, err error) {
	s, err := h.read("/proc/self/limits")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 {
				return f[0], f[1], nil
			}
		}
	}
	return "", "", errors.New("no Max open files line")
}

// checkProtectedHardlinks: the store walks a base's paths refusing
// symlinks (openat2 RESOLVE_NO_SYMLINKS); a hard link a user makes in a
// base they can write to a file they do not own is refused by the kernel
// only with fs.protected_hardlinks=1.
func checkProtectedHardlinks(_ context.Context, h *host) Check {
	use := "a user who can write a base could otherwise hard-link another user's file into it, and a commit or a copy-up would act on that file"
	switch v := h.readTrim("/proc/sys/fs/protected_hardlinks"); v {
	case "1":
		return ok("fs.protected_hardlinks = 1: no hard links to other users' files (" + use + ")")
	case "":
		return warn("cannot read /proc/sys/fs/protected_hardlinks; "+use, "sysctl -w fs.protected_hardlinks=1")
	default:
		return warn("fs.protected_hardlinks = "+v+": "+use+"; admit no untrusted user and mount no base an untrusted user can write",
			"sysctl -w fs.protected_hardlinks=1 (and fs.protected_hardlinks = 1 in /etc/sysctl.d/)")
	}
}
