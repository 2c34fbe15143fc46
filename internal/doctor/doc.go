// Package doctor is what the host can do for Arbor: one check per
// capability (the kernel, root, /dev/fuse, fusermount3, FUSE passthrough,
// fusectl, FUSE over io_uring, cgroups, namespaces, Landlock, seccomp, KVM,
// QEMU, reflink under ARBOR_HOME, the open-files limit), each ok, warn or
// missing, with what it means for Arbor and how to fix it. `arbor doctor`
// prints it.
//
// # Vocabulary
//
// A Check is one capability's verdict: Name (stable, see Names), Status,
// Detail (what was found and what it means for Arbor) and Fix (empty when
// there is nothing to do). A Report holds every Check and whether the
// default backend (dir: files over FUSE) can run; BlockedBy names the checks
// that keep it from running (a kernel without openat2, no usable /dev/fuse,
// no way to mount). Their JSON field names are stable: default_backend,
// default_backend_runs, blocked_by, checks; and in each check name, status,
// detail, fix.
//
//   - ok: Arbor gets from the capability what it needs.
//   - warn: present but limited, or absent where Arbor works around it at a
//     cost the detail names.
//   - missing: not there, or not usable by this user; what needs it does
//     not work (which may be a backend that is still planned: the detail
//     says).
//
// # A pure core with thin edges
//
// The checks read the host through Host: Root is its file tree (/proc,
// /sys, /dev, the PATH directories) as an fs.FS, and Probes are the few
// system calls that a file cannot answer (open a device, clone into
// namespaces, the Landlock ABI, statfs, FICLONE, `qemu-system-x86_64
// --version`). SystemHost is this machine; the tests give fake file trees
// and probes, so they show hosts this one cannot (cgroup2 only, no FUSE,
// KVM with VMX, an old kernel, no namespaces).
//
// # Sharp edges
//
//   - Run changes nothing on the host but for the reflink probe's two
//     temporary files under ARBOR_HOME (or its nearest existing parent),
//     which it removes; it starts no daemon.
//   - The namespace probe clones a child that execs nothing (see
//     cloneProbe); as non-root it makes each namespace inside a new user
//     namespace, as an unprivileged jail would.
//   - A Go program raises its soft open-files limit to the hard one at
//     start, so the soft limit shown is the one arbord would have, not the
//     shell's.
//   - A device is judged by opening it: a stat can fail where the open
//     works. /dev/fuse is first looked up in mountinfo, since a stat of a
//     FUSE filesystem mounted over it (a test's mistake, seen on the build
//     machine) fails or, with a hung server, hangs.
//   - FUSE passthrough is judged by the kernel's version and
//     /proc/config.gz, not by a mount (Run mounts nothing).
package doctor
