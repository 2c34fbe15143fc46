package jail

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The policy every process of a sandbox runs under. init applies it to
// one locked OS thread, its spawner, and forks every process from that
// thread: capabilities, no_new_privs, the Landlock domain and the
// seccomp filter are per thread and inherited by fork, so the user's
// processes get them from their first instruction while init's other
// threads keep what they need (cgroup and pty setup, reaping, killing).

// keptCaps is Docker's default set less CAP_SYS_CHROOT (a chroot is the
// one wall inside the root: see init.go), CAP_MKNOD and CAP_SETFCAP: root
// inside the sandbox owns its files and processes, nothing of the host's,
// and gives no file a capability (a file of /workspace lands in the
// tree's base at a commit, where a host user could run it).
var keptCaps = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID,
	unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP,
	unix.CAP_NET_BIND_SERVICE, unix.CAP_NET_RAW, unix.CAP_AUDIT_WRITE,
}

// setidModes are the mode bits no sandboxed process may give a file: a
// setuid-root (or setgid) program written in /workspace would reach the
// tree's base at a commit, a root shell for any host user who runs it.
var setidModes = []seccomp.NameWithConditions{
	{Name: "chmod", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "fchmod", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "fchmodat", Conditions: []seccomp.Condition{{Argument: 2, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "fchmodat2", Conditions: []seccomp.Condition{{Argument: 2, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "creat", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "open", Conditions: []seccomp.Condition{{Argument: 2, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "openat", Conditions: []seccomp.Condition{{Argument: 3, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "mknod", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
	{Name: "mknodat", Conditions: []seccomp.Condition{{Argument: 2, Operation: seccomp.BitsSet, Value: unix.S_ISUID | unix.S_ISGID}}},
}

// dropCaps shrinks the calling thread's bounding set to keptCaps and
// clears its inheritable and ambient sets, so that an execve (as uid 0:
// permitted = inheritable | bounding) gets keptCaps only. The thread's own
// effective set stays whole: it still chroots its children.
func dropCaps() error {
	keep := map[uintptr]bool{}
	for _, c := range keptCaps {
		keep[c] = true
	}
	for c := uintptr(0); c <= unix.CAP_LAST_CAP; c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// landlockWrites returns a ruleset that allows writes only beneath the
// given directories and to the given device files (reads and execution
// stay free: /usr is read-only by its mount), and scopes signals and
// abstract unix sockets to the sandbox's own domain.
func landlockRuleset(rwDirs, rwDevs []string) (fd int, flags uint32, err error) {
	cfg := landlock.V7.BestEffort()
	// Network rules are the network namespace's job: a sandbox's own
	// loopback servers must bind and connect.
	cfg.HandledAccessNet = 0
	// Execution and reads are not restricted: only writes are handled.
	cfg.HandledAccessFS &^= ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	return cfg.NewRulesetFD(
		landlock.RWDirs(rwDirs...).WithRefer().WithIoctlDev(),
		landlock.RWFiles(rwDevs...).WithIoctlDev().IgnoreIfMissing(),
	)
}

// seccompFilter denies what no sandboxed process needs and what opens
// the kernel or the host to it: the usual container deny-list (Docker's
// default profile without CAP_SYS_ADMIN, and more).
func seccompFilter() seccomp.Filter {
	newNS := uint64(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME)
	return seccomp.Filter{
		NoNewPrivs: true,
		Flag:       0, // this thread only: see the comment at the top
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{
					Action: seccomp.ActionErrno, // EPERM
					Names: []string{
						// mounts and namespaces
						"mount", "umount2", "pivot_root", "unshare", "setns",
						"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
						// other processes' memory and fds
						"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
						// the kernel itself
						"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
						"bpf", "perf_event_open", "userfaultfd", "iopl", "ioperm",
						"keyctl", "add_key", "request_key",
						"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
						"syslog", "uselib", "vhangup", "lookup_dcookie", "nfsservctl",
						"open_by_handle_at", "name_to_handle_at",
						"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
						"fanotify_init",
						// their modes are in memory, beyond the checks of
						// setidModes (io_uring's opens too)
						"openat2", "io_uring_setup", "io_uring_enter", "io_uring_register",
					},
				},
				{
					Action:             seccomp.ActionErrno,
					NamesWithCondtions: setidModes,
				},
				{
					Action: seccomp.ActionErrno,
					NamesWithCondtions: []seccomp.NameWithConditions{{
						Name:       "clone",
						Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: newNS}},
					}},
				},
			},
		},
	}
}
