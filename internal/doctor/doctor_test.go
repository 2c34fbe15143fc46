package doctor

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"golang.org/x/sys/unix"
)

// fakeHost is a host the test describes: a file tree and probes.
type fakeHost struct {
	files   fstest.MapFS
	uid     int
	home    string
	path    string
	probe   Probes
	failing map[string]error // paths whose stat and open fail so
}

func (f *fakeHost) host() Host {
	var root fs.FS = f.files
	if f.failing != nil {
		root = failFS{f.files, f.failing}
	}
	return Host{Root: root, UID: f.uid, Home: f.home, PATH: f.path, Probe: f.probe}
}

// failFS is a file tree in which some paths fail to stat or open.
type failFS struct {
	fs.FS
	failing map[string]error
}

func (f failFS) Open(name string) (fs.File, error) {
	if err, ok := f.failing[name]; ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f.FS.Open(name)
}

func (f failFS) Stat(name string) (fs.FileInfo, error) {
	if err, ok := f.failing[name]; ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return fs.Stat(f.FS, name)
}

func text(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func dir() *fstest.MapFile { return &fstest.MapFile{Mode: fs.ModeDir | 0o755} }

func device(perm fs.FileMode, uid, gid uint32) *fstest.MapFile {
	return &fstest.MapFile{Mode: fs.ModeDevice | fs.ModeCharDevice | perm, Sys: &syscall.Stat_t{Uid: uid, Gid: gid}}
}

func program(mode fs.FileMode, uid uint32) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte("#!"), Mode: mode, Sys: &syscall.Stat_t{Uid: uid}}
}

func gz(s string) *fstest.MapFile {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return &fstest.MapFile{Data: b.Bytes()}
}

const (
	statusRoot    = "Name:\tarbor\nCapEff:\t000001ffffffffff\nSeccomp:\t0\n"
	statusNoAdmin = "Name:\tarbor\nCapEff:\t00000000a80425fb\nSeccomp:\t2\nSeccomp_filters:\t1\n"
	statusUser    = "Name:\tarbor\nCapEff:\t0000000000000000\nSeccomp:\t0\n"

	mountsUnified = "22 1 0:21 / / rw - ext4 /dev/vda rw\n" +
		"30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n" +
		"31 22 0:27 / /sys/fs/fuse/connections rw - fusectl fusectl rw\n"
	// This machine's: v1 controllers, a cgroup2 hierarchy with only
	// hugetlb, fusectl not mounted.
	mountsHybrid = "22 1 0:21 / / rw - ext4 /dev/vda rw\n" +
		"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n" +
		"39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n" +
		"40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	mountsV1 = "22 1 0:21 / / rw - ext4 /dev/vda rw\n" +
		"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory\n"
)

// modern is a root host that has everything: Linux 6.12, cgroup2 with
// every controller, KVM on VMX, btrfs under ARBOR_HOME.
func modern() *fakeHost {
	return &fakeHost{
		uid:  0,
		home: "/var/lib/arbor",
		path: "/usr/local/bin:/usr/bin",
		files: fstest.MapFS{
			"proc/sys/kernel/osrelease":                               text("6.12.48-1-amd64\n"),
			"proc/self/status":                                        text(statusRoot),
			"proc/filesystems":                                        text("nodev\tcgroup2\nnodev\tfuse\nnodev\tfusectl\n\text4\n"),
			"proc/self/mountinfo":                                     text(mountsUnified),
			"proc/self/cgroup":                                        text("0::/system.slice/arbord.service\n"),
			"proc/config.gz":                                          gz("CONFIG_FUSE_FS=y\nCONFIG_FUSE_PASSTHROUGH=y\n# CONFIG_FUSE_DAX is not set\n"),
			"proc/sys/kernel/seccomp/actions_avail":                   text("kill_process kill_thread trap errno user_notif trace log allow\n"),
			"proc/cpuinfo":                                            text("processor\t: 0\nflags\t\t: fpu vme de pse msr vmx sse2\n\nprocessor\t: 1\nflags\t\t: fpu vmx\n"),
			"proc/self/limits":                                        text("Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n"),
			"proc/sys/fs/protected_hardlinks":                         text("1\n"),
			"sys/fs/cgroup/cgroup.controllers":                        text("cpuset cpu io memory hugetlb pids rdma misc\n"),
			"sys/fs/cgroup/cgroup.procs":                              text(""),
			"sys/fs/cgroup/system.slice/cgroup.procs":                 text(""),
			"sys/fs/cgroup/system.slice/cgroup.kill":                  text(""),
			"sys/fs/cgroup/system.slice/cgroup.freeze":                text("0\n"),
			"sys/fs/cgroup/system.slice/arbord.service/cgroup.procs":  text(""),
			"sys/fs/cgroup/system.slice/arbord.service/cgroup.kill":   text(""),
			"sys/fs/cgroup/system.slice/arbord.service/cgroup.freeze": text("0\n"),
			"sys/module/fuse/parameters/enable_uring":                 text("Y\n"),
			"sys/module/kvm_intel/parameters/nested":                  text("Y\n"),
			"dev/fuse":                                                device(0o666, 0, 0),
			"dev/kvm":                                                 device(0o660, 0, 104),
			"usr/bin/fusermount3":                                     program(fs.ModeSetuid|0o755, 0),
			"usr/bin/qemu-system-x86_64":                              program(0o755, 0),
			"usr/bin/mmdebstrap":                                      program(0o755, 0),
			"usr/bin/pasta":                                           program(0o755, 0),
			"var/lib/arbor/trees.db":                                  text(""),
		},
		probe: Probes{
			OpenDevice:  func(string) error { return nil },
			Clone:       func(uintptr) error { return nil },
			LandlockABI: func() (int, error) { return 6, nil },
			FSType:      func(string) (int64, error) { return unix.BTRFS_SUPER_MAGIC, nil },
			Reflink:     func(string) error { return nil },
			Version: func(_ context.Context, p string) (string, error) {
				return "QEMU emulator version 8.2.2 (Debian 1:8.2.2+ds-0ubuntu1)", nil
			},
		},
	}
}

// thisMachine is the build machine: root, Linux 6.18, hybrid cgroups, KVM
// on PVM, /dev/fuse 0600, fusectl not mounted, no fusermount3, no QEMU,
// ext4, ARBOR_HOME not made yet.
func thisMachine() *fakeHost {
	f := modern()
	f.files["proc/sys/kernel/osrelease"] = text("6.18.44-fc-v669\n")
	f.files["proc/self/mountinfo"] = text(mountsHybrid)
	f.files["proc/self/cgroup"] = text("4:memory:/process_api/cbf6\n1:cpu:/\n0::/\n")
	delete(f.files, "sys/fs/cgroup/cgroup.controllers")
	for p := range f.files {
		if strings.HasPrefix(p, "sys/fs/cgroup/") {
			delete(f.files, p)
		}
	}
	f.files["sys/fs/cgroup/unified/cgroup.controllers"] = text("hugetlb\n")
	f.files["sys/fs/cgroup/unified/cgroup.procs"] = text("")
	f.files["sys/fs/fuse/connections"] = dir()
	f.files["sys/module/fuse/parameters/enable_uring"] = text("N\n")
	f.files["proc/cpuinfo"] = text("processor\t: 0\nflags\t\t: fpu vme de pse msr sse2 hypervisor\n")
	delete(f.files, "sys/module/kvm_intel/parameters/nested")
	f.files["sys/module/kvm_pvm/parameters/pvm_native"] = text("Y\n")
	f.files["dev/fuse"] = device(0o600, 0, 0)
	f.files["dev/kvm"] = device(0o600, 0, 0)
	delete(f.files, "usr/bin/fusermount3")
	delete(f.files, "usr/bin/qemu-system-x86_64")
	delete(f.files, "usr/bin/mmdebstrap")
	delete(f.files, "usr/bin/pasta")
	delete(f.files, "var/lib/arbor/trees.db")
	f.files["var/lib/dpkg"] = dir()
	f.probe.LandlockABI = func() (int, error) { return 7, nil }
	f.probe.FSType = func(string) (int64, error) { return unix.EXT4_SUPER_MAGIC, nil }
	f.probe.Reflink = func(string) error { return unix.EOPNOTSUPP }
	return f
}

// nonRoot is modern as uid 1000 with /dev/fuse mode 0666.
func nonRoot() *fakeHost {
	f := modern()
	f.uid = 1000
	f.home = "/home/u/.local/share/arbor"
	f.files["proc/self/status"] = text(statusUser)
	f.files["home/u/.local/share/arbor/arbord.sock"] = text("")
	return f
}

func errOn(path string, err error) func(string) error {
	return func(p string) error {
		if p == path {
			return err
		}
		return nil
	}
}

func TestChecks(t *testing.T) {
	type want struct {
		status   Status
		contains []string // in detail
		fix      string   // in fix; "-" for an empty fix
	}
	cases := []struct {
		name    string
		host    func() *fakeHost
		want    map[string]want
		blocked []string
	}{
		{name: "modern root host", host: modern, want: map[string]want{
			"kernel": {status: OK}, "root": {status: OK, fix: "-"}, "dev_fuse": {status: OK, contains: []string{"mode 0666"}},
			"fusermount3":      {status: OK, contains: []string{"/usr/bin/fusermount3", "go-fuse uses it when a mount(2) or an unmount fails"}},
			"fuse_passthrough": {status: OK, contains: []string{"CONFIG_FUSE_PASSTHROUGH=y"}},
			"fusectl":          {status: OK}, "fuse_io_uring": {status: OK},
			"cgroup":  {status: OK, contains: []string{"cgroup2 at /sys/fs/cgroup with controllers cpuset cpu io memory", "cgroup.kill and cgroup.freeze"}},
			"ns_user": {status: OK}, "ns_pid": {status: OK}, "ns_net": {status: OK}, "ns_mount": {status: OK},
			"landlock":            {status: OK, contains: []string{"ABI 6", "TCP bind and connect"}},
			"seccomp":             {status: OK},
			"kvm":                 {status: OK, contains: []string{"VMX, kvm_intel"}},
			"qemu":                {status: OK, contains: []string{"8.2.2"}},
			"mmdebstrap":          {status: OK, contains: []string{"/usr/bin/mmdebstrap", "arbor image build"}},
			"pasta":               {status: OK, contains: []string{"/usr/bin/pasta", "--network outbound"}},
			"reflink":             {status: OK, contains: []string{"btrfs at /var/lib/arbor clones"}},
			"open_files":          {status: OK, contains: []string{"hard 1048576"}},
			"protected_hardlinks": {status: OK, contains: []string{"fs.protected_hardlinks = 1"}},
		}},
		{name: "this machine", host: thisMachine, want: map[string]want{
			"kernel":        {status: OK, contains: []string{"6.18.44-fc-v669"}},
			"root":          {status: OK},
			"dev_fuse":      {status: OK, contains: []string{"mode 0600, owner root:root", "only a root arbord can mount"}},
			"fusermount3":   {status: Warn, contains: []string{"not installed", "arbord as root mounts with mount(2)", "instead of busy", "a non-root arbord cannot mount"}, fix: "apt-get install fuse3"},
			"fusectl":       {status: Warn, contains: []string{"not mounted", "mounts it itself"}, fix: "mount -t fusectl none /sys/fs/fuse/connections"},
			"fuse_io_uring": {status: Warn, contains: []string{"enable_uring = N", "turns it on at start", "read and write /dev/fuse"}, fix: "echo Y >"},
			"cgroup": {status: Warn, contains: []string{"hybrid: v1 controllers cpu, memory, freezer, pids;",
				"cgroup2 at /sys/fs/cgroup/unified with controllers hugetlb", "cgroup.kill and cgroup.freeze (by the kernel's version",
				"cgroup2 lacks memory and pids"}, fix: "systemd.unified_cgroup_hierarchy=1"},
			"landlock":   {status: OK, contains: []string{"ABI 7", "audit logs"}},
			"kvm":        {status: Warn, contains: []string{"PVM", "no VMX or SVM", "itself a virtual machine", "does not boot"}},
			"qemu":       {status: Missing, fix: "apt-get install qemu-system-x86"},
			"mmdebstrap": {status: Warn, contains: []string{"not installed"}, fix: "apt-get install mmdebstrap"},
			"pasta":      {status: Warn, contains: []string{"not installed"}, fix: "apt-get install passt"},
			"reflink":    {status: Missing, contains: []string{"ext4 at /var/lib (ARBOR_HOME /var/lib/arbor does not exist yet) cannot clone"}},
		}},
		{name: "non-root, /dev/fuse 0600 root", host: func() *fakeHost {
			f := nonRoot()
			f.files["dev/fuse"] = device(0o600, 0, 0)
			f.probe.OpenDevice = errOn("/dev/fuse", unix.EACCES)
			return f
		}, blocked: []string{"dev_fuse"}, want: map[string]want{
			"root":             {status: Warn, contains: []string{"uid 1000, not root"}},
			"dev_fuse":         {status: Missing, contains: []string{"mode 0600", "uid 1000", "permission denied", "every mount fails"}, fix: "chmod 0666 /dev/fuse"},
			"fusermount3":      {status: OK, contains: []string{"arbord mounts through it"}},
			"fuse_passthrough": {status: Warn, contains: []string{"only root"}},
		}},
		{name: "non-root with a usable /dev/fuse", host: nonRoot, want: map[string]want{
			"root": {status: Warn}, "dev_fuse": {status: OK, contains: []string{"opens as uid 1000"}},
			"fusermount3": {status: OK}, "fuse_passthrough": {status: Warn},
			"fusectl": {status: OK},
			"reflink": {status: OK, contains: []string{"at /home/u/.local/share/arbor clones"}},
		}},
		{name: "non-root without fusermount3", host: func() *fakeHost {
			f := nonRoot()
			delete(f.files, "usr/bin/fusermount3")
			return f
		}, blocked: []string{"fusermount3"}, want: map[string]want{
			"fusermount3": {status: Missing, contains: []string{"no way to mount"}, fix: "apt-get install fuse3"},
		}},
		{name: "non-root, fusermount3 not setuid", host: func() *fakeHost {
			f := nonRoot()
			f.files["usr/bin/fusermount3"] = program(0o755, 0)
			return f
		}, blocked: []string{"fusermount3"}, want: map[string]want{
			"fusermount3": {status: Missing, contains: []string{"not setuid root (mode 0755, owner root:"}, fix: "chmod u+s /usr/bin/fusermount3"},
		}},
		{name: "non-root, fusermount3 setuid but not root's", host: func() *fakeHost {
			f := nonRoot()
			f.files["usr/bin/fusermount3"] = program(fs.ModeSetuid|0o755, 1000)
			return f
		}, blocked: []string{"fusermount3"}, want: map[string]want{"fusermount3": {status: Missing}}},
		{name: "non-root with FUSE 2's fusermount only", host: func() *fakeHost {
			f := nonRoot()
			delete(f.files, "usr/bin/fusermount3")
			f.files["usr/bin/fusermount"] = program(fs.ModeSetuid|0o755, 0)
			return f
		}, want: map[string]want{"fusermount3": {status: OK, contains: []string{"/usr/bin/fusermount (FUSE 2's"}}}},
		{name: "fusermount3 only in /bin, as go-fuse falls back", host: func() *fakeHost {
			f := nonRoot()
			delete(f.files, "usr/bin/fusermount3")
			f.files["bin/fusermount3"] = program(fs.ModeSetuid|0o755, 0)
			f.path = ""
			return f
		}, want: map[string]want{"fusermount3": {status: OK, contains: []string{"/bin/fusermount3"}}}},
		{name: "relative PATH entries are not searched", host: func() *fakeHost {
			f := nonRoot()
			delete(f.files, "usr/bin/fusermount3")
			f.files["bin/fusermount3"] = program(0o644, 0) // not executable
			f.files["usr/bin/fusermount3"] = program(fs.ModeSetuid|0o755, 0)
			f.path = "usr/bin"
			return f
		}, blocked: []string{"fusermount3"}, want: map[string]want{"fusermount3": {status: Missing}}},
		{name: "no /dev/fuse", host: func() *fakeHost {
			f := modern()
			delete(f.files, "dev/fuse")
			delete(f.files, "sys/module/fuse/parameters/enable_uring")
			f.files["proc/filesystems"] = text("nodev\tcgroup2\n")
			return f
		}, blocked: []string{"dev_fuse"}, want: map[string]want{
			"dev_fuse": {status: Missing, contains: []string{"no /dev/fuse"}, fix: "a kernel with CONFIG_FUSE_FS"},
			"fusectl":  {status: OK}, // still in this mountinfo
		}},
		{name: "/dev/fuse that cannot be stat'ed but opens (this machine, non-root)", host: func() *fakeHost {
			f := nonRoot()
			f.failing = map[string]error{"dev/fuse": unix.EIO}
			return f
		}, want: map[string]want{"dev_fuse": {status: OK, contains: []string{"stat fails", "input/output error", "opens as uid 1000"}}}},
		{name: "/dev/fuse that can neither be stat'ed nor opened", host: func() *fakeHost {
			f := nonRoot()
			f.failing = map[string]error{"dev/fuse": unix.EIO, "dev/kvm": unix.EIO}
			f.probe.OpenDevice = func(string) error { return unix.EIO }
			return f
		}, blocked: []string{"dev_fuse"}, want: map[string]want{
			"dev_fuse": {status: Missing, contains: []string{"stat fails", "cannot be opened by uid 1000"}},
			"kvm":      {status: Missing, contains: []string{"stat fails", "cannot be opened by uid 1000"}},
		}},
		{name: "a FUSE filesystem mounted over /dev/fuse (seen on this machine)", host: func() *fakeHost {
			f := modern()
			f.files["proc/self/mountinfo"] = text(mountsUnified + "69 24 0:45 / /dev/fuse rw,nosuid,nodev,relatime - fuse.branchfs /tmp/TestX/001 rw,user_id=0\n")
			f.failing = map[string]error{"dev/fuse": unix.EIO}
			f.probe.OpenDevice = func(p string) error {
				if p == "/dev/fuse" {
					panic("opened /dev/fuse under a FUSE mount")
				}
				return nil
			}
			return f
		}, blocked: []string{"dev_fuse"}, want: map[string]want{
			"dev_fuse": {status: Missing, contains: []string{"fuse.branchfs filesystem (source /tmp/TestX/001) is mounted over /dev/fuse"}, fix: "umount -l /dev/fuse"},
		}},
		{name: "/dev/fuse not a device", host: func() *fakeHost {
			f := modern()
			f.files["dev/fuse"] = text("")
			return f
		}, blocked: []string{"dev_fuse"}, want: map[string]want{"dev_fuse": {status: Missing, contains: []string{"not a character device"}}}},
		{name: "root in a container without CAP_SYS_ADMIN or fusermount3", host: func() *fakeHost {
			f := modern()
			f.files["proc/self/status"] = text(statusNoAdmin)
			delete(f.files, "usr/bin/fusermount3")
			return f
		}, blocked: []string{"fusermount3"}, want: map[string]want{
			"root":             {status: Warn, contains: []string{"without CAP_SYS_ADMIN"}, fix: "--cap-add SYS_ADMIN"},
			"fusermount3":      {status: Missing},
			"fuse_passthrough": {status: Warn, contains: []string{"CAP_SYS_ADMIN"}},
			"seccomp":          {status: OK, contains: []string{"already runs under 1 filter(s)"}},
		}},
		{name: "Linux 5.4", host: func() *fakeHost {
			f := modern()
			f.files["proc/sys/kernel/osrelease"] = text("5.4.0-150-generic\n")
			delete(f.files, "sys/module/fuse/parameters/enable_uring")
			for p := range f.files {
				if strings.HasPrefix(p, "sys/fs/cgroup/system.slice") {
					delete(f.files, p)
				}
			}
			f.files["proc/self/cgroup"] = text("0::/\n")
			return f
		}, blocked: []string{"kernel"}, want: map[string]want{
			"kernel":           {status: Missing, contains: []string{"5.4.0-150-generic is too old", "openat2"}},
			"fuse_passthrough": {status: Missing, contains: []string{"no FUSE passthrough (6.9+)"}},
			"fuse_io_uring":    {status: Missing, fix: "-"},
			"cgroup":           {status: Warn, contains: []string{"cgroup.freeze but no cgroup.kill (by the kernel's version"}, fix: "5.14"},
		}},
		{name: "Linux 6.6: no passthrough, still runs", host: func() *fakeHost {
			f := modern()
			f.files["proc/sys/kernel/osrelease"] = text("6.6.0\n")
			return f
		}, want: map[string]want{"kernel": {status: OK}, "fuse_passthrough": {status: Missing}}},
		{name: "built without passthrough", host: func() *fakeHost {
			f := modern()
			f.files["proc/config.gz"] = gz("CONFIG_FUSE_FS=y\n# CONFIG_FUSE_PASSTHROUGH is not set\n")
			return f
		}, want: map[string]want{"fuse_passthrough": {status: Missing, contains: []string{"without CONFIG_FUSE_PASSTHROUGH"}}}},
		{name: "no /proc/config.gz", host: func() *fakeHost {
			f := modern()
			delete(f.files, "proc/config.gz")
			return f
		}, want: map[string]want{"fuse_passthrough": {status: OK, contains: []string{"no /proc/config.gz to confirm"}}}},
		{name: "unreadable kernel version", host: func() *fakeHost {
			f := modern()
			delete(f.files, "proc/sys/kernel/osrelease")
			return f
		}, want: map[string]want{"kernel": {status: Warn}}},
		{name: "cgroup2 without memory and pids", host: func() *fakeHost {
			f := modern()
			f.files["sys/fs/cgroup/cgroup.controllers"] = text("cpu io\n")
			return f
		}, want: map[string]want{"cgroup": {status: Warn, contains: []string{"lacks memory and pids"}, fix: "echo '+memory +pids' > /sys/fs/cgroup/cgroup.subtree_control"}}},
		{name: "cgroup2 whose own cgroup lacks cgroup.kill", host: func() *fakeHost {
			f := modern()
			delete(f.files, "sys/fs/cgroup/system.slice/arbord.service/cgroup.kill")
			return f
		}, want: map[string]want{"cgroup": {status: Warn, contains: []string{"cgroup.freeze but no cgroup.kill"}}}},
		{name: "cgroup2 from the first child when at the root", host: func() *fakeHost {
			f := modern()
			f.files["proc/self/cgroup"] = text("0::/\n")
			f.files["proc/sys/kernel/osrelease"] = text("5.10.0\n") // by version it would lack cgroup.kill
			return f
		}, want: map[string]want{"cgroup": {status: OK, contains: []string{"cgroup.kill and cgroup.freeze."}}}},
		{name: "cgroup v1 only", host: func() *fakeHost {
			f := modern()
			f.files["proc/self/mountinfo"] = text(mountsV1)
			return f
		}, want: map[string]want{
			"cgroup":  {status: Warn, contains: []string{"cgroup v1 only (controllers cpu, cpuacct, memory)"}},
			"fusectl": {status: Warn, contains: []string{"mounts it itself"}},
		}},
		{name: "no cgroups", host: func() *fakeHost {
			f := modern()
			f.files["proc/self/mountinfo"] = text("22 1 0:21 / / rw - ext4 /dev/vda rw\n")
			return f
		}, want: map[string]want{"cgroup": {status: Missing}}},
		{name: "fusectl, non-root, not mounted", host: func() *fakeHost {
			f := nonRoot()
			f.files["proc/self/mountinfo"] = text(mountsV1)
			return f
		}, want: map[string]want{"fusectl": {status: Warn, contains: []string{"only root can mount it"}, fix: "as root: mount -t fusectl"}}},
		{name: "no fusectl filesystem", host: func() *fakeHost {
			f := modern()
			f.files["proc/self/mountinfo"] = text(mountsV1)
			f.files["proc/filesystems"] = text("nodev\tfuse\n")
			return f
		}, want: map[string]want{"fusectl": {status: Missing}}},
		{name: "KVM on SVM", host: func() *fakeHost {
			f := modern()
			f.files["proc/cpuinfo"] = text("flags\t\t: fpu svm\n")
			delete(f.files, "sys/module/kvm_intel/parameters/nested")
			f.files["sys/module/kvm_amd/parameters/nested"] = text("1\n")
			return f
		}, want: map[string]want{"kvm": {status: OK, contains: []string{"SVM, kvm_amd"}}}},
		{name: "no /dev/kvm on a CPU with VMX", host: func() *fakeHost {
			f := modern()
			delete(f.files, "dev/kvm")
			return f
		}, want: map[string]want{"kvm": {status: Missing, contains: []string{"TCG"}, fix: "modprobe kvm_intel or kvm_amd (the CPU has VMX)"}}},
		{name: "no /dev/kvm and no VMX", host: func() *fakeHost {
			f := thisMachine()
			delete(f.files, "dev/kvm")
			return f
		}, want: map[string]want{"kvm": {status: Missing, fix: "nested virtualisation"}}},
		{name: "/dev/kvm not open to the user", host: func() *fakeHost {
			f := nonRoot()
			f.probe.OpenDevice = errOn("/dev/kvm", unix.EACCES)
			return f
		}, want: map[string]want{"kvm": {status: Missing, contains: []string{"mode 0660, owner root:104"}, fix: "group"}}},
		{name: "KVM of an unknown kind", host: func() *fakeHost {
			f := modern()
			f.files["proc/cpuinfo"] = text("flags\t\t: fpu\n")
			delete(f.files, "sys/module/kvm_intel/parameters/nested")
			return f
		}, want: map[string]want{"kvm": {status: Warn, contains: []string{"some other KVM"}}}},
		{name: "namespaces refused, user namespaces limited to 0", host: func() *fakeHost {
			f := modern()
			f.files["proc/sys/user/max_user_namespaces"] = text("0\n")
			f.probe.Clone = func(uintptr) error { return unix.ENOSPC }
			return f
		}, want: map[string]want{
			"ns_user":  {status: Missing, contains: []string{"no space left on device"}, fix: "sysctl -w user.max_user_namespaces=10000"},
			"ns_mount": {status: Missing, fix: "sysctl -w user.max_user_namespaces=10000"},
		}},
		{name: "net namespaces limited to 0", host: func() *fakeHost {
			f := modern()
			f.files["proc/sys/user/max_net_namespaces"] = text("0\n")
			f.probe.Clone = func(flags uintptr) error {
				if flags&unix.CLONE_NEWNET != 0 {
					return unix.ENOSPC
				}
				return nil
			}
			return f
		}, want: map[string]want{
			"ns_user": {status: OK}, "ns_net": {status: Missing, fix: "user.max_net_namespaces=10000"},
		}},
		{name: "root in a container: EPERM", host: func() *fakeHost {
			f := modern()
			f.probe.Clone = func(uintptr) error { return unix.EPERM }
			return f
		}, want: map[string]want{"ns_pid": {status: Missing, contains: []string{"operation not permitted"}, fix: "--privileged"}}},
		{name: "kernel without pid namespaces", host: func() *fakeHost {
			f := modern()
			f.probe.Clone = func(flags uintptr) error {
				if flags&unix.CLONE_NEWPID != 0 {
					return unix.EINVAL
				}
				return nil
			}
			return f
		}, want: map[string]want{"ns_pid": {status: Missing, fix: "CONFIG_PID_NS=y"}, "ns_net": {status: OK}}},
		{name: "non-root makes each namespace inside a user namespace", host: func() *fakeHost {
			f := nonRoot()
			f.probe.Clone = func(flags uintptr) error {
				if flags&unix.CLONE_NEWUSER == 0 {
					return unix.EPERM // as the kernel refuses an unprivileged user
				}
				return nil
			}
			return f
		}, want: map[string]want{
			"ns_user": {status: OK, contains: []string{"unprivileged"}},
			"ns_pid":  {status: OK, contains: []string{"inside a new user namespace"}},
			"ns_net":  {status: OK}, "ns_mount": {status: OK},
		}},
		{name: "non-root, Debian's unprivileged_userns_clone off", host: func() *fakeHost {
			f := nonRoot()
			f.files["proc/sys/kernel/unprivileged_userns_clone"] = text("0\n")
			f.probe.Clone = func(uintptr) error { return unix.EPERM }
			return f
		}, want: map[string]want{"ns_user": {status: Missing, fix: "sysctl -w kernel.unprivileged_userns_clone=1"}}},
		{name: "non-root, AppArmor restricts user namespaces", host: func() *fakeHost {
			f := nonRoot()
			f.files["proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = text("1\n")
			f.probe.Clone = func(uintptr) error { return unix.EACCES }
			return f
		}, want: map[string]want{"ns_net": {status: Missing, fix: "kernel.apparmor_restrict_unprivileged_userns=0"}}},
		{name: "no Landlock in the kernel", host: func() *fakeHost {
			f := modern()
			f.probe.LandlockABI = func() (int, error) { return 0, unix.ENOSYS }
			return f
		}, want: map[string]want{"landlock": {status: Missing, contains: []string{"no Landlock"}, fix: "CONFIG_SECURITY_LANDLOCK=y"}}},
		{name: "Landlock not enabled at boot", host: func() *fakeHost {
			f := modern()
			f.probe.LandlockABI = func() (int, error) { return 0, unix.EOPNOTSUPP }
			return f
		}, want: map[string]want{"landlock": {status: Missing, contains: []string{"not enabled at boot"}, fix: "lsm="}}},
		{name: "a Landlock ABI newer than this list", host: func() *fakeHost {
			f := modern()
			f.probe.LandlockABI = func() (int, error) { return 9, nil }
			return f
		}, want: map[string]want{"landlock": {status: OK, contains: []string{"ABI 9", "audit logs, and more"}}}},
		{name: "no seccomp", host: func() *fakeHost {
			f := modern()
			delete(f.files, "proc/sys/kernel/seccomp/actions_avail")
			f.files["proc/self/status"] = text("Name:\tarbor\nCapEff:\t000001ffffffffff\n")
			return f
		}, want: map[string]want{"seccomp": {status: Missing, contains: []string{"no seccomp"}}}},
		{name: "seccomp without filters", host: func() *fakeHost {
			f := modern()
			delete(f.files, "proc/sys/kernel/seccomp/actions_avail")
			return f
		}, want: map[string]want{"seccomp": {status: Missing, contains: []string{"no filters"}}}},
		{name: "seccomp without user_notif", host: func() *fakeHost {
			f := modern()
			f.files["proc/sys/kernel/seccomp/actions_avail"] = text("kill_process kill_thread trap errno trace log allow\n")
			return f
		}, want: map[string]want{"seccomp": {status: Warn, contains: []string{"no user_notif"}}}},
		{name: "QEMU that does not run", host: func() *fakeHost {
			f := modern()
			f.probe.Version = func(context.Context, string) (string, error) { return "", unix.ENOEXEC }
			return f
		}, want: map[string]want{"qemu": {status: Warn, contains: []string{"does not run"}}}},
		{name: "reflink untestable", host: func() *fakeHost {
			f := nonRoot()
			f.probe.Reflink = func(string) error { return unix.EACCES }
			return f
		}, want: map[string]want{"reflink": {status: Warn, contains: []string{"cannot test", "permission denied"}}}},
		{name: "xfs without reflink, home missing up to /", host: func() *fakeHost {
			f := modern()
			f.home = "/srv/arbor/home"
			f.probe.FSType = func(string) (int64, error) { return unix.XFS_SUPER_MAGIC, nil }
			f.probe.Reflink = errOn("/", unix.EOPNOTSUPP) // and nil elsewhere: it must try "/"
			return f
		}, want: map[string]want{"reflink": {status: Missing, contains: []string{"xfs at / (ARBOR_HOME /srv/arbor/home does not exist yet)"}, fix: "btrfs"}}},
		{name: "a low open-files limit", host: func() *fakeHost {
			f := modern()
			f.files["proc/self/limits"] = text("Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 4096                 files\n")
			return f
		}, want: map[string]want{"open_files": {status: Warn, contains: []string{"soft 1024, hard 4096"}, fix: "ulimit -Hn"}}},
		{name: "hard links to other users' files allowed", host: func() *fakeHost {
			f := modern()
			f.files["proc/sys/fs/protected_hardlinks"] = text("0\n")
			return f
		}, want: map[string]want{"protected_hardlinks": {status: Warn, contains: []string{"= 0", "hard-link another user's file"}, fix: "sysctl -w fs.protected_hardlinks=1"}}},
		{name: "no /proc/self/limits", host: func() *fakeHost {
			f := modern()
			delete(f.files, "proc/self/limits")
			return f
		}, want: map[string]want{"open_files": {status: Warn}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Run(context.Background(), c.host().host())
			if got := names(r); !slices.Equal(got, Names()) {
				t.Fatalf("checks %v, want %v", got, Names())
			}
			byName := map[string]Check{}
			for _, ch := range r.Checks {
				byName[ch.Name] = ch
				if ch.Detail == "" {
					t.Errorf("%s: empty detail", ch.Name)
				}
				if ch.Status != OK && ch.Status != Warn && ch.Status != Missing {
					t.Errorf("%s: status %q", ch.Name, ch.Status)
				}
			}
			for name, w := range c.want {
				ch, ok := byName[name]
				if !ok {
					t.Fatalf("no check %q", name)
				}
				if ch.Status != w.status {
					t.Errorf("%s: status %s, want %s (%s)", name, ch.Status, w.status, ch.Detail)
				}
				for _, s := range w.contains {
					if !strings.Contains(ch.Detail, s) {
						t.Errorf("%s: detail %q lacks %q", name, ch.Detail, s)
					}
				}
				switch {
				case w.fix == "-" && ch.Fix != "":
					t.Errorf("%s: fix %q, want none", name, ch.Fix)
				case w.fix != "" && w.fix != "-" && !strings.Contains(ch.Fix, w.fix):
					t.Errorf("%s: fix %q lacks %q", name, ch.Fix, w.fix)
				}
			}
			blocked := c.blocked
			if blocked == nil {
				blocked = []string{}
			}
			if !slices.Equal(r.BlockedBy, blocked) || r.Runs != (len(blocked) == 0) {
				t.Errorf("blocked by %v (runs %v), want %v", r.BlockedBy, r.Runs, blocked)
			}
		})
	}
}

func names(r Report) []string {
	var ns []string
	for _, c := range r.Checks {
		ns = append(ns, c.Name)
	}
	return ns
}

// Every check that is not ok says how to fix it, on every host above but
// for the ones where there is nothing to do.
func TestFixes(t *testing.T) {
	noFix := map[string]bool{"fuse_io_uring": true, "open_files": true, "landlock": true, "seccomp": true}
	for _, f := range []*fakeHost{modern(), thisMachine(), nonRoot()} {
		for _, c := range Run(context.Background(), f.host()).Checks {
			if c.Status != OK && c.Fix == "" && !noFix[c.Name] {
				t.Errorf("%s is %s with no fix: %s", c.Name, c.Status, c.Detail)
			}
			if c.Status == OK && c.Fix != "" {
				t.Errorf("%s is ok with a fix: %s", c.Name, c.Fix)
			}
		}
	}
}

func TestWriteText(t *testing.T) {
	r := Run(context.Background(), thisMachine().host())
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(r.Checks)+1 {
		t.Fatalf("%d lines for %d checks and a summary:\n%s", len(lines), len(r.Checks), b.String())
	}
	for i, c := range r.Checks {
		f := strings.Fields(lines[i])
		if len(f) < 3 || f[0] != string(c.Status) || f[1] != c.Name {
			t.Errorf("line %d %q: want status %s and name %s first", i, lines[i], c.Status, c.Name)
		}
		if c.Fix != "" && !strings.HasSuffix(lines[i], ". Fix: "+c.Fix) {
			t.Errorf("line %d %q does not end with its fix %q", i, lines[i], c.Fix)
		}
	}
	if last := lines[len(lines)-1]; last != "default backend dir (files over FUSE): can run" {
		t.Errorf("summary %q", last)
	}

	f := thisMachine()
	delete(f.files, "dev/fuse")
	b.Reset()
	Run(context.Background(), f.host()).WriteText(&b)
	if !strings.HasSuffix(b.String(), "default backend dir (files over FUSE): cannot run (dev_fuse)\n") {
		t.Errorf("summary of a host without /dev/fuse:\n%s", b.String())
	}
}

// The JSON field names are documented and stable.
func TestWriteJSON(t *testing.T) {
	f := nonRoot()
	f.probe.OpenDevice = errOn("/dev/fuse", unix.EACCES)
	var b bytes.Buffer
	if err := Run(context.Background(), f.host()).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(top)); !slices.Equal(got, []string{"blocked_by", "checks", "default_backend", "default_backend_runs"}) {
		t.Errorf("top-level fields %v", got)
	}
	var checks []map[string]any
	if err := json.Unmarshal(top["checks"], &checks); err != nil {
		t.Fatal(err)
	}
	if len(checks) != len(Names()) {
		t.Fatalf("%d checks", len(checks))
	}
	for _, c := range checks {
		if got := slices.Sorted(maps.Keys(c)); !slices.Equal(got, []string{"detail", "fix", "name", "status"}) {
			t.Errorf("check fields %v", got)
		}
	}
	var blocked []string
	if err := json.Unmarshal(top["blocked_by"], &blocked); err != nil {
		t.Fatal(err)
	}
	if string(top["default_backend"]) != `"dir"` || string(top["default_backend_runs"]) != "false" || !slices.Equal(blocked, []string{"dev_fuse"}) {
		t.Errorf("summary fields: %s %s %s", top["default_backend"], top["default_backend_runs"], top["blocked_by"])
	}
}

func TestParseRelease(t *testing.T) {
	for _, c := range []struct {
		in   string
		want version
		ok   bool
	}{
		{"6.18.44-fc-v669", version{6, 18}, true},
		{"5.4.0-150-generic", version{5, 4}, true},
		{"6.9", version{6, 9}, true},
		{"6.10-rc1", version{6, 10}, true},
		{"4.19.0+", version{4, 19}, true},
		{"", version{}, false},
		{"six.one", version{}, false},
		{"6", version{}, false},
	} {
		got, ok := parseRelease(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseRelease(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	if !(version{6, 10}).atLeast(6, 9) || (version{5, 19}).atLeast(6, 0) || !(version{7, 0}).atLeast(6, 9) {
		t.Error("atLeast")
	}
}
