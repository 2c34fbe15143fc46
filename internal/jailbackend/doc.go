// Package jailbackend is the engine's jail backend: every live node of a
// jail tree is a process sandbox (internal/jail) over the node's files.
// It joins the two without either importing the other: engine defines the
// Backend seam, jail the sandbox, and this adapter implements the one with
// the other.
//
// # What a node is here
//
// A live node is a jail.Sandbox named by the node's id, with the node's
// files path at /workspace and the node's /tmp at /tmp. A suspended node
// is its /tmp alone (its sandbox stopped: its processes ended, its files
// and /tmp kept, the /tmp read-only). A stopped node is nothing: its
// sandbox is stopped and its /tmp dropped.
//
// Each tree has a jail.Manager of its own, labelled by the tree's id and a
// hash of the backend's directory (so that two daemons on one host, with
// trees of the same id, never share or reap each other's cgroups). At open
// the manager reaps what a killed daemon left under the label; every /tmp
// found then is a node held suspended, which reconcile resumes (a live
// node, LostRestart) or stops (a node the tree no longer has).
//
// Each sandbox is limited by the tree's budget (engine.BackendConfig):
// memory by MaxNodeRAMBytes (default the tree's MaxLiveRAMBytes: no node
// may hold more than the tree), past which the kernel kills a process and
// the exec's exit says OOMKilled; tasks by MaxNodePids (default 4096),
// past which fork fails with EAGAIN. A fork's children get the same.
//
// # Images and network
//
// A tree that names an image (engine.BackendConfig.Image) runs its
// sandboxes on that image's root (Config.Image resolves the name when
// the tree opens; jail.Config.Root), else on the host's. A tree with
// network "outbound" gives each sandbox a pasta of its own
// (jail.Config.Outbound); otherwise sandboxes have loopback only.
//
// # /tmp
//
// A node's /tmp is part of its state, like its files: children see the
// source's /tmp as of the fork, and none of what the source or a sibling
// writes after; a commit makes the child's /tmp the parent's; suspend,
// resume and a daemon restart keep it; it is never written into a base
// directory; abort, prune and stop drop it.
//
// It is kept by Arbor's own store (internal/store) over a private, empty
// base under the backend's directory (tmp-base, never written), in a store
// of its own (tmp-store), served by cowfs without control files at
// tmp-mnt: node ID's /tmp is the store's branch ID at tmp-mnt/@ID, bound
// at /tmp in its sandbox. TmpPath is the one function that says where a
// node's /tmp is on the host. A root's /tmp is a branch forked from the
// empty base at its Start; every other node's is forked from its source's
// inside the source's pause, so that files and /tmp are of one instant.
// The mount is made before the manager's first init (an init's mount
// namespace sees only the mounts made before it).
//
// Why the store: its fork is O(1) whatever /tmp holds (a frozen head layer
// shared, fresh heads; 12-25 µs with no /tmp file open for writing in the
// source, docs/BENCHMARKS.md), it keeps serving the source's live mount
// through the fork (the source's processes keep their cwd and open files),
// its commit into a branch is one metadata transaction (crash-safe: done
// or not), and it is the code the files already trust. A copy (cp -a of
// 50 MiB: 10-30 ms on the development host, growing with size) is not a
// fork. overlayfs layers stacked per fork would need the source's /tmp
// mount to change its upper directory at each fork, under processes that
// hold it (a remount inside the sandbox's mount namespace, their open
// files left on the old layer), and a stack that grows with every fork
// past the kernel's 500-lower limit.
//
// Commit: the engine commits a node's files first (the commit point;
// first-commit-wins there), then calls Commit, which must not refuse. So
// the /tmp commit is store.CommitOver: the parent's /tmp becomes the
// child's even if the parent wrote its /tmp after the fork (those writes
// are dropped: after a commit the parent is the child's state, files and
// /tmp). A child whose /tmp is gone was committed already: the engine's
// call again after a crash does nothing. The siblings' /tmp go stale
// (ESTALE) until the engine stops them.
//
// # Fork
//
// Fork freezes the source (its cgroup's freezer), runs the files' fork and
// the /tmp fork and thaws the source, then starts the children. The
// children's start needs nothing of the source's state as of the pause
// besides the files and /tmp already forked, so it happens after the thaw:
// the source is paused for the two forks only, not for the children's
// sandbox starts (4 to 15 ms each). A fork carries no processes: children
// start with nothing running, and the fork's reply says "processes: not
// carried" (engine.Caps.ForkProcesses); that is the vm backend's job.
// One spare init per tree (jail.Config.Spares) is kept started ahead of
// need, so a tree's first start skips the init's cold start.
//
// # Sharp edges
//
//   - A file of the source's /tmp open for writing at the fork is kept
//     apart by the store (moved up, a copy left for the children: see
//     store.Fork): the fork then costs a copy of that file and one more
//     metadata transaction (0.3-1.7 ms for a small file on the
//     development host under load).
//   - /tmp counts in the tree's disk usage (engine.DiskUser), and the
//     budget's MaxDiskBytes limits the /tmp layer (ENOSPC past it, every
//     /tmp write then metered by the daemon, as the files' are), but on
//     its own: files and /tmp together may reach twice the budget before
//     the engine, which sees the sum, refuses forks.
//   - Stop of a node drops the /tmp of the node's descendants too (the
//     store drops subtrees); the engine stops them first or with it.
//   - The OOMKilled mark counts the sandbox's kills during the exec: a
//     sibling exec's kill in the same node at the same time marks both.
//   - The plain per-node /tmp directories of an earlier version
//     (<Dir>/tmp/ID) are moved into the layer at open (names, data,
//     modes, owners, symlinks; not xattrs or times).
package jailbackend
