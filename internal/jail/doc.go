// Package jail is the process sandbox of a live node: a set of Linux
// namespaces, cgroups and a resident init in which a node's processes
// run, over the node's files.
//
// # Vocabulary
//
// A Manager starts sandboxes under a label; a Sandbox is one live
// sandbox, named (a node's id); a Process is one program started in it
// (Start) or run to its end (Exec). A spare is an init started ahead of
// need: in placeholder cgroups, its skeleton root built, its spawner
// thread under seccomp with its capabilities cut, waiting for the node's
// directories (then its Landlock domain, which names them). A taken
// spare is replaced once the sandbox's first process has ended, 20 ms
// after its start, or at its Stop, whichever is first: a new init's start
// would otherwise compete for the CPU with that first process. init is the sandbox's PID 1: a re-exec of
// the calling binary (Main recognises it) that builds the root, serves
// exec requests over a SEQPACKET socketpair and reaps every orphan.
//
// # Lifecycle
//
//	New -> Start (spare or cold init; cgroups; setup; ready) -> Exec/Start ...
//	    -> Freeze/Thaw (suspend/resume) ... -> Stop (kill, wait empty, remove)
//	Reap (at the next start after a crash) kills and removes what a
//	predecessor of the label left; Close stops everything.
//
// A sandbox has new PID, mount, UTS, IPC and network namespaces (only
// lo, up). init is cloned into the sandbox's cgroup2 directory
// (CLONE_INTO_CGROUP) and, on a v1 or hybrid host, written into the v1
// memory, pids and freezer cgroups before it leaves its gate, so every
// user process starts inside them. cgroups live below the caller's own:
// <caller's cgroup>/arbor-jail/<label>/<name>, one directory per exec
// below that (cgroup2 only), so an exec's timeout kills its whole tree.
// Kill is cgroup.kill where the kernel has it (cgroup2, 5.14+), else v1
// freezer, SIGKILL of every pid, thaw; init's own death then takes the
// PID namespace along. Freeze is cgroup.freeze, else the v1 freezer.
// The cgroup code is containerd/cgroups (v1, v2 and hybrid hosts).
//
// The root: a tmpfs (read-only once built) with read-only binds of the
// host's /usr, /bin, /lib*, /etc, /sbin (symlinks copied as symlinks),
// /workspace and /tmp bound read-write (nosuid, nodev), a fresh /proc, and
// a /dev of null, zero, full, random, urandom, tty and a private devpts.
// On the host's root the host's secrets in /etc (password hashes, SSH host
// keys, TLS private keys: hostSecrets) are covered by empty read-only
// binds, since root inside owns and reads them.
// init pivots into it; user processes are further chrooted to its /r,
// which makes the kernel refuse them a user namespace whatever the
// syscall.
//
// With Config.Root (an image's root filesystem, internal/image) the
// skeleton binds the image's top-level directories read-only instead of
// the host's, the rest as above. With Config.Outbound every sandbox gets
// outbound network: a pasta (passt) attached to its network namespace,
// cloned into its cgroups (a spare's too, moved with its init) and
// killed and reaped by Stop (network.go).
//
// The policy of a user process (policy.go): capabilities cut to Docker's
// default set less CAP_SYS_CHROOT, CAP_MKNOD and CAP_SETFCAP, no_new_privs,
// a Landlock domain (writes only beneath /workspace, /tmp, /dev/pts and to
// the device nodes; signals and abstract sockets scoped to the domain), and
// a seccomp deny-list (mount, namespaces, ptrace, kernel modules, kexec,
// bpf, perf_event_open, keyctl, io_uring, openat2, ...) that also refuses
// a setuid or setgid mode to chmod, open, creat and mknod: a file the
// sandbox writes reaches the tree's base at a commit, so it may carry
// neither those bits nor a file capability. All are per thread in Linux: init
// applies them to one locked thread and forks every user process from it.
//
// # Locking
//
// Manager.mu guards the sandbox and spare tables; Sandbox.mu the process
// table and the frozen/stopping state; Sandbox.wmu (and init's wmu) one
// packet at a time on the socket. No lock is held across a wait on init,
// except that init writes a process's "started" under its table lock, so
// the host never sees an exit before the start.
//
// # Sharp edges
//
//   - Pdeathsig fires when the forking thread ends: every init is cloned
//     from one locked thread of the Manager's, which ends only with Close.
//   - A SIGKILLed caller's inits die by Pdeathsig, and their namespaces'
//     processes with them; the empty cgroups stay until Reap.
//   - PidsMax counts tasks, init's Go threads included.
//   - Output of a process is drained for outputGrace after it ends: a
//     background child that inherited its stdout keeps running but its
//     output after that is cut.
//   - A pure cgroup2 host needs the caller's cgroup to allow enabling
//     controllers below it (no processes of its own in a non-root cgroup)
//     for memory and pids limits; without limits nothing is enabled.
//   - The root cgroup has no cgroup.kill nor cgroup.freeze: for a caller in
//     the root of the cgroup2 tree (a hybrid host's unified tree, often) the
//     kernel's version says whether they exist below it (5.14+).
//   - ARBOR_JAIL_TRACE=1 in the caller's environment prints, for each
//     sandbox, the steps of its start and of its first exec (host and
//     init, in ms from the start) at that exec's first output (trace.go).
//   - Never put the FUSE server of a node's files in a cgroup that Freeze
//     freezes: the sandbox's processes would block on it.
package jail
