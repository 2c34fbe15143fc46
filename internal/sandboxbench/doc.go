// Package sandboxbench is the process sandbox's benchmark, `arbor bench
// sandbox`: Arbor's jail side by side, in one run on one machine, with
// what a user would otherwise use here: bubblewrap (bwrap, with the same
// namespaces and binds) and plain unshare(1).
//
// # Vocabulary
//
//   - case: one measured operation, timed for Config.Rounds rounds; the
//     report gives its median per system. start: from nothing to the first
//     byte of `echo hi` (jail: with a spare init ready, as after any start,
//     and cold); exec: a round trip of /bin/true in a running sandbox (jail;
//     nsenter into an unshare'd sandbox; a plain fork+exec on the host);
//     kill-100: from the kill of a sandbox running 100 processes until they
//     are all gone; fork-0 and fork-50M: Backend.Fork of a live jail
//     sandbox (its loop writing /tmp) with nothing, or 50 MiB in /workspace
//     and 50 MiB in /tmp, into one child, the figures being the source's
//     pause and the whole fork (the child's sandbox start included); memory:
//     the RSS, PSS and anonymous memory of everything an idle sandbox adds
//     to the host (jail: its init; bwrap and unshare: themselves and the
//     namespace's `sleep`), averaged over 8, and the jail sandbox's cgroup
//     charge.
//   - system: jail (internal/jail, through the jail backend for the
//     forks), bwrap, unshare. A system this host cannot run (no root, the
//     tool missing, a binary that does not call jail.Main) is skipped with
//     the reason, and the other systems still run.
//
// # Lifecycle
//
// Run makes a scratch directory, runs each case for each system, and
// removes everything it made: sandboxes are stopped, tools' processes
// killed and waited for, the fork case's FUSE mount unmounted.
//
// # Sharp edges
//
//   - The jail cases need this binary to serve as a sandbox's init
//     (jail.Main first in main): cmd/arbor does.
//   - The fork cases serve their files over FUSE from this process, as
//     arbord does; only the sandboxes' processes use the mount.
//   - Figures on a loaded machine move: the report carries the load
//     average before and after the run.
package sandboxbench
